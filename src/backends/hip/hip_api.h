// backends/hip/hip_api.h — the HIP runtime, hiprtc and the code-object
// manager's ISA table, loaded with dlopen on first use.
//
// tailor links no ROCm library: libamdhip64 (which holds hiprtc up to
// ROCm 5.x; ROCm 6 moved it to libhiprtc) and libamd_comgr are found at run
// time, so the library builds and loads on machines without ROCm, and the
// HIP backend reports Unavailable there. hiprtc needs no GPU: CI compiles
// every HIP template with it.
//
// Search order (first that dlopens wins, through the dynamic linker, then
// under $ROCM_PATH/lib and /opt/rocm/lib):
//   HIP runtime: libamdhip64.so.6, libamdhip64.so.5, libamdhip64.so
//   hiprtc:      libhiprtc.so.6, libhiprtc.so (ROCm 6), else the symbols of
//                the HIP runtime itself (ROCm 5)
//   comgr:       libamd_comgr.so.3, libamd_comgr.so.2, libamd_comgr.so
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(const HipApi* hip, LoadHipApi());
//   TAILOR_RETURN_IF_ERROR(HipErrorToStatus(
//       hip->ModuleLoadData(&module, code_object.data()),
//       "hipModuleLoadData"));
#ifndef TAILOR_BACKENDS_HIP_HIP_API_H_
#define TAILOR_BACKENDS_HIP_HIP_API_H_

// The HIP headers pick the AMD implementation by this macro (hipcc sets it;
// g++ compiling host code must too).
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>  // types and prototypes only; no linking
#include <hip/hiprtc.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tailor::hip {

// hiprtc's entry points (ROCm 5.2+ spellings).
struct HiprtcApi {
  std::string library_path;  // the file the symbols came from
  int version_major = 0;     // hiprtcVersion(); ROCm 5.2 reports 9.0
  int version_minor = 0;
  decltype(&::hiprtcGetErrorString) GetErrorString = nullptr;
  decltype(&::hiprtcVersion) Version = nullptr;
  decltype(&::hiprtcCreateProgram) CreateProgram = nullptr;
  decltype(&::hiprtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::hiprtcCompileProgram) CompileProgram = nullptr;
  decltype(&::hiprtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::hiprtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::hiprtcGetCodeSize) GetCodeSize = nullptr;
  decltype(&::hiprtcGetCode) GetCode = nullptr;
  // The ISA names the code-object manager that hiprtc compiles through
  // knows, without the "amdgcn-amd-amdhsa--" prefix ("gfx90a", ...). Empty
  // when libamd_comgr did not load (then no target is refused up front).
  std::vector<std::string> comgr_targets;
  std::string comgr_path;
  // "9.0"
  std::string VersionString() const;
};

// The HIP runtime entry points the backend uses (module API, memory).
struct HipRuntimeApi {
  std::string library_path;
  decltype(&::hipGetErrorName) GetErrorName = nullptr;
  decltype(&::hipInit) Init = nullptr;
  decltype(&::hipGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&::hipGetDeviceProperties) GetDeviceProperties = nullptr;
  decltype(&::hipSetDevice) SetDevice = nullptr;
  decltype(&::hipModuleLoadData) ModuleLoadData = nullptr;
  decltype(&::hipModuleUnload) ModuleUnload = nullptr;
  decltype(&::hipModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::hipModuleLaunchKernel) ModuleLaunchKernel = nullptr;
  hipError_t (*Malloc)(void**, size_t) = nullptr;  // hipMalloc (non-template)
  decltype(&::hipFree) Free = nullptr;
  decltype(&::hipMemsetAsync) MemsetAsync = nullptr;
  decltype(&::hipMemcpyAsync) MemcpyAsync = nullptr;
  decltype(&::hipStreamSynchronize) StreamSynchronize = nullptr;
};

// Loads hiprtc (and comgr's ISA table) once per process (thread-safe).
// Unavailable naming every path tried when no library loads, or naming the
// missing symbol. The outcome, failure included, is remembered.
absl::StatusOr<const HiprtcApi*> LoadHiprtcApi();

// Loads the HIP runtime once per process; Unavailable as above.
absl::StatusOr<const HipRuntimeApi*> LoadHipRuntimeApi();

// The one conversion of a hiprtcResult: OkStatus for HIPRTC_SUCCESS, else
// "<what>: HIPRTC_ERROR_... (<n>)" with
//   HIPRTC_ERROR_OUT_OF_MEMORY                            -> ResourceExhausted
//   _INVALID_INPUT / _INVALID_PROGRAM / _INVALID_OPTION /
//   name-expression errors                                -> InvalidArgument
//   everything else (compilation, builtins, internal)     -> Internal
// `result` is an int: a newer hiprtc may return a value outside the
// hiprtcResult enum of the headers tailor was compiled with (ROCm 6 added
// codes), and holding such a value in the enum type is undefined behavior
// (UBSan's enum check, make asan), as for CudaResultToStatus.
absl::Status HiprtcResultToStatus(int result, absl::string_view what);
absl::string_view HiprtcResultName(int result);

// The one conversion of a hipError_t: OkStatus for hipSuccess, else
// "<what>: hipError... (<n>)" with
//   hipErrorOutOfMemory                                   -> ResourceExhausted
//   hipErrorNoDevice / hipErrorInsufficientDriver /
//   hipErrorNoBinaryForGpu / hipErrorInvalidDevice        -> Unavailable
//   hipErrorInvalidValue / _InvalidImage / _NotFound /
//   _InvalidKernelFile / _InvalidDeviceFunction           -> InvalidArgument
//   hipErrorLaunchOutOfResources                          -> ResourceExhausted
//   everything else                                       -> Internal
// `api` (may be null) supplies hipGetErrorName; without it the number alone.
absl::Status HipErrorToStatus(hipError_t error, absl::string_view what,
                              const HipRuntimeApi* api = nullptr);

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_HIP_API_H_
