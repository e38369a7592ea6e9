#include "core/backend.h"

#include "absl/strings/str_cat.h"

namespace tailor::internal {
namespace {

absl::Status HostMemoryBackend(const Backend& backend, absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat(what, ": the ", BackendName(backend.kind()),
                   " backend works in host memory"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<void>> Backend::AllocateDevice(size_t) {
  return HostMemoryBackend(*this, "AllocateDevice");
}

absl::Status Backend::FillDevice(void*, uint8_t, size_t, void*) {
  return HostMemoryBackend(*this, "FillDevice");
}

absl::Status Backend::CopyToHost(void*, const void*, size_t, void*) {
  return HostMemoryBackend(*this, "CopyToHost");
}

absl::Status Backend::CopyToDevice(void*, const void*, size_t, void*) {
  return HostMemoryBackend(*this, "CopyToDevice");
}

}  // namespace tailor::internal
