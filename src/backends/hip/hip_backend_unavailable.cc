// Built instead of the HIP backend when the HIP headers (hip_runtime_api.h,
// hiprtc.h) are not found at configure time (TAILOR_HIP_INCLUDE_DIR).
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
