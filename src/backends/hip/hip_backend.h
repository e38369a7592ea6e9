// backends/hip/hip_backend.h — the HIP backend: hiprtc -> code object for
// the device's gfx target, HIP module API load and launch on the caller's
// stream (hipStream_t), device memory for workspaces.
//
// Nothing links against ROCm (backends/hip/hip_api.h): without libamdhip64,
// or without an AMD GPU, Create reports Unavailable with the reason.
//
// Target: the device's gcnArchName ("gfx90a:sramecc+:xnack-"), or for
// offline compiles (tools, CI without a GPU) the one CreateOffline is given;
// an offline backend compiles but has no device: Load, Launch and device
// memory say FailedPrecondition. Keys carry the target (SpecKey::arch) and
// every disk entry carries compiler_identity() (hiprtc version, library,
// flags), so code objects of one ROCm are never loaded by another.
//
// Kernels: the MoE family (backends/hip/moe/kernels.h; templates/hip/),
// paged decode (backends/hip/attention/decode_kernels.h) and ragged attention
// (backends/hip/attention/ragged_kernels.h). CDNA (wave64) processors
// only: Supports says Unimplemented for other targets.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(auto backend, HipBackend::CreateOffline("gfx90a"));
//   TAILOR_ASSIGN_OR_RETURN(std::string code_object,
//                           backend->Compile(key, source));
#ifndef TAILOR_BACKENDS_HIP_HIP_BACKEND_H_
#define TAILOR_BACKENDS_HIP_HIP_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/hip/attention/decode_kernels.h"
#include "backends/hip/attention/ragged_kernels.h"
#include "backends/hip/hip_api.h"
#include "backends/hip/hiprtc_compiler.h"
#include "backends/hip/moe/kernels.h"
#include "core/backend.h"
#include "core/backend_registry.h"

namespace tailor::hip {

// A loaded code object and its entry.
class HipKernel final : public tailor::internal::Kernel {
 public:
  HipKernel(const HipRuntimeApi& api, hipModule_t module,
            hipFunction_t function)
      : api_(api), module_(module), function_(function) {}
  // An unload error cannot be reported from here; it leaks at most the
  // module.
  ~HipKernel() override { (void)api_.ModuleUnload(module_); }
  hipFunction_t function() const { return function_; }

 private:
  const HipRuntimeApi& api_;
  hipModule_t module_;
  hipFunction_t function_;
};

// What a device (or an offline target) gives the kernels' launch glue.
struct HipDeviceInfo {
  std::string target;     // "gfx90a:sramecc+:xnack-"
  int compute_units = 0;  // 0 offline
  int lds_bytes_per_block = 64 * 1024;
};

class HipBackend final : public tailor::internal::Backend {
 public:
  // The HIP device options.device_index. Unavailable (with the reason) when
  // libamdhip64 or hiprtc is absent, or there is no AMD GPU; InvalidArgument
  // for an index past the device count.
  static absl::StatusOr<std::unique_ptr<HipBackend>> Create(
      const tailor::internal::BackendOptions& options);
  // A backend without a device that compiles for `target` (e.g. "gfx90a").
  // InvalidArgument for a malformed target; Unimplemented when this hiprtc
  // cannot compile for it (HiprtcCompiler::CheckTarget); Unavailable when
  // hiprtc is absent.
  static absl::StatusOr<std::unique_ptr<HipBackend>> CreateOffline(
      absl::string_view target);

  BackendKind kind() const override { return BackendKind::kHip; }
  Device device() const override { return device_; }
  const std::string& arch() const override { return info_.target; }
  const std::string& compiler_identity() const override {
    return compiler_.identity();
  }
  const tailor::internal::Hash128& headers_hash() const override {
    return headers_hash_;
  }
  absl::Status Supports(const tailor::internal::SpecKey& key) const override;
  absl::StatusOr<std::string> Compile(
      const tailor::internal::SpecKey& key,
      const tailor::internal::KernelSource& source) override;
  absl::StatusOr<std::shared_ptr<tailor::internal::Kernel>> Load(
      const tailor::internal::SpecKey& key,
      const tailor::internal::KernelSource& source,
      absl::string_view binary) override;
  absl::Status Launch(const tailor::internal::Kernel& kernel,
                      const tailor::internal::LaunchConfig& config,
                      const void* params, size_t params_size) override;

  absl::StatusOr<std::shared_ptr<void>> AllocateDevice(size_t bytes) override;
  absl::Status FillDevice(void* dst, uint8_t value, size_t bytes,
                          void* stream) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes,
                          void* stream) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes,
                            void* stream) override;

  tailor::internal::MoeKernels* moe_kernels() override { return &moe_kernels_; }
  tailor::internal::DecodeKernels* decode_kernels() override {
    return &decode_kernels_;
  }
  tailor::internal::RaggedKernels* ragged_kernels() override {
    return &ragged_kernels_;
  }

  const HiprtcCompiler& compiler() const { return compiler_; }
  const HipDeviceInfo& info() const { return info_; }
  bool offline() const { return runtime_ == nullptr; }

 private:
  HipBackend(const HipRuntimeApi* runtime, Device device,
             HiprtcCompiler compiler, HipDeviceInfo info);
  // FailedPrecondition for an offline backend, else selects the device.
  absl::Status RequireDevice(absl::string_view what) const;

  const HipRuntimeApi* runtime_;  // null offline
  Device device_;
  HiprtcCompiler compiler_;
  HipDeviceInfo info_;
  tailor::internal::Hash128 headers_hash_;
  HipMoeKernels moe_kernels_;
  HipDecodeKernels decode_kernels_;
  HipRaggedKernels ragged_kernels_;
};

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_HIP_BACKEND_H_
