// Built instead of the HIP backend when the HIP headers (hip_runtime_api.h,
// hiprtc.h) are not found at configure time (TAILOR_HIP_INCLUDE_DIR).
#include "backends/hip/attention/decode_kernels.h"
#include "backends/hip/attention/ragged_kernels.h"
#include "backends/hip/moe/kernels.h"
#include "core/backend_registry.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(
    const BackendOptions&) {
  return absl::UnavailableError(
      "HIP backend unavailable: built without HIP headers (install "
      "libamdhip64-dev, or set TAILOR_HIP_INCLUDE_DIR to ROCm's include "
      "directory, and reconfigure)");
}

}  // namespace tailor::internal

// The family registry names the HIP generators; this build has none.
namespace tailor::hip {
namespace {

absl::Status NoHipKernels() {
  return absl::UnavailableError(
      "HIP kernels unavailable: built without HIP headers");
}

}  // namespace

absl::StatusOr<internal::KernelSource> GenerateHipMoeKernel(
    const internal::SpecKey&) {
  return NoHipKernels();
}

absl::StatusOr<internal::KernelSource> GenerateHipDecode(
    const internal::SpecKey&) {
  return NoHipKernels();
}

absl::StatusOr<internal::KernelSource> GenerateHipRagged(
    const internal::SpecKey&) {
  return NoHipKernels();
}

}  // namespace tailor::hip
