// Built instead of the CUDA backend when the CUDA toolkit headers (cuda.h,
// nvrtc.h) are not found at configure time (TAILOR_CUDA_HOME).
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/attention/ragged_kernels.h"
#include "backends/cuda/moe/kernels.h"
#include "core/backend_registry.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions&) {
  return absl::UnavailableError(
      "CUDA backend unavailable: built without CUDA headers (set "
      "TAILOR_CUDA_HOME to a CUDA 12+ toolkit and reconfigure)");
}

}  // namespace tailor::internal

// Warm-up lists CUDA keys without a device, but this build cannot generate
// their sources either.
namespace tailor::cuda {
namespace {

absl::Status NoCudaKernels() {
  return absl::UnavailableError(
      "CUDA kernels unavailable: built without CUDA headers");
}

}  // namespace

absl::StatusOr<std::vector<internal::KernelJob>> MoeLayerKernels(
    const internal::KeyTarget&, const internal::MoeLayerShape&,
    const MoeTuning&) {
  return NoCudaKernels();
}

absl::StatusOr<std::vector<internal::KernelJob>> DecodeLayerKernels(
    const internal::KeyTarget&, const internal::DecodeShape&,
    const DecodeTuning&) {
  return NoCudaKernels();
}

absl::StatusOr<internal::KernelSource> GenerateMoeKernel(
    const internal::SpecKey&) {
  return NoCudaKernels();
}

absl::StatusOr<internal::KernelSource> GenerateCudaDecode(
    const internal::SpecKey&) {
  return NoCudaKernels();
}

absl::StatusOr<internal::KernelSource> GenerateCudaRagged(
    const internal::SpecKey&) {
  return NoCudaKernels();
}

}  // namespace tailor::cuda
