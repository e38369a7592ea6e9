// templates/cuda/moe_combine.cuh — weighted sum of each token's expert rows.
//
// out[t, :] = sum_j weights[t, j] * c[inverse[t, j], :] over the kTopk slots
// whose row is in [0, rows) (-1: an expert on another rank, or a padding
// token: it contributes nothing; a token with no such slot gets zeros). f32
// accumulation; each thread owns one vector of the row (the widest that
// keeps rows aligned) and loads it from all kTopk rows before adding, so
// kTopk loads are in flight. out may be the tensor Pack read from (in place):
// this kernel never reads it.
//
// Grid: x = tokens, y = ceil(row vectors / kThreads).
// Params: MoeCombineParams (templates/cuda/moe_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe_params.h"

namespace tailor::cuda {

template <typename T, int kH, int kTopk>
struct MoeCombine {
  static_assert(kH >= 1, "H must be positive");
  static_assert(kTopk >= 1 && kTopk <= 64, "kTopk must be in [1, 64]");
  using Params = MoeCombineParams;
  static constexpr int kThreads = kMoeCombineThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr long long kRowBytes = static_cast<long long>(kH) * sizeof(T);
  static constexpr int kVectorBytes = MoeRowVectorBytes(kRowBytes);
  static constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(T));
  static constexpr int kRowVectors = static_cast<int>(kRowBytes / kVectorBytes);
  using Vector = Chunk<kVectorBytes>;

  static const Vector* Row(const Params& p, int row) {
    return reinterpret_cast<const Vector*>(static_cast<const char*>(p.c) +
                                           row * kRowBytes);
  }

  static void Run(const Params& p) {
    const int v = blockIdx.y * kThreads + threadIdx.x;
    if (v >= kRowVectors) return;
    const long long token = blockIdx.x;
    int rows[kTopk];
    Vector chunks[kTopk];
#pragma unroll
    for (int j = 0; j < kTopk; ++j) {
      rows[j] = p.inverse[token * kTopk + j];
      if (rows[j] >= 0 && rows[j] < p.rows) chunks[j] = Row(p, rows[j])[v];
    }
    float acc[kLanes];
#pragma unroll
    for (int l = 0; l < kLanes; ++l) acc[l] = 0.0f;
#pragma unroll
    for (int j = 0; j < kTopk; ++j) {
      if (rows[j] < 0 || rows[j] >= p.rows) continue;
      const float weight = p.weights[token * kTopk + j];
      const T* values = reinterpret_cast<const T*>(&chunks[j]);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) acc[l] += weight * ToFloat(values[l]);
    }
    Vector result;
    T* out_values = reinterpret_cast<T*>(&result);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) out_values[l] = FromFloat<T>(acc[l]);
    reinterpret_cast<Vector*>(static_cast<char*>(p.out) +
                              token * kRowBytes)[v] = result;
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_
