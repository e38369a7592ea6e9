// templates/hip/moe/grouped_gemm.h — the MoE grouped GEMM on AMD Instinct
// (CDNA, wave64) over the device Route's work list: core tiles and every
// tail class in one persistent launch.
//
// C[r, :] = epilogue(A[r, :] . W[e]^T) for the rows r of each work item of
// expert e; A [R, K] expert-sorted rows, W [E, N, K] (nn.Linear layout).
// The launch reads its item count from the route header (no host sync).
// Items, tails, the (item, N tile) walk and the epilogues are the CUDA
// kernel's (templates/cuda/moe/grouped_gemm_sm80.cuh documents them):
//   tail_class 0: a core tile of kTileRows rows, unmasked when its parts
//   are whole 16-row MFMA blocks; c > 0: a tail of 1..c rows, up to 16 rows
//   one MFMA row block, longer ones a masked full part. A rows past a tail
//   are zero-filled in LDS, C rows past it are not stored. A CTA computes
//   at most 64 rows: a 128-row tile runs as two parts.
//
// Two kernels:
//   MoeGroupedGemmMfma     bf16, K % 8 == 0: v_mfma_f32_16x16x16bf16_1k
//                          (runtime/hip/mfma.h: operand layout, LDS bank
//                          model, XOR swizzle), CTA tile (rows) x 128 W rows
//                          x 64 K, 4 waves each owning 32 W rows (gated: 16
//                          gate + the matching 16 up rows, so silu_and_mul
//                          stays in registers), two LDS buffers with the
//                          next K tile staged in registers during the MFMAs
//   MoeGroupedGemmSimtHip  f32 and unaligned bf16 (kBf16): LDS-tiled SIMT FMA
//
// Params: MoeGroupedGemmParams (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_HIP_MOE_GROUPED_GEMM_H_
#define TAILOR_TEMPLATES_HIP_MOE_GROUPED_GEMM_H_

#include "runtime/hip/entry.h"
#include "runtime/hip/mfma.h"
#include "runtime/hip/numeric.h"
#include "templates/hip/moe/params.h"

namespace tailor::hip {

using ::tailor::gpu::kMoeEpilogueNone;
using ::tailor::gpu::kMoeEpilogueSiluAndMul;
using ::tailor::gpu::kMoeMaxTileRows;

inline constexpr int kHipGroupItems = 8;

// Tile t of a launch over num_work items x n_tiles N tiles, in groups of
// kHipGroupItems items (neighbouring CTAs share W tiles in L2).
struct HipTileCoord {
  int item;
  int n_tile;
};
TAILOR_HIP_DEVICE HipTileCoord HipTileOf(int t, int num_work, int n_tiles) {
  const int group = t / (kHipGroupItems * n_tiles);
  const int first = group * kHipGroupItems;
  const int rest_items = num_work - first;
  const int items = rest_items < kHipGroupItems ? rest_items : kHipGroupItems;
  const int rest = t - group * kHipGroupItems * n_tiles;
  return {first + rest % items, rest / items};
}

// W row (within the expert) of CTA W row n of N tile n_tile; -1 past N.
// Gated CTAs hold kOutPerCta gate rows, then the matching up rows.
template <int kN, bool kGated, int kBN>
TAILOR_HIP_DEVICE int HipWRow(int n_tile, int n) {
  constexpr int kOutN = kGated ? kN / 2 : kN;
  if constexpr (kGated) {
    constexpr int kOutPerCta = kBN / 2;
    const int out = n_tile * kOutPerCta + (n % kOutPerCta);
    if (out >= kOutN) return -1;
    return n < kOutPerCta ? out : kOutN + out;
  } else {
    const int row = n_tile * kBN + n;
    return row < kN ? row : -1;
  }
}

// =============================================================================
// MoeGroupedGemmMfma: bf16 matrix cores.
// =============================================================================
template <int kN, int kK, int kTileRows, int kEpilogue>
struct MoeGroupedGemmMfma {
  // (kN > 0 makes the assertion dependent: checked when instantiated.)
  static_assert(kN > 0 && kHasMfmaBf16,
                "bf16 _1k MFMAs need gfx90a or gfx94x, not gfx908 (the host "
                "runs MoeGroupedGemmSimtHip there)");
  static_assert(kN >= 1 && kK >= 1, "N and K must be positive");
  static_assert(kK % 8 == 0, "rows of A and W must be 16-byte aligned");
  static_assert(kTileRows >= 1 && kTileRows <= kMoeMaxTileRows,
                "tile rows must be in [1, 128]");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul,
                "unknown epilogue");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");

  using Params = MoeGroupedGemmParams;
  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kOutN = kGated ? kN / 2 : kN;
  static constexpr int kBM = HipGemmCtaRows(kTileRows);  // <= 64
  static constexpr int kMF = kBM / 16;                   // 16-row blocks
  static constexpr int kBN = kHipMfmaWRows;              // 128
  static constexpr int kNTiles = HipGemmNTiles(true, kGated, kN);
  static constexpr int kBK = kHipMfmaKTile;  // 64 = one 128-byte LDS row
  static constexpr int kKTiles = (kK + kBK - 1) / kBK;
  static constexpr int kThreads = kHipMfmaThreads;  // 4 waves
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kChunksPerRow = kTileRowBytes / kChunkBytes;  // 8
  static constexpr int kAChunkCount = kBM * kChunksPerRow;           // 128..512
  static constexpr int kAChunks = (kAChunkCount + kThreads - 1) / kThreads;
  static constexpr int kWChunks = kBN * kChunksPerRow / kThreads;  // 4
  static constexpr int kBufferBytes = (kBM + kBN) * kTileRowBytes;
  static_assert(kHipMfmaBuffers * kBufferBytes == HipMfmaLdsBytes(kTileRows),
                "LDS layout");
  static_assert(kThreads / kWaveSize * 32 == kBN, "4 waves x 32 W rows");

  // The next K tile's chunks, held in registers while the MFMAs run.
  struct Staged {
    uint4 a[kAChunks];
    uint4 w[kWChunks];
  };

  // CTA W row of this wave's 16-row block nb (0: gate when gated, 1: up).
  static TAILOR_HIP_DEVICE int WaveWRow(int wave, int nb) {
    if constexpr (kGated) return nb == 0 ? wave * 16 : kBN / 2 + wave * 16;
    return wave * 32 + nb * 16;
  }

  // ---- global -> registers: chunk c of row r (zero past rows, N or K) ----
  static TAILOR_HIP_DEVICE uint4 LoadChunkGlobal(const unsigned short* row,
                                                 bool row_ok, int k) {
    if (!row_ok || k >= kK) return uint4{0, 0, 0, 0};
    return *reinterpret_cast<const uint4*>(row + k);
  }

  template <bool kMasked>
  static TAILOR_HIP_DEVICE void LoadTile(const Params& p,
                                         const MoeWorkItem& part, int rows,
                                         int n_tile, int k_tile, Staged& s) {
    const int tid = threadIdx.x;
    const auto* a = static_cast<const unsigned short*>(p.a);
    const auto* w = static_cast<const unsigned short*>(p.w) +
                    static_cast<long long>(part.group) * kN * kK;
    for (int i = 0; i < kAChunks; ++i) {
      const int c = tid + i * kThreads, r = c / kChunksPerRow;
      if (c >= kAChunkCount) break;  // 16-row CTAs: half the threads
      const int k = k_tile * kBK + (c % kChunksPerRow) * 8;
      s.a[i] =
          LoadChunkGlobal(a + static_cast<long long>(part.row_begin + r) * kK,
                          !kMasked || r < rows, k);
    }
    for (int i = 0; i < kWChunks; ++i) {
      const int c = tid + i * kThreads, n = c / kChunksPerRow;
      const int k = k_tile * kBK + (c % kChunksPerRow) * 8;
      const int w_row = HipWRow<kN, kGated, kBN>(n_tile, n);
      s.w[i] = LoadChunkGlobal(w + static_cast<long long>(w_row) * kK,
                               w_row >= 0, k);
    }
  }

  // ---- registers -> LDS (swizzled; 8 lanes write one row's 8 chunks) -----
  static TAILOR_HIP_DEVICE void StoreTile(const Staged& s,
                                          unsigned char* buffer) {
    const int tid = threadIdx.x;
    unsigned char* lds_a = buffer;                        // [kBM][128 B]
    unsigned char* lds_w = buffer + kBM * kTileRowBytes;  // [kBN][128 B]
    for (int i = 0; i < kAChunks; ++i) {
      const int c = tid + i * kThreads;
      if (c >= kAChunkCount) break;
      *reinterpret_cast<uint4*>(
          lds_a + SwizzledChunk(c / kChunksPerRow, c % kChunksPerRow)) = s.a[i];
    }
    for (int i = 0; i < kWChunks; ++i) {
      const int c = tid + i * kThreads;
      *reinterpret_cast<uint4*>(
          lds_w + SwizzledChunk(c / kChunksPerRow, c % kChunksPerRow)) = s.w[i];
    }
  }

  // ---- MFMAs over one K tile in LDS ----------------------------------------
  template <int kMFActive>
  static TAILOR_HIP_DEVICE void MmaTile(const unsigned char* buffer,
                                        Floatx4 (&acc)[kMF][2], int wave,
                                        int lane) {
    const unsigned char* lds_a = buffer;
    const unsigned char* lds_w = buffer + kBM * kTileRowBytes;
    const int r = lane % 16, q = lane / 16;
    for (int kb = 0; kb < kBK / 32; ++kb) {  // two 32-k blocks
      const int chunk = kb * 4 + q;
      Bf16x8 b[2];
      for (int nb = 0; nb < 2; ++nb) {
        b[nb] = LoadChunk(lds_w + SwizzledChunk(WaveWRow(wave, nb) + r, chunk));
      }
      for (int mb = 0; mb < kMFActive; ++mb) {
        const Bf16x8 a = LoadChunk(lds_a + SwizzledChunk(mb * 16 + r, chunk));
        for (int nb = 0; nb < 2; ++nb) {
          acc[mb][nb] = Mfma16x16x32Bf16(acc[mb][nb], a, b[nb]);
        }
      }
    }
  }

  // ---- epilogue: lane holds D[4q + i][r] of each 16 x 16 block -------------
  template <int kMFActive, bool kMasked>
  static TAILOR_HIP_DEVICE void Store(const Params& p, const MoeWorkItem& part,
                                      int rows, int n_tile,
                                      const Floatx4 (&acc)[kMF][2], int wave,
                                      int lane) {
    auto* c = static_cast<unsigned short*>(p.c);
    const int r = lane % 16, q = lane / 16;
    for (int mb = 0; mb < kMFActive; ++mb) {
      for (int i = 0; i < 4; ++i) {
        const int row = mb * 16 + 4 * q + i;
        if (kMasked && row >= rows) continue;
        unsigned short* c_row =
            c + static_cast<long long>(part.row_begin + row) * kOutN;
        if constexpr (kGated) {
          const int col = n_tile * (kBN / 2) + wave * 16 + r;
          if (col < kOutN) {
            c_row[col] =
                FloatToHalf<true>(SiluHip(acc[mb][0][i]) * acc[mb][1][i]);
          }
        } else {
          for (int nb = 0; nb < 2; ++nb) {
            const int col = n_tile * kBN + WaveWRow(wave, nb) + r;
            if (col < kOutN) c_row[col] = FloatToHalf<true>(acc[mb][nb][i]);
          }
        }
      }
    }
  }

  // ---- one part (<= kBM rows) x one N tile ----------------------------------
  template <int kMFActive, bool kMasked>
  static TAILOR_HIP_DEVICE void Tile(const Params& p, const MoeWorkItem& part,
                                     int rows, int n_tile, unsigned char* lds) {
    const int wave = threadIdx.x / kWaveSize, lane = LaneId();
    Floatx4 acc[kMF][2];
    for (int mb = 0; mb < kMF; ++mb) {
      for (int nb = 0; nb < 2; ++nb) acc[mb][nb] = Floatx4{0, 0, 0, 0};
    }
    Staged staged;
    LoadTile<kMasked>(p, part, rows, n_tile, 0, staged);
    StoreTile(staged, lds);
    __syncthreads();
    for (int kt = 0; kt < kKTiles; ++kt) {
      unsigned char* current = lds + (kt % 2) * kBufferBytes;
      unsigned char* next = lds + ((kt + 1) % 2) * kBufferBytes;
      const bool more = kt + 1 < kKTiles;
      if (more) LoadTile<kMasked>(p, part, rows, n_tile, kt + 1, staged);
      MmaTile<kMFActive>(current, acc, wave, lane);
      if (more) StoreTile(staged, next);
      __syncthreads();  // next is written; current may be overwritten
    }
    Store<kMFActive, kMasked>(p, part, rows, n_tile, acc, wave, lane);
  }

  static TAILOR_HIP_DEVICE void RunItem(const Params& p,
                                        const MoeWorkItem& item, int n_tile,
                                        unsigned char* lds) {
    const int rows = item.tail_class == 0 ? kTileRows : item.rows;
    for (int first = 0; first < rows; first += kBM) {
      MoeWorkItem part = item;
      part.row_begin += first;
      const int part_rows = rows - first < kBM ? rows - first : kBM;
      if (part_rows == kBM) {
        Tile<kMF, false>(p, part, kBM, n_tile, lds);
      } else if (part_rows <= 16) {
        Tile<1, true>(p, part, part_rows, n_tile, lds);
      } else {
        if constexpr (kMF > 1) Tile<kMF, true>(p, part, part_rows, n_tile, lds);
      }
    }
  }

  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    extern __shared__ __attribute__((aligned(16))) unsigned char mfma_lds[];
    const int num_work = p.header->num_work;
    const int tiles = num_work * kNTiles;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const HipTileCoord coord = HipTileOf(t, num_work, kNTiles);
      RunItem(p, p.work[coord.item], coord.n_tile, mfma_lds);
    }
  }
};

// =============================================================================
// MoeGroupedGemmSimtHip: f32 and unaligned bf16, plain FMA.
// =============================================================================
template <bool kBf16, int kN, int kK, int kTileRows, int kEpilogue>
struct MoeGroupedGemmSimtHip {
  static_assert(kN >= 1 && kK >= 1, "N and K must be positive");
  static_assert(kTileRows >= 1 && kTileRows <= kMoeMaxTileRows,
                "tile rows must be in [1, 128]");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");

  using Params = MoeGroupedGemmParams;
  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kOutN = kGated ? kN / 2 : kN;
  static constexpr int kBM = HipGemmCtaRows(kTileRows);
  static constexpr int kRowsPerThread = kBM / 16;
  static constexpr int kBN = kHipSimtWRows;  // 64: 4 per thread column
  static constexpr int kNTiles = HipGemmNTiles(false, kGated, kN);
  static constexpr int kBK = 16;
  static constexpr int kThreads = kHipSimtThreads;  // 16 x 16
  static constexpr int kMinBlocksPerSm = 1;

  static TAILOR_HIP_DEVICE float Load(const void* base, long long i) {
    if constexpr (kBf16) {
      return HalfToFloat<true>(static_cast<const unsigned short*>(base)[i]);
    } else {
      return static_cast<const float*>(base)[i];
    }
  }
  static TAILOR_HIP_DEVICE void StoreC(void* base, long long i, float x) {
    if constexpr (kBf16) {
      static_cast<unsigned short*>(base)[i] = FloatToHalf<true>(x);
    } else {
      static_cast<float*>(base)[i] = x;
    }
  }

  static TAILOR_HIP_DEVICE void RunPart(const Params& p,
                                        const MoeWorkItem& part, int rows,
                                        int n_tile) {
    // LDS: [kBK][kBM + 1] and [kBK][kBN + 1]: the +1 column puts the
    // transposed writes of 16 consecutive k (one row each) in 16 banks.
    __shared__ float lds_a[kBK][kBM + 1];
    __shared__ float lds_w[kBK][kBN + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const long long w_base = static_cast<long long>(part.group) * kN * kK;
    float acc[kRowsPerThread][4] = {};
    for (int k0 = 0; k0 < kK; k0 += kBK) {
      for (int e = threadIdx.x; e < kBM * kBK; e += kThreads) {
        const int r = e / kBK, k = k0 + e % kBK;
        lds_a[e % kBK][r] =
            r < rows && k < kK
                ? Load(p.a, static_cast<long long>(part.row_begin + r) * kK + k)
                : 0.0f;
      }
      for (int e = threadIdx.x; e < kBN * kBK; e += kThreads) {
        const int n = e / kBK, k = k0 + e % kBK;
        const int w_row = HipWRow<kN, kGated, kBN>(n_tile, n);
        lds_w[e % kBK][n] =
            w_row >= 0 && k < kK
                ? Load(p.w, w_base + static_cast<long long>(w_row) * kK + k)
                : 0.0f;
      }
      __syncthreads();
      for (int k = 0; k < kBK; ++k) {
        for (int i = 0; i < kRowsPerThread; ++i) {
          const float a = lds_a[k][ty + 16 * i];
          for (int j = 0; j < 4; ++j) acc[i][j] += a * lds_w[k][tx + 16 * j];
        }
      }
      __syncthreads();
    }
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = ty + 16 * i;
      if (row >= rows) continue;
      const long long c_row =
          static_cast<long long>(part.row_begin + row) * kOutN;
      if constexpr (kGated) {  // columns tx, tx + 16: gate; tx + 32/48: up
        for (int j = 0; j < 2; ++j) {
          const int col = n_tile * (kBN / 2) + tx + 16 * j;
          if (col < kOutN)
            StoreC(p.c, c_row + col, SiluHip(acc[i][j]) * acc[i][j + 2]);
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const int col = n_tile * kBN + tx + 16 * j;
          if (col < kOutN) StoreC(p.c, c_row + col, acc[i][j]);
        }
      }
    }
  }

  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    const int num_work = p.header->num_work;
    const int tiles = num_work * kNTiles;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const HipTileCoord coord = HipTileOf(t, num_work, kNTiles);
      const MoeWorkItem item = p.work[coord.item];
      const int rows = item.tail_class == 0 ? kTileRows : item.rows;
      for (int first = 0; first < rows; first += kBM) {
        MoeWorkItem part = item;
        part.row_begin += first;
        RunPart(p, part, rows - first < kBM ? rows - first : kBM, coord.n_tile);
      }
    }
  }
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_MOE_GROUPED_GEMM_H_
