// runtime/cuda/bulk_copy.cuh — non-tensor bulk copies (cp.async.bulk) from
// global to shared memory, completed through an mbarrier.
//
// Contract: device-only code for NVRTC, sm_90 or newer. Header-only, no host
// code, no framework or standard headers.
//
// A bulk copy moves `bytes` contiguous bytes (a multiple of 16; both
// addresses 16-byte aligned) without a tensor map, and signals complete_tx
// of those bytes on the barrier, which the issuing side arms with
// ArriveExpectTx like a TMA load (runtime/cuda/mbarrier.cuh):
//   bar.ArriveExpectTx(kRowBytes);
//   BulkLoad(smem_row, global_row, kRowBytes, &bar);
//   bar.Wait(phase);
//
// PTX used (PTX ISA 8.0+, sm_90): cp.async.bulk.shared::cluster.global
// .mbarrier::complete_tx::bytes.
#ifndef TAILOR_RUNTIME_CUDA_BULK_COPY_CUH_
#define TAILOR_RUNTIME_CUDA_BULK_COPY_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/mbarrier.cuh"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90)
#error "runtime/cuda/bulk_copy.cuh needs sm_90 or newer (cp.async.bulk)"
#endif

namespace tailor::cuda {

TAILOR_DEVICE void BulkLoad(void* smem_dst, const void* global_src,
                            unsigned bytes, Mbarrier* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1], %2, [%3];" ::"r"(SharedAddress(smem_dst)),
      "l"(GlobalAddress(global_src)), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_BULK_COPY_CUH_
