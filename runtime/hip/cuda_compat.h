// runtime/hip/cuda_compat.h — the vendor header that lets HIP kernels reuse
// CUDA kernel sources whose algorithm is the same on both vendors (as ggml's
// HIP backend compiles its CUDA sources through vendors/hip.h).
//
// Contract: device-only code for hiprtc (ROCm 5.2+; hiprtc pre-includes the
// HIP runtime). Header-only, no standard headers.
//
// Use it around the CUDA template it reuses, and nothing else:
//
//   #include "runtime/hip/cuda_compat.h"
//   TAILOR_HIP_REUSE_CUDA_BEGIN
//   #include "templates/cuda/moe/pack.cuh"
//   TAILOR_HIP_REUSE_CUDA_END
//
// What it does:
//   - stands in for runtime/cuda/arch.cuh, the one CUDA runtime header whose
//     body does not compile for amdgcn (it wraps the NVPTX cvta builtins):
//     it defines that header's include guard and TAILOR_DEVICE, so the CUDA
//     template's `#include "runtime/cuda/arch.cuh"` is a no-op. A reused
//     template that calls SharedAddress / GlobalAddress (PTX operands) then
//     fails to compile here, in CI's hiprtc tests, which is the point: such
//     a template is not vendor-neutral and needs a HIP version.
//   - replaces NVRTC's -default-device: CUDA templates declare their
//     kernel-class members without __device__ (NVRTC makes every function a
//     device function). hiprtc has no such flag; clang's
//     `#pragma clang force_cuda_host_device` makes every function declared
//     between BEGIN and END __host__ __device__, and hiprtc only ever emits
//     the device side.
//   - stands in for runtime/cuda/lanes.cuh with runtime/hip/lanes.h: the
//     same lane primitives (and ArriveAcqRel) for 64-lane waves, so that a
//     template written against them (the Route) is vendor-neutral.
//   runtime/cuda/numeric.cuh and entry.cuh compile unchanged (numeric.cuh's
//   PTX is behind __CUDA_ARCH__, which HIP does not define; entry.cuh's
//   macro is not used on HIP: runtime/hip/entry.h has TAILOR_HIP_ENTRY).
//
// Any other runtime/cuda/ header (mma_sm80.cuh, warp_mma.cuh, tma.cuh, ...)
// is PTX and must not be reached from a reused template.
#ifndef TAILOR_RUNTIME_HIP_CUDA_COMPAT_H_
#define TAILOR_RUNTIME_HIP_CUDA_COMPAT_H_

#if defined(TAILOR_RUNTIME_CUDA_ARCH_CUH_)
#error "runtime/hip/cuda_compat.h must come before any runtime/cuda/ header"
#endif

// Claims runtime/cuda/arch.cuh (its guard) and provides what vendor-neutral
// templates take from it.
#define TAILOR_RUNTIME_CUDA_ARCH_CUH_ 1
#define TAILOR_DEVICE __device__ __forceinline__

// Claims runtime/cuda/lanes.cuh and provides its names for 64-lane waves.
#include "runtime/hip/lanes.h"

#define TAILOR_HIP_REUSE_CUDA_BEGIN \
  _Pragma("clang force_cuda_host_device begin")
#define TAILOR_HIP_REUSE_CUDA_END _Pragma("clang force_cuda_host_device end")

#endif  // TAILOR_RUNTIME_HIP_CUDA_COMPAT_H_
