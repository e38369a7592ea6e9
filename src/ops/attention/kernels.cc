#include "ops/attention/kernels.h"

#include "absl/strings/str_cat.h"
#include "api/internals.h"

namespace tailor::internal {
namespace {

absl::Status HostBackend(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      what, ": this backend keeps decode workspaces in host memory"));
}

}  // namespace

absl::Status DecodeKernels::InitScratch(Engine&, void*, int64_t, void*) {
  return HostBackend("attention.decode scratch");
}

absl::Status DecodeKernels::UploadPlan(Engine&, const void*, void*, size_t,
                                       void*) {
  return HostBackend("attention.plan_decode upload");
}

absl::StatusOr<DecodeErrors> DecodeKernels::TakeErrors(Engine&, void*, int64_t,
                                                       void*) {
  return HostBackend("attention.decode errors");
}

absl::StatusOr<DecodeKernels*> DecodeKernelsOf(Runtime& runtime,
                                               absl::string_view op) {
  DecodeKernels* kernels =
      internal::EngineOf(runtime).backend().decode_kernels();
  if (kernels == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": the ", BackendName(runtime.backend()),
                     " backend has no decode attention kernels"));
  }
  return kernels;
}

}  // namespace tailor::internal
