// templates/cuda/moe_pack.cuh — gather token rows into expert-sorted order.
//
// a[r, :] = hidden[permutation[r] / topk, :] for every row r whose entry is
// in [0, tokens * topk); other rows (the -1 past R of a device Route, or bad
// entries) are left untouched. Memory-bound: the row length kH is compile-
// time, so each thread moves kVectorsPerThread chunks of the widest vector
// that keeps every row aligned (16 bytes when kH * sizeof(T) % 16 == 0),
// all loads in flight before the stores.
//
// Grid: x = rows, y = ceil(row vectors / (kThreads * kVectorsPerThread)).
// Params: MoePackParams (templates/cuda/moe_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe_params.h"

namespace tailor::cuda {

template <typename T, int kH>
struct MoePack {
  static_assert(kH >= 1, "H must be positive");
  using Params = MoePackParams;
  static constexpr int kThreads = kMoePackThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr long long kRowBytes = static_cast<long long>(kH) * sizeof(T);
  static constexpr int kVectorBytes = MoeRowVectorBytes(kRowBytes);
  static constexpr int kRowVectors = static_cast<int>(kRowBytes / kVectorBytes);
  static constexpr int kVectorsPerThread = kMoePackVectorsPerThread;
  static constexpr int kVectorsPerBlock = kMoePackVectorsPerBlock;
  using Vector = Chunk<kVectorBytes>;

  static void Run(const Params& p) {
    const int entry = p.permutation[blockIdx.x];
    if (entry < 0 || entry >= p.tokens * p.topk) return;
    const long long token = entry / p.topk;
    const Vector* src = reinterpret_cast<const Vector*>(
        static_cast<const char*>(p.hidden) + token * kRowBytes);  // [kH]
    Vector* dst = reinterpret_cast<Vector*>(
        static_cast<char*>(p.a) + blockIdx.x * kRowBytes);  // [kH]
    const int first = blockIdx.y * kVectorsPerBlock + threadIdx.x;
    Vector chunks[kVectorsPerThread];
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
      const int v = first + u * kThreads;
      if (v < kRowVectors) chunks[u] = src[v];
    }
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
      const int v = first + u * kThreads;
      if (v < kRowVectors) dst[v] = chunks[u];
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_
