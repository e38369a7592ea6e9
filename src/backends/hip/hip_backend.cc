#include "backends/hip/hip_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/embedded_files.h"
#include "core/family_registry.h"
#include "core/spec_key.h"
#include "tailor/status.h"

namespace tailor::hip {

using ::tailor::internal::BackendOptions;
using ::tailor::internal::Kernel;
using ::tailor::internal::KernelSource;
using ::tailor::internal::LaunchConfig;
using ::tailor::internal::SpecKey;

namespace {

absl::Status Unavailable(const absl::Status& cause) {
  if (cause.code() == absl::StatusCode::kUnavailable) return cause;
  return absl::UnavailableError(
      absl::StrCat("HIP backend unavailable: ", cause.message()));
}

}  // namespace

HipBackend::HipBackend(const HipRuntimeApi* runtime, Device device,
                       HiprtcCompiler compiler, HipDeviceInfo info)
    : runtime_(runtime),
      device_(device),
      compiler_(std::move(compiler)),
      info_(std::move(info)),
      headers_hash_(tailor::internal::HashEmbeddedFiles(
          {"runtime/hip/", "templates/hip/", "runtime/cuda/", "templates/cuda/",
           "templates/common/"})),
      moe_kernels_(*this, info_.compute_units,
                   HasMfmaBf16(GfxProcessor(info_.target))),
      decode_kernels_(*this, info_.compute_units),
      ragged_kernels_(*this, info_.compute_units) {}

absl::StatusOr<std::unique_ptr<HipBackend>> HipBackend::Create(
    const BackendOptions& options) {
  absl::StatusOr<const HipRuntimeApi*> api = LoadHipRuntimeApi();
  if (!api.ok()) return Unavailable(api.status());
  const HipRuntimeApi& hip = **api;
  int count = 0;
  if (absl::Status s = HipErrorToStatus(hip.GetDeviceCount(&count),
                                        "hipGetDeviceCount", &hip);
      !s.ok() || count == 0) {
    return absl::UnavailableError(
        absl::StrCat("HIP backend unavailable: no AMD GPU",
                     s.ok() ? "" : absl::StrCat(" (", s.message(), ")")));
  }
  if (options.device_index < 0 || options.device_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_index: must be in [0, ", count, "), got ",
                     options.device_index));
  }
  hipDeviceProp_t props = {};
  TAILOR_RETURN_IF_ERROR(
      HipErrorToStatus(hip.GetDeviceProperties(&props, options.device_index),
                       "hipGetDeviceProperties", &hip));
  absl::StatusOr<HiprtcCompiler> compiler = HiprtcCompiler::Create({});
  if (!compiler.ok()) return Unavailable(compiler.status());
  HipDeviceInfo info{
      .target = props.gcnArchName,
      .compute_units = props.multiProcessorCount,
      .lds_bytes_per_block = static_cast<int>(props.sharedMemPerBlock)};
  TAILOR_RETURN_IF_ERROR(compiler->CheckTarget(info.target));
  return std::unique_ptr<HipBackend>(new HipBackend(
      &hip, Device{.type = DeviceType::kHip, .index = options.device_index},
      *std::move(compiler), std::move(info)));
}

absl::StatusOr<std::unique_ptr<HipBackend>> HipBackend::CreateOffline(
    absl::string_view target) {
  TAILOR_RETURN_IF_ERROR(ValidateGfxTarget(target));
  absl::StatusOr<HiprtcCompiler> compiler = HiprtcCompiler::Create({});
  if (!compiler.ok()) return Unavailable(compiler.status());
  TAILOR_RETURN_IF_ERROR(compiler->CheckTarget(target));
  return std::unique_ptr<HipBackend>(new HipBackend(
      nullptr, Device{.type = DeviceType::kHip, .index = 0},
      *std::move(compiler), HipDeviceInfo{.target = std::string(target)}));
}

absl::Status HipBackend::RequireDevice(absl::string_view what) const {
  if (runtime_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("hip backend: ", what,
                     " needs a device; this backend "
                     "compiles offline for ",
                     info_.target));
  }
  return HipErrorToStatus(runtime_->SetDevice(device_.index), "hipSetDevice",
                          runtime_);
}

absl::Status HipBackend::Supports(const SpecKey& key) const {
  if (key.backend != BackendKind::kHip) {
    return absl::UnimplementedError(
        absl::StrCat("hip backend: key is for the ",
                     std::string(BackendName(key.backend)), " backend"));
  }
  if (key.arch_name() != info_.target) {
    return absl::UnimplementedError(
        absl::StrCat("hip backend: key target \"", std::string(key.arch_name()),
                     "\" is not this backend's \"", info_.target, "\""));
  }
  if (!IsCdnaProcessor(GfxProcessor(info_.target))) {
    return absl::UnimplementedError(absl::StrCat(
        "hip backend: tailor's HIP kernels are wave64 CDNA kernels (gfx908, "
        "gfx90a, gfx94x), target is ",
        info_.target));
  }
  if (::tailor::internal::FindFamily(BackendKind::kHip, key.op) == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "hip backend: no HIP kernel for ", GetOpInfo(key.op).name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HipBackend::Compile(const SpecKey& key,
                                                const KernelSource& source) {
  const std::string target =
      key.arch_name().empty() ? info_.target : std::string(key.arch_name());
  TAILOR_ASSIGN_OR_RETURN(HiprtcCompiler::Output output,
                          compiler_.Compile(source, target));
  return std::move(output.code_object);
}

absl::StatusOr<std::shared_ptr<Kernel>> HipBackend::Load(
    const SpecKey& key, const KernelSource& source, absl::string_view binary) {
  TAILOR_RETURN_IF_ERROR(RequireDevice("Load"));
  if (binary.empty()) {
    return absl::InvalidArgumentError(
        "binary: must be a code object, got 0 bytes");
  }
  hipModule_t module = nullptr;
  TAILOR_RETURN_IF_ERROR(HipErrorToStatus(
      runtime_->ModuleLoadData(&module, binary.data()),
      absl::StrCat("hipModuleLoadData(", key.ToString(), ")"), runtime_));
  hipFunction_t function = nullptr;
  absl::Status found = HipErrorToStatus(
      runtime_->ModuleGetFunction(&function, module, source.entry.c_str()),
      absl::StrCat("hipModuleGetFunction(\"", source.entry, "\")"), runtime_);
  if (!found.ok()) {
    (void)runtime_->ModuleUnload(module);  // the lookup error is the news
    return found;
  }
  return std::shared_ptr<Kernel>(
      std::make_shared<HipKernel>(*runtime_, module, function));
}

absl::Status HipBackend::Launch(const Kernel& kernel,
                                const LaunchConfig& config, const void* params,
                                size_t params_size) {
  TAILOR_RETURN_IF_ERROR(RequireDevice("Launch"));
  if (config.shared_bytes > static_cast<uint32_t>(info_.lds_bytes_per_block)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.shared_bytes: ", config.shared_bytes, " exceeds the ",
        info_.lds_bytes_per_block, " bytes of LDS a work-group may use"));
  }
  const auto& hip_kernel = static_cast<const HipKernel&>(kernel);
  // The kernel's one by-value argument; params_size is its size.
  (void)params_size;
  void* args[] = {const_cast<void*>(params)};
  return HipErrorToStatus(
      runtime_->ModuleLaunchKernel(
          hip_kernel.function(), config.grid.x, config.grid.y, config.grid.z,
          config.block.x, config.block.y, config.block.z, config.shared_bytes,
          static_cast<hipStream_t>(config.stream), args, nullptr),
      "hipModuleLaunchKernel", runtime_);
}

absl::StatusOr<std::shared_ptr<void>> HipBackend::AllocateDevice(size_t bytes) {
  TAILOR_RETURN_IF_ERROR(RequireDevice("AllocateDevice"));
  void* ptr = nullptr;
  TAILOR_RETURN_IF_ERROR(
      HipErrorToStatus(runtime_->Malloc(&ptr, bytes == 0 ? 1 : bytes),
                       absl::StrCat("hipMalloc(", bytes, " bytes)"), runtime_));
  const HipRuntimeApi* api = runtime_;
  // A free error cannot be reported from a deleter; it leaks at most.
  return std::shared_ptr<void>(ptr, [api](void* p) { (void)api->Free(p); });
}

absl::Status HipBackend::FillDevice(void* dst, uint8_t value, size_t bytes,
                                    void* stream) {
  if (bytes == 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(RequireDevice("FillDevice"));
  return HipErrorToStatus(
      runtime_->MemsetAsync(dst, value, bytes,
                            static_cast<hipStream_t>(stream)),
      "hipMemsetAsync", runtime_);
}

absl::Status HipBackend::CopyToHost(void* dst, const void* src, size_t bytes,
                                    void* stream) {
  TAILOR_RETURN_IF_ERROR(RequireDevice("CopyToHost"));
  auto hip_stream = static_cast<hipStream_t>(stream);
  if (bytes > 0) {
    TAILOR_RETURN_IF_ERROR(HipErrorToStatus(
        runtime_->MemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost,
                              hip_stream),
        "hipMemcpyAsync(device to host)", runtime_));
  }
  return HipErrorToStatus(runtime_->StreamSynchronize(hip_stream),
                          "hipStreamSynchronize", runtime_);
}

absl::Status HipBackend::CopyToDevice(void* dst, const void* src, size_t bytes,
                                      void* stream) {
  TAILOR_RETURN_IF_ERROR(RequireDevice("CopyToDevice"));
  auto hip_stream = static_cast<hipStream_t>(stream);
  if (bytes > 0) {
    TAILOR_RETURN_IF_ERROR(HipErrorToStatus(
        runtime_->MemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice,
                              hip_stream),
        "hipMemcpyAsync(host to device)", runtime_));
  }
  return HipErrorToStatus(runtime_->StreamSynchronize(hip_stream),
                          "hipStreamSynchronize", runtime_);
}

}  // namespace tailor::hip

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(
    const BackendOptions& options) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<tailor::hip::HipBackend> backend,
                          tailor::hip::HipBackend::Create(options));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tailor::internal
