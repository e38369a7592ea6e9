#include "ops/moe/kernels.h"

#include "absl/strings/str_cat.h"
#include "api/internals.h"

namespace tailor::internal {
namespace {

absl::Status NoDeviceRoute(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      what, ": this backend routes on the host (no device route)"));
}

}  // namespace

absl::Status MoeKernels::InitRouteScratch(Engine&, void*, void*) {
  return NoDeviceRoute("moe.route scratch");
}

absl::Status MoeKernels::Route(Engine&, const DeviceRouteLaunch&) {
  return NoDeviceRoute("moe.route");
}

absl::StatusOr<RouteErrors> MoeKernels::TakeRouteErrors(Engine&, void*, void*) {
  return NoDeviceRoute("moe.route errors");
}

absl::Status MoeKernels::SupportsScaleMode(moe::ScaleMode mode) const {
  if (mode == moe::ScaleMode::kNone) return absl::OkStatus();
  return absl::UnimplementedError("this backend has no FP8 (e4m3) MoE kernels");
}

absl::StatusOr<MoeKernels*> MoeKernelsOf(Runtime& runtime,
                                         absl::string_view op) {
  MoeKernels* kernels = internal::EngineOf(runtime).backend().moe_kernels();
  if (kernels == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": the ", BackendName(runtime.backend()),
                     " backend has no MoE kernels"));
  }
  return kernels;
}

}  // namespace tailor::internal
