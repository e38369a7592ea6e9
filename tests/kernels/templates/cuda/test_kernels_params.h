// templates/cuda/test_kernels_params.h — params of test_kernels.cuh, shared
// by host and device (plain C++, no CUDA keywords, no standard headers).
#ifndef TAILOR_TEMPLATES_CUDA_TEST_KERNELS_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_TEST_KERNELS_PARAMS_H_

namespace tailor::cuda {

struct TestEmptyParams {
  int unused = 0;  // a kernel argument cannot be empty in every ABI
};

struct TestAxpyParams {
  float a = 0.0f;
  const float* x = nullptr;  // [n]
  float* y = nullptr;        // [n]
  long long n = 0;
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TEST_KERNELS_PARAMS_H_
