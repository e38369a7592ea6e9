// runtime/cuda/arch.cuh — target checks and address helpers shared by the
// other runtime/cuda headers.
//
// Contract: device-only code for NVRTC. Header-only, no host code, no
// framework or standard headers.
//
// Targets:
//   TAILOR_CUDA_HAS_SM90   — __CUDA_ARCH__ >= 900: mbarrier transaction
//                            counts, cp.async.bulk(.tensor), fence.proxy.async,
//                            fence.proxy.tensormap, prefetch.tensormap.
//   TAILOR_CUDA_HAS_SM90A  — an arch-specific Hopper target (sm_90a), needed
//                            by tensormap.replace and wgmma.
// A header that needs one of them says so with #error, so that compiling a
// Hopper template for the wrong -arch fails with a sentence, not a ptxas
// message about an unknown instruction.
//
// PTX used here: bar.sync with a thread count (named barriers),
// atom.add.acq_rel.gpu (arrival counters); otherwise only the cvta builtins,
// which lower to cvta.to.*.
#ifndef TAILOR_RUNTIME_CUDA_ARCH_CUH_
#define TAILOR_RUNTIME_CUDA_ARCH_CUH_

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TAILOR_CUDA_HAS_SM90 1
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TAILOR_CUDA_HAS_SM90A 1
#endif

#define TAILOR_DEVICE __device__ __forceinline__

namespace tailor::cuda {

// 32-bit shared-window address of a pointer into this CTA's shared memory,
// the form PTX `.shared::cta` / `.shared::cluster` operands take.
TAILOR_DEVICE unsigned SharedAddress(const void* shared_ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(shared_ptr));
}

// Global-window address of a generic pointer into global memory, the form
// PTX `.global` operands take.
TAILOR_DEVICE unsigned long long GlobalAddress(const void* global_ptr) {
  return static_cast<unsigned long long>(__cvta_generic_to_global(global_ptr));
}

// Generic address as an integer, the form PTX operands without a state space
// take (e.g. the tensor-map operand of cp.async.bulk.tensor, which may point
// into param, const or global space).
TAILOR_DEVICE unsigned long long GenericAddress(const void* ptr) {
  return reinterpret_cast<unsigned long long>(ptr);
}

// Waits until kThreads threads (whole warps) of the CTA reached named
// barrier `id` (1..15; 0 is __syncthreads'): a barrier for one warpgroup
// that the CTA's other warps never join.
template <int kThreads>
TAILOR_DEVICE void NamedBarrierSync(int id) {
  static_assert(kThreads % 32 == 0, "named barriers count whole warps");
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kThreads) : "memory");
}

// NamedBarrierSync that also returns whether any participating thread passed
// `value` true (bar.red.or): a broadcast without shared memory.
template <int kThreads>
TAILOR_DEVICE bool NamedBarrierOr(int id, bool value) {
  static_assert(kThreads % 32 == 0, "named barriers count whole warps");
  int result;
  asm volatile(
      "{\n"
      "  .reg .pred p, q;\n"
      "  setp.ne.s32 p, %1, 0;\n"
      "  bar.red.or.pred q, %2, %3, p;\n"
      "  selp.s32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(result)
      : "r"(static_cast<int>(value)), "r"(id), "n"(kThreads)
      : "memory");
  return result != 0;
}

// The GPU's global timer, in nanoseconds (coarse ticks; for timeouts and
// traces, not for timing short code).
TAILOR_DEVICE unsigned long long GlobalTimerNs() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// A GPU-scope relaxed load of a counter others update with atomics: it
// always reads memory (an int the compiler may not cache in a register), and
// orders nothing.
TAILOR_DEVICE int LoadRelaxed(const int* counter) {
  int value;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];"
               : "=r"(value)
               : "l"(GlobalAddress(counter))
               : "memory");
  return value;
}

// Adds 1 to a GPU-scope arrival counter in global memory and returns the
// count before it, with release semantics for the writes ordered before the
// call and acquire semantics for the reads after it. The "last one out"
// pattern across CTAs (split-K, split-KV merges, a last block that plans):
//   every participant:  its global writes
//   a barrier over the participants (__syncthreads / NamedBarrierSync)
//   one participant:    last = ArriveAcqRel(counter) == arrivals - 1
//   a barrier that broadcasts `last` (shared memory or NamedBarrierOr)
//   if last, the participants read everyone's writes, then reset the counter
// Correct by the PTX memory model, as CUTLASS's split-K semaphore: the
// barrier orders every participant's writes before the releasing atomic
// (release is cumulative), and the acquiring atomic before every
// participant's later reads. No fence.sc per thread (__threadfence), which
// costs each thread a GPU-wide round trip.
TAILOR_DEVICE int ArriveAcqRel(int* counter) {
  int previous;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;"
               : "=r"(previous)
               : "l"(GlobalAddress(counter))
               : "memory");
  return previous;
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_ARCH_CUH_
