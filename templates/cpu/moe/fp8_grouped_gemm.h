// templates/cpu/moe/fp8_grouped_gemm.h — grouped GEMM over e4m3 expert-sorted
// rows and e4m3 expert weights, dequantizing: the FP8 MoE on the CPU (the
// embedded default, so the op exists everywhere and CI tests it).
//
// C[r, :] = epilogue(dequant(A)[r, :] · dequant(W[e])ᵀ) for every row r of
// expert e, with A, W and their scales in one of the scale modes of
// templates/cpu/moe/fp8_params.h (block 1 x 128 / 128 x 128, per tensor, per
// channel). Plan, work items, core and tail variants as the bf16 template
// (moe/grouped_gemm.h): kTailClass 0 runs full tiles of kTileRows rows, c
// runs items of 1..c rows as c-row micro-tiles whose extra rows re-read the
// item's last row and are never stored.
//
// Per work item (one plan item x one N tile of kTileN W rows, taken as
// pairs: (n, n + 1) plain, (gate j, up j) gated), K is walked in 128-element
// blocks, the scale blocks. A block's A rows and each W row pair are decoded
// to f32 into stack buffers; the micro-kernel multiplies kMicroRows x 2
// with 8-lane vector sums, which start fresh every block and are then added
// into the f32 accumulators, scaled by sa(row, block) x sw(W row, block) in
// block mode (the promotion of the Hopper kernel); per-tensor and
// per-channel scales multiply the accumulators once at the end.
//
// Epilogues:
//   kMoeEpilogueNone              C T [R, N]
//   kMoeEpilogueSiluAndMul        C T [R, N / 2] = silu(gate) * up
//   kMoeEpilogueSiluAndMulQuant   C e4m3 [R, N / 2] and 1 x 128 scales
//                                 (fp8_params.h), quantized by
//                                 runtime/cpu/fp8.h's rule from the f32
//                                 values; its N tile is one scale group
//
// Stack: about kTileRows * (kTileN + 128) * 4 bytes (72 KiB at 64 rows with
// the quantizing epilogue's 256-row N tile).
//
// Params: MoeFp8GroupedGemmParams (templates/cpu/moe/fp8_params.h).
#ifndef TAILOR_TEMPLATES_CPU_MOE_FP8_GROUPED_GEMM_H_
#define TAILOR_TEMPLATES_CPU_MOE_FP8_GROUPED_GEMM_H_

#include "runtime/cpu/fp8.h"
#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/moe/fp8_params.h"

namespace tailor::kernels {

// e4m3 code -> f32, all 256 (decoding by table: one load per element).
struct E4m3Table {
  float value[256];
  constexpr E4m3Table() : value() {
    for (int i = 0; i < 256; ++i) value[i] = E4m3ToFloat(i);
  }
};
inline constexpr E4m3Table kE4m3Table{};

template <typename T, int kN, int kK, int kTileRows, int kTailClass,
          int kEpilogue, int kScaleMode>
struct MoeFp8GroupedGemmKernel {
  static_assert(kN >= 1 && kK >= 1, "N and K must be positive");
  static_assert(kTileRows >= 1 && kTileRows <= 64,
                "kTileRows must be in [1, 64]");
  static_assert(kTailClass >= 0 && kTailClass <= kTileRows,
                "a tail class is at most one tile");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul ||
                    kEpilogue == kMoeEpilogueSiluAndMulQuant,
                "unknown epilogue");
  static_assert(kEpilogue == kMoeEpilogueNone || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");
  static_assert(kScaleMode == kMoeFp8ScaleBlock ||
                    kScaleMode == kMoeFp8ScalePerTensor ||
                    kScaleMode == kMoeFp8ScalePerChannel,
                "unknown scale mode");

  using Params = MoeFp8GroupedGemmParams;
  static constexpr bool kGated = kEpilogue != kMoeEpilogueNone;
  static constexpr bool kQuantized = kEpilogue == kMoeEpilogueSiluAndMulQuant;
  static constexpr bool kMasked = kTailClass != 0;
  static constexpr int kOutN = kGated ? kN / 2 : kN;  // columns of C
  static constexpr int kRows = kMasked ? kTailClass : kTileRows;
  static constexpr int kMicroRows = kRows < 4 ? kRows : 4;
  static constexpr int kPaddedRows =
      (kRows + kMicroRows - 1) / kMicroRows * kMicroRows;
  static constexpr int kTileN =
      kQuantized ? kMoeFp8GemmQuantTileN : kMoeFp8GemmTileN;
  static constexpr int kOutPerTile = kGated ? kTileN / 2 : kTileN;
  // The host launches num_work x kNumNTiles items.
  static constexpr int kNumNTiles = (kOutN + kOutPerTile - 1) / kOutPerTile;
  static constexpr int kBK = kMoeFp8Block;
  static constexpr int kKBlocks = (kK + kBK - 1) / kBK;
  static constexpr int kNBlocks = (kN + kBK - 1) / kBK;  // W scale rows
  static constexpr bool kBlockScales = kScaleMode == kMoeFp8ScaleBlock;

  // ---- scales -------------------------------------------------------------
  static float AScale(const Params& p, int64_t row, int kb) {
    if constexpr (kBlockScales) return p.a_scales[kb * p.a_scale_rows + row];
    if constexpr (kScaleMode == kMoeFp8ScalePerChannel) return p.a_scales[row];
    return p.a_scales[0];
  }
  static float WScale(const Params& p, int expert, int w_row, int kb) {
    if constexpr (kBlockScales) {
      return p
          .w_scales[(int64_t{expert} * kNBlocks + w_row / kBK) * kKBlocks + kb];
    }
    if constexpr (kScaleMode == kMoeFp8ScalePerChannel) {
      return p.w_scales[int64_t{expert} * kN + w_row];
    }
    return p.w_scales[expert];
  }

  // W row (within expert e's [N, K]) of the pair's first/second member; an
  // odd last plain column pairs with itself (its second result dropped).
  static int WRow(int out_col, int member) {
    if constexpr (kGated) return member == 0 ? out_col : kOutN + out_col;
    return Min(out_col + member, kOutN - 1);
  }

  // ---- staging: kLen e4m3 codes decoded to f32
  // --------------------------------
  template <int kLen>
  static void Decode(const uint8_t* src, float* dst) {
    for (int k = 0; k < kLen; ++k) dst[k] = kE4m3Table.value[src[k]];
  }

  // ---- micro-kernel: kMr rows x one W row pair over one K block
  // --------------- sums[i][m] = a_i · w_m (lanes summed), for the block's
  // promotion.
  template <int kMr, int kLen>
  static void MicroTile(const float* const* a, const float* w0, const float* w1,
                        float (&sums)[kMr][2]) {
    float8 sum[kMr][2];
    for (int i = 0; i < kMr; ++i) sum[i][0] = sum[i][1] = 0;
    constexpr int kVecLen = kLen / kLanes * kLanes;
    TAILOR_UNROLL_BY(8)
    for (int k = 0; k < kVecLen; k += kLanes) {
      const float8 wv0 = Load8(w0 + k), wv1 = Load8(w1 + k);
      for (int i = 0; i < kMr; ++i) {
        const float8 av = Load8(a[i] + k);
        sum[i][0] += av * wv0;
        sum[i][1] += av * wv1;
      }
    }
    for (int i = 0; i < kMr; ++i) {
      sums[i][0] = SumLanes(sum[i][0]);
      sums[i][1] = SumLanes(sum[i][1]);
      for (int k = kVecLen; k < kLen; ++k) {  // K % 8 leftovers
        sums[i][0] += a[i][k] * w0[k];
        sums[i][1] += a[i][k] * w1[k];
      }
    }
  }

  // acc[i][2 pair + m] += sums[i][m] (x sa x sw in block mode) for the
  // micro-tile's rows [i0, i0 + kMr).
  template <int kMr>
  static void Promote(const Params& p, const MoeWorkItem& item, int rows,
                      int i0, int kb, const float (&sw)[2],
                      const float (&sums)[kMr][2], float* acc_pair) {
    for (int i = 0; i < kMr; ++i) {
      float sa = 1.0f;
      if constexpr (kBlockScales) {
        sa = AScale(p, int64_t{item.row_begin} + Min(i0 + i, rows - 1), kb);
      }
      acc_pair[(i0 + i) * kTileN] += sums[i][0] * sa * sw[0];
      acc_pair[(i0 + i) * kTileN + 1] += sums[i][1] * sa * sw[1];
    }
  }

  // ---- one K block [kb * 128, + kLen): all pairs x all micro-tiles --------
  template <int kLen>
  static void Block(const Params& p, const MoeWorkItem& item, int rows,
                    int out0, int pairs, int kb, float* acc) {
    float a_buf[kPaddedRows][kLen];
    float w_buf[2][kLen];
    const float* a_rows[kPaddedRows];  // row i's block, as f32
    const int64_t k0 = int64_t{kb} * kBK;
    TAILOR_NO_UNROLL
    for (int i = 0; i < kPaddedRows; ++i) {
      if (kMasked && i >= rows) {  // re-read the last row, never stored
        a_rows[i] = a_rows[rows - 1];
        continue;
      }
      Decode<kLen>(p.a + (int64_t{item.row_begin} + i) * kK + k0, a_buf[i]);
      a_rows[i] = a_buf[i];
    }
    const uint8_t* w_expert = p.w + int64_t{item.group} * kN * kK + k0;
    const int micro_tiles = kMasked ? (rows + kMicroRows - 1) / kMicroRows
                                    : kPaddedRows / kMicroRows;
    TAILOR_NO_UNROLL
    for (int pair = 0; pair < pairs; ++pair) {
      const int out_col = out0 + (kGated ? pair : 2 * pair);
      float sw[2] = {1.0f, 1.0f};
      for (int m = 0; m < 2; ++m) {
        const int w_row = WRow(out_col, m);
        Decode<kLen>(w_expert + int64_t{w_row} * kK, w_buf[m]);
        if constexpr (kBlockScales) sw[m] = WScale(p, item.group, w_row, kb);
      }
      TAILOR_NO_UNROLL
      for (int t = 0; t < micro_tiles; ++t) {
        float sums[kMicroRows][2];
        MicroTile<kMicroRows, kLen>(a_rows + t * kMicroRows, w_buf[0], w_buf[1],
                                    sums);
        Promote<kMicroRows>(p, item, rows, t * kMicroRows, kb, sw, sums,
                            acc + 2 * pair);
      }
    }
  }

  // Per-tensor and per-channel modes: acc x sa x sw once, after K.
  static void ScaleOnce(const Params& p, const MoeWorkItem& item, int rows,
                        int out0, int pairs, float* acc) {
    TAILOR_NO_UNROLL
    for (int i = 0; i < rows; ++i) {
      const float sa = AScale(p, int64_t{item.row_begin} + i, 0);
      for (int pair = 0; pair < pairs; ++pair) {
        const int out_col = out0 + (kGated ? pair : 2 * pair);
        for (int m = 0; m < 2; ++m) {
          acc[i * kTileN + 2 * pair + m] *=
              sa * WScale(p, item.group, WRow(out_col, m), 0);
        }
      }
    }
  }

  // ---- epilogue -------------------------------------------------------------
  static float Output(const float* acc_row, int o) {
    if constexpr (kGated) {
      const float gate = acc_row[2 * o], up = acc_row[2 * o + 1];
      return gate / (1.0f + Exp(-gate)) * up;
    }
    return acc_row[o];  // plain: pair o / 2, member o % 2
  }

  static void Store(const Params& p, const MoeWorkItem& item, int rows,
                    int out0, int outs, const float* acc) {
    TAILOR_NO_UNROLL
    for (int i = 0; i < rows; ++i) {
      const int64_t row = int64_t{item.row_begin} + i;
      const float* acc_row = acc + i * kTileN;
      if constexpr (kQuantized) {
        float amax = 0.0f;
        for (int o = 0; o < outs; ++o) {
          amax = MaxPropagateNan(amax, __builtin_fabsf(Output(acc_row, o)));
        }
        const float scale = Fp8Scale(amax);
        p.c_scales[int64_t{out0 / kBK} * p.c_scale_rows + row] = scale;
        uint8_t* c_row = static_cast<uint8_t*>(p.c) + row * kOutN + out0;
        for (int o = 0; o < outs; ++o) {
          c_row[o] = E4m3FromFloat(Output(acc_row, o) / scale);
        }
      } else {
        T* c_row = static_cast<T*>(p.c) + row * kOutN + out0;
        TAILOR_NO_UNROLL
        for (int o = 0; o < outs; ++o)
          c_row[o] = FromFloat<T>(Output(acc_row, o));
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

    float acc[kPaddedRows * kTileN];  // [kPaddedRows][kTileN]
    for (int i = 0; i < kPaddedRows * kTileN; ++i) acc[i] = 0.0f;
    constexpr int kFullBlocks = kK / kBK;
    constexpr int kLastBlock = kK % kBK;
    TAILOR_NO_UNROLL
    for (int kb = 0; kb < kFullBlocks; ++kb) {
      Block<kBK>(p, item, rows, out0, pairs, kb, acc);
    }
    if constexpr (kLastBlock > 0) {
      Block<kLastBlock>(p, item, rows, out0, pairs, kFullBlocks, acc);
    }
    if constexpr (!kBlockScales) ScaleOnce(p, item, rows, out0, pairs, acc);
    Store(p, item, rows, out0, outs, acc);
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_FP8_GROUPED_GEMM_H_
