// templates/cuda/moe/fp8_mainloop_sm90.cuh — the block-scaled e4m3 mainloop
// of the Hopper grouped GEMM: what the producer copies into a stage and what
// a consumer warpgroup computes from it.
//
// One stage per 128-K block (the scale block; 128 e4m3 = one 128-byte
// swizzled row): the A tile (kARows rows), 4 W boxes of 64 rows, and the A
// tile's scales of that K block, all by TMA onto the stage's full barrier.
// The scale box starts at the tile's first row rounded down to 4 (a TMA
// box's innermost start is 16-byte aligned; fp8_params.h), so a tile's
// scales sit `scale_shift` (row_begin % 4) floats into it. The CTA tiles
// are the bf16 kernel's (moe/grouped_gemm_sm90.cuh, same W box order, same
// gate/up layout):
//   128 rows   consumer c: A rows [64 c, +64) x all 256 W rows, as two waves
//              of m64n128k32 (W boxes {0, 1}, then {2, 3})
//   64 rows    consumer c: all 64 rows x W boxes {2 c, 2 c + 1} (one wave)
//   swap-AB    consumer c: W boxes 2 c and 2 c + 1 as wgmma's M x the tile's
//              kARows tokens (m64nTk32 each, one wave)
//
// Promotion (runtime/cuda/wgmma_fp8.cuh, "Precision"): per K block and wave,
// the 4 k32 wgmma steps start a fresh f32 partial; once they are done the
// consumer adds partial x sa[row] x sw[box] into its f32 accumulators, which
// hold the tile in the bf16 kernel's m64n256 / m64n128 / swap layout, so the
// epilogues index them alike. A W box (64 rows) lies inside one 128-row scale
// block (N and, gated, N / 2 are multiples of 128), so each box has one W
// scale per K block, read from global memory (L2-resident, 4 bytes per box)
// before the stage's wait. One partial (64 registers) serves both waves of
// the 128-row tile: 128 + 64 accumulators, where two partials would not fit.
//
// Scales constant along K (per tensor, per channel; kScaleMode): the stage
// carries no A scales, the partials are promoted unscaled, and ApplyScales
// multiplies the finished accumulators by sa[row] x sw[W row] once.
//
// Stage release: the consumer computes every scale product of a K block
// (reading the stage's A scales) before its first wgmma on the stage, so a
// thread's shared-memory reads are complete when its wgmma issues; the
// leader releases the stage after the last wave's wgmma completed (which
// needs all four warps to have issued it).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_MAINLOOP_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_MAINLOOP_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/warpgroup_turns.cuh"
#include "runtime/cuda/wgmma_fp8.cuh"
#include "templates/cuda/moe/fp8_params.h"

namespace tailor::cuda {

template <int kTileRows, int kSwapAB, bool kGated,
          int kScaleMode = kMoeFp8BlockScaled, bool kOrderedWaves = true>
struct MoeFp8MainloopSm90 {
  static_assert(kScaleMode == kMoeFp8PerTensor ||
                    kScaleMode == kMoeFp8PerChannel ||
                    kScaleMode == kMoeFp8BlockScaled,
                "a scale mode: per tensor (1), per channel (2) or block (3)");
  static_assert(kTileRows >= 1 && kTileRows <= kMoeSm90MaxRows,
                "a plan tile must fit the CTA's 128 rows");
  static_assert(kSwapAB == 0 ||
                    (kSwapAB == 1 && kTileRows <= kMoeSm90SwapMaxRows),
                "swap-AB: plan tiles of at most 32 rows");
  using Params = MoeFp8GemmSm90Params;
  static constexpr bool kSwap = kSwapAB == 1;
  static constexpr int kCtaRows = MoeSm90CtaRows(kTileRows);
  static constexpr bool kSplitRows = !kSwap && kCtaRows == 128;
  static constexpr int kARows = MoeSm90ARows(kTileRows, kSwap);
  static constexpr int kBK = kMoeFp8Block;
  static constexpr int kBox = kMoeSm90BoxRows;
  static constexpr unsigned kABytes = kARows * kBK;
  static constexpr unsigned kBoxBytes = kMoeFp8WBoxBytes;
  static constexpr unsigned kScaleOffset = kABytes + 4 * kBoxBytes;
  static constexpr int kScaleBoxRows = MoeFp8ScaleBoxRows(kARows);
  static constexpr int kMode = kScaleMode;
  static constexpr bool kBlockScaled = kScaleMode == kMoeFp8BlockScaled;
  // Without block scales the stage's A-scale box stays empty.
  static constexpr unsigned kTxBytes =
      kBlockScaled ? MoeFp8StageTxBytes(kARows) : kScaleOffset;
  static constexpr unsigned kStageBytes = MoeFp8StageBytes(kARows);
  static constexpr int kStages = MoeFp8Stages(kARows);
  static constexpr int kWaves = kSplitRows ? 2 : 1;
  static constexpr int kConsumerWRows = kSplitRows ? 256 : 128;
  // f32 accumulators per thread (the tile) and partials (one wave).
  static constexpr int kAccumulators = kSwap ? kARows : kConsumerWRows / 2;
  static constexpr int kPartials = kSwap ? kARows : 64;
  // A scales a thread reads per K block: its two row halves, or (swap-AB)
  // its tokens 8 j + 2 t + x.
  static constexpr int kRowScales = kSwap ? kARows / 4 : 2;
  // W scales per wave: a 128-row tile's wave is 128 W rows of one scale
  // block (N and N / 2 are multiples of 128); the other tiles' two boxes
  // may be gate and up rows of different blocks.
  static constexpr int kWaveScales = kSplitRows ? 1 : 2;
  static_assert(kScaleOffset % 128 == 0, "the A-scale box is 128-byte aligned");
  static_assert(kScaleBoxRows * 4 % 16 == 0 && kScaleBoxRows <= 256,
                "TMA boxes are 16-byte multiples of at most 256 elements");
  static_assert(!kBlockScaled || kTxBytes == kScaleOffset + kScaleBoxRows * 4,
                "the stage's copies are the A tile, 4 W boxes, the scales");

  // The K blocks of one tile (or split unit) a consumer runs, and what the
  // producer told it about the tile.
  struct Tile {
    int k_begin, k_end;  // K blocks [k_begin, k_end)
    int expert, n_tile;
    int scale_shift;  // the tile's first A scale in the stage's scale box
    int n, k_blocks;  // N and K / 128
  };

  // Global W row (of the [E * N, K] view) of box q of N tile n_tile: the
  // bf16 kernel's order. Gated, 128 rows: gate 0-63, gate 64-127, up 0-63,
  // up 64-127; 64 rows and swap-AB: gate 0-63, up 0-63, gate 64-127, up
  // 64-127 (each consumer's two boxes hold the gate and up rows of the same
  // 64 outputs).
  static int WBoxRow(int expert, int n_tile, int q, int n) {
    if constexpr (kGated) {
      const int half = kSplitRows ? q % 2 : q / 2;
      const bool up = kSplitRows ? q >= 2 : q % 2 == 1;
      const int out = n_tile * (kMoeSm90WRows / 2) + half * kBox;
      return expert * n + (up ? n / 2 + out : out);
    } else {
      return expert * n + n_tile * kMoeSm90WRows + q * kBox;
    }
  }

  // The W box of half b (0, 1) of wave v of consumer c.
  static int BoxOf(int consumer, int wave, int b) {
    return (kSplitRows ? 2 * wave : 2 * consumer) + b;
  }

  // ---- producer: one stage's copies -----------------------------------------
  static void Load(const Params& p, unsigned char* stage, Mbarrier* full,
                   int kb, int row_begin, int expert, int n_tile, int n) {
    TmaLoad<2>(stage, &p.a_map, {kb * kBK, row_begin}, full);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      TmaLoad<2>(stage + kABytes + q * kBoxBytes, &p.w_map,
                 {kb * kBK, WBoxRow(expert, n_tile, q, n)}, full);
    }
    if constexpr (kBlockScaled) {
      TmaLoad<2>(stage + kScaleOffset, &p.a_scale_map,
                 {MoeFp8ScaleBoxStart(row_begin), kb}, full);
    }
  }

  // ---- consumer: scales -----------------------------------------------------
  // W scale of box q for K block kb (0 for boxes past N: never stored).
  static float WScale(const Params& p, int expert, int n_tile, int q, int kb,
                      int n, int k_blocks) {
    const int row = WBoxRow(expert, n_tile, q, n);
    if (row - expert * n >= n) return 0.0f;
    return __ldg(
        &p.w_scales[static_cast<long long>(row / kBK) * k_blocks + kb]);
  }

  // This thread's A scales of the stage: rows 16 w + g + 8 h (+ 64 c for the
  // 128-row tile), or tokens 8 j + 2 t + x (index 2 j + x).
  static void AScales(const unsigned char* stage, int consumer, int scale_shift,
                      float (&sa)[kRowScales]) {
    const float* scales =
        reinterpret_cast<const float*>(stage + kScaleOffset) + scale_shift;
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    if constexpr (kSwap) {
#pragma unroll
      for (int i = 0; i < kRowScales; ++i) {
        sa[i] = scales[8 * (i / 2) + 2 * t + i % 2];
      }
    } else {
      const int row = (kSplitRows ? 64 * consumer : 0) + 16 * warp + g;
      sa[0] = scales[row];
      sa[1] = scales[row + 8];
    }
  }

  // ---- consumer: the turns of the two consumers' waves -----------------------
  // Named barriers 4 and 5 (0: __syncthreads; 1, 2: one consumer; 3: both,
  // the epilogue's exchange). Both consumers issue the same waves (they
  // share every tile), so the turns alternate strictly: consumer 1 hands
  // consumer 0 the first, and after the last consumer 0 takes the one
  // consumer 1 handed back, so no arrival is left.
  using Turns = WarpgroupTurns<4>;
  static void FirstTurn(int consumer) {
    if (kOrderedWaves && consumer == 1) Turns::Pass(0);
  }
  static void LastTurn(int consumer) {
    if (kOrderedWaves && consumer == 0) Turns::Wait(0);
  }

  // ---- consumer: MMAs of one wave into the partial --------------------------
  // Issues the wave's wgmma steps as one group; with kOrderedWaves only in
  // the consumer's turn, which it hands on once its warps have issued. Two
  // consumers that issue at once finish at once and promote at once, with
  // the tensor pipe idle; taking turns, each promotes while the other's
  // wave runs.
  static void IssueWave(const unsigned char* stage, int consumer, int wave,
                        float (&part)[kPartials]) {
    if constexpr (kOrderedWaves) Turns::Wait(consumer);
    const unsigned char* w_tile =
        stage + kABytes + BoxOf(consumer, wave, 0) * kBoxBytes;
    FenceAccumulators(part);
    WgmmaFence();
    if constexpr (kSwap) {
      using Half = float[kPartials / 2];
      Half& lo = reinterpret_cast<Half&>(part[0]);
      Half& hi = reinterpret_cast<Half&>(part[kPartials / 2]);
      const unsigned long long tokens = SwizzledKMajorDescriptor(stage);
      const unsigned long long w0 = SwizzledKMajorDescriptor(w_tile);
      const unsigned long long w1 =
          SwizzledKMajorDescriptor(w_tile + kBoxBytes);
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks) {
        WgmmaM64NSmallK32E4m3<kARows>(lo, w0 + 2 * ks, tokens + 2 * ks, ks > 0);
        WgmmaM64NSmallK32E4m3<kARows>(hi, w1 + 2 * ks, tokens + 2 * ks, ks > 0);
      }
    } else {
      const unsigned char* a_tile =
          stage + (kSplitRows ? consumer * 64 * kBK : 0);
      const unsigned long long a = SwizzledKMajorDescriptor(a_tile);
      const unsigned long long b = SwizzledKMajorDescriptor(w_tile);
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks) {
        WgmmaM64N128K32E4m3(part, a + 2 * ks, b + 2 * ks, ks > 0);
      }
    }
    WgmmaCommit();
    if constexpr (kOrderedWaves) Turns::Pass(1 - consumer);
  }

  // Waits for the wave's group: `part` is complete.
  static void FinishWave(float (&part)[kPartials]) {
    WgmmaWait<0>();
    FenceAccumulators(part);
  }

  // acc += part x scale, wave `wave`; s[b][i]: the W scale of the wave's
  // box b (one for both boxes of a 128-row wave) times A scale i.
  static void Promote(const float (&part)[kPartials], int wave,
                      const float (&s)[kWaveScales][kRowScales],
                      float (&acc)[kAccumulators]) {
    if constexpr (kSwap) {
      constexpr int kHalf = kPartials / 2;
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
          // Accumulator 4 j + 2 h + x: token 8 j + 2 t + x (scale 2 j + x).
          acc[b * kHalf + i] += part[b * kHalf + i] * s[b][2 * (i / 4) + i % 2];
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPartials; ++i) {
        // Accumulator 4 j + 2 h + x: W box j / 8 of the wave, row half h.
        const int box = kWaveScales == 1 ? 0 : (i / 4) / 8;
        acc[wave * kPartials + i] += part[i] * s[box][(i / 2) % 2];
      }
    }
  }

  // Runs tile `t`'s K blocks into `acc` (overwritten). The caller has waited
  // for the first block's stage (it carries the tile's message); `c` ends
  // past the last stage, which is released.
  template <typename Ring>
  static void Run(const Params& p, const unsigned char* stages, Ring& ring,
                  PipelineCursor& c, const Tile& t, int consumer,
                  float (&acc)[kAccumulators]) {
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
    float part[kPartials];
    const bool leader = threadIdx.x % 128 == 0;
    for (int kb = t.k_begin; kb < t.k_end; ++kb) {
      float sw[kWaves][kWaveScales];
#pragma unroll
      for (int v = 0; v < kWaves; ++v) {
#pragma unroll
        for (int b = 0; b < kWaveScales; ++b) {
          sw[v][b] = kBlockScaled
                         ? WScale(p, t.expert, t.n_tile, BoxOf(consumer, v, b),
                                  kb, t.n, t.k_blocks)
                         : 1.0f;
        }
      }
      if (kb != t.k_begin) WaitFull(ring, c);
      const unsigned char* stage = stages + c.stage * kStageBytes;
      float sa[kRowScales];
      if constexpr (kBlockScaled) {
        AScales(stage, consumer, t.scale_shift, sa);
      } else {
#pragma unroll
        for (int i = 0; i < kRowScales; ++i) sa[i] = 1.0f;
      }
      float s[kWaves][kWaveScales][kRowScales];
#pragma unroll
      for (int v = 0; v < kWaves; ++v) {
#pragma unroll
        for (int b = 0; b < kWaveScales; ++b) {
#pragma unroll
          for (int i = 0; i < kRowScales; ++i) s[v][b][i] = sa[i] * sw[v][b];
          if constexpr (kBlockScaled) FenceAccumulators(s[v][b]);
        }
      }
#pragma unroll
      for (int v = 0; v < kWaves; ++v) {
        IssueWave(stage, consumer, v, part);
        FinishWave(part);
        if (v == kWaves - 1 && leader) Release(ring, c);
        Promote(part, v, s[v], acc);
      }
      c.Advance(kStages);
    }
  }

  // ---- scales constant along K: applied once ----------------------------------
  // A scale of tile row (or token) r of an item of `rows` rows starting at
  // row_begin (0 past the item: those rows are never stored).
  static float AScaleOf(const Params& p, int row_begin, int rows, int r) {
    if constexpr (kScaleMode == kMoeFp8PerTensor) {
      return __ldg(p.a_scales);
    } else {
      return r < rows ? __ldg(&p.a_scales[row_begin + r]) : 0.0f;
    }
  }
  // W scale of row `within` of box q (0 past N: never stored).
  static float WScaleOf(const Params& p, int expert, int n_tile, int q,
                        int within, int n) {
    if constexpr (kScaleMode == kMoeFp8PerTensor) {
      return __ldg(&p.w_scales[expert]);
    } else {
      const int row = WBoxRow(expert, n_tile, q, n) + within;
      return row - expert * n < n ? __ldg(&p.w_scales[row]) : 0.0f;
    }
  }

  // acc x sa[row] x sw[W row] (the layouts of fp8_epilogue_sm90.cuh): per
  // tensor one product for every accumulator.
  static void ApplyScales(const Params& p, int expert, int n_tile,
                          int row_begin, int rows, int consumer, int n,
                          float (&acc)[kAccumulators]) {
    static_assert(!kBlockScaled, "block scales are applied per K block");
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    if constexpr (kScaleMode == kMoeFp8PerTensor) {
      const float s = AScaleOf(p, row_begin, rows, 0) *
                      WScaleOf(p, expert, n_tile, 0, 0, n);
#pragma unroll
      for (int i = 0; i < kAccumulators; ++i) acc[i] *= s;
    } else if constexpr (kSwap) {
      // Half b: W box 2 c + b, rows 16 warp + g + 8 h; tokens 8 j + 2 t + x.
      constexpr int kHalf = kAccumulators / 2;
      float sa[kHalf / 2];
#pragma unroll
      for (int i = 0; i < kHalf / 2; ++i) {
        sa[i] = AScaleOf(p, row_begin, rows, 8 * (i / 2) + 2 * t + i % 2);
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float sw = WScaleOf(p, expert, n_tile, BoxOf(consumer, 0, b),
                                    16 * warp + g + 8 * h, n);
#pragma unroll
          for (int i = 0; i < kHalf / 4; ++i) {
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              acc[b * kHalf + 4 * i + 2 * h + x] *= sw * sa[2 * i + x];
            }
          }
        }
      }
    } else {
      // Accumulator 4 j + 2 h + x: row 16 warp + g + 8 h (+ 64 c), W row
      // 8 (j % 8) + 2 t + x of the consumer's box j / 8.
      const int row0 = (kSplitRows ? 64 * consumer : 0) + 16 * warp + g;
      const float sa[2] = {AScaleOf(p, row_begin, rows, row0),
                           AScaleOf(p, row_begin, rows, row0 + 8)};
#pragma unroll
      for (int j = 0; j < kAccumulators / 4; ++j) {
        const int box = kSplitRows ? j / 8 : 2 * consumer + j / 8;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const float sw =
              WScaleOf(p, expert, n_tile, box, 8 * (j % 8) + 2 * t + x, n);
          acc[4 * j + x] *= sa[0] * sw;
          acc[4 * j + 2 + x] *= sa[1] * sw;
        }
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_MAINLOOP_SM90_CUH_
