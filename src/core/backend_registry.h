// core/backend_registry.h — the one place that knows every backend.
#ifndef TAILOR_CORE_BACKEND_REGISTRY_H_
#define TAILOR_CORE_BACKEND_REGISTRY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/tuning.h"

namespace tailor::internal {

class Stats;

struct BackendOptions {
  int device_index = 0;
  int cpu_threads = 0;  // 0 = hardware threads
  Stats* stats =
      nullptr;  // for backend-owned counters (descriptor pool); may be null
  // The runtime's validated tuning overrides; each family on the backend
  // reads its own keys.
  Tuning tuning;
};

// Creates the backend `kind`. kAuto tries cuda, hip, cpu in that order and
// returns the first that is available. Unavailable (with each backend's
// reason) when none is; Unavailable when an explicit backend cannot run here.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    BackendKind kind, const BackendOptions& options);

// Each backend folder defines its factory (declared here so the registry needs
// no backend headers). A backend compiled out returns Unavailable.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const BackendOptions& options);
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions& options);
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(
    const BackendOptions& options);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_BACKEND_REGISTRY_H_
