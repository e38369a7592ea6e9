// templates/cuda/moe/fp8_grouped_gemm_sm80.cuh — the portable (sm_80 and
// newer) FP8 (e4m3) grouped GEMM: the bf16 mma.sync kernel's tiles, ring,
// work list and tails (grouped_gemm_sm80.cuh) over e4m3 A and W, converted
// to f16 in registers right before each mma.sync.
//
// Scale modes and layouts: templates/cuda/moe/fp8_params.h. A and W tiles
// arrive by cp.async as e4m3 (half the bytes of bf16): a stage's 128-byte
// swizzled rows hold 128 K, one scale block. Every e4m3 value is an f16
// value, so the conversion is exact; the tensor cores accumulate in f32.
//
// K order: ldmatrix reads the e4m3 rows as b16 pairs, so a lane's register
// holds 4 consecutive K (4t..4t+3 of a 16-K chunk); its low f16x2 serves
// fragment K 2t..2t+1 and its high one 2t+8..2t+9. A and W are read alike,
// so each m16n8k16 sums the same 16 K of both — in another order.
//
// Block mode: each 128-K block (a stage) runs into a fresh f32 partial that
// is promoted into the f32 accumulators times sa[kb, row] x sw[e, n / 128,
// kb], as the reference dequantizes (scales from global memory, L2-resident;
// rows past a tail scale by 0). Per tensor and per channel the scales are
// constant along K: the accumulators are scaled once at the end.
//
// Epilogues: kMoeEpilogueNone and kMoeEpilogueSiluAndMul store bf16 as the
// bf16 kernel does. kMoeEpilogueSiluAndMulQuant writes the down GEMM's A in
// the Hopper epilogue's format: e4m3 [R, N / 2] and (block mode) 1 x 128
// scales [N / 256, c_scale_rows] by runtime/cuda/fp8.cuh's rule; per tensor
// divided by the static c_scale[0]. A 128-column group is two of the CTA's
// 64-column N tiles: a unit runs both as one pass of the ring, keeps the
// first's f32 outputs in shared memory past the ring and the second's in
// the drained ring, then a warp per row quantizes the group (one
// GroupAbsMax over 32 lanes).
//
// N, K and the tile rows are compiled in, or all kMoeRuntimeDim (the
// generic kernel: 64-row CTAs, dims from params.gemm).
//
// Params: MoeFp8GemmParams (templates/cuda/moe/fp8_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM80_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM80_CUH_

#include "runtime/cuda/fp8.cuh"
#include "templates/cuda/moe/fp8_params.h"
#include "templates/cuda/moe/grouped_gemm_sm80.cuh"

namespace tailor::cuda {

template <int kN, int kK, int kTileRows, int kEpilogue,
          int kScaleMode = kMoeFp8BlockScaled>
struct MoeFp8GroupedGemmMma {
  static_assert(kScaleMode == kMoeFp8PerTensor ||
                    kScaleMode == kMoeFp8PerChannel ||
                    kScaleMode == kMoeFp8BlockScaled,
                "a scale mode: per tensor (1), per channel (2) or block (3)");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul ||
                    kEpilogue == kMoeEpilogueSiluAndMulQuant,
                "unknown epilogue");
  static_assert(kK % kMoeFp8Block == 0 && kN % kMoeFp8Block == 0,
                "K and N are multiples of 128 (kMoeRuntimeDim: params)");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMulQuant ||
                    (kN % (2 * kMoeFp8Block) == 0 &&
                     kScaleMode != kMoeFp8PerChannel),
                "quantized outputs: whole 128-column groups, block or per "
                "tensor scales");

  using Params = MoeFp8GemmParams;
  static constexpr bool kGated = kEpilogue != kMoeEpilogueNone;
  static constexpr bool kQuantized = kEpilogue == kMoeEpilogueSiluAndMulQuant;
  static constexpr bool kStaticScale =
      kQuantized && kScaleMode == kMoeFp8PerTensor;
  static constexpr bool kBlockScaled = kScaleMode == kMoeFp8BlockScaled;
  // The bf16 kernel of the same tile: swizzle, W row order, bf16 stores.
  using Bf16 =
      MoeGroupedGemmMma<kN, kK, kTileRows,
                        kGated ? kMoeEpilogueSiluAndMul : kMoeEpilogueNone>;
  static constexpr int kBM = Bf16::kBM;  // <= 64
  static constexpr int kMF = Bf16::kMF;
  static constexpr int kOutPerCta = Bf16::kOutPerCta;
  static constexpr int kBK = kMoeFp8Block;  // one 128-byte row, one block
  static constexpr int kStages = MoeFp8MmaStages(kQuantized);
  static constexpr int kThreads = Bf16::kThreads;
  static constexpr int kMinBlocksPerSm = Bf16::kMinBlocksPerSm;
  static constexpr int kATileBytes = Bf16::kATileBytes;
  static constexpr int kStageBytes = Bf16::kStageBytes;
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kStashFloats = kBM * kOutPerCta;  // [kBM][64]
  static constexpr int kSharedBytes =
      kRingBytes + (kQuantized ? kStashFloats * 4 : 0);
  static_assert(Bf16::kRowBytes == kBK, "128 e4m3 fill a bf16 row's bytes");
  static_assert(kTileRows == kMoeRuntimeDim ||
                    kSharedBytes == MoeFp8MmaSharedBytes(kTileRows, kQuantized),
                "the host's shared memory size");
  static_assert(!kQuantized || (kOutPerCta * 2 == kMoeFp8Block &&
                                kStashFloats * 4 <= kRingBytes),
                "a scale group is two N tiles; the second's outputs fit the "
                "drained ring");

  // ---- one K block into a stage: the bf16 kernel's chunks, 16 e4m3 each ----
  template <int kMFActive, bool kMasked>
  static void LoadStage(const Params& p, const MoeGemmDims& d,
                        const MoeWorkItem& item, int rows, int n_tile,
                        int k_tile, unsigned char* stage) {
    const int k0 = k_tile * kBK;
    const unsigned char* a = static_cast<const unsigned char*>(p.gemm.a) +
                             static_cast<long long>(item.row_begin) * d.k;
#pragma unroll
    for (int i = 0; i < kMFActive * 16 * 8 / kThreads; ++i) {
      const int c = i * kThreads + threadIdx.x;
      const int row = c / 8, chunk = c % 8, k = k0 + chunk * 16;
      const bool valid =
          (!kMasked || row < rows) && (d.k % kBK == 0 || k < d.k);
      const unsigned char* src =
          valid ? a + static_cast<long long>(row) * d.k + k : a;
      CpAsync16(stage + Bf16::Swizzle(row, chunk), src, valid);
    }
    const unsigned char* w = static_cast<const unsigned char*>(p.gemm.w) +
                             static_cast<long long>(item.group) * d.n * d.k;
    unsigned char* w_tile = stage + kATileBytes;
#pragma unroll
    for (int i = 0; i < Bf16::kBN * 8 / kThreads; ++i) {
      const int c = i * kThreads + threadIdx.x;
      const int n = c / 8, chunk = c % 8, k = k0 + chunk * 16;
      const int w_row = Bf16::WRow(d, n_tile, n);
      const bool valid = w_row >= 0 && (d.k % kBK == 0 || k < d.k);
      const unsigned char* src =
          valid ? w + static_cast<long long>(w_row) * d.k + k : w;
      CpAsync16(w_tile + Bf16::Swizzle(n, chunk), src, valid);
    }
  }

  // ---- acc += A_stage · W_stageᵀ: 8 chunks of 16 K, one k16 MMA each -----
  template <int kMFActive>
  static void ComputeStage(const unsigned char* stage,
                           float (&acc)[kMFActive][4][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned char* w_tile = stage + kATileBytes;
    // Not unrolled: hoisted fragments of later steps would spill beside the
    // block mode's two accumulator sets.
#pragma unroll 1
    for (int chunk = 0; chunk < kBK / 16; ++chunk) {  // one k16 step each
      // W: matrix i is n8 fragment i (rows 8 (i % 2) of pair i / 2).
      unsigned w8[4];
      const int i = lane / 8;
      LdMatrixX4(w8, w_tile + Bf16::Swizzle(Bf16::WarpPairRow(warp, i / 2) +
                                                8 * (i % 2) + (lane & 7),
                                            chunk));
      unsigned b[4][2];
#pragma unroll
      for (int nf = 0; nf < 4; ++nf) E4m3x4ToHalf2(w8[nf], b[nf][0], b[nf][1]);
#pragma unroll
      for (int mf = 0; mf < kMFActive; ++mf) {
        unsigned a8[2];  // rows g and g + 8
        LdMatrixX2(a8, stage + Bf16::Swizzle(mf * 16 + (lane & 15), chunk));
        unsigned a[4];
        E4m3x4ToHalf2(a8[0], a[0], a[2]);
        E4m3x4ToHalf2(a8[1], a[1], a[3]);
#pragma unroll
        for (int nf = 0; nf < 4; ++nf) MmaF16(acc[mf][nf], a, b[nf]);
      }
    }
  }

  // ---- scales ----------------------------------------------------------------
  // Offset of W block (item's expert, block of the warp's pair, K block 0)
  // in w_scales, per pair; -1 past N. A pair's 16 rows share a block. (W
  // scales are E x N x K / 16384 floats: int offsets.)
  static void WBlockBases(const MoeGemmDims& d, const MoeWorkItem& item,
                          int n_tile, int (&base)[2]) {
    const int warp = threadIdx.x / 32;
    const int k_blocks = d.k / kBK;
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const int w_row = Bf16::WRow(d, n_tile, Bf16::WarpPairRow(warp, pair));
      base[pair] =
          w_row < 0 ? -1 : (item.group * (d.n / kBK) + w_row / kBK) * k_blocks;
    }
  }

  // acc += partial x sa[kb, row] x sw[block, kb] for the thread's rows
  // (g, g + 8 of each fragment) and pairs.
  template <int kMFActive>
  static void Promote(const Params& p, const MoeWorkItem& item, int rows,
                      int kb, const int (&w_base)[2],
                      const float (&part)[kMFActive][4][4],
                      float (&acc)[kMFActive][4][4]) {
    const int g = threadIdx.x % 32 / 4;
    const float* sa = p.a_scales + static_cast<long long>(kb) * p.a_scale_rows +
                      item.row_begin;
    float sw[2];
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      sw[pair] =
          w_base[pair] < 0 ? 0.0f : __ldg(p.w_scales + w_base[pair] + kb);
    }
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mf * 16 + g + 8 * h;
        const float s = row < rows ? __ldg(sa + row) : 0.0f;
#pragma unroll
        for (int nf = 0; nf < 4; ++nf) {
          const float scale = s * sw[nf / 2];
          acc[mf][nf][2 * h] += part[mf][nf][2 * h] * scale;
          acc[mf][nf][2 * h + 1] += part[mf][nf][2 * h + 1] * scale;
        }
      }
    }
  }

  // Per tensor acc x sa[0] x sw[e]; per channel acc x sa[row] x sw[e, n].
  template <int kMFActive>
  static void ApplyScales(const Params& p, const MoeGemmDims& d,
                          const MoeWorkItem& item, int rows, int n_tile,
                          float (&acc)[kMFActive][4][4]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    float sw[4][2];
#pragma unroll
    for (int nf = 0; nf < 4; ++nf) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        if constexpr (kScaleMode == kMoeFp8PerTensor) {
          sw[nf][x] = __ldg(p.w_scales + item.group);
        } else {
          const int w_row = Bf16::WRow(
              d, n_tile,
              Bf16::WarpPairRow(warp, nf / 2) + 8 * (nf % 2) + 2 * t + x);
          sw[nf][x] =
              w_row < 0
                  ? 0.0f
                  : __ldg(p.w_scales +
                          static_cast<long long>(item.group) * d.n + w_row);
        }
      }
    }
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mf * 16 + g + 8 * h;
        float sa = 0.0f;
        if constexpr (kScaleMode == kMoeFp8PerTensor) {
          sa = __ldg(p.a_scales);
        } else if (row < rows) {
          sa = __ldg(p.a_scales + item.row_begin + row);
        }
#pragma unroll
        for (int nf = 0; nf < 4; ++nf) {
#pragma unroll
          for (int x = 0; x < 2; ++x) acc[mf][nf][2 * h + x] *= sa * sw[nf][x];
        }
      }
    }
  }

  // ---- one unit: the cp.async ring over K of its N tiles, scaled ----------
  // A unit is an N tile, or (quantized) the two N tiles of a scale group as
  // one run of 2 x k_tiles stages: at the first tile's end its outputs go
  // to `stash` and the accumulators restart, so the ring never drains
  // between the tiles. `acc` ends with the unit's (last) N tile.
  static constexpr int kTilesPerUnit = kQuantized ? 2 : 1;

  template <int kMFActive>
  static void Zero(float (&acc)[kMFActive][4][4]) {
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf)
#pragma unroll
      for (int nf = 0; nf < 4; ++nf)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mf][nf][i] = 0.0f;
  }

  template <int kMFActive, bool kMasked>
  static void Accumulate(const Params& p, const MoeGemmDims& d,
                         const MoeWorkItem& item, int rows, int unit,
                         unsigned char* smem, float* stash,
                         float (&acc)[kMFActive][4][4]) {
    const int stages = kTilesPerUnit * d.k_tiles;
    Zero<kMFActive>(acc);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < stages) {
        LoadStage<kMFActive, kMasked>(p, d, item, rows,
                                      kTilesPerUnit * unit + s / d.k_tiles,
                                      s % d.k_tiles, smem + s * kStageBytes);
      }
      CpAsyncCommit();
    }
    int w_base[2] = {-1, -1};
#pragma unroll 1
    for (int st = 0; st < stages; ++st) {
      const int kb = st % d.k_tiles;
      const int n_tile = kTilesPerUnit * unit + st / d.k_tiles;
      CpAsyncWait<kStages - 2>();  // stage st has landed (this thread's)
      __syncthreads();             // ... everyone's; stage st-1 is free
      const int next = st + kStages - 1;
      if (next < stages) {
        LoadStage<kMFActive, kMasked>(
            p, d, item, rows, kTilesPerUnit * unit + next / d.k_tiles,
            next % d.k_tiles, smem + (next % kStages) * kStageBytes);
      }
      CpAsyncCommit();
      const unsigned char* stage = smem + (st % kStages) * kStageBytes;
      if constexpr (kBlockScaled) {
        if (kb == 0) WBlockBases(d, item, n_tile, w_base);
        float part[kMFActive][4][4];
        Zero<kMFActive>(part);
        ComputeStage<kMFActive>(stage, part);
        Promote<kMFActive>(p, item, rows, kb, w_base, part, acc);
      } else {
        ComputeStage<kMFActive>(stage, acc);
      }
      if (kb == d.k_tiles - 1) {
        if constexpr (!kBlockScaled) {
          ApplyScales<kMFActive>(p, d, item, rows, n_tile, acc);
        }
        if (kQuantized && st + 1 < stages) {
          StashOutputs<kMFActive>(acc, stash);
          Zero<kMFActive>(acc);
        }
      }
    }
    CpAsyncWait<0>();
    __syncthreads();  // the ring is free for the next unit
  }

  // ---- the quantizing epilogue ---------------------------------------------
  // The tile's silu(gate) * up in f32 into `out` [kBM][kOutPerCta].
  template <int kMFActive>
  static void StashOutputs(const float (&acc)[kMFActive][4][4], float* out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mf = 0; mf < kMFActive; ++mf) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* row = out + (mf * 16 + g + 8 * h) * kOutPerCta;
#pragma unroll
        for (int nf = 0; nf < 2; ++nf) {
          const int col = warp * 16 + nf * 8 + 2 * t;
          row[col] = Silu(acc[mf][nf][2 * h]) * acc[mf][nf + 2][2 * h];
          row[col + 1] =
              Silu(acc[mf][nf][2 * h + 1]) * acc[mf][nf + 2][2 * h + 1];
        }
      }
    }
  }

  // Rows [0, rows) of 128-column group `group` as e4m3 and (block) its
  // scales: columns 0-63 from `first`, 64-127 from `second`; a warp per
  // row, 4 columns per lane.
  static void QuantizeGroup(const Params& p, const MoeGemmDims& d,
                            const MoeWorkItem& item, int rows, int group,
                            const float* first, const float* second) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* half = (lane < 16 ? first : second) + (lane % 16) * 4;
#pragma unroll 1
    for (int row = warp; row < rows; row += kThreads / 32) {
      const float* v = half + row * kOutPerCta;
      float scale;
      if constexpr (kStaticScale) {
        scale = __ldg(p.c_scale);
      } else {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) amax = MaxPropagateNan(amax, fabsf(v[i]));
        scale = Fp8GroupScale(GroupAbsMax<32>(amax));
      }
      const long long c_row = item.row_begin + row;
      *reinterpret_cast<unsigned*>(static_cast<unsigned char*>(p.gemm.c) +
                                   c_row * d.out_n + group * kMoeFp8Block +
                                   lane * 4) =
          PackE4m3x4(Fp8Scaled(v[0], scale), Fp8Scaled(v[1], scale),
                     Fp8Scaled(v[2], scale), Fp8Scaled(v[3], scale));
      if (!kStaticScale && lane == 0) {
        p.c_scales[static_cast<long long>(group) * p.c_scale_rows + c_row] =
            scale;
      }
    }
  }

  // ---- one unit and its epilogue -------------------------------------------
  template <int kMFActive, bool kMasked>
  static void Unit(const Params& p, const MoeGemmDims& d,
                   const MoeWorkItem& item, int rows, int unit,
                   unsigned char* smem) {
    float* first = reinterpret_cast<float*>(smem + kRingBytes);
    float acc[kMFActive][4][4];
    Accumulate<kMFActive, kMasked>(p, d, item, rows, unit, smem, first, acc);
    if constexpr (kQuantized) {
      float* second = reinterpret_cast<float*>(smem);  // the drained ring
      StashOutputs<kMFActive>(acc, second);
      __syncthreads();
      QuantizeGroup(p, d, item, rows, unit, first, second);
      __syncthreads();  // the ring and the stash are free for the next unit
    } else {
      Bf16::template Store<kMFActive, kMasked>(p.gemm, d, item, rows, unit,
                                               acc);
    }
  }

  // The bf16 kernel's parts: full (unmasked), at most 16 rows, other.
  static void RunItem(const Params& p, const MoeGemmDims& d,
                      const MoeWorkItem& item, int unit, unsigned char* smem) {
    const int rows = item.tail_class == 0 ? d.tile_rows : item.rows;
    for (int first = 0; first < rows; first += kBM) {
      MoeWorkItem part = item;
      part.row_begin += first;
      const int part_rows = Min(kBM, rows - first);
      if (part_rows == kBM) {
        Unit<kMF, false>(p, d, part, kBM, unit, smem);
      } else if (part_rows <= 16) {
        Unit<1, true>(p, d, part, part_rows, unit, smem);
      } else {
        if constexpr (kMF > 1)
          Unit<kMF, true>(p, d, part, part_rows, unit, smem);
      }
    }
  }

  static void Run(const Params& p) {
    extern __shared__ __align__(128) unsigned char fp8_mma_smem[];
    const MoeGemmDims d =
        MoeGemmDimsOf<kN, kK, kTileRows, true, kGated, kBK>(p.gemm);
    const int units = kQuantized ? d.out_n / kMoeFp8Block : d.n_tiles;
    const int num_work = p.gemm.header->num_work;
    const int tiles = num_work * units;
#pragma unroll 1
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord coord = TileOf(t, p.gemm.work, num_work, units);
      RunItem(p, d, p.gemm.work[coord.item], coord.n_tile, fp8_mma_smem);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM80_CUH_
