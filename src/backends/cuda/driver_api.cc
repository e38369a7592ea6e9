// backends/cuda/driver_api.cc — dlopen libcuda, resolve entry points, and
// the single CUresult -> absl::Status conversion.
#include "backends/cuda/driver_api.h"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

// ABI versions requested from cuGetProcAddress. A newer driver may export a
// newer variant of an entry point with another signature (CUDA 13.0's
// cuCtxSynchronize takes a CUcontext; the 12.0 one takes nothing), so each
// entry point is requested at the version whose signature cuda.h declares.
constexpr int kCuda12_0 = 12000;
constexpr int kCuda12_8 = 12080;  // cuEventElapsedTime_v2

// Library names tried in order: the versioned soname the driver installs,
// then the development symlink.
constexpr const char* kLibcudaNames[] = {"libcuda.so.1", "libcuda.so"};

struct KnownResult {
  CUresult result;
  const char* name;
  absl::StatusCode code;
};

// The codes with a specific mapping (see driver_api.h), with their names so
// that messages stay readable without a driver.
constexpr KnownResult kKnownResults[] = {
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE",
     absl::StatusCode::kInvalidArgument},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     absl::StatusCode::kInvalidArgument},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE",
     absl::StatusCode::kInvalidArgument},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX",
     absl::StatusCode::kInvalidArgument},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     absl::StatusCode::kInvalidArgument},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY",
     absl::StatusCode::kResourceExhausted},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     absl::StatusCode::kResourceExhausted},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
     "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     absl::StatusCode::kUnavailable},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", absl::StatusCode::kNotFound},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     absl::StatusCode::kFailedPrecondition},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     absl::StatusCode::kFailedPrecondition},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     absl::StatusCode::kFailedPrecondition},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     absl::StatusCode::kUnimplemented},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT",
     absl::StatusCode::kDeadlineExceeded},
};

const KnownResult* FindKnownResult(int result) {
  for (const KnownResult& known : kKnownResults) {
    if (static_cast<int>(known.result) == result) return &known;
  }
  return nullptr;
}

// The conversion behind CudaResultToStatus; `api` (may be null or partly
// resolved) supplies the driver's own names and descriptions.
absl::Status ResultToStatus(const DriverApi* api, int result,
                            absl::string_view what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const KnownResult* known = FindKnownResult(result);
  const char* name = nullptr;
  const char* description = nullptr;
  if (api != nullptr && api->cuGetErrorName != nullptr &&
      // The driver's own names may know codes that CUresult does not (cast
      // inline: never stored in, or loaded from, a CUresult variable).
      api->cuGetErrorName(static_cast<CUresult>(result), &name) !=
          CUDA_SUCCESS) {
    name = nullptr;
  }
  if (api != nullptr && api->cuGetErrorString != nullptr &&
      api->cuGetErrorString(static_cast<CUresult>(result), &description) !=
          CUDA_SUCCESS) {
    description = nullptr;
  }
  if (name == nullptr && known != nullptr) name = known->name;
  std::string message = name != nullptr
                            ? absl::StrCat(what, ": ", name, " (", result, ")")
                            : absl::StrCat(what, ": CUresult ", result);
  if (description != nullptr) absl::StrAppend(&message, ": ", description);
  const absl::StatusCode code =
      known != nullptr ? known->code : absl::StatusCode::kInternal;
  return absl::Status(code, message);
}

std::string VersionText(int version) {
  return absl::StrCat(version / 1000, ".", version % 1000 / 10);
}

// Set once LoadDriverApi succeeds; lets CudaResultToStatus use the driver's
// names without ever triggering a load.
std::atomic<const DriverApi*> g_loaded_api{nullptr};
std::atomic<int> g_load_attempts{0};

using GetProcAddressFn = decltype(&::cuGetProcAddress);  // the _v2 ABI

// Resolves entry points through cuGetProcAddress at explicit ABI versions.
class EntryPointResolver {
 public:
  EntryPointResolver(GetProcAddressFn get_proc_address, const DriverApi* api)
      : get_proc_address_(get_proc_address), api_(api) {}

  template <typename Fn>
  absl::Status Resolve(const char* symbol, int version, Fn* slot) const {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult query = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult result = get_proc_address_(
        symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &query);
    if (result == CUDA_SUCCESS && query == CU_GET_PROC_ADDRESS_SUCCESS &&
        fn != nullptr) {
      *slot = reinterpret_cast<Fn>(fn);
      return absl::OkStatus();
    }
    if (result == CUDA_SUCCESS || result == CUDA_ERROR_NOT_FOUND) {
      return absl::UnavailableError(absl::StrCat(
          "libcuda (driver version ", api_->driver_version, "): entry point ",
          symbol, " for CUDA ", VersionText(version),
          query == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
              ? " needs a newer driver"
              : " not found"));
    }
    const absl::Status status = ResultToStatus(
        api_, result, absl::StrCat("cuGetProcAddress(", symbol, ")"));
    return absl::UnavailableError(status.message());
  }

 private:
  GetProcAddressFn get_proc_address_;
  const DriverApi* api_;
};

// `#name` is the entry point's base name ("cuMemAlloc"), which is what
// cuGetProcAddress wants; `api.name` follows cuda.h's #define (cuMemAlloc_v2)
// like the member declaration does.
#define TAILOR_RESOLVE(name, version) \
  TAILOR_RETURN_IF_ERROR(resolver.Resolve(#name, version, &api.name))

absl::Status ResolveErrorsAndVersion(const EntryPointResolver& resolver,
                                     DriverApi& api) {
  // Error names first: every later failure message uses them.
  TAILOR_RESOLVE(cuGetErrorName, kCuda12_0);
  TAILOR_RESOLVE(cuGetErrorString, kCuda12_0);
  TAILOR_RESOLVE(cuDriverGetVersion, kCuda12_0);
  int version = 0;
  const CUresult result = api.cuDriverGetVersion(&version);
  if (result != CUDA_SUCCESS) {
    return absl::UnavailableError(
        ResultToStatus(&api, result, "cuDriverGetVersion").message());
  }
  api.driver_version = version;
  if (version < kMinDriverVersion) {
    return absl::UnavailableError(absl::StrCat(
        "libcuda: the NVIDIA driver supports CUDA ", VersionText(version),
        "; tailor needs CUDA ", VersionText(kMinDriverVersion), " or newer"));
  }
  return absl::OkStatus();
}

absl::Status ResolveEntryPoints(const EntryPointResolver& resolver,
                                DriverApi& api) {
  TAILOR_RESOLVE(cuInit, kCuda12_0);
  TAILOR_RESOLVE(cuDeviceGet, kCuda12_0);
  TAILOR_RESOLVE(cuDeviceGetCount, kCuda12_0);
  TAILOR_RESOLVE(cuDeviceGetAttribute, kCuda12_0);
  TAILOR_RESOLVE(cuDeviceGetName, kCuda12_0);
  TAILOR_RESOLVE(cuDevicePrimaryCtxRetain, kCuda12_0);
  TAILOR_RESOLVE(cuDevicePrimaryCtxRelease, kCuda12_0);
  TAILOR_RESOLVE(cuCtxSetCurrent, kCuda12_0);
  TAILOR_RESOLVE(cuCtxGetCurrent, kCuda12_0);
  TAILOR_RESOLVE(cuCtxSynchronize, kCuda12_0);  // not the 13.0 (ctx) variant
  TAILOR_RESOLVE(cuModuleLoadData, kCuda12_0);
  TAILOR_RESOLVE(cuModuleUnload, kCuda12_0);
  TAILOR_RESOLVE(cuModuleGetFunction, kCuda12_0);
  TAILOR_RESOLVE(cuFuncSetAttribute, kCuda12_0);
  TAILOR_RESOLVE(cuFuncGetAttribute, kCuda12_0);
  TAILOR_RESOLVE(cuLaunchKernelEx, kCuda12_0);
  TAILOR_RESOLVE(cuLaunchKernel, kCuda12_0);
  TAILOR_RESOLVE(cuOccupancyMaxActiveClusters, kCuda12_0);
  TAILOR_RESOLVE(cuMemAlloc, kCuda12_0);
  TAILOR_RESOLVE(cuMemFree, kCuda12_0);
  TAILOR_RESOLVE(cuMemcpyHtoD, kCuda12_0);
  TAILOR_RESOLVE(cuMemcpyDtoH, kCuda12_0);
  TAILOR_RESOLVE(cuMemsetD8, kCuda12_0);
  TAILOR_RESOLVE(cuMemsetD8Async, kCuda12_0);
  TAILOR_RESOLVE(cuMemcpyHtoDAsync, kCuda12_0);
  TAILOR_RESOLVE(cuMemcpyDtoHAsync, kCuda12_0);
  TAILOR_RESOLVE(cuMemcpyDtoDAsync, kCuda12_0);
  TAILOR_RESOLVE(cuStreamCreate, kCuda12_0);
  TAILOR_RESOLVE(cuStreamDestroy, kCuda12_0);
  TAILOR_RESOLVE(cuStreamSynchronize, kCuda12_0);
  TAILOR_RESOLVE(cuLaunchHostFunc, kCuda12_0);
  TAILOR_RESOLVE(cuEventCreate, kCuda12_0);
  TAILOR_RESOLVE(cuEventRecord, kCuda12_0);
  TAILOR_RESOLVE(cuEventSynchronize, kCuda12_0);
  TAILOR_RESOLVE(cuEventElapsedTime, kCuda12_8);  // older drivers: v1, same ABI
  TAILOR_RESOLVE(cuEventDestroy, kCuda12_0);
  TAILOR_RESOLVE(cuStreamBeginCapture, kCuda12_0);
  TAILOR_RESOLVE(cuStreamIsCapturing, kCuda12_0);
  TAILOR_RESOLVE(cuStreamEndCapture, kCuda12_0);
  TAILOR_RESOLVE(cuGraphInstantiateWithFlags, kCuda12_0);
  TAILOR_RESOLVE(cuGraphLaunch, kCuda12_0);
  TAILOR_RESOLVE(cuGraphExecDestroy, kCuda12_0);
  TAILOR_RESOLVE(cuGraphDestroy, kCuda12_0);
  TAILOR_RESOLVE(cuTensorMapEncodeTiled, kCuda12_0);
  return absl::OkStatus();
}

#undef TAILOR_RESOLVE

absl::Status ResolveAndInitialize(void* library, bool initialize,
                                  DriverApi& api) {
  // dlsym, not cuGetProcAddress: this is the one symbol that resolves the
  // others. Its absence means a pre-12.0 driver.
  auto get_proc_address =
      reinterpret_cast<GetProcAddressFn>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) {
    return absl::UnavailableError(
        "libcuda has no cuGetProcAddress_v2: the NVIDIA driver predates CUDA "
        "12.0; tailor needs a CUDA 12.0 or newer driver");
  }
  const EntryPointResolver resolver(get_proc_address, &api);
  TAILOR_RETURN_IF_ERROR(ResolveErrorsAndVersion(resolver, api));
  TAILOR_RETURN_IF_ERROR(ResolveEntryPoints(resolver, api));
  if (initialize) {
    const CUresult result = api.cuInit(0);
    if (result != CUDA_SUCCESS) {
      return absl::UnavailableError(
          ResultToStatus(&api, result, "cuInit").message());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const DriverApi*> LoadOnce() {
  g_load_attempts.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<std::unique_ptr<DriverApi>> api =
      internal::OpenDriverLibrary(kLibcudaNames, /*initialize=*/true);
  if (!api.ok()) return api.status();
  const DriverApi* loaded = api->release();  // lives for the process
  g_loaded_api.store(loaded, std::memory_order_release);
  return loaded;
}

}  // namespace

absl::StatusOr<const DriverApi*> LoadDriverApi() {
  // Thread-safe one-time initialization; the outcome, failure included, is
  // kept for the process. Never destroyed: other statics may still call the
  // driver during exit.
  static const auto* const kLoaded =
      new absl::StatusOr<const DriverApi*>(LoadOnce());
  return *kLoaded;
}

absl::Status CudaResultToStatus(int result, absl::string_view what) {
  return ResultToStatus(g_loaded_api.load(std::memory_order_acquire), result,
                        what);
}

namespace internal {

absl::StatusOr<std::unique_ptr<DriverApi>> OpenDriverLibrary(
    absl::Span<const char* const> library_names, bool initialize) {
  void* library = nullptr;
  std::string first_error;
  for (const char* name : library_names) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* error = dlerror();
    if (first_error.empty()) first_error = error != nullptr ? error : "?";
  }
  if (library == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        library_names.empty() ? "libcuda" : library_names[0],
        " not found: no NVIDIA driver on this machine (dlopen: ", first_error,
        ")"));
  }
  auto api = std::make_unique<DriverApi>();
  if (absl::Status status = ResolveAndInitialize(library, initialize, *api);
      !status.ok()) {
    dlclose(library);  // nothing of it is kept
    return status;
  }
  return api;
}

int DriverLoadAttemptsForTesting() {
  return g_load_attempts.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace tailor::cuda
