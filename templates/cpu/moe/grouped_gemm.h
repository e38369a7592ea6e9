// templates/cpu/moe/grouped_gemm.h — grouped GEMM over expert-sorted rows.
//
// C[r, :] = A[r, :] · W[e]ᵀ for every row r of expert e, where A [R, K] holds
// the expert-sorted rows and W [E, N, K] the experts' weights in nn.Linear
// layout (K contiguous). The host's piecewise plan cuts each expert's rows
// into full tiles of kTileRows rows (the *core*) and at most one tail piece;
// one launch runs one variant of the plan:
//
//   kTailClass == 0   core: every work item is a full tile of kTileRows
//                     rows; row counts are compile-time, nothing is masked
//   kTailClass == c   tail class c: every item has 1..c rows (runtime),
//                     computed as c-row micro-tiles whose missing rows
//                     re-read the item's last row and are never stored
//
// Work item i of a launch is (N tile i / num_work, plan item i % num_work):
// consecutive items share the N tile, so a thread walking its chunk keeps one
// expert's W tile hot in cache.
//
// Epilogues:
//   kMoeEpilogueNone        C [R, N]   = A Wᵀ
//   kMoeEpilogueSiluAndMul  C [R, N/2] = silu(A W[:, :N/2]ᵀ) * (A W[:, N/2:]ᵀ),
//                           vLLM's silu_and_mul on the gate|up product,
//                           applied to the f32 accumulators
//
// Inside an item: K is walked in chunks of kChunkK. The chunk's A rows (and
// each W row pair, when more than one micro-tile reuses it) are copied,
// widened to f32, into stack buffers. The micro-kernel multiplies a
// kMicroRows x 2 block (rows x W rows) with 8-lane vector accumulators kept
// in a stack tile that persists across K chunks; lanes are summed once at
// the end. Stack use is about kTileRows * (kTileN * 32 + kChunkK * 4)
// bytes: 32 KiB at kTileRows = 16, 128 KiB at the largest tile, 64.
//
// Params: MoeGroupedGemmParams (templates/cpu/moe/params.h).
#ifndef TAILOR_TEMPLATES_CPU_MOE_GROUPED_GEMM_H_
#define TAILOR_TEMPLATES_CPU_MOE_GROUPED_GEMM_H_

#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/moe/params.h"

namespace tailor::kernels {

template <typename T, int kN, int kK, int kTileRows, int kTailClass,
          int kEpilogue>
struct MoeGroupedGemmKernel {
  static_assert(kN >= 1 && kK >= 1, "N and K must be positive");
  static_assert(kTileRows >= 1 && kTileRows <= 64,
                "kTileRows must be in [1, 64]");
  static_assert(kTailClass >= 0 && kTailClass <= kTileRows,
                "a tail class is at most one tile");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul,
                "unknown epilogue");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");

  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr bool kMasked = kTailClass != 0;
  static constexpr int kOutN = kGated ? kN / 2 : kN;  // columns of C
  static constexpr int kRows = kMasked ? kTailClass : kTileRows;
  static constexpr int kMicroRows = kRows < 4 ? kRows : 4;
  static constexpr int kPaddedRows =
      (kRows + kMicroRows - 1) / kMicroRows * kMicroRows;
  // W rows per N tile, taken as pairs: (n, n+1) plain, (gate j, up j) gated.
  static constexpr int kTileN = kMoeGroupedGemmTileN;
  static constexpr int kPairs = kTileN / 2;
  static constexpr int kOutPerTile = kGated ? kPairs : kTileN;
  // The host launches num_work x kNumNTiles items (ops/moe/kernels.cc).
  static constexpr int kNumNTiles = (kOutN + kOutPerTile - 1) / kOutPerTile;
  static constexpr int kChunkK = kK < 256 ? kK : 256;
  // W rows are staged (copied, widened to f32) into a stack buffer only when
  // several micro-tiles reuse them; a single micro-tile (tiles or tails of
  // <= 4 rows) reads W as is. A rows are always staged: every pair re-reads
  // them, and rows K elements apart in memory would alias in L1 sets.
  static constexpr bool kStageW = kPaddedRows > kMicroRows;

  using Params = MoeGroupedGemmParams;

  // ---- micro-kernel: acc[i][0..1] += a[i] · w0, a[i] · w1 over kLen ---------
  // W rows come staged as f32 or, when each is used by one micro-tile only,
  // straight from memory in T (widened in registers).
  template <int kMr, int kLen, typename WT>
  static void MicroTile(const float* const* a, const WT* w0, const WT* w1,
                        float8* acc) {  // acc: [kMr] rows of stride kTileN
    float8 sum[kMr][2];
    for (int i = 0; i < kMr; ++i) {
      sum[i][0] = acc[i * kTileN];
      sum[i][1] = acc[i * kTileN + 1];
    }
    constexpr int kVecLen = kLen / kLanes * kLanes;
    // 8 steps per iteration: as fast as unrolling all kLen / 8 steps, in
    // an eighth of the code. Micro-tiles of one or two rows (small tails)
    // unroll fully: on their rolled loop LLVM's loop strength reduction
    // costs more codegen time than the unrolled code.
    constexpr int kSteps = kVecLen / kLanes;
    constexpr int kUnroll = kMr <= 2 && kSteps > 0 ? kSteps : 8;
    TAILOR_UNROLL_BY(kUnroll)
    for (int k = 0; k < kVecLen; k += kLanes) {
      float8 wv0 = Load8(w0 + k);
      float8 wv1 = Load8(w1 + k);
      for (int i = 0; i < kMr; ++i) {
        float8 av = Load8(a[i] + k);
        sum[i][0] += av * wv0;
        sum[i][1] += av * wv1;
      }
    }
    for (int k = kVecLen; k < kLen; ++k) {  // K % 8 leftovers into lane 0
      for (int i = 0; i < kMr; ++i) {
        sum[i][0][0] += a[i][k] * ToFloat(w0[k]);
        sum[i][1][0] += a[i][k] * ToFloat(w1[k]);
      }
    }
    for (int i = 0; i < kMr; ++i) {
      acc[i * kTileN] = sum[i][0];
      acc[i * kTileN + 1] = sum[i][1];
    }
  }

  // All micro-tiles of one W row pair: compile-time count for the core,
  // ceil(rows / kMicroRows) for tails.
  template <int kLen, typename WT>
  static void MicroTiles(const float* const* a_rows, int rows, const WT* w0,
                         const WT* w1, float8* acc_pair) {
    if constexpr (kMasked) {
      int micro_tiles = (rows + kMicroRows - 1) / kMicroRows;
      for (int m = 0; m < micro_tiles; ++m) {
        MicroTile<kMicroRows, kLen>(a_rows + m * kMicroRows, w0, w1,
                                    acc_pair + m * kMicroRows * kTileN);
      }
    } else {
      constexpr int kFull = kRows / kMicroRows;
      constexpr int kRest = kRows % kMicroRows;
      TAILOR_NO_UNROLL
      for (int m = 0; m < kFull; ++m) {
        MicroTile<kMicroRows, kLen>(a_rows + m * kMicroRows, w0, w1,
                                    acc_pair + m * kMicroRows * kTileN);
      }
      if constexpr (kRest > 0) {
        MicroTile<kRest, kLen>(a_rows + kFull * kMicroRows, w0, w1,
                               acc_pair + kFull * kMicroRows * kTileN);
      }
    }
  }

  // ---- staging: a row's K chunk copied to f32 `buf` [kLen] ------------------
  template <int kLen>
  static const float* StageRow(const T* src, float* buf) {
    constexpr int kVecLen = kLen / kLanes * kLanes;
    for (int k = 0; k < kVecLen; k += kLanes) Store8(buf + k, Load8(src + k));
    for (int k = kVecLen; k < kLen; ++k) buf[k] = ToFloat(src[k]);
    return buf;
  }

  // W row (within expert e's [N, K]) of the pair's first/second member.
  static int WRow(int out_col, int member) {
    if constexpr (kGated) return member == 0 ? out_col : kOutN + out_col;
    return out_col + member;
  }

  // ---- one K chunk [k0, k0 + kLen): all pairs x all micro-tiles -------------
  template <int kLen>
  static void Chunk(const Params& p, const MoeWorkItem& item, int rows,
                    int out0, int pairs, int k0, float8* acc) {
    float a_buf[kPaddedRows][kLen];
    float w_buf[kStageW ? 2 : 1][kStageW ? kLen : 1];
    const float* a_rows[kPaddedRows];  // row i's chunk, as f32
    TAILOR_NO_UNROLL
    for (int i = 0; i < kPaddedRows; ++i) {
      // Tails: rows past `rows` re-read the last row (computed, never stored).
      if (kMasked && i >= rows) {
        a_rows[i] = a_rows[rows - 1];
        continue;
      }
      const T* src =
          static_cast<const T*>(p.a) + (int64_t{item.row_begin} + i) * kK + k0;
      a_rows[i] = StageRow<kLen>(src, a_buf[i]);
    }
    const T* w_expert = static_cast<const T*>(p.w) +
                        int64_t{item.group} * kN * kK + k0;  // [N, K]
    TAILOR_NO_UNROLL
    for (int pair = 0; pair < pairs; ++pair) {
      int out_col = out0 + (kGated ? pair : 2 * pair);
      // An odd last plain column pairs with itself (second result dropped).
      int second = kGated ? WRow(out_col, 1) : Min(WRow(out_col, 1), kOutN - 1);
      const T* w0 = w_expert + int64_t{WRow(out_col, 0)} * kK;  // [kLen]
      const T* w1 = w_expert + int64_t{second} * kK;            // [kLen]
      float8* acc_pair = acc + 2 * pair;
      if constexpr (kStageW) {
        MicroTiles<kLen>(a_rows, rows, StageRow<kLen>(w0, w_buf[0]),
                         StageRow<kLen>(w1, w_buf[1]), acc_pair);
      } else {
        MicroTiles<kLen>(a_rows, rows, w0, w1, acc_pair);
      }
    }
  }

  // ---- epilogue: sum lanes, activate, narrow, store the item's rows ---------
  static void Store(const Params& p, const MoeWorkItem& item, int rows,
                    int out0, int outs, const float8* acc) {
    TAILOR_NO_UNROLL
    for (int i = 0; i < rows; ++i) {
      T* c_row = static_cast<T*>(p.c) + (int64_t{item.row_begin} + i) * kOutN +
                 out0;  // [kOutN]
      const float8* acc_row = acc + i * kTileN;
      TAILOR_NO_UNROLL
      for (int o = 0; o < outs; ++o) {
        float value;
        if constexpr (kGated) {
          float gate = SumLanes(acc_row[2 * o]);
          float up = SumLanes(acc_row[2 * o + 1]);
          value = gate / (1.0f + Exp(-gate)) * up;
        } else {
          value = SumLanes(acc_row[o]);
        }
        c_row[o] = FromFloat<T>(value);
      }
    }
  }

  static void Run(const Params& p, int64_t work_index) {
    const int n_tile = static_cast<int>(work_index / p.num_work);
    const MoeWorkItem item = p.work[work_index % p.num_work];
    const int rows = kMasked ? item.rows : kRows;
    const int out0 = n_tile * kOutPerTile;
    const int outs = Min(kOutPerTile, kOutN - out0);   // output columns here
    const int pairs = kGated ? outs : (outs + 1) / 2;  // W row pairs here

    float8 acc[kPaddedRows * kTileN];  // [kPaddedRows][kTileN] lane partials
    for (int i = 0; i < kPaddedRows * kTileN; ++i) acc[i] = 0;

    constexpr int kFullChunks = kK / kChunkK;
    constexpr int kLastChunk = kK % kChunkK;
    for (int chunk = 0; chunk < kFullChunks; ++chunk) {
      Chunk<kChunkK>(p, item, rows, out0, pairs, chunk * kChunkK, acc);
    }
    if constexpr (kLastChunk > 0) {
      Chunk<kLastChunk>(p, item, rows, out0, pairs, kFullChunks * kChunkK, acc);
    }
    Store(p, item, rows, out0, outs, acc);
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_GROUPED_GEMM_H_
