// templates/cpu/moe/fp8_pack.h — gather token rows into expert-sorted order
// and quantize them to e4m3: the quantizing Pack on the CPU.
//
// a[r, :] = e4m3(hidden[permutation[r] / topk, :] / scale) for every row r
// whose entry is in [0, tokens * topk) (others are left untouched), with the
// scale by kMode (templates/cpu/moe/fp8_params.h):
//   kMoeFp8PackGroups    one per 128 columns (a ragged last group has its
//                        own), a_scales[g * scale_rows + r]: block mode's A
//   kMoeFp8PackPerToken  one per row, a_scales[r]
//   kMoeFp8PackStatic    the caller's per-tensor scale, static_scale[0]; no
//                        scale is written
// each computed by runtime/cpu/fp8.h's rule (a NaN in a group makes its scale
// and values NaN). One work item per row; kH is compile-time.
//
// Params: MoeFp8PackParams (templates/cpu/moe/fp8_params.h).
#ifndef TAILOR_TEMPLATES_CPU_MOE_FP8_PACK_H_
#define TAILOR_TEMPLATES_CPU_MOE_FP8_PACK_H_

#include "runtime/cpu/fp8.h"
#include "runtime/cpu/tailor_cpu.h"
#include "templates/cpu/moe/fp8_params.h"

namespace tailor::kernels {

template <typename T, int kH, int kMode>
struct MoeFp8PackKernel {
  static_assert(kH >= 1, "H must be positive");
  static_assert(kMode == kMoeFp8PackGroups || kMode == kMoeFp8PackPerToken ||
                    kMode == kMoeFp8PackStatic,
                "unknown activation quantization");
  // Elements that share a scale: a group, or the whole row.
  static constexpr int kGroup = kMode == kMoeFp8PackGroups ? kMoeFp8Block : kH;
  static constexpr int kGroups = (kH + kGroup - 1) / kGroup;

  using Params = MoeFp8PackParams;

  static float GroupAbsMax(const T* x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
      amax = MaxPropagateNan(amax, __builtin_fabsf(ToFloat(x[i])));
    }
    return amax;
  }

  static void Run(const Params& p, int64_t row) {
    const int64_t entry = p.permutation[row];
    if (entry < 0 || entry >= p.tokens * p.topk) return;
    const T* src = static_cast<const T*>(p.hidden) + entry / p.topk * kH;
    uint8_t* dst = p.a + row * kH;  // [kH]
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroups; ++g) {
      const int begin = g * kGroup, n = Min(kGroup, kH - begin);
      float scale;
      if constexpr (kMode == kMoeFp8PackStatic) {
        scale = p.static_scale[0];
      } else {
        scale = Fp8Scale(GroupAbsMax(src + begin, n));
        const int64_t at =
            kMode == kMoeFp8PackGroups ? g * p.scale_rows + row : row;
        p.a_scales[at] = scale;
      }
      for (int i = 0; i < n; ++i) {
        dst[begin + i] = E4m3FromFloat(ToFloat(src[begin + i]) / scale);
      }
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_FP8_PACK_H_
