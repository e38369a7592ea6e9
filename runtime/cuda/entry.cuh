// runtime/cuda/entry.cuh — the extern "C" entry of a generated CUDA kernel.
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
//
// A generated kernel source is exactly:
//
//   #include "templates/cuda/<family>.cuh"
//   TAILOR_CUDA_ENTRY(tailor_<name>, (tailor::cuda::<Kernel><template args>))
//
// where the kernel class supplies
//   using Params = ...;                        // the one by-value argument
//   static constexpr int kThreads = ...;       // block size it is built for
//   static constexpr int kMinBlocksPerSm = ...;
//   static __device__ void Run(const Params&);
//   static constexpr bool kWaitsForPrerequisites = true;  // optional
// so launch bounds live in the template, next to the code they constrain,
// and the params struct is passed as `const __grid_constant__` (TMA maps in
// it stay in parameter space, where cp.async.bulk.tensor may use them).
//
// Every entry is safe to launch overlapping its predecessor (LaunchConfig::
// overlap_predecessor): before Run touches global memory it waits for the
// grids before it, then lets the next grid launch. A kernel whose prologue
// (barrier init, tensor-map prefetch: params only) should run under the
// predecessor's tail declares kWaitsForPrerequisites and calls both itself.
#ifndef TAILOR_RUNTIME_CUDA_ENTRY_CUH_
#define TAILOR_RUNTIME_CUDA_ENTRY_CUH_

namespace tailor::cuda {

// Unwraps a parenthesized type: ParenType<void(T)>::type is T. Lets the
// macro take template types whose arguments contain commas.
template <typename T>
struct ParenType;
template <typename T>
struct ParenType<void(T)> {
  using type = T;
};

// Programmatic dependent launch (sm_90+; no-ops before): a grid launched
// with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while
// its predecessor in the stream still runs. WaitForPrerequisiteGrids blocks
// until every prerequisite grid has completed and its memory is visible, so
// a kernel must call it before it touches any global memory but its
// read-only params; AllowDependentLaunch lets the next grid start early.
__device__ __forceinline__ void WaitForPrerequisiteGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Kernels that call WaitForPrerequisiteGrids themselves, after a prologue
// that reads only their params, declare kWaitsForPrerequisites = true; the
// entry waits before Run for every other kernel.
template <typename K, typename = void>
struct WaitsForPrerequisites {
  static constexpr bool value = false;
};
template <typename K>
struct WaitsForPrerequisites<K, decltype(void(K::kWaitsForPrerequisites))> {
  static constexpr bool value = K::kWaitsForPrerequisites;
};

}  // namespace tailor::cuda

#define TAILOR_CUDA_ENTRY(NAME, KERNEL)                                        \
  using NAME##_kernel = typename ::tailor::cuda::ParenType<void KERNEL>::type; \
  extern "C" __global__ void __launch_bounds__(NAME##_kernel::kThreads,        \
                                               NAME##_kernel::kMinBlocksPerSm) \
      NAME(const __grid_constant__ typename NAME##_kernel::Params params) {    \
    if constexpr (!::tailor::cuda::WaitsForPrerequisites<                      \
                      NAME##_kernel>::value) {                                 \
      ::tailor::cuda::WaitForPrerequisiteGrids();                              \
      ::tailor::cuda::AllowDependentLaunch();                                  \
    }                                                                          \
    NAME##_kernel::Run(params);                                                \
  }

#endif  // TAILOR_RUNTIME_CUDA_ENTRY_CUH_
