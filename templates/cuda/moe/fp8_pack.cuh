// templates/cuda/moe/fp8_pack.cuh — gather token rows into expert-sorted
// order and quantize them to e4m3 with 1 x 128 scales, in the layouts the
// block-scaled grouped GEMM loads (templates/cuda/moe/fp8_params.h).
//
// a[r, :] = e4m3(hidden[permutation[r] / topk, :] / scale) with one scale per
// 128 columns, by runtime/cuda/fp8.cuh's rule, for every row r whose entry is
// in [0, tokens * topk); other rows (the -1 past R of a device Route, or bad
// entries) are left untouched. A group of 128 bf16 is 8 lanes x 16 elements
// (two 16-byte loads, one 16-byte store per lane); the group's amax is three
// shuffles among its 8 lanes. kH is the row length compiled in, or
// kMoeRuntimeDim (0) to read params.hidden_dim; H % 128 == 0. Per tensor
// (kScaleMode kMoeFp8PerTensor) every group is divided by the static
// params.static_scale[0] and no scale is written.
//
// Grid: x = rows, y = ceil(H / 128 / kMoeFp8PackGroupsPerBlock).
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
                    kScaleMode == kMoeFp8PerTensor,
                "1 x 128 groups or a static per-tensor scale");
  static constexpr bool kStatic = kScaleMode == kMoeFp8PerTensor;
  using Params = MoeFp8PackParams;
  static constexpr int kThreads = kMoeFp8PackThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kLanes = kMoeFp8PackLanesPerGroup;
  static constexpr int kPerLane = kMoeFp8Block / kLanes;  // 16 elements
  static_assert(kPerLane == 16, "a lane moves two 16-byte bf16 vectors");

  static void Run(const Params& p) {
    const int row = blockIdx.x;
    const int entry = p.permutation[row];
    if (entry < 0 || entry >= p.tokens * p.topk) return;
    const long long h = kH > 0 ? kH : p.hidden_dim;
    const int lane = threadIdx.x % 32;
    const int group = blockIdx.y * kMoeFp8PackGroupsPerBlock +
                      threadIdx.x / kLanes;  // 8-lane segments in order
    if (group >= h / kMoeFp8Block) return;   // whole segments leave together
    const long long token = entry / p.topk;
    const long long column = static_cast<long long>(group) * kMoeFp8Block +
                             (lane % kLanes) * kPerLane;
    const uint4* src = reinterpret_cast<const uint4*>(
        static_cast<const unsigned short*>(p.hidden) + token * h + column);
    const uint4 chunks[2] = {src[0], src[1]};
    float x[kPerLane];
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
    float scale;
    if constexpr (kStatic) {
      scale = __ldg(p.static_scale);
    } else {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        amax = MaxPropagateNan(amax, fabsf(x[i]));
      scale = Fp8GroupScale(GroupAbsMax<kLanes>(amax));
    }
    unsigned q[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      q[w] = PackE4m3x4(
          Fp8Scaled(x[4 * w], scale), Fp8Scaled(x[4 * w + 1], scale),
          Fp8Scaled(x[4 * w + 2], scale), Fp8Scaled(x[4 * w + 3], scale));
    }
    *reinterpret_cast<uint4*>(static_cast<unsigned char*>(p.a) + row * h +
                              column) = make_uint4(q[0], q[1], q[2], q[3]);
    if (!kStatic && lane % kLanes == 0) {
      p.a_scales[static_cast<long long>(group) * p.scale_rows + row] = scale;
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_PACK_CUH_
