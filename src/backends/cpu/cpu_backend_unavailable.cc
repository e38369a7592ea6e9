// Built instead of the CPU backend when TAILOR_ENABLE_CPU_JIT=OFF (e.g. the
// GPU test bundle, which must not depend on LLVM).
#include "core/backend_registry.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const BackendOptions&) {
  return absl::UnavailableError(
      "cpu backend: not built (TAILOR_ENABLE_CPU_JIT=OFF)");
}

}  // namespace tailor::internal
