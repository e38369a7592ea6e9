// templates/cuda/moe/pack.cuh — gather token rows into expert-sorted order.
//
// a[r, :] = hidden[permutation[r] / topk, :] for every row r whose entry is
// in [0, tokens * topk); other rows (the -1 past R of a device Route, or bad
// entries) are left untouched. Memory-bound: each thread moves
// kVectorsPerThread chunks of the widest vector that keeps every row aligned
// (16 bytes when H * sizeof(T) % 16 == 0), all loads in flight before the
// stores. kH is the row length compiled in, or kMoeRuntimeDim (0) for the
// generic kernel (background JIT), which reads params.hidden_dim and picks
// the vector width at run time.
//
// Grid: x = rows, y = ceil(row vectors / (kThreads * kVectorsPerThread)).
// Params: MoePackParams (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

template <typename T, int kH>
struct MoePack {
  static_assert(kH >= 0,
                "H must be positive, or kMoeRuntimeDim: params.hidden_dim");
  using Params = MoePackParams;
  static constexpr int kThreads = kMoePackThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kVectorsPerThread = kMoePackVectorsPerThread;
  static constexpr int kVectorsPerBlock = kMoePackVectorsPerBlock;

  // Row blockIdx.x of A from its token's row of hidden, in kVectorBytes
  // vectors (rows of `row_bytes`).
  template <int kVectorBytes>
  static void CopyRow(const Params& p, long long token, long long row_bytes) {
    using Vector = Chunk<kVectorBytes>;
    const int row_vectors = static_cast<int>(row_bytes / kVectorBytes);
    const Vector* src = reinterpret_cast<const Vector*>(
        static_cast<const char*>(p.hidden) + token * row_bytes);  // [H]
    Vector* dst = reinterpret_cast<Vector*>(
        static_cast<char*>(p.a) + blockIdx.x * row_bytes);  // [H]
    const int first = blockIdx.y * kVectorsPerBlock + threadIdx.x;
    Vector chunks[kVectorsPerThread];
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
      const int v = first + u * kThreads;
      if (v < row_vectors) chunks[u] = src[v];
    }
#pragma unroll
    for (int u = 0; u < kVectorsPerThread; ++u) {
      const int v = first + u * kThreads;
      if (v < row_vectors) dst[v] = chunks[u];
    }
  }

  static void Run(const Params& p) {
    const int entry = p.permutation[blockIdx.x];
    if (entry < 0 || entry >= p.tokens * p.topk) return;
    const long long token = entry / p.topk;
    if constexpr (kH > 0) {
      constexpr long long kRowBytes = static_cast<long long>(kH) * sizeof(T);
      CopyRow<MoeRowVectorBytes(kRowBytes)>(p, token, kRowBytes);
    } else {  // the generic kernel: the vector width from the runtime H
      const long long row_bytes =
          static_cast<long long>(p.hidden_dim) * sizeof(T);
      switch (MoeRowVectorBytes(row_bytes)) {
        case 16:
          return CopyRow<16>(p, token, row_bytes);
        case 8:
          return CopyRow<8>(p, token, row_bytes);
        case 4:
          return CopyRow<4>(p, token, row_bytes);
        case 2:
          return CopyRow<2>(p, token, row_bytes);
        default:
          return CopyRow<1>(p, token, row_bytes);
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_PACK_CUH_
