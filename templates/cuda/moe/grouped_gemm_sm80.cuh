// templates/cuda/moe/grouped_gemm_sm80.cuh — the portable grouped GEMM (sm_80
// and newer) over the device Route's work list: core tiles and every tail
// class in one persistent launch.
//
// C[r, :] = epilogue(A[r, :] · W[e]ᵀ) for the rows r of each work item of
// expert e. A [R, K] holds the expert-sorted rows, W [E, N, K] the weights
// (nn.Linear layout, K contiguous). The launch reads its item count from the
// route header, so the host needs no sync and one captured launch serves
// every routing.
//
//   tail_class of an item   0: a core tile of kTileRows rows, run without
//                           any row mask when its rows are whole m16
//                           fragments (kTileRows % 16 == 0)
//                           c > 0: a tail of 1..c rows: up to 16 rows run
//                           one m16 fragment (a 3-row tail computes 16 rows,
//                           not kTileRows), longer ones a masked full tile;
//                           A rows past the tail are zero-filled by
//                           cp.async, C rows past it are not stored
// A CTA computes at most 64 rows: a 128-row item runs as two parts.
//
// N, K and the tile rows are compiled in (a specialized kernel), or all
// three kMoeRuntimeDim (0): the generic kernel of background JIT reads them
// from the params (MoeGemmDims) and runs 64-row CTA tiles for any plan tile.
//
// Epilogues: kMoeEpilogueNone C [R, N]; kMoeEpilogueSiluAndMul C [R, N / 2]
// = silu(A W[:N/2]ᵀ) * (A W[N/2:]ᵀ) (vLLM's silu_and_mul), on the f32
// accumulators.
//
// Two kernels:
//   MoeGroupedGemmMma   bf16 with K % 8 == 0: mma.sync m16n8k16 (f32
//                       accumulators), ldmatrix from a 128B-swizzled
//                       shared-memory ring of kStages cp.async stages; CTA
//                       tile (tile rows) x 128 W rows x 64 K, 4 warps, each
//                       owning 32 W rows (gated: 16 gate + the 16 matching
//                       up rows, so silu_and_mul stays in registers)
//   MoeGroupedGemmSimt  f32 (exact FMA: f32 results within 1e-5 of fp64),
//                       and bf16 rows that are not 16-byte aligned: a plain
//                       shared-memory tiled SIMT GEMM
// Both walk tiles t = blockIdx.x, +gridDim.x, ... of (item, N tile) pairs in
// groups of kGroupItems items, so a CTA wave reuses each W tile across
// neighbouring items of one expert and each A tile across N tiles in L2.
//
// Params: MoeGroupedGemmParams (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM80_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM80_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mma_sm80.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/params.h"
#include "templates/cuda/moe/tile_raster.cuh"

namespace tailor::cuda {

// N, K and the core tile's rows of a launch, with what follows from them:
// compile-time constants in a specialized kernel, read from the params in
// the generic one (template dims kMoeRuntimeDim).
struct MoeGemmDims {
  int n;  // W rows per expert
  int k;
  int tile_rows;  // rows of a core tile
  int out_n;      // columns of C
  int k_tiles;    // K tiles of kBK
  int n_tiles;    // N tiles of one CTA's output columns
};

template <int kN, int kK, int kTileRows, bool kMma, bool kGated, int kBK>
TAILOR_DEVICE MoeGemmDims MoeGemmDimsOf(const MoeGroupedGemmParams& p) {
  static_assert((kN == kMoeRuntimeDim) == (kK == kMoeRuntimeDim) &&
                    (kK == kMoeRuntimeDim) == (kTileRows == kMoeRuntimeDim),
                "N, K and tile rows are all compiled in or all runtime");
  const int n = kN != kMoeRuntimeDim ? kN : p.n;
  const int k = kK != kMoeRuntimeDim ? kK : p.k;
  const int tile_rows = kTileRows != kMoeRuntimeDim ? kTileRows : p.tile_rows;
  return {n,
          k,
          tile_rows,
          kGated ? n / 2 : n,
          (k + kBK - 1) / kBK,
          MoeGemmNTiles(kMma, kGated, n)};
}

// The CTA rows of a kernel built for kTileRows (the generic one: the most).
constexpr int MoeGemmKernelCtaRows(int tile_rows) {
  return MoeGemmCtaRows(tile_rows == kMoeRuntimeDim ? kMoePortableMaxRows
                                                    : tile_rows);
}

// =============================================================================
// MoeGroupedGemmMma: bf16 tensor cores.
// =============================================================================
template <int kN, int kK, int kTileRows, int kEpilogue>
struct MoeGroupedGemmMma {
  static_assert(kN >= 0 && kK >= 0,
                "N and K must be positive (kMoeRuntimeDim: from the params)");
  static_assert(kK % 8 == 0,
                "rows of A and W must be 16-byte aligned (K % 8 == 0); "
                "MoeGroupedGemmSimt takes the others");
  static_assert(kTileRows >= 0 && kTileRows <= kMoeMaxTileRows,
                "tile rows must be in [1, 128] (kMoeRuntimeDim: params)");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul,
                "unknown epilogue");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");

  using Params = MoeGroupedGemmParams;
  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kBM = MoeGemmKernelCtaRows(kTileRows);  // <= 64
  static constexpr int kMF = kBM / 16;                         // m16 frags
  static constexpr int kBN = kMoeMmaWRows;                     // W rows per CTA
  static constexpr int kOutPerCta = MoeGemmOutPerCta(true, kGated);
  static constexpr int kBK = kMoeMmaKTile;  // 128-byte rows
  static constexpr int kStages = kMoeMmaStages;
  static constexpr int kThreads = kMoeMmaThreads;  // 4 warps
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kRowBytes = kBK * 2;
  static constexpr int kATileBytes = kBM * kRowBytes;
  static constexpr int kStageBytes = kATileBytes + kBN * kRowBytes;
  static constexpr int kSharedBytes = kStages * (kBM + kBN) * kBK * 2;
  static_assert(kSharedBytes == kStages * kStageBytes, "shared memory layout");
  static_assert(kTileRows == kMoeRuntimeDim ||
                    kSharedBytes == MoeMmaSharedBytes(kTileRows),
                "the host's shared memory size");
  static_assert(kThreads / 32 * 32 == kBN,
                "each of the 4 warps owns 32 W rows (4 n8 fragments)");

  // Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile:
  // chunk c of row r sits at c ^ (r % 8), so the 8 rows an ldmatrix phase
  // reads hit 8 different bank groups.
  static int Swizzle(int row, int chunk) {
    return row * kRowBytes + ((chunk ^ (row & 7)) << 4);
  }

  // W row (within the expert) held in CTA row n of N tile n_tile; -1 past N.
  static int WRow(const MoeGemmDims& d, int n_tile, int n) {
    if constexpr (kGated) {
      const int out = n_tile * kOutPerCta + (n % kOutPerCta);
      if (out >= d.out_n) return -1;
      return n < kOutPerCta ? out : d.out_n + out;
    } else {
      const int row = n_tile * kBN + n;
      return row < d.n ? row : -1;
    }
  }

  // First CTA W row of warp `warp`'s 16-row pair `pair` (4 n8 fragments).
  static int WarpPairRow(int warp, int pair) {
    if constexpr (kGated) return pair == 0 ? warp * 16 : kBN / 2 + warp * 16;
    return warp * 32 + pair * 16;
  }

  // ---- one K tile into a stage ------------------------------------------------
  template <int kMFActive, bool kMasked>
  static void LoadStage(const Params& p, const MoeGemmDims& d,
                        const MoeWorkItem& item, int rows, int n_tile,
                        int k_tile, unsigned char* stage) {
    const int k0 = k_tile * kBK;
    const unsigned short* a =
        static_cast<const unsigned short*>(p.a) +
        static_cast<long long>(item.row_begin) * d.k;  // [rows, K]
    // 16-byte chunks: kMFActive * 16 rows x 8 of A, kBN rows x 8 of W; each
    // thread copies kMFActive of A and 8 of W.
    static_assert(16 * 8 % kThreads == 0 && kBN * 8 % kThreads == 0,
                  "chunks split evenly over the threads");
#pragma unroll
    for (int i = 0; i < kMFActive * 16 * 8 / kThreads; ++i) {
      const int c = i * kThreads + threadIdx.x;
      const int row = c / 8, chunk = c % 8, k = k0 + chunk * 8;
      const bool valid =
          (!kMasked || row < rows) && (d.k % kBK == 0 || k < d.k);
      const unsigned short* src =
          valid ? a + static_cast<long long>(row) * d.k + k : a;
      CpAsync16(stage + Swizzle(row, chunk), src, valid);
    }
    const unsigned short* w = static_cast<const unsigned short*>(p.w) +
                              static_cast<long long>(item.group) * d.n * d.k;
    unsigned char* w_tile = stage + kATileBytes;
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int c = i * kThreads + threadIdx.x;
      const int n = c / 8, chunk = c % 8, k = k0 + chunk * 8;
      const int w_row = WRow(d, n_tile, n);
      const bool valid = w_row >= 0 && (d.k % kBK == 0 || k < d.k);
      const unsigned short* src =
          valid ? w + static_cast<long long>(w_row) * d.k + k : w;
      CpAsync16(w_tile + Swizzle(n, chunk), src, valid);
    }
  }

  // ---- acc += A_stage · W_stageᵀ ---------------------------------------------
  template <int kMFActive>
  static void ComputeStage(const unsigned char* stage,
                           float (&acc)[kMFActive][4][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned char* w_tile = stage + kATileBytes;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      unsigned a[kMFActive][4];
#pragma unroll
      for (int mf = 0; mf < kMFActive; ++mf) {
        LdMatrixX4(a[mf],
                   stage + Swizzle(mf * 16 + (lane & 15), ks * 2 + (lane >> 4)));
      }
      unsigned b[4][2];
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        unsigned r[4];
        const int n = WarpPairRow(warp, pair) + (lane & 7) + ((lane >> 4) << 3);
        LdMatrixX4(r, w_tile + Swizzle(n, ks * 2 + ((lane >> 3) & 1)));
        b[2 * pair][0] = r[0];
        b[2 * pair][1] = r[1];
        b[2 * pair + 1][0] = r[2];
        b[2 * pair + 1][1] = r[3];
      }
#pragma unroll
      for (int mf = 0; mf < kMFActive; ++mf) {
#pragma unroll
        for (int nf = 0; nf < 4; ++nf) MmaBf16(acc[mf][nf], a[mf], b[nf]);
      }
    }
  }

  // ---- registers -> C ----------------------------------------------------------
  static void StorePair(const Params& p, const MoeGemmDims& d, long long row,
                        int col, float v0, float v1) {
    unsigned short* c = static_cast<unsigned short*>(p.c) + row * d.out_n + col;
    if (d.out_n % 2 == 0) {
      if (col < d.out_n) *reinterpret_cast<unsigned*>(c) = PackBf16x2(v0, v1);
    } else {
      if (col < d.out_n) c[0] = FromFloat<bf16>(v0).bits;
      if (col + 1 < d.out_n) c[1] = FromFloat<bf16>(v1).bits;
    }
  }

  template <int kMFActive, bool kMasked>
  static void Store(const Params& p, const MoeGemmDims& d,
                    const MoeWorkItem& item, int rows, int n_tile,
                    const float (&acc)[kMFActive][4][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mf * 16 + g + 8 * half;
        if (kMasked && row >= rows) continue;
        const long long c_row = item.row_begin + row;
        if constexpr (kGated) {
#pragma unroll
          for (int nf = 0; nf < 2; ++nf) {
            const int col = n_tile * kOutPerCta + warp * 16 + nf * 8 + 2 * t;
            const float* gate = &acc[mf][nf][2 * half];
            const float* up = &acc[mf][nf + 2][2 * half];
            StorePair(p, d, c_row, col, Silu(gate[0]) * up[0],
                      Silu(gate[1]) * up[1]);
          }
        } else {
#pragma unroll
          for (int nf = 0; nf < 4; ++nf) {
            const int col = n_tile * kBN + warp * 32 + nf * 8 + 2 * t;
            StorePair(p, d, c_row, col, acc[mf][nf][2 * half],
                      acc[mf][nf][2 * half + 1]);
          }
        }
      }
    }
  }

  // ---- one (item, N tile): the cp.async ring over K, then the epilogue -------
  template <int kMFActive, bool kMasked>
  static void Tile(const Params& p, const MoeGemmDims& d,
                   const MoeWorkItem& item, int rows, int n_tile,
                   unsigned char* smem) {
    float acc[kMFActive][4][4];
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf)
#pragma unroll
      for (int nf = 0; nf < 4; ++nf)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mf][nf][i] = 0.0f;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < d.k_tiles) {
        LoadStage<kMFActive, kMasked>(p, d, item, rows, n_tile, s,
                                      smem + s * kStageBytes);
      }
      CpAsyncCommit();
    }
#pragma unroll 1
    for (int kt = 0; kt < d.k_tiles; ++kt) {
      CpAsyncWait<kStages - 2>();  // K tile kt has landed (this thread's)
      __syncthreads();             // ... everyone's; stage kt-1 is free
      const int next = kt + kStages - 1;
      if (next < d.k_tiles) {
        LoadStage<kMFActive, kMasked>(p, d, item, rows, n_tile, next,
                                      smem + (next % kStages) * kStageBytes);
      }
      CpAsyncCommit();
      ComputeStage<kMFActive>(smem + (kt % kStages) * kStageBytes, acc);
    }
    CpAsyncWait<0>();
    __syncthreads();  // the ring is free for the next tile
    Store<kMFActive, kMasked>(p, d, item, rows, n_tile, acc);
  }

  // An item runs as parts of at most kBM rows (a 128-row tile: two). Three
  // variants keep compile time and code size down: full parts, unmasked
  // (every part of a core tile whose rows are a multiple of 16); parts of at
  // most 16 rows, one m16 fragment (decode steps are almost all these); and
  // other parts, a masked full part.
  static void RunItem(const Params& p, const MoeGemmDims& d,
                      const MoeWorkItem& item, int n_tile,
                      unsigned char* smem) {
    const int rows = item.tail_class == 0 ? d.tile_rows : item.rows;
    for (int first = 0; first < rows; first += kBM) {
      MoeWorkItem part = item;
      part.row_begin += first;
      const int part_rows = Min(kBM, rows - first);
      if (part_rows == kBM) {
        Tile<kMF, false>(p, d, part, kBM, n_tile, smem);
      } else if (part_rows <= 16) {
        Tile<1, true>(p, d, part, part_rows, n_tile, smem);
      } else {
        if constexpr (kMF > 1) {
          Tile<kMF, true>(p, d, part, part_rows, n_tile, smem);
        }
      }
    }
  }

  static void Run(const Params& p) {
    extern __shared__ __align__(128) unsigned char mma_smem[];
    const MoeGemmDims d =
        MoeGemmDimsOf<kN, kK, kTileRows, true, kGated, kBK>(p);
    const int num_work = p.header->num_work;
    const int tiles = num_work * d.n_tiles;
#pragma unroll 1
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord coord = TileOf(t, p.work, num_work, d.n_tiles);
      RunItem(p, d, p.work[coord.item], coord.n_tile, mma_smem);
    }
  }
};

// =============================================================================
// MoeGroupedGemmSimt: f32 (and unaligned bf16), plain FMA.
// =============================================================================
template <typename T, int kN, int kK, int kTileRows, int kEpilogue>
struct MoeGroupedGemmSimt {
  static_assert(kN >= 0 && kK >= 0,
                "N and K must be positive (kMoeRuntimeDim: from the params)");
  static_assert(kTileRows >= 0 && kTileRows <= kMoeMaxTileRows,
                "tile rows must be in [1, 128] (kMoeRuntimeDim: params)");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");

  using Params = MoeGroupedGemmParams;
  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kBM = MoeGemmKernelCtaRows(kTileRows);
  static constexpr int kRowsPerThread = kBM / 16;
  static constexpr int kBN = kMoeSimtWRows;  // 4 per thread column
  static constexpr int kOutPerCta = MoeGemmOutPerCta(false, kGated);
  static constexpr int kBK = 16;
  static constexpr int kThreads = kMoeSimtThreads;  // 16 x 16
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kSharedBytes = 0;  // static shared memory only

  // W row of CTA column n (thread column tx owns n = tx + 16 j); -1 past N.
  static int WRow(const MoeGemmDims& d, int n_tile, int n) {
    if constexpr (kGated) {
      const int out = n_tile * kOutPerCta + (n % kOutPerCta);
      if (out >= d.out_n) return -1;
      return n < kOutPerCta ? out : d.out_n + out;
    } else {
      const int row = n_tile * kBN + n;
      return row < d.n ? row : -1;
    }
  }

  // Rows [0, rows) of `item` (rows <= kBM).
  static void Tile(const Params& p, const MoeGemmDims& d,
                   const MoeWorkItem& item, int rows, int n_tile,
                   float (&a_tile)[kBK][kBM], float (&w_tile)[kBK][kBN]) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const T* a = static_cast<const T*>(p.a) +
                 static_cast<long long>(item.row_begin) * d.k;  // [rows, K]
    const T* w = static_cast<const T*>(p.w) +
                 static_cast<long long>(item.group) * d.n * d.k;  // [N, K]
    float acc[kRowsPerThread][4] = {};
#pragma unroll 1
    for (int k0 = 0; k0 < d.k; k0 += kBK) {
      for (int e = threadIdx.x; e < kBM * kBK; e += kThreads) {
        const int m = e / kBK, kk = e % kBK;
        const bool valid = m < rows && k0 + kk < d.k;
        a_tile[kk][m] =
            valid ? ToFloat(a[static_cast<long long>(m) * d.k + k0 + kk]) : 0.f;
      }
      for (int e = threadIdx.x; e < kBN * kBK; e += kThreads) {
        const int n = e / kBK, kk = e % kBK;
        const int w_row = WRow(d, n_tile, n);
        const bool valid = w_row >= 0 && k0 + kk < d.k;
        w_tile[kk][n] =
            valid ? ToFloat(w[static_cast<long long>(w_row) * d.k + k0 + kk])
                  : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const float x = a_tile[kk][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += x * w_tile[kk][tx + 16 * j];
        }
      }
      __syncthreads();
    }
    T* c = static_cast<T*>(p.c);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = ty + 16 * i;
      if (row >= rows) continue;
      T* c_row = c + (static_cast<long long>(item.row_begin) + row) * d.out_n;
      if constexpr (kGated) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int out = n_tile * kOutPerCta + tx + 16 * j;
          if (out < d.out_n) {
            c_row[out] = FromFloat<T>(Silu(acc[i][j]) * acc[i][j + 2]);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int out = n_tile * kBN + tx + 16 * j;
          if (out < d.out_n) c_row[out] = FromFloat<T>(acc[i][j]);
        }
      }
    }
  }

  static void Run(const Params& p) {
    __shared__ float a_tile[kBK][kBM];
    __shared__ float w_tile[kBK][kBN];
    const MoeGemmDims d =
        MoeGemmDimsOf<kN, kK, kTileRows, false, kGated, kBK>(p);
    const int num_work = p.header->num_work;
    const int tiles = num_work * d.n_tiles;
#pragma unroll 1
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord coord = TileOf(t, p.work, num_work, d.n_tiles);
      const MoeWorkItem item = p.work[coord.item];
      const int rows = item.tail_class == 0 ? d.tile_rows : item.rows;
      for (int first = 0; first < rows; first += kBM) {  // parts of kBM rows
        MoeWorkItem part = item;
        part.row_begin += first;
        Tile(p, d, part, Min(kBM, rows - first), coord.n_tile, a_tile, w_tile);
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM80_CUH_
