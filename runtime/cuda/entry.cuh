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
// so launch bounds live in the template, next to the code they constrain,
// and the params struct is passed as `const __grid_constant__` (TMA maps in
// it stay in parameter space, where cp.async.bulk.tensor may use them).
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

}  // namespace tailor::cuda

#define TAILOR_CUDA_ENTRY(NAME, KERNEL)                                        \
  using NAME##_kernel = typename ::tailor::cuda::ParenType<void KERNEL>::type; \
  extern "C" __global__ void __launch_bounds__(NAME##_kernel::kThreads,        \
                                               NAME##_kernel::kMinBlocksPerSm) \
      NAME(const __grid_constant__ typename NAME##_kernel::Params params) {    \
    NAME##_kernel::Run(params);                                                \
  }

#endif  // TAILOR_RUNTIME_CUDA_ENTRY_CUH_
