// backends/cuda/driver_api.h — the CUDA driver, loaded at run time.
//
// tailor never links libcuda: it must build, load and run its CPU paths on
// machines without an NVIDIA driver. LoadDriverApi() dlopens libcuda.so.1
// (then libcuda.so) on first use, resolves cuGetProcAddress_v2 with dlsym,
// resolves every other entry point through it with an explicit CUDA ABI
// version, calls cuInit(0), and caches the outcome for the process: a machine
// without a driver pays for one failed dlopen, not one per call.
//
// cuda.h (CUDA 12.0+ toolkit headers) is included for the types and enums
// only; nothing here calls a driver function directly.
//
// Every CUresult becomes an absl::Status in exactly one place:
// CudaResultToStatus. Codes map as follows (the message always carries
// `what`, the error's name, its number and, when the driver is loaded, its
// description):
//   CUDA_ERROR_INVALID_VALUE, _INVALID_DEVICE, _INVALID_IMAGE, _INVALID_PTX,
//   _INVALID_HANDLE                                     -> InvalidArgument
//   CUDA_ERROR_OUT_OF_MEMORY, _LAUNCH_OUT_OF_RESOURCES  -> ResourceExhausted
//   CUDA_ERROR_NOT_INITIALIZED, _DEINITIALIZED, _STUB_LIBRARY,
//   _DEVICE_UNAVAILABLE, _NO_DEVICE, _SYSTEM_DRIVER_MISMATCH,
//   _COMPAT_NOT_SUPPORTED_ON_DEVICE                     -> Unavailable
//   CUDA_ERROR_NOT_FOUND                                -> NotFound
//   CUDA_ERROR_INVALID_CONTEXT, _NO_BINARY_FOR_GPU,
//   _UNSUPPORTED_PTX_VERSION                            -> FailedPrecondition
//   CUDA_ERROR_NOT_SUPPORTED                            -> Unimplemented
//   CUDA_ERROR_LAUNCH_TIMEOUT                           -> DeadlineExceeded
//   anything else (CUDA_ERROR_ILLEGAL_ADDRESS, _LAUNCH_FAILED, ...) -> Internal
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::LoadDriverApi());
//   CUdevice device;
//   TAILOR_RETURN_IF_ERROR(
//       cuda::CudaResultToStatus(api->cuDeviceGet(&device, 0), "cuDeviceGet"));
#ifndef TAILOR_BACKENDS_CUDA_DRIVER_API_H_
#define TAILOR_BACKENDS_CUDA_DRIVER_API_H_

#include <cuda.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tailor::cuda {

// The oldest driver tailor accepts: cuGetProcAddress_v2 and tensor maps
// arrived with CUDA 12.0.
inline constexpr int kMinDriverVersion = 12000;

// Typed pointers to the driver entry points tailor uses, all resolved (never
// null) in an API returned by LoadDriverApi. Members are named after the
// driver functions so that calls read like the CUDA documentation:
// api->cuMemAlloc(&ptr, bytes). (cuda.h #defines some names to their _v2
// ABI; the members follow those #defines, and so do the calls.)
//
// To add an entry point: add a member here and one TAILOR_RESOLVE line with
// the CUDA version whose ABI cuda.h declares, in driver_api.cc.
struct DriverApi {
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000 for CUDA 13.0

  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;

  // Devices and contexts.
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize = nullptr;

  // Modules and launches.
  decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) cuModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute = nullptr;
  decltype(&::cuFuncGetAttribute) cuFuncGetAttribute = nullptr;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;
  decltype(&::cuLaunchKernel) cuLaunchKernel = nullptr;
  decltype(&::cuOccupancyMaxActiveClusters) cuOccupancyMaxActiveClusters =
      nullptr;

  // Memory.
  decltype(&::cuMemAlloc) cuMemAlloc = nullptr;
  decltype(&::cuMemFree) cuMemFree = nullptr;
  decltype(&::cuMemcpyHtoD) cuMemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) cuMemcpyDtoH = nullptr;
  decltype(&::cuMemsetD8) cuMemsetD8 = nullptr;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async = nullptr;
  decltype(&::cuMemcpyHtoDAsync) cuMemcpyHtoDAsync = nullptr;
  decltype(&::cuMemcpyDtoHAsync) cuMemcpyDtoHAsync = nullptr;
  decltype(&::cuMemcpyDtoDAsync) cuMemcpyDtoDAsync = nullptr;

  // Streams and events.
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy) cuStreamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuLaunchHostFunc) cuLaunchHostFunc = nullptr;
  decltype(&::cuEventCreate) cuEventCreate = nullptr;
  decltype(&::cuEventRecord) cuEventRecord = nullptr;
  decltype(&::cuEventSynchronize) cuEventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime = nullptr;
  decltype(&::cuEventDestroy) cuEventDestroy = nullptr;

  // CUDA graphs (stream capture).
  decltype(&::cuStreamBeginCapture) cuStreamBeginCapture = nullptr;
  decltype(&::cuStreamIsCapturing) cuStreamIsCapturing = nullptr;
  decltype(&::cuStreamEndCapture) cuStreamEndCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) cuGraphInstantiateWithFlags =
      nullptr;
  decltype(&::cuGraphLaunch) cuGraphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) cuGraphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) cuGraphDestroy = nullptr;

  // Tensor maps.
  decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;
};

// The process-wide driver, loaded once (thread-safe) and initialized with
// cuInit(0). Fails with Unavailable, cached for the process, when:
//   - there is no driver: "libcuda.so.1 not found: no NVIDIA driver on this
//     machine (dlopen: <dlerror>)";
//   - the driver is older than CUDA 12.0 or lacks an entry point;
//   - cuInit fails (e.g. CUDA_ERROR_NO_DEVICE, or the toolkit's stub libcuda).
// The returned pointer lives for the process.
absl::StatusOr<const DriverApi*> LoadDriverApi();

// Converts a driver result to a Status (OkStatus for CUDA_SUCCESS) with the
// mapping in the file comment and the message
//   "<what>: <CUDA_ERROR_NAME> (<number>): <driver description>"
// The name and description come from the loaded driver's cuGetErrorName /
// cuGetErrorString; before (or without) a loaded driver the name comes from a
// built-in table of the codes above and unknown codes read "CUresult <n>".
// Never loads the driver itself. Thread-safe.
// `result` is an int: a newer driver may return a value outside the CUresult
// enum of the headers tailor was compiled with, and holding such a value in
// the enum type is undefined behavior (UBSan's enum check, make asan).
absl::Status CudaResultToStatus(int result, absl::string_view what);

namespace internal {

// Opens the first loadable library of `library_names`, resolves every entry
// point and, when `initialize` is set, calls cuInit(0). Not cached, for tests
// (e.g. against the toolkit's stub libcuda). On failure the library is
// closed again; on success it stays open for the process.
absl::StatusOr<std::unique_ptr<DriverApi>> OpenDriverLibrary(
    absl::Span<const char* const> library_names, bool initialize);

// How many times LoadDriverApi has attempted a load (0 or 1).
int DriverLoadAttemptsForTesting();

}  // namespace internal
}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_DRIVER_API_H_
