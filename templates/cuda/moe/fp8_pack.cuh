// templates/cuda/moe/fp8_pack.cuh — gather token rows into expert-sorted
// order and quantize them to e4m3, in the layouts the FP8 grouped GEMMs load
// (templates/cuda/moe/fp8_params.h).
//
// a[r, :] = e4m3(src(r) / scale), src(r) = hidden[permutation[r] / topk, :]
// (or hidden[r, :] when params.rows_in_order), by runtime/cuda/fp8.cuh's
// rule, for every row r whose entry is in [0, tokens * topk); other rows (the
// -1 past R of a device Route, or bad entries) are left untouched. A group of
// 128 bf16 is 8 lanes x 16 elements (two 16-byte loads, one 16-byte store
// per lane). kH is the row length compiled in, or kMoeRuntimeDim (0) to read
// params.hidden_dim; H % 128 == 0. The scale by kScaleMode:
//   kMoeFp8BlockScaled  one per 128 columns (the group's amax: three shuffles
//                       among its 8 lanes), a_scales[g * scale_rows + r]
//   kMoeFp8PerTensor    the static params.static_scale[0]; none written
//   kMoeFp8PerChannel   one per row (per token: the amax of the whole row,
//                       reduced over the CTA), a_scales[r]; the row is read
//                       twice (amax, then quantize; the second read hits L1
//                       / L2)
//
// Grid: x = rows, y = ceil(H / 128 / kMoeFp8PackGroupsPerBlock) (per token:
// 1, a CTA walks its row).
// Params: MoeFp8PackParams (templates/cuda/moe/fp8_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_PACK_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_PACK_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/fp8.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/fp8_params.h"

namespace tailor::cuda {

template <int kH, int kScaleMode = kMoeFp8BlockScaled>
struct MoeFp8Pack {
  static_assert(kH >= 0 && kH % kMoeFp8Block == 0,
                "H is a multiple of 128, or kMoeRuntimeDim: params.hidden_dim");
  static_assert(kScaleMode == kMoeFp8BlockScaled ||
                    kScaleMode == kMoeFp8PerTensor ||
                    kScaleMode == kMoeFp8PerChannel,
                "1 x 128 groups, a static per-tensor scale or per token");
  static constexpr bool kStatic = kScaleMode == kMoeFp8PerTensor;
  static constexpr bool kPerToken = kScaleMode == kMoeFp8PerChannel;
  using Params = MoeFp8PackParams;
  static constexpr int kThreads = kMoeFp8PackThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kLanes = kMoeFp8PackLanesPerGroup;
  static constexpr int kPerLane = kMoeFp8Block / kLanes;  // 16 elements
  static_assert(kPerLane == 16, "a lane moves two 16-byte bf16 vectors");

  // 16 bf16 at `src` as floats.
  static void Load(const unsigned short* src, float (&x)[kPerLane]) {
    const uint4* vectors = reinterpret_cast<const uint4*>(src);
    const uint4 chunks[2] = {vectors[0], vectors[1]};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const unsigned words[4] = {chunks[c].x, chunks[c].y, chunks[c].z,
                                 chunks[c].w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        x[8 * c + 2 * w] = __uint_as_float(words[w] << 16);
        x[8 * c + 2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
      }
    }
  }

  static float LaneAbsMax(const float (&x)[kPerLane]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      amax = MaxPropagateNan(amax, fabsf(x[i]));
    return amax;
  }

  // e4m3(x / scale) as one 16-byte store at `dst`.
  static void Store(const float (&x)[kPerLane], float scale,
                    unsigned char* dst) {
    unsigned q[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      q[w] = PackE4m3x4(
          Fp8Scaled(x[4 * w], scale), Fp8Scaled(x[4 * w + 1], scale),
          Fp8Scaled(x[4 * w + 2], scale), Fp8Scaled(x[4 * w + 3], scale));
    }
    *reinterpret_cast<uint4*>(dst) = make_uint4(q[0], q[1], q[2], q[3]);
  }

  // The amax of a whole row over the CTA: each thread's 16-element chunks
  // (strided by the CTA's 2048 columns), its warp, then the 4 warps.
  static float RowAbsMax(const unsigned short* src, long long h) {
    __shared__ float warp_amax[kThreads / 32];
    float amax = 0.0f;
    for (long long column = threadIdx.x * kPerLane; column < h;
         column += kThreads * kPerLane) {
      float x[kPerLane];
      Load(src + column, x);
      amax = MaxPropagateNan(amax, LaneAbsMax(x));
    }
    amax = GroupAbsMax<32>(amax);
    if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = warp_amax[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w)
      amax = MaxPropagateNan(amax, warp_amax[w]);
    return amax;
  }

  static void RunPerToken(const Params& p, int row, const unsigned short* src,
                          long long h) {
    const float scale = Fp8GroupScale(RowAbsMax(src, h));
    unsigned char* dst = static_cast<unsigned char*>(p.a) + row * h;
    for (long long column = threadIdx.x * kPerLane; column < h;
         column += kThreads * kPerLane) {
      float x[kPerLane];
      Load(src + column, x);
      Store(x, scale, dst + column);
    }
    if (threadIdx.x == 0) p.a_scales[row] = scale;
  }

  static void Run(const Params& p) {
    const int row = blockIdx.x;
    const int entry = p.permutation[row];
    if (entry < 0 || entry >= p.tokens * p.topk) return;
    const long long h = kH > 0 ? kH : p.hidden_dim;
    const long long source = p.rows_in_order ? row : entry / p.topk;
    const unsigned short* src =
        static_cast<const unsigned short*>(p.hidden) + source * h;
    if constexpr (kPerToken) {
      RunPerToken(p, row, src, h);
      return;
    }
    const int lane = threadIdx.x % 32;
    const int group = blockIdx.y * kMoeFp8PackGroupsPerBlock +
                      threadIdx.x / kLanes;  // 8-lane segments in order
    if (group >= h / kMoeFp8Block) return;   // whole segments leave together
    const long long column = static_cast<long long>(group) * kMoeFp8Block +
                             (lane % kLanes) * kPerLane;
    float x[kPerLane];
    Load(src + column, x);
    float scale;
    if constexpr (kStatic) {
      scale = __ldg(p.static_scale);
    } else {
      scale = Fp8GroupScale(GroupAbsMax<kLanes>(LaneAbsMax(x)));
    }
    Store(x, scale, static_cast<unsigned char*>(p.a) + row * h + column);
    if (!kStatic && lane % kLanes == 0) {
      p.a_scales[static_cast<long long>(group) * p.scale_rows + row] = scale;
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_PACK_CUH_
