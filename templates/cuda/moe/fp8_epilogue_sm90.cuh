// templates/cuda/moe/fp8_epilogue_sm90.cuh — the epilogues of the
// block-scaled Hopper grouped GEMM: a consumer's f32 accumulators (the
// mainloop's layout) to C, the item's rows only.
//
//   kMoeEpilogueNone              C bf16 [R, N]
//   kMoeEpilogueSiluAndMul        C bf16 [R, N / 2] = silu(gate) * up
//   kMoeEpilogueSiluAndMulQuant   C e4m3 [R, N / 2] and its 1 x 128 scales
//                                 [N / 256, c_scale_rows]: silu(gate) * up
//                                 quantized by runtime/cuda/fp8.cuh's rule
//                                 from the f32 values, the down GEMM's A;
//                                 per tensor: divided by the static
//                                 c_scale[0], no scales written
//
// Quantizing needs each output row's largest magnitude over its 128-column
// group, which is one N tile of gated outputs: in the 128-row tile one
// consumer holds it (a quad of lanes per row: two shuffles); in the 64-row
// and swap-AB tiles the two consumers hold half each, and exchange their
// halves' maxima through shared memory between two barriers of both
// consumer warpgroups (so a fast consumer cannot overwrite them before the
// slow one read them).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_EPILOGUE_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_EPILOGUE_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/fp8.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/quad_transpose.cuh"
#include "templates/cuda/moe/fp8_params.h"

namespace tailor::cuda {

// Named barrier of both consumer warpgroups (1 and 2 are theirs alone).
inline constexpr int kMoeFp8ConsumersBarrier = 3;

template <typename Mainloop, int kEpilogue>
struct MoeFp8EpilogueSm90 {
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul ||
                    kEpilogue == kMoeEpilogueSiluAndMulQuant,
                "unknown epilogue");
  using Params = MoeFp8GemmSm90Params;
  static constexpr bool kGated = kEpilogue != kMoeEpilogueNone;
  static constexpr bool kQuantized = kEpilogue == kMoeEpilogueSiluAndMulQuant;
  // Per tensor the output's scale is static: no maxima, no scales written.
  static constexpr bool kStaticScale =
      kQuantized && Mainloop::kMode == kMoeFp8PerTensor;
  static_assert(!kQuantized || Mainloop::kMode != kMoeFp8PerChannel,
                "per-channel outputs need a whole row's maximum: not fused");
  static constexpr bool kSwap = Mainloop::kSwap;
  static constexpr bool kSplitRows = Mainloop::kSplitRows;
  static constexpr int kAccumulators = Mainloop::kAccumulators;
  static constexpr int kConsumerWRows = Mainloop::kConsumerWRows;
  // Whether both consumers hold parts of one output group (see above).
  static constexpr bool kExchanges = kQuantized && !kStaticScale && !kSplitRows;
  static constexpr int kExchangeFloats = kSwap ? 2 * 4 * 32 : 2 * 64;
  static_assert(!kQuantized || kGated, "quantized outputs are gated");

  // First output column of the consumer's tile.
  static int FirstColumn(int n_tile, int consumer) {
    if constexpr (kSwap || !kSplitRows) {
      return n_tile * (kGated ? kMoeSm90WRows / 2 : kMoeSm90WRows) +
             (kGated ? 64 : 128) * consumer;
    } else {
      return n_tile * (kGated ? kMoeSm90WRows / 2 : kMoeSm90WRows);
    }
  }

  static void ConsumersSync() {
    NamedBarrierSync<256>(kMoeFp8ConsumersBarrier);
  }

  // ---- rows x columns tiles (128 and 64 rows) -------------------------------
  // Accumulator 4 j + 2 h + x holds row 16 warp + g + 8 h (+ 64 consumer with
  // 128 rows), column 8 j + 2 t + x of the consumer's W rows; gated, group j
  // (gate) and j + kUp (up) hold the same output.
  static constexpr int kGroups = kConsumerWRows / 8;  // n8 groups
  static constexpr int kUp = kGroups / 2;
  static constexpr int kOutGroups = kGated ? kGroups / 2 : kGroups;

  static float OutputOf(const float (&acc)[kAccumulators], int j, int h,
                        int x) {
    if constexpr (kGated) {
      return Silu(acc[4 * j + 2 * h + x]) * acc[4 * (j + kUp) + 2 * h + x];
    } else {
      return acc[4 * j + 2 * h + x];
    }
  }

  // Largest |output| of row half h over the consumer's columns, the quad's
  // four lanes combined.
  static float RowAbsMax(const float (&acc)[kAccumulators], int h) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kOutGroups; ++j) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        amax = MaxPropagateNan(amax, fabsf(OutputOf(acc, j, h, x)));
      }
    }
    return GroupAbsMax<4>(amax);
  }

  // Row maxima of both consumers (64-row tile): this consumer's, exchanged.
  static void ExchangeRowMax(float (&amax)[2], int consumer, float* exchange) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int row = 16 * warp + lane / 4;
    if (lane % 4 == 0) {
      exchange[64 * consumer + row] = amax[0];
      exchange[64 * consumer + row + 8] = amax[1];
    }
    ConsumersSync();
    amax[0] = MaxPropagateNan(amax[0], exchange[64 * (1 - consumer) + row]);
    amax[1] = MaxPropagateNan(amax[1], exchange[64 * (1 - consumer) + row + 8]);
    ConsumersSync();
  }

  // Row half h of the consumer's tile. Transposed over 4 n8 groups
  // (QuadTranspose), lane t holds group 4 i + t's 8 columns and stores them
  // at once: 16 bytes of bf16 or 8 of e4m3 (whole 32-byte sectors, a
  // quarter of the stores of one pair each). Rows are 16-byte aligned: c is
  // (ops/moe checks) and out_n is a multiple of 64.
  static void StoreRow(const float (&acc)[kAccumulators], int h, int t,
                       float scale, bool live, void* c, long long c_row,
                       int col0, int out_n) {
    static_assert(kOutGroups % 4 == 0, "whole quads of n8 groups");
#pragma unroll
    for (int i = 0; i < kOutGroups / 4; ++i) {
      unsigned v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float v0 = OutputOf(acc, 4 * i + r, h, 0);
        const float v1 = OutputOf(acc, 4 * i + r, h, 1);
        v[r] = kQuantized ? PackE4m3x2(Fp8Scaled(v0, scale),
                                       Fp8Scaled(v1, scale))
                          : PackBf16x2(v0, v1);
      }
      QuadTranspose(v);
      const int col = col0 + 8 * (4 * i + t);
      if (!live || col >= out_n) continue;
      if constexpr (kQuantized) {
        *reinterpret_cast<uint2*>(static_cast<unsigned char*>(c) +
                                  c_row * out_n + col) =
            make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
      } else {
        *reinterpret_cast<uint4*>(static_cast<unsigned short*>(c) +
                                  c_row * out_n + col) =
            make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }

  static void StoreRows(const Params& p, const MoeWorkItem& item, int rows,
                        int n_tile, int consumer, int out_n,
                        const float (&acc)[kAccumulators], float* exchange) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    const int row0 = (kSplitRows ? 64 * consumer : 0) + 16 * warp + g;
    const int col0 = FirstColumn(n_tile, consumer);
    float scale[2] = {1.0f, 1.0f};
    if constexpr (kStaticScale) {
      scale[0] = scale[1] = __ldg(p.c_scale);
    } else if constexpr (kQuantized) {
      float amax[2] = {RowAbsMax(acc, 0), RowAbsMax(acc, 1)};
      if constexpr (kExchanges) ExchangeRowMax(amax, consumer, exchange);
      scale[0] = Fp8GroupScale(amax[0]);
      scale[1] = Fp8GroupScale(amax[1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      const long long c_row = item.row_begin + row;
      if constexpr (kQuantized && !kStaticScale) {
        if (row < rows && t == 0 && (kSplitRows || consumer == 0)) {
          p.c_scales[static_cast<long long>(n_tile) * p.c_scale_rows + c_row] =
              scale[h];
        }
      }
      StoreRow(acc, h, t, scale[h], row < rows, p.c, c_row, col0, out_n);
    }
  }

  // ---- swap-AB tiles --------------------------------------------------------
  // Accumulator half b is W box b of the consumer; its accumulator 4 j + 2 h
  // + x holds W row 16 warp + g + 8 h of the box, token 8 j + 2 t + x. Gated,
  // the halves are the gate and up rows of the same 64 output columns.
  static constexpr int kHalf = kAccumulators / 2;
  static constexpr int kTokens = kAccumulators;  // the tile's token columns

  static float SwappedOutput(const float (&acc)[kAccumulators], int b, int i) {
    if constexpr (kGated) {
      return Silu(acc[i]) * acc[kHalf + i];
    } else {
      return acc[b * kHalf + i];
    }
  }

  // Per token (index 2 j + x) the largest |output| over both consumers'
  // 128 outputs: over h in the thread, g across lanes, then warps and
  // consumers through `exchange` [2][4][kTokens].
  static void TokenScales(const float (&acc)[kAccumulators], int consumer,
                          float* exchange, float (&scale)[kTokens / 4]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int t = lane % 4;
#pragma unroll
    for (int s = 0; s < kTokens / 4; ++s) {
      const int j = s / 2, x = s % 2;
      float amax = MaxPropagateNan(fabsf(SwappedOutput(acc, 0, 4 * j + x)),
                                   fabsf(SwappedOutput(acc, 0, 4 * j + 2 + x)));
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) {
        amax =
            MaxPropagateNan(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      }
      if (lane < 4)
        exchange[(consumer * 4 + warp) * 32 + 8 * j + 2 * t + x] = amax;
    }
    ConsumersSync();
#pragma unroll
    for (int s = 0; s < kTokens / 4; ++s) {
      const int token = 8 * (s / 2) + 2 * t + s % 2;
      float amax = exchange[token];
#pragma unroll
      for (int w = 1; w < 8; ++w) {
        amax = MaxPropagateNan(amax, exchange[w * 32 + token]);
      }
      scale[s] = Fp8GroupScale(amax);
    }
    ConsumersSync();
  }

  static void StoreSwapped(const Params& p, const MoeWorkItem& item, int rows,
                           int n_tile, int consumer, int out_n,
                           const float (&acc)[kAccumulators], float* exchange) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    const int col0 = FirstColumn(n_tile, consumer) + 16 * warp + g;
    float scale[kTokens / 4];
    if constexpr (kStaticScale) {
#pragma unroll
      for (int s = 0; s < kTokens / 4; ++s) scale[s] = __ldg(p.c_scale);
    } else if constexpr (kQuantized) {
      TokenScales(acc, consumer, exchange, scale);
    }
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const int token = 8 * (i / 4) + 2 * t + i % 2;
      const int col = col0 + 8 * ((i / 2) % 2);
      if (token >= rows) continue;
      const long long c_row = item.row_begin + token;
      if constexpr (kQuantized) {
        const float s = scale[2 * (i / 4) + i % 2];
        if (!kStaticScale && consumer == 0 && warp == 0 && g == 0 &&
            (i / 2) % 2 == 0) {
          p.c_scales[static_cast<long long>(n_tile) * p.c_scale_rows + c_row] =
              s;
        }
        if (col < out_n) {
          static_cast<unsigned char*>(p.c)[c_row * out_n + col] =
              static_cast<unsigned char>(
                  PackE4m3x2(Fp8Scaled(SwappedOutput(acc, 0, i), s), 0.0f));
        }
      } else {
        unsigned short* c = static_cast<unsigned short*>(p.c) + c_row * out_n;
#pragma unroll
        for (int b = 0; b < (kGated ? 1 : 2); ++b) {
          if (col + 64 * b < out_n) {
            c[col + 64 * b] = Bf16Bits(SwappedOutput(acc, b, i));
          }
        }
      }
    }
  }

  static void Store(const Params& p, const MoeWorkItem& item, int rows,
                    int n_tile, int consumer, int out_n,
                    const float (&acc)[kAccumulators], float* exchange) {
    if constexpr (kSwap) {
      StoreSwapped(p, item, rows, n_tile, consumer, out_n, acc, exchange);
    } else {
      StoreRows(p, item, rows, n_tile, consumer, out_n, acc, exchange);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_EPILOGUE_SM90_CUH_
