#include "core/backend_registry.h"

#include "absl/strings/str_cat.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    BackendKind kind, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::kCpu:
      return CreateCpuBackend(options);
    case BackendKind::kCuda:
      return CreateCudaBackend(options);
    case BackendKind::kHip:
      return CreateHipBackend(options);
    case BackendKind::kAuto:
      break;
  }
  // Auto: the first available, GPUs first.
  std::string reasons;
  for (auto factory : {&CreateCudaBackend, &CreateHipBackend, &CreateCpuBackend}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = factory(options);
    if (backend.ok()) return backend;
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ",
                    backend.status().message());
  }
  return absl::UnavailableError(
      absl::StrCat("no backend is available: ", reasons));
}

}  // namespace tailor::internal
