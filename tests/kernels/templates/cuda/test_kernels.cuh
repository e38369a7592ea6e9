// templates/cuda/test_kernels.cuh — the smallest CUDA kernels: an empty one
// (dispatch overhead) and axpy (end-to-end smoke test). Generic: any sm_80+.
//
// Template parameters (SpecKey: dims[0] = kUnroll for axpy): none for the
// empty kernel; kUnroll (>= 1) elements per thread for axpy.
// Launch: any grid/block; axpy covers n elements with
//   grid.x * block.x * kUnroll >= n.
#ifndef TAILOR_TEMPLATES_CUDA_TEST_KERNELS_CUH_
#define TAILOR_TEMPLATES_CUDA_TEST_KERNELS_CUH_

#include "templates/cuda/test_kernels_params.h"

namespace tailor::cuda {

__device__ __forceinline__ void TestEmpty(const TestEmptyParams& params) {}

// y[i] = a * x[i] + y[i] for i in [0, n).
template <int kUnroll>
__device__ __forceinline__ void TestAxpy(const TestAxpyParams& params) {
  static_assert(kUnroll >= 1, "each thread handles at least one element");
  const long long first =
      (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * kUnroll;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const long long i = first + u;
    if (i < params.n) params.y[i] = params.a * params.x[i] + params.y[i];
  }
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TEST_KERNELS_CUH_
