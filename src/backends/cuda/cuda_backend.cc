#include "backends/cuda/cuda_backend.h"

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backends/cuda/tma/tensor_map_driver_encoder.h"
#include "core/embedded_files.h"
#include "core/env.h"
#include "core/family_registry.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

using tailor::internal::Backend;
using tailor::internal::BackendOptions;
using tailor::internal::EnvIs;
using tailor::internal::Kernel;
using tailor::internal::KernelSource;
using tailor::internal::LaunchConfig;
using tailor::internal::SpecKey;

constexpr uint32_t kMaxThreadsPerBlock = 1024;
// Larger clusters need CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
constexpr uint32_t kMaxPortableClusterCtas = 8;

absl::Status Unavailable(const absl::Status& status) {
  return absl::UnavailableError(
      absl::StrCat("CUDA backend unavailable: ", status.message()));
}

absl::StatusOr<int> DeviceAttribute(const DriverApi& api,
                                    CUdevice_attribute attribute,
                                    CUdevice device, absl::string_view name) {
  int value = 0;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuDeviceGetAttribute(&value, attribute, device), name));
  return value;
}

absl::Status ValidateLaunchConfig(const LaunchConfig& config) {
  const tailor::internal::Dim3& b = config.block;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.count() > kMaxThreadsPerBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.block: every dim must be >= 1 and x*y*z <= ",
        kMaxThreadsPerBlock, ", got {", b.x, ", ", b.y, ", ", b.z, "}"));
  }
  const tailor::internal::Dim3& c = config.cluster;
  if (c.x == 0 || c.y == 0 || c.z == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.cluster: every dim must be >= 1 ({1,1,1} = no cluster), got {",
        c.x, ", ", c.y, ", ", c.z, "}"));
  }
  return absl::OkStatus();
}

// TAILOR_NVRTC_FLAGS: extra NVRTC flags, separated by blanks (a developer
// knob, e.g. "-DNAME" for an experiment or "-Xptxas -v"). They join the
// compiler identity, so kernels built with and without them never share a
// disk-cache entry.
std::vector<std::string> ExtraNvrtcFlagsFromEnv() {
  const char* env = std::getenv("TAILOR_NVRTC_FLAGS");
  if (env == nullptr) return {};
  return absl::StrSplit(env, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

}  // namespace

std::string ArchForComputeCapability(int major, int minor) {
  std::string arch = absl::StrCat("sm_", major, minor);
  if (major == 9 && minor == 0) arch += "a";
  return arch;
}

// ---- DeviceContext ----------------------------------------------------------

absl::StatusOr<std::shared_ptr<DeviceContext>> DeviceContext::Retain(
    const DriverApi& api, int device_index) {
  int count = 0;
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(api.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) {
    return absl::UnavailableError("no CUDA device on this machine");
  }
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_index: must be in [0, ", count,
                     ") (CUDA devices here), got ", device_index));
  }
  CUdevice device = 0;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuDeviceGet(&device, device_index), "cuDeviceGet"));
  CUcontext context = nullptr;
  TAILOR_RETURN_IF_ERROR(
      CudaResultToStatus(api.cuDevicePrimaryCtxRetain(&context, device),
                         "cuDevicePrimaryCtxRetain"));
  std::shared_ptr<DeviceContext> holder(
      new DeviceContext(api, device, context));
  TAILOR_RETURN_IF_ERROR(holder->MakeCurrent());
  return holder;
}

DeviceContext::~DeviceContext() { api_.cuDevicePrimaryCtxRelease(device_); }

absl::Status DeviceContext::MakeCurrent() const {
  CUcontext current = nullptr;
  if (api_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_) {
    return absl::OkStatus();
  }
  return CudaResultToStatus(api_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

// ---- CudaKernel -------------------------------------------------------------

CudaModule::~CudaModule() {
  // Unloading needs the module's context current; errors cannot be reported
  // from a destructor and leave at most a leaked module.
  if (context_->MakeCurrent().ok()) context_->api().cuModuleUnload(module_);
}

absl::Status CudaKernel::EnsureDynamicSharedLimit(uint32_t bytes) const {
  if (bytes <= dynamic_shared_limit_.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  absl::MutexLock lock(&limit_mu_);
  if (bytes <= dynamic_shared_limit_.load(std::memory_order_relaxed)) {
    return absl::OkStatus();
  }
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      context_->api().cuFuncSetAttribute(
          function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(bytes)),
      absl::StrCat("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ", bytes,
                   ")")));
  dynamic_shared_limit_.store(bytes, std::memory_order_release);
  return absl::OkStatus();
}

bool CudaKernel::BuiltForSm90() const {
  int version = ptx_version_.load(std::memory_order_acquire);
  if (version < 0) {
    // A failed query reads as "not built for sm_90": never overlap then.
    version = 0;
    context_->api().cuFuncGetAttribute(&version, CU_FUNC_ATTRIBUTE_PTX_VERSION,
                                       function_);
    ptx_version_.store(version, std::memory_order_release);
  }
  return version >= 90;
}

absl::Status CudaKernel::AllowNonPortableClusters() const {
  if (non_portable_clusters_.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      context_->api().cuFuncSetAttribute(
          function_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
      "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)"));
  non_portable_clusters_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

// ---- CudaBackend ------------------------------------------------------------

CudaBackend::CudaBackend(std::shared_ptr<DeviceContext> context,
                         int device_index, NvrtcCompiler compiler,
                         int compute_capability, int multiprocessors,
                         int64_t l2_bytes,
                         const tailor::internal::Tuning& tuning)
    : context_(std::move(context)),
      device_{.type = DeviceType::kCuda, .index = device_index},
      compiler_(std::move(compiler)),
      compute_capability_(compute_capability),
      arch_(ArchForComputeCapability(compute_capability / 10,
                                     compute_capability % 10)),
      compiler_identity_(absl::StrCat(compiler_.identity(), " driver ",
                                      context_->api().driver_version)),
      headers_hash_(tailor::internal::HashEmbeddedFiles(
          {"runtime/cuda/", "templates/cuda/", "templates/common/"})),
      descriptor_pool_(compute_capability,
                       DriverTensorMapEncoder(&context_->api())),
      moe_kernels_(*this, multiprocessors, l2_bytes, arch_ == "sm_90a",
                   descriptor_pool_, generic_kernels_, MoeTuningFrom(tuning)),
      decode_kernels_(*this, DecodeTuningFrom(tuning)),
      ragged_kernels_(*this, RaggedCudaEnabled(tuning),
                      RaggedDecodeRowsOnDecodeKernel(tuning),
                      RaggedPortableForced(tuning)),
      // moe.pdl=off: no launch overlaps its predecessor (comparisons, and a
      // way out should a driver mishandle programmatic dependent launch).
      // Only MoE launches ask to overlap.
      overlap_enabled_(MoeTuningFrom(tuning).pdl) {}

void CudaBackend::AddCounters(StatsSnapshot& snapshot) const {
  const DescriptorPoolCounters pool = descriptor_pool_.counters();
  std::map<std::string, uint64_t>& out = snapshot.backend_counters;
  out["cuda.descriptor_encodes"] += pool.encodes;
  out["cuda.descriptor_reuses"] += pool.reuses;
  out["cuda.descriptor_evictions"] += pool.evictions;
  out["cuda.descriptor_rejections"] += pool.rejections;
  out["cuda.descriptor_encode_failures"] += pool.encode_failures;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const BackendOptions& options) {
  absl::StatusOr<const DriverApi*> api = LoadDriverApi();
  if (!api.ok()) return Unavailable(api.status());
  absl::StatusOr<std::shared_ptr<DeviceContext>> context =
      DeviceContext::Retain(**api, options.device_index);
  if (!context.ok()) {
    if (context.status().code() == absl::StatusCode::kInvalidArgument) {
      return context.status();
    }
    return Unavailable(context.status());
  }
  const CUdevice device = (*context)->device();
  TAILOR_ASSIGN_OR_RETURN(
      int major,
      DeviceAttribute(**api, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                      device, "compute capability major"));
  TAILOR_ASSIGN_OR_RETURN(
      int minor,
      DeviceAttribute(**api, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                      device, "compute capability minor"));
  TAILOR_ASSIGN_OR_RETURN(
      int multiprocessors,
      DeviceAttribute(**api, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device,
                      "multiprocessor count"));
  TAILOR_ASSIGN_OR_RETURN(
      int l2_bytes, DeviceAttribute(**api, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                                    device, "L2 cache size"));
  // Line tables let compute-sanitizer and ncu name source lines.
  absl::StatusOr<NvrtcCompiler> compiler =
      NvrtcCompiler::Create({.line_info = EnvIs("TAILOR_CUDA_LINEINFO", "1"),
                             .extra_flags = ExtraNvrtcFlagsFromEnv()});
  if (!compiler.ok()) return Unavailable(compiler.status());
  return std::unique_ptr<CudaBackend>(new CudaBackend(
      *std::move(context), options.device_index, *std::move(compiler),
      major * 10 + minor, multiprocessors, l2_bytes, options.tuning));
}

absl::Status CudaBackend::Supports(const SpecKey& key) const {
  if (key.backend != BackendKind::kCuda) {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: key is for the ",
                     std::string(BackendName(key.backend)), " backend"));
  }
  if (key.arch_name() != arch_) {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: key arch \"", std::string(key.arch_name()),
                     "\" is not this device's \"", arch_, "\""));
  }
  // What the key's family needs (core/family_registry.h).
  const tailor::internal::FamilyDescriptor* family =
      tailor::internal::FindFamily(BackendKind::kCuda, key.op);
  const std::string op_name(GetOpInfo(key.op).name);
  if (family == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: no CUDA kernel for ", op_name));
  }
  const int need = family->min_compute_capability;
  if (compute_capability_ < need) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda backend: ", op_name, " needs compute capability >= ", need / 10,
        ".", need % 10, ", device is ", arch_));
  }
  if (family->arch_specific && arch_.back() != 'a') {
    return absl::UnimplementedError(
        absl::StrCat("cuda backend: ", op_name,
                     " needs an arch-specific target such as "
                     "sm_90a, device is ",
                     arch_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<void>> CudaBackend::AllocateDevice(
    size_t bytes) {
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  CUdeviceptr ptr = 0;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      context_->api().cuMemAlloc(&ptr, bytes == 0 ? 1 : bytes),
      absl::StrCat("cuMemAlloc(", bytes, " bytes)")));
  // The deleter keeps the context alive and current for cuMemFree; an error
  // there cannot be reported and leaves at most a leak.
  std::shared_ptr<const DeviceContext> context = context_;
  return std::shared_ptr<void>(
      reinterpret_cast<void*>(ptr), [context](void* p) {
        if (context->MakeCurrent().ok()) {
          context->api().cuMemFree(reinterpret_cast<CUdeviceptr>(p));
        }
      });
}

absl::Status CudaBackend::FillDevice(void* dst, uint8_t value, size_t bytes,
                                     void* stream) {
  if (bytes == 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  return CudaResultToStatus(
      context_->api().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), value,
                                      bytes, static_cast<CUstream>(stream)),
      "cuMemsetD8Async");
}

absl::Status CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes,
                                     void* stream) {
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  const DriverApi& api = context_->api();
  if (bytes > 0) {
    TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
        api.cuMemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), bytes,
                              static_cast<CUstream>(stream)),
        "cuMemcpyDtoHAsync"));
  }
  return CudaResultToStatus(
      api.cuStreamSynchronize(static_cast<CUstream>(stream)),
      "cuStreamSynchronize");
}

absl::Status CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes,
                                       void* stream) {
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  const DriverApi& api = context_->api();
  if (bytes > 0) {
    TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
        api.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes,
                              static_cast<CUstream>(stream)),
        "cuMemcpyHtoDAsync"));
  }
  return CudaResultToStatus(
      api.cuStreamSynchronize(static_cast<CUstream>(stream)),
      "cuStreamSynchronize");
}

absl::StatusOr<std::string> CudaBackend::Compile(const SpecKey& key,
                                                 const KernelSource& source) {
  const std::string arch =
      key.arch_name().empty() ? arch_ : std::string(key.arch_name());
  TAILOR_ASSIGN_OR_RETURN(NvrtcCompiler::Output output,
                          compiler_.Compile(source, arch));
  return std::move(output.cubin);
}

absl::StatusOr<std::shared_ptr<Kernel>> CudaBackend::Load(
    const SpecKey& key, const KernelSource& source, absl::string_view binary) {
  if (binary.empty()) {
    return absl::InvalidArgumentError("binary: must be a cubin, got 0 bytes");
  }
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  const DriverApi& api = context_->api();
  CUmodule module = nullptr;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuModuleLoadData(&module, binary.data()),
      absl::StrCat("cuModuleLoadData(", key.ToString(), ")")));
  CUfunction function = nullptr;
  absl::Status found = CudaResultToStatus(
      api.cuModuleGetFunction(&function, module, source.entry.c_str()),
      absl::StrCat("cuModuleGetFunction(\"", source.entry, "\")"));
  if (!found.ok()) {
    api.cuModuleUnload(module);
    return found;
  }
  return std::make_shared<CudaKernel>(context_, module, function);
}

absl::StatusOr<std::vector<int>> CudaBackend::MaxActiveClusters(
    absl::Span<const int> sizes, int threads, int shared_bytes) {
  if (compute_capability_ < 90) {
    return absl::FailedPreconditionError(
        "thread-block clusters need sm_90 or newer");
  }
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  const KernelSource probe = {
      .code = "extern \"C\" __global__ void tailor_cluster_probe() {}\n",
      .entry = "tailor_cluster_probe"};
  const SpecKey key;  // this backend's arch
  TAILOR_ASSIGN_OR_RETURN(const std::string cubin, Compile(key, probe));
  TAILOR_ASSIGN_OR_RETURN(const std::shared_ptr<Kernel> kernel,
                          Load(key, probe, cubin));
  const auto& cuda = static_cast<const CudaKernel&>(*kernel);
  TAILOR_RETURN_IF_ERROR(cuda.EnsureDynamicSharedLimit(shared_bytes));
  TAILOR_RETURN_IF_ERROR(cuda.AllowNonPortableClusters());
  std::vector<int> counts;
  for (const int size : sizes) {
    CUlaunchAttribute cluster = {};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = size;
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    CUlaunchConfig config = {};
    config.gridDimX = size;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = threads;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = shared_bytes;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int count = 0;
    TAILOR_RETURN_IF_ERROR(
        CudaResultToStatus(context_->api().cuOccupancyMaxActiveClusters(
                               &count, cuda.function(), &config),
                           "cuOccupancyMaxActiveClusters"));
    counts.push_back(count);
  }
  return counts;
}

absl::Status CudaBackend::Launch(const Kernel& kernel,
                                 const LaunchConfig& config, const void* params,
                                 size_t params_size) {
  const auto* cuda_kernel = dynamic_cast<const CudaKernel*>(&kernel);
  if (cuda_kernel == nullptr) {
    return absl::InvalidArgumentError(
        "kernel: was not loaded by the cuda backend");
  }
  if (params == nullptr || params_size == 0) {
    return absl::InvalidArgumentError(
        "params: must point at the kernel's params struct (one argument, size "
        ">= 1)");
  }
  TAILOR_RETURN_IF_ERROR(ValidateLaunchConfig(config));
  // Empty ragged work (no tiles) launches nothing.
  if (config.grid.count() == 0) return absl::OkStatus();
  TAILOR_RETURN_IF_ERROR(context_->MakeCurrent());
  TAILOR_RETURN_IF_ERROR(
      cuda_kernel->EnsureDynamicSharedLimit(config.shared_bytes));
  if (config.cluster.count() > kMaxPortableClusterCtas) {
    TAILOR_RETURN_IF_ERROR(cuda_kernel->AllowNonPortableClusters());
  }

  CUlaunchAttribute attributes[2] = {};  // a cluster shape, an overlap
  CUlaunchConfig launch = {};
  launch.gridDimX = config.grid.x;
  launch.gridDimY = config.grid.y;
  launch.gridDimZ = config.grid.z;
  launch.blockDimX = config.block.x;
  launch.blockDimY = config.block.y;
  launch.blockDimZ = config.block.z;
  launch.sharedMemBytes = config.shared_bytes;
  launch.hStream = static_cast<CUstream>(config.stream);
  launch.attrs = attributes;
  if (config.cluster.count() != 1) {
    CUlaunchAttribute& cluster = attributes[launch.numAttrs++];
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = config.cluster.x;
    cluster.value.clusterDim.y = config.cluster.y;
    cluster.value.clusterDim.z = config.cluster.z;
  }
  if (config.overlap_predecessor && overlap_enabled_ &&
      cuda_kernel->BuiltForSm90()) {
    CUlaunchAttribute& serialization = attributes[launch.numAttrs++];
    serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    serialization.value.programmaticStreamSerializationAllowed = 1;
  }
  // The kernel ABI (core/backend.h): one params struct, passed by value; the
  // driver copies the kernel's parameter size from `params`.
  void* arguments[] = {const_cast<void*>(params)};
  return CudaResultToStatus(
      context_->api().cuLaunchKernelEx(&launch, cuda_kernel->function(),
                                       arguments, nullptr),
      "cuLaunchKernelEx");
}

}  // namespace tailor::cuda

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions& options) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend,
                          cuda::CudaBackend::Create(options));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tailor::internal
