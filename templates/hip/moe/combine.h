// templates/hip/moe/combine.h — Combine on HIP: the CUDA kernel
// (templates/cuda/moe/combine.cuh), unchanged: per token, kTopk vector loads
// in flight and an f32 weighted sum, nothing vendor-specific, compiled
// through the vendor header (runtime/hip/cuda_compat.h).
//
// Instantiate tailor::cuda::MoeCombine<T, kH, kTopk> with TAILOR_HIP_ENTRY;
// launch shape: templates/cuda/moe/params.h (kMoeCombineThreads = 2 waves).
#ifndef TAILOR_TEMPLATES_HIP_MOE_COMBINE_H_
#define TAILOR_TEMPLATES_HIP_MOE_COMBINE_H_

#include "runtime/hip/cuda_compat.h"
#include "runtime/hip/entry.h"

TAILOR_HIP_REUSE_CUDA_BEGIN
#include "templates/cuda/moe/combine.cuh"
TAILOR_HIP_REUSE_CUDA_END

#endif  // TAILOR_TEMPLATES_HIP_MOE_COMBINE_H_
