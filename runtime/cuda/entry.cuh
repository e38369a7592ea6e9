// runtime/cuda/entry.cuh — the one kernel entry of a generated CUDA module.
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
//
// A generated source is exactly
//
//   #include "templates/cuda/<family>.cuh"
//   TAILOR_CUDA_ENTRY((tailor::cuda::<Family><template args>))
//
// and defines `extern "C" __global__ void tailor_entry(Params)` with the
// kernel class's launch bounds, so the bounds live in the template next to
// the code they constrain. The kernel class provides:
//   Params                 the params struct (core/backend.h kernel ABI:
//                          one argument, passed by value, __grid_constant__)
//   kThreads               threads per block the host launches with
//   kMinBlocksPerSm        the second __launch_bounds__ argument
//   static void Run(const Params&)
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

#define TAILOR_CUDA_ENTRY(KERNEL)                                          \
  using TailorEntryKernel = ::tailor::cuda::ParenType<void KERNEL>::type;  \
  extern "C" __global__ void __launch_bounds__(                            \
      TailorEntryKernel::kThreads, TailorEntryKernel::kMinBlocksPerSm)     \
      tailor_entry(const __grid_constant__ TailorEntryKernel::Params p) {  \
    TailorEntryKernel::Run(p);                                             \
  }

#endif  // TAILOR_RUNTIME_CUDA_ENTRY_CUH_
