// runtime/hip/entry.h — the extern "C" entry of a generated HIP kernel.
//
// Contract: device-only code for hiprtc. Header-only, no standard headers.
//
// A generated kernel source is exactly:
//
//   #include "templates/hip/<family>.h"
//   TAILOR_HIP_ENTRY(tailor_<name>, (<namespace>::<Kernel><template args>))
//
// where the kernel class supplies (as on CUDA, runtime/cuda/entry.cuh)
//   using Params = ...;                        // the one by-value argument
//   static constexpr int kThreads = ...;       // block size it is built for
//   static constexpr int kMinBlocksPerSm = ...;  // blocks per CU it wants
//   static void Run(const Params&);
// The launch bounds become AMDGPU attributes: a flat work-group size of at
// most kThreads, and the waves per execution unit (SIMD; 4 per CU) that
// kMinBlocksPerSm blocks of kThreads / 64 waves need, which caps the VGPRs
// the compiler may give each wave. The params struct travels in the kernarg
// segment (constant, read through the scalar cache).
#ifndef TAILOR_RUNTIME_HIP_ENTRY_H_
#define TAILOR_RUNTIME_HIP_ENTRY_H_

#include "runtime/hip/wave.h"

namespace tailor::hip {

// Unwraps a parenthesized type: ParenType<void(T)>::type is T. Lets the
// macro take template types whose arguments contain commas.
template <typename T>
struct ParenType;
template <typename T>
struct ParenType<void(T)> {
  using type = T;
};

// Execution units (SIMDs) per compute unit on CDNA (gfx90a, gfx94x).
inline constexpr int kSimdsPerCu = 4;

// Waves per SIMD that `blocks` resident blocks of `threads` threads need.
constexpr int WavesPerSimd(int threads, int blocks) {
  const int waves = (threads + kWaveSize - 1) / kWaveSize * blocks;
  return waves < kSimdsPerCu ? 1 : (waves + kSimdsPerCu - 1) / kSimdsPerCu;
}

}  // namespace tailor::hip

#define TAILOR_HIP_ENTRY(NAME, KERNEL)                                        \
  using NAME##_kernel = typename ::tailor::hip::ParenType<void KERNEL>::type; \
  extern "C" __global__ void __attribute__((                                  \
      amdgpu_flat_work_group_size(1, NAME##_kernel::kThreads),                \
      amdgpu_waves_per_eu(::tailor::hip::WavesPerSimd(                        \
          NAME##_kernel::kThreads, NAME##_kernel::kMinBlocksPerSm))))         \
  NAME(const typename NAME##_kernel::Params params) {                         \
    NAME##_kernel::Run(params);                                               \
  }

#endif  // TAILOR_RUNTIME_HIP_ENTRY_H_
