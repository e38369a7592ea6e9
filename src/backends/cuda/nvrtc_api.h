// backends/cuda/nvrtc_api.h — NVRTC, loaded with dlopen on first use.
//
// tailor links no CUDA library: NVRTC is found at run time, so the library
// builds and loads on machines without a CUDA toolkit, and the CUDA backend
// reports Unavailable there instead of failing to start. NVRTC needs no GPU:
// CI compiles every CUDA template with it.
//
// Search order (first that dlopens wins):
//   1. libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so through the dynamic
//      linker (LD_LIBRARY_PATH, rpath, ld.so.cache);
//   2. the same names in $CUDA_HOME/lib64, then /usr/local/cuda/lib64.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(const NvrtcApi* nvrtc, LoadNvrtcApi());
//   nvrtcProgram program;
//   TAILOR_RETURN_IF_ERROR(NvrtcResultToStatus(
//       nvrtc->CreateProgram(&program, code, "kernel.cu", 0, nullptr, nullptr),
//       "nvrtcCreateProgram"));
#ifndef TAILOR_BACKENDS_CUDA_NVRTC_API_H_
#define TAILOR_BACKENDS_CUDA_NVRTC_API_H_

#include <nvrtc.h>  // types and prototypes only; nothing links against NVRTC

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tailor::cuda {

// The NVRTC entry points tailor uses, resolved from the loaded library.
struct NvrtcApi {
  std::string library_path;  // the file that was loaded (resolved symlinks)
  int version_major = 0;     // nvrtcVersion()
  int version_minor = 0;

  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  // Optional (NVRTC 12.8+ precompiled headers); nullptr when absent.
  decltype(&::nvrtcGetPCHCreateStatus) GetPCHCreateStatus = nullptr;
  decltype(&::nvrtcGetPCHHeapSize) GetPCHHeapSize = nullptr;
  decltype(&::nvrtcSetPCHHeapSize) SetPCHHeapSize = nullptr;
  decltype(&::nvrtcGetPCHHeapSizeRequired) GetPCHHeapSizeRequired = nullptr;

  // "13.0"
  std::string VersionString() const;
};

// Loads NVRTC once per process (thread-safe) and returns the resolved entry
// points, which live until the process exits. Unavailable, naming every path
// tried, when no library loads; Unavailable naming the symbol when a required
// entry point is missing. The outcome, failure included, is remembered.
absl::StatusOr<const NvrtcApi*> LoadNvrtcApi();

// The one conversion of an nvrtcResult: OkStatus for NVRTC_SUCCESS, else the
// most specific canonical code with "<what>: NVRTC_ERROR_... (<n>)".
//   NVRTC_ERROR_OUT_OF_MEMORY                          -> ResourceExhausted
//   NVRTC_ERROR_INVALID_INPUT / _INVALID_PROGRAM /
//   _INVALID_OPTION / name-expression errors           -> InvalidArgument
//   NVRTC_ERROR_CANCELLED                              -> Cancelled
//   everything else (compilation, builtin, internal)   -> Internal
// Takes the code as an int: a newer NVRTC may return a value outside the
// nvrtcResult enum this tailor was compiled with, and holding such a value
// in the enum type is undefined behavior (UBSan's enum check, make asan).
absl::Status NvrtcResultToStatus(int result, absl::string_view what);

// "NVRTC_ERROR_COMPILATION" for 6; "NVRTC_ERROR_UNKNOWN" for values this
// tailor does not know.
absl::string_view NvrtcResultName(int result);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_NVRTC_API_H_
