// backends/cuda/cuda_backend.h — the CUDA backend: NVRTC -> cubin -> driver.
//
// CreateCudaBackend (core/backend_registry.h) loads the driver and NVRTC with
// dlopen, retains the device's primary context (the one the CUDA runtime and
// PyTorch use, so tailor's launches interoperate with torch's current
// stream), and derives the target from the compute capability: "sm_90a" for
// 9.0 (Hopper TMA, wgmma, tensormap.replace), "sm_<major><minor>" otherwise.
//
//   Compile : NvrtcCompiler (backends/cuda/nvrtc_compiler.h) for key.arch.
//   Load    : cuModuleLoadData + cuModuleGetFunction(source.entry) into a
//             CudaKernel, which owns the CUmodule and unloads it (with the
//             context current) when the last reference goes.
//   Launch  : cuLaunchKernelEx on config.stream (a CUstream; null = the
//             legacy default stream) with the params struct as the kernel's
//             one argument; CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION when
//             config.cluster is not {1,1,1};
//             CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION when
//             config.overlap_predecessor and the kernel was built for sm_90+
//             (the kernel's prologue then runs under its predecessor's tail;
//             the tuning key moe.pdl=off never overlaps); raises the kernel's
//             MAX_DYNAMIC_SHARED_SIZE_BYTES the first time a launch needs
//             more than 48 KiB. No allocation, no synchronization.
//
// Every driver call first makes the primary context current on the calling
// thread if it is not (one cuCtxGetCurrent when it already is).
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cuda,
//                           CreateCudaBackend({}));
//   TAILOR_ASSIGN_OR_RETURN(std::string cubin, cuda->Compile(key, source));
//   TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
//                           cuda->Load(key, source, cubin));
//   LaunchConfig config;
//   config.grid = {num_tiles};
//   config.block = {128};
//   config.stream = stream;  // e.g. torch's current CUstream
//   TAILOR_RETURN_IF_ERROR(
//       cuda->Launch(*kernel, config, &params, sizeof(params)));
#ifndef TAILOR_BACKENDS_CUDA_CUDA_BACKEND_H_
#define TAILOR_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/attention/ragged_kernels.h"
#include "backends/cuda/driver_api.h"
#include "backends/cuda/generic_kernels.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/tma/descriptor_pool.h"
#include "core/backend.h"
#include "core/backend_registry.h"

namespace tailor::cuda {

// The retained primary context of one device; released when the backend and
// every kernel it loaded are gone.
class DeviceContext {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceContext>> Retain(
      const DriverApi& api, int device_index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Makes the context current on the calling thread (no-op when it is).
  absl::Status MakeCurrent() const;

  const DriverApi& api() const { return api_; }
  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }

 private:
  DeviceContext(const DriverApi& api, CUdevice device, CUcontext context)
      : api_(api), device_(device), context_(context) {}
  const DriverApi& api_;
  CUdevice device_;
  CUcontext context_;
};

// A loaded module; unloaded (with its context current) when the last kernel
// of it goes.
class CudaModule {
 public:
  CudaModule(std::shared_ptr<const DeviceContext> context, CUmodule module)
      : context_(std::move(context)), module_(module) {}
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  CUmodule get() const { return module_; }

 private:
  std::shared_ptr<const DeviceContext> context_;
  CUmodule module_;
};

// A loaded CUDA kernel: one function of a module it shares (JIT kernels:
// the module is the kernel's alone; generic kernels share the image's).
class CudaKernel final : public tailor::internal::Kernel {
 public:
  CudaKernel(std::shared_ptr<const DeviceContext> context, CUmodule module,
             CUfunction function)
      : CudaKernel(context, std::make_shared<CudaModule>(context, module),
                   function) {}
  CudaKernel(std::shared_ptr<const DeviceContext> context,
             std::shared_ptr<const CudaModule> module, CUfunction function)
      : context_(std::move(context)),
        module_(std::move(module)),
        function_(function) {}

  CUfunction function() const { return function_; }

  // Raises the kernel's dynamic shared memory limit to `bytes` if it is lower
  // (thread-safe; lock-free once the limit is high enough).
  absl::Status EnsureDynamicSharedLimit(uint32_t bytes) const;
  // Lets the kernel launch in clusters of more than 8 CTAs (the portable
  // size), once (thread-safe).
  absl::Status AllowNonPortableClusters() const;
  // Whether the kernel's code was built for sm_90 or later (its PTX
  // version), where griddepcontrol exists: a kernel built from PTX for an
  // older target (the generic image's compute_80 PTX on a newer GPU) has no
  // wait for its predecessors and must not overlap them. Queried once.
  bool BuiltForSm90() const;

 private:
  std::shared_ptr<const DeviceContext> context_;
  std::shared_ptr<const CudaModule> module_;
  CUfunction function_;
  mutable std::atomic<uint32_t> dynamic_shared_limit_{48 *
                                                      1024};  // driver default
  mutable absl::Mutex limit_mu_;
  mutable std::atomic<bool> non_portable_clusters_{false};
  mutable std::atomic<int> ptx_version_{-1};  // -1: not queried yet
};

class CudaBackend final : public tailor::internal::Backend {
 public:
  // See the file comment; Unavailable without a driver, a device or NVRTC.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      const tailor::internal::BackendOptions& options);

  BackendKind kind() const override { return BackendKind::kCuda; }
  Device device() const override { return device_; }
  const std::string& arch() const override { return arch_; }
  const std::string& compiler_identity() const override {
    return compiler_identity_;
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

  void AddCounters(StatsSnapshot& snapshot) const override;
  tailor::internal::DecodeKernels* decode_kernels() override {
    return &decode_kernels_;
  }
  tailor::internal::RaggedKernels* ragged_kernels() override {
    return &ragged_kernels_;
  }
  // Loads the built-in generic kernels (or queues their compiles).
  void PrepareBackgroundJit(tailor::internal::Engine& engine) override {
    generic_kernels_.Prepare(engine);
  }

  // Device memory: cuMemAlloc (freed with the context current), async
  // memset and copy-back on the caller's stream.
  absl::StatusOr<std::shared_ptr<void>> AllocateDevice(size_t bytes) override;
  absl::Status FillDevice(void* dst, uint8_t value, size_t bytes,
                          void* stream) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes,
                          void* stream) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes,
                            void* stream) override;

  tailor::internal::MoeKernels* moe_kernels() override { return &moe_kernels_; }
  // How many clusters of each of `sizes` CTAs (1D) of `threads` threads
  // and `shared_bytes` of dynamic shared memory the device runs at once:
  // the occupancy of a kernel that does nothing, compiled for the purpose
  // (one NVRTC compile), so callers query once. sm_90 or newer.
  absl::StatusOr<std::vector<int>> MaxActiveClusters(
      absl::Span<const int> sizes, int threads, int shared_bytes);

  // TMA descriptors of this device, encoded once per spec (checked first).
  DescriptorPool& descriptor_pool() { return descriptor_pool_; }
  const DeviceContext& device_context() const { return *context_; }
  std::shared_ptr<const DeviceContext> shared_device_context() const {
    return context_;
  }
  // The generic kernels of background JIT (generic_kernels.h).
  CudaGenericKernels& generic_kernels() { return generic_kernels_; }
  const NvrtcCompiler& compiler() const { return compiler_; }
  int compute_capability() const { return compute_capability_; }  // 90 for 9.0

 private:
  CudaBackend(std::shared_ptr<DeviceContext> context, int device_index,
              NvrtcCompiler compiler, int compute_capability,
              int multiprocessors, int64_t l2_bytes,
              const tailor::internal::Tuning& tuning);

  std::shared_ptr<DeviceContext> context_;
  Device device_;
  NvrtcCompiler compiler_;
  int compute_capability_;
  std::string arch_;
  std::string compiler_identity_;
  tailor::internal::Hash128 headers_hash_;
  DescriptorPool descriptor_pool_;
  CudaGenericKernels generic_kernels_{*this};
  CudaMoeKernels moe_kernels_;
  CudaDecodeKernels decode_kernels_;
  CudaRaggedKernels ragged_kernels_;
  bool overlap_enabled_;  // false: moe.pdl=off
};

// "sm_90a" for 90 (Hopper's arch-specific target), "sm_<cc>" otherwise.
std::string ArchForComputeCapability(int major, int minor);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_CUDA_BACKEND_H_
