// templates/hip/moe/pack.h — Pack on HIP: the CUDA kernel
// (templates/cuda/moe/pack.cuh), unchanged: a memory-bound gather of 16-byte
// vectors with nothing vendor-specific in it, compiled through the vendor
// header (runtime/hip/cuda_compat.h).
//
// Instantiate tailor::cuda::MoePack<T, kH> with TAILOR_HIP_ENTRY; launch
// shape: templates/cuda/moe/params.h (kMoePackThreads = 2 waves).
#ifndef TAILOR_TEMPLATES_HIP_MOE_PACK_H_
#define TAILOR_TEMPLATES_HIP_MOE_PACK_H_

#include "runtime/hip/cuda_compat.h"
#include "runtime/hip/entry.h"

TAILOR_HIP_REUSE_CUDA_BEGIN
#include "templates/cuda/moe/pack.cuh"
TAILOR_HIP_REUSE_CUDA_END

#endif  // TAILOR_TEMPLATES_HIP_MOE_PACK_H_
