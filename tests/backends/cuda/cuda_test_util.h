// tests/backends/cuda/cuda_test_util.h — helpers for GPU tests and GPU
// benches: a CUDA runtime (Unavailable without a device, so callers can skip
// cleanly), device buffers, streams, tensor-map encoding. No GoogleTest
// dependency (the benches are plain programs).
//
// Example:
//   absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
//   CudaTestRuntime::Create(); if (!env.ok()) { /* Unavailable: skip */ }
//   DeviceBuffer x((*env)->api(), 1024);
//   TAILOR_RETURN_IF_ERROR(x.Fill(0));
#ifndef TAILOR_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_
#define TAILOR_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/driver_api.h"
#include "core/engine.h"
#include "runtime/cuda/tensor_map.h"
#include "tailor/runtime.h"

namespace tailor::cuda::testing {

// A Runtime on the CUDA backend (memory cache only) and its backend.
class CudaTestRuntime {
 public:
  // Unavailable (the caller skips) when this machine has no CUDA driver or
  // device; any other error is a failure.
  static absl::StatusOr<std::unique_ptr<CudaTestRuntime>> Create() {
    return Create(DefaultOptions());
  }
  // The same with `options` (backend kCuda is forced).
  static absl::StatusOr<std::unique_ptr<CudaTestRuntime>> Create(
      Runtime::Options options) {
    options.backend = BackendKind::kCuda;
    absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
    if (!runtime.ok()) return runtime.status();
    auto* backend = dynamic_cast<CudaBackend*>(
        &tailor::internal::EngineOf(**runtime).backend());
    if (backend == nullptr) {
      return absl::InternalError("kCuda runtime without a CudaBackend");
    }
    return std::unique_ptr<CudaTestRuntime>(
        new CudaTestRuntime(*std::move(runtime), backend));
  }

  // kCuda, memory cache only.
  static Runtime::Options DefaultOptions() {
    Runtime::Options options;
    options.backend = BackendKind::kCuda;
    options.disable_disk_cache = true;
    return options;
  }

  // `options` in background JIT mode on two compile threads; with
  // `disable_jit` nothing compiles (the generic kernels only, and every
  // queued resolve fails: logging off).
  static Runtime::Options BackgroundJit(Runtime::Options options,
                                        bool disable_jit) {
    options.jit_mode = Runtime::JitMode::kBackground;
    options.disable_jit = disable_jit;
    options.compile_threads = 2;
    options.log_level = disable_jit ? "off" : "error";
    return options;
  }

  Runtime& runtime() { return *runtime_; }
  tailor::internal::Engine& engine() {
    return tailor::internal::EngineOf(*runtime_);
  }
  CudaBackend& backend() { return *backend_; }
  const DriverApi& api() { return backend_->device_context().api(); }

 private:
  CudaTestRuntime(std::unique_ptr<Runtime> runtime, CudaBackend* backend)
      : runtime_(std::move(runtime)), backend_(backend) {}
  std::unique_ptr<Runtime> runtime_;
  CudaBackend* backend_;
};

// Device memory for a test; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(const DriverApi& api, size_t bytes) : api_(api), bytes_(bytes) {
    // cuMemAlloc rejects 0 bytes; keep one so every buffer has an address.
    if (api_.cuMemAlloc(&ptr_, bytes == 0 ? 1 : bytes) != CUDA_SUCCESS) {
      ptr_ = 0;
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != 0) api_.cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  bool ok() const { return ptr_ != 0; }
  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

  absl::Status Upload(const void* host, size_t bytes) const {
    if (bytes == 0) return absl::OkStatus();
    return CudaResultToStatus(api_.cuMemcpyHtoD(ptr_, host, bytes),
                              "cuMemcpyHtoD");
  }
  template <typename T>
  absl::Status Upload(const std::vector<T>& host) const {
    return Upload(host.data(), host.size() * sizeof(T));
  }
  absl::Status Fill(uint8_t byte) const {
    return CudaResultToStatus(
        api_.cuMemsetD8(ptr_, byte, bytes_ == 0 ? 1 : bytes_), "cuMemsetD8");
  }
  absl::StatusOr<std::vector<uint8_t>> Download() const {
    std::vector<uint8_t> host(bytes_);
    if (bytes_ == 0) return host;
    absl::Status status = CudaResultToStatus(
        api_.cuMemcpyDtoH(host.data(), ptr_, bytes_), "cuMemcpyDtoH");
    if (!status.ok()) return status;
    return host;
  }

 private:
  const DriverApi& api_;
  size_t bytes_;
  CUdeviceptr ptr_ = 0;
};

// A stream for a test; destroyed on destruction. A *blocking* stream
// (CU_STREAM_DEFAULT): DeviceBuffer's cuMemcpyHtoD / cuMemsetD8 run on the
// legacy default stream, and only a blocking stream orders its launches after
// them (a non-blocking one would race the uploads and poison fills).
class TestStream {
 public:
  explicit TestStream(const DriverApi& api) : api_(api) {
    if (api_.cuStreamCreate(&stream_, CU_STREAM_DEFAULT) != CUDA_SUCCESS) {
      stream_ = nullptr;
    }
  }
  ~TestStream() {
    if (stream_ != nullptr) api_.cuStreamDestroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  bool ok() const { return stream_ != nullptr; }
  CUstream get() const { return stream_; }
  absl::Status Synchronize() const {
    return CudaResultToStatus(api_.cuStreamSynchronize(stream_),
                              "cuStreamSynchronize");
  }

 private:
  const DriverApi& api_;
  CUstream stream_ = nullptr;
};

// A LaunchConfig from its parts (LaunchConfig's members have no default
// member initializers, so designated initializers trip
// -Wmissing-field-initializers).
inline tailor::internal::LaunchConfig MakeLaunchConfig(
    tailor::internal::Dim3 grid, tailor::internal::Dim3 block,
    uint32_t shared_bytes = 0, CUstream stream = nullptr,
    tailor::internal::Dim3 cluster = {}) {
  tailor::internal::LaunchConfig config;
  config.grid = grid;
  config.block = block;
  config.cluster = cluster;
  config.shared_bytes = shared_bytes;
  config.stream = stream;
  return config;
}

inline CUtensorMapDataType TensorMapDataType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kF16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kF32:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kI32:
      return CU_TENSOR_MAP_DATA_TYPE_INT32;
    default:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
}

// Everything cuTensorMapEncodeTiled takes, innermost dimension first.
struct TiledMapSpec {
  DType dtype = DType::kF32;
  int rank = 2;
  const void* address = nullptr;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};  // bytes, of dims 1..rank-1
  uint32_t box[5] = {};
};

// Encodes `spec` (no swizzle, no interleave, zero fill) into a TensorMap.
inline absl::StatusOr<TensorMap> EncodeTiled(const DriverApi& api,
                                             const TiledMapSpec& spec) {
  CUtensorMap encoded;
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  absl::Status status = CudaResultToStatus(
      api.cuTensorMapEncodeTiled(
          &encoded, TensorMapDataType(spec.dtype), spec.rank,
          const_cast<void*>(spec.address), spec.dims, spec.strides, spec.box,
          element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
          CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
      "cuTensorMapEncodeTiled");
  if (!status.ok()) return status;
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap),
                "TensorMap mirrors CUtensorMap");
  TensorMap map;
  std::memcpy(&map, &encoded, sizeof(map));
  return map;
}

}  // namespace tailor::cuda::testing

// For GoogleTest files (the macros expand to GTEST_SKIP, FAIL and ASSERT; the
// benches never use them): declares `std::unique_ptr<CudaTestRuntime> name`
// from `created` (an absl::StatusOr of one), with its context current, or
// skips the test when the machine has no CUDA and fails it on any other
// error. TAILOR_CUDA_RUNTIME_OR_SKIP creates it with the default options.
#define TAILOR_CUDA_RUNTIME_FROM_OR_SKIP(name, created)                  \
  std::unique_ptr<::tailor::cuda::testing::CudaTestRuntime> name;        \
  do {                                                                   \
    auto name##_or = (created);                                          \
    if (!name##_or.ok()) {                                               \
      if (name##_or.status().code() == absl::StatusCode::kUnavailable) { \
        GTEST_SKIP() << "no CUDA device here: "                          \
                     << name##_or.status().message();                    \
      }                                                                  \
      FAIL() << name##_or.status();                                      \
    }                                                                    \
    name = *std::move(name##_or);                                        \
    ASSERT_TRUE(name->backend().device_context().MakeCurrent().ok());    \
  } while (false)
#define TAILOR_CUDA_RUNTIME_OR_SKIP(name) \
  TAILOR_CUDA_RUNTIME_FROM_OR_SKIP(       \
      name, ::tailor::cuda::testing::CudaTestRuntime::Create())

#endif  // TAILOR_TESTS_BACKENDS_CUDA_CUDA_TEST_UTIL_H_
