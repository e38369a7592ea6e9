// runtime/cuda/cp_async.cuh — groups of cp.async copies (sm_80 and newer):
// the commit and wait that every cp.async pipeline shares
// (mma_sm80.cuh and warp_mma.cuh each bring their own 16-byte copy).
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
// One definition, so that templates including both copy headers (the
// generic kernels of background JIT put every family in one translation
// unit) compile.
#ifndef TAILOR_RUNTIME_CUDA_CP_ASYNC_CUH_
#define TAILOR_RUNTIME_CUDA_CP_ASYNC_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

// Closes this thread's current group of cp.async copies.
TAILOR_DEVICE void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still
// in flight. A CTA barrier after it makes every thread's copies visible.
template <int kPending>
TAILOR_DEVICE void CpAsyncWait() {
  static_assert(kPending >= 0 && kPending <= 7, "pending groups are 0..7");
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_CP_ASYNC_CUH_
