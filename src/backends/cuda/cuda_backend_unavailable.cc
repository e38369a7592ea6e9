// Built instead of the CUDA backend when the CUDA toolkit headers (cuda.h,
// nvrtc.h) are not found at configure time (TAILOR_CUDA_HOME).
#include "core/backend_registry.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions&) {
  return absl::UnavailableError(
      "CUDA backend unavailable: built without CUDA headers (set "
      "TAILOR_CUDA_HOME to a CUDA 12+ toolkit and reconfigure)");
}

}  // namespace tailor::internal
