// templates/cuda/moe/combine.cuh — weighted sum of each token's expert rows.
//
// out[t, :] = sum_j weights[t, j] * c[inverse[t, j], :] over the topk slots
// whose row is in [0, rows) (-1: an expert on another rank, or a padding
// token: it contributes nothing; a token with no such slot gets zeros). f32
// accumulation; each thread owns one vector of the row (the widest that
// keeps rows aligned) and loads it from all kTopk rows before adding, so
// kTopk loads are in flight. out may be the tensor Pack read from (in place):
// this kernel never reads it. kH and kTopk are compiled in, or both
// kMoeRuntimeDim (0) for the generic kernel (background JIT), which reads
// params.hidden_dim and params.topk and loads one slot at a time.
//
// Grid: x = tokens, y = ceil(row vectors / kThreads).
// Params: MoeCombineParams (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

template <typename T, int kH, int kTopk>
struct MoeCombine {
  static_assert(kH >= 0,
                "H must be positive, or kMoeRuntimeDim: params.hidden_dim");
  static_assert(kTopk >= 0 && kTopk <= 64,
                "kTopk must be in [1, 64], or kMoeRuntimeDim: params.topk");
  static_assert((kH == kMoeRuntimeDim) == (kTopk == kMoeRuntimeDim),
                "H and topk are both compiled in or both runtime");
  using Params = MoeCombineParams;
  static constexpr int kThreads = kMoeCombineThreads;
  static constexpr int kMinBlocksPerSm = 1;

  template <int kVectorBytes>
  static const Chunk<kVectorBytes>* Row(const Params& p, int row,
                                        long long row_bytes) {
    return reinterpret_cast<const Chunk<kVectorBytes>*>(
        static_cast<const char*>(p.c) + row * row_bytes);
  }

  // acc += weight * the `lanes` values of `chunk`.
  template <int kLanes, typename Vector>
  static void AddScaled(float (&acc)[kLanes], float weight,
                        const Vector& chunk) {
    const T* values = reinterpret_cast<const T*>(&chunk);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) acc[l] += weight * ToFloat(values[l]);
  }

  // Vector v (this thread's) of token blockIdx.x's output row, in
  // kVectorBytes vectors. kTopk slots compiled in: every row's load in
  // flight before the adds; else params.topk slots, one at a time.
  template <int kVectorBytes>
  static void CombineVector(const Params& p, long long row_bytes, int topk) {
    using Vector = Chunk<kVectorBytes>;
    constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(T));
    const int v = blockIdx.y * kThreads + threadIdx.x;
    if (v >= static_cast<int>(row_bytes / kVectorBytes)) return;
    const long long token = blockIdx.x;
    float acc[kLanes];
#pragma unroll
    for (int l = 0; l < kLanes; ++l) acc[l] = 0.0f;
    if constexpr (kTopk > 0) {
      int rows[kTopk];
      Vector chunks[kTopk];
#pragma unroll
      for (int j = 0; j < kTopk; ++j) {
        rows[j] = p.inverse[token * kTopk + j];
        if (rows[j] >= 0 && rows[j] < p.rows) {
          chunks[j] = Row<kVectorBytes>(p, rows[j], row_bytes)[v];
        }
      }
#pragma unroll
      for (int j = 0; j < kTopk; ++j) {
        if (rows[j] < 0 || rows[j] >= p.rows) continue;
        AddScaled<kLanes>(acc, p.weights[token * kTopk + j], chunks[j]);
      }
    } else {
#pragma unroll 1
      for (int j = 0; j < topk; ++j) {
        const int row = p.inverse[token * topk + j];
        if (row < 0 || row >= p.rows) continue;
        AddScaled<kLanes>(acc, p.weights[token * topk + j],
                          Row<kVectorBytes>(p, row, row_bytes)[v]);
      }
    }
    Vector result;
    T* out_values = reinterpret_cast<T*>(&result);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) out_values[l] = FromFloat<T>(acc[l]);
    reinterpret_cast<Vector*>(static_cast<char*>(p.out) +
                              token * row_bytes)[v] = result;
  }

  static void Run(const Params& p) {
    if constexpr (kH > 0) {
      constexpr long long kRowBytes = static_cast<long long>(kH) * sizeof(T);
      CombineVector<MoeRowVectorBytes(kRowBytes)>(p, kRowBytes, kTopk);
    } else {  // the generic kernel: rows are whole T, so >= sizeof(T) bytes
      const long long row_bytes =
          static_cast<long long>(p.hidden_dim) * sizeof(T);
      switch (MoeRowVectorBytes(row_bytes)) {
        case 16:
          return CombineVector<16>(p, row_bytes, p.topk);
        case 8:
          return CombineVector<8>(p, row_bytes, p.topk);
        default:
          if constexpr (sizeof(T) <= 2) {
            if (row_bytes % 4 != 0) {
              return CombineVector<sizeof(T)>(p, row_bytes, p.topk);
            }
          }
          return CombineVector<4>(p, row_bytes, p.topk);
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_COMBINE_CUH_
