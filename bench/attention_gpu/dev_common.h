// bench/attention_gpu/dev_common.h — what the host files of the development
// library (dev_api.cc, dev_decode.cc) share: error messages and the tensor
// map encoder. Not part of the C ABI.
#ifndef TAILOR_BENCH_ATTENTION_GPU_DEV_COMMON_H_
#define TAILOR_BENCH_ATTENTION_GPU_DEV_COMMON_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "runtime/cuda/tensor_map.h"

namespace tailor::attention_dev {

// Writes `message` into `error` (error_len bytes); returns 1.
int Fail(char* error, int error_len, const std::string& message);

// True for cudaSuccess; else writes "what: name description" and returns
// false.
bool CudaOk(cudaError_t e, const char* what, char* error, int error_len);

// A rank-5, 128-byte swizzled map of 16-bit elements (dtype 0 bf16, 1 f16);
// strides in bytes of dims 1..4.
bool Encode5(tailor::cuda::TensorMap* map, int dtype, const void* base,
             const cuuint64_t (&dims)[5], const cuuint64_t (&strides)[4],
             const cuuint32_t (&box)[5], CUtensorMapL2promotion promotion,
             const char* what, char* error, int error_len);

// The cache maps' L2 promotion: the library's (none), or $variable = none |
// 64 | 128 | 256 for A/B runs.
CUtensorMapL2promotion L2PromotionFromEnv(const char* variable);

}  // namespace tailor::attention_dev

#endif  // TAILOR_BENCH_ATTENTION_GPU_DEV_COMMON_H_
