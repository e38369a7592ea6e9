// runtime/cuda/mbarrier.cuh — transaction-count barriers in shared memory.
//
// Contract: device-only code for NVRTC, sm_90 or newer. Header-only, no host
// code, no framework or standard headers.
//
// An Mbarrier is the 64-bit `mbarrier` object of PTX, placed in shared memory.
// It completes a *phase* when (a) the expected number of arrivals has arrived
// and (b) the transaction count, raised by `ArriveExpectTx(bytes)` and lowered
// by every byte a TMA copy writes (`mbarrier::complete_tx::bytes`), is back to
// zero. Waiters name the phase they wait for by its parity (0, 1, 0, ...).
//
// Protocol for one TMA load stage (one producer thread, any consumers):
//
//   __shared__ Mbarrier full;                    // one per stage
//   if (threadIdx.x == 0) full.Init(1);          // 1 arrival per phase
//   FenceMbarrierInit(); __syncthreads();        // init visible to TMA + CTA
//   unsigned phase = 0;
//   for (each reuse of the stage) {
//     if (threadIdx.x == 0) {
//       full.ArriveExpectTx(kStageBytes);        // arrive + expect bytes
//       TmaLoad(..., &full);                     // complete_tx lowers them
//     }
//     full.Wait(phase);                          // every consumer thread
//     ... read the stage ...
//     __syncthreads() or an "empty" Mbarrier before the stage is refilled;
//     phase ^= 1;
//   }
//
// Rules the type cannot check (break one and the kernel hangs or races):
//   - ArriveExpectTx must announce exactly the bytes the copies of the phase
//     write: the full box bytes of each TMA load, out-of-bounds fill included.
//   - A stage is refilled only after every consumer finished reading it.
//   - A waiter must not fall two phases behind: parity cannot tell phase k
//     from phase k+2.
//
// PTX used (PTX ISA 8.0+, sm_90): mbarrier.init, mbarrier.arrive,
// mbarrier.arrive.expect_tx, mbarrier.try_wait.parity, fence.mbarrier_init,
// fence.proxy.async.shared::cta.
#ifndef TAILOR_RUNTIME_CUDA_MBARRIER_CUH_
#define TAILOR_RUNTIME_CUDA_MBARRIER_CUH_

#include "runtime/cuda/arch.cuh"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90)
#error \
    "runtime/cuda/mbarrier.cuh needs sm_90 or newer (transaction-count mbarriers)"
#endif

namespace tailor::cuda {

class alignas(8) Mbarrier {
 public:
  // Sets the arrival count of every phase to `arrive_count` (1 .. 2^20-1)
  // and the current phase to 0. One thread; then FenceMbarrierInit() and a
  // CTA barrier before any other thread or a TMA copy touches it.
  TAILOR_DEVICE void Init(unsigned arrive_count) {
    asm volatile(
        "mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(this)),
        "r"(arrive_count)
        : "memory");
  }

  // Arrives once and raises the expected transaction count by `bytes`
  // (release semantics at CTA scope).
  TAILOR_DEVICE void ArriveExpectTx(unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     SharedAddress(this)),
                 "r"(bytes)
                 : "memory");
  }

  // Arrives once without transaction bytes (e.g. a consumer releasing an
  // "empty" barrier).
  TAILOR_DEVICE void Arrive() {
    asm volatile(
        "mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(this))
        : "memory");
  }

  // True when the phase with parity `phase_parity` has completed. May suspend
  // the thread for a system-dependent time before returning false.
  TAILOR_DEVICE bool TryWait(unsigned phase_parity) {
    unsigned done;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(SharedAddress(this)), "r"(phase_parity)
        : "memory");
    return done != 0;
  }

  // Blocks until the phase with parity `phase_parity` has completed. Has
  // acquire semantics: data the TMA wrote for that phase is visible after.
  TAILOR_DEVICE void Wait(unsigned phase_parity) {
    while (!TryWait(phase_parity)) {
    }
  }

 private:
  unsigned long long state_;
};
static_assert(sizeof(Mbarrier) == 8, "an mbarrier object is 64 bits");

// Makes barrier initializations by this thread visible to the async proxy
// (TMA complete_tx) and to the other CTAs of the cluster. Call after the Init
// calls, before the CTA (or cluster) barrier that publishes them.
TAILOR_DEVICE void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_MBARRIER_CUH_
