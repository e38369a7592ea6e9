// templates/cpu/moe/combine.h — weighted sum of each token's expert rows.
//
// out[t, :] = sum_j topk_weights[t, j] * C[inverse[t, j], :] over the
// token's kTopk slots, skipping slots whose inverse is -1 (an expert that is
// not on this rank contributes nothing, as in vLLM's expert_map). A token
// with no local slot gets zeros. Accumulation is f32 in 8-lane vectors over
// a strip of kStrip columns held in registers; the result is narrowed to T.
// One work item is one token.
//
// Params: MoeCombineParams (templates/cpu/moe/params.h).
#ifndef TAILOR_TEMPLATES_CPU_MOE_COMBINE_H_
#define TAILOR_TEMPLATES_CPU_MOE_COMBINE_H_

#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/moe/params.h"

namespace tailor::kernels {

template <typename T, int kH, int kTopk>
struct MoeCombineKernel {
  static_assert(kH >= 1, "H must be positive");
  static_assert(kTopk >= 1 && kTopk <= 64, "kTopk must be in [1, 64]");
  static constexpr int kVectorsPerStrip = 8;  // 8 accumulators: 64 columns
  static constexpr int kStrip = kVectorsPerStrip * kLanes;
  static constexpr int kFullStrips = kH / kStrip;
  static constexpr int kRestVectors = (kH % kStrip) / kLanes;
  static constexpr int kRestScalars = kH % kLanes;

  using Params = MoeCombineParams;

  // Columns [h0, h0 + kVectors * kLanes) of one token.
  template <int kVectors>
  static void Strip(const Params& p, int64_t token, int h0) {
    float8 acc[kVectors];
    for (int v = 0; v < kVectors; ++v) acc[v] = 0;
    for (int j = 0; j < kTopk; ++j) {
      const int32_t row = p.inverse[token * kTopk + j];
      if (row < 0) continue;
      const float8 weight = p.weights[token * kTopk + j];
      const T* c_row = static_cast<const T*>(p.c) + int64_t{row} * kH +
                       h0;  // [kVectors * kLanes]
      for (int v = 0; v < kVectors; ++v)
        acc[v] += weight * Load8(c_row + v * kLanes);
    }
    T* out_row = static_cast<T*>(p.out) + token * kH + h0;
    for (int v = 0; v < kVectors; ++v) Store8(out_row + v * kLanes, acc[v]);
  }

  // The last kH % 8 columns, scalar.
  static void Scalars(const Params& p, int64_t token, int h0) {
    float acc[kRestScalars > 0 ? kRestScalars : 1] = {};
    for (int j = 0; j < kTopk; ++j) {
      const int32_t row = p.inverse[token * kTopk + j];
      if (row < 0) continue;
      const float weight = p.weights[token * kTopk + j];
      const T* c_row = static_cast<const T*>(p.c) + int64_t{row} * kH + h0;
      for (int h = 0; h < kRestScalars; ++h)
        acc[h] += weight * ToFloat(c_row[h]);
    }
    for (int h = 0; h < kRestScalars; ++h)
      static_cast<T*>(p.out)[token * kH + h0 + h] = FromFloat<T>(acc[h]);
  }

  static void Run(const Params& p, int64_t token) {
    for (int s = 0; s < kFullStrips; ++s)
      Strip<kVectorsPerStrip>(p, token, s * kStrip);
    if constexpr (kRestVectors > 0)
      Strip<kRestVectors>(p, token, kFullStrips * kStrip);
    if constexpr (kRestScalars > 0) Scalars(p, token, kH - kRestScalars);
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_COMBINE_H_
