#include "backends/cuda/nvrtc_api.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tailor::cuda {
namespace {

constexpr const char* kLibraryNames[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                         "libnvrtc.so"};

// Every candidate, in search order (see nvrtc_api.h).
std::vector<std::string> CandidatePaths() {
  std::vector<std::string> paths(std::begin(kLibraryNames),
                                 std::end(kLibraryNames));
  std::vector<std::string> dirs;
  if (const char* cuda_home = std::getenv("CUDA_HOME");
      cuda_home != nullptr && *cuda_home) {
    dirs.push_back(absl::StrCat(cuda_home, "/lib64"));
  }
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string& dir : dirs) {
    for (const char* name : kLibraryNames)
      paths.push_back(absl::StrCat(dir, "/", name));
  }
  return paths;
}

// The file behind `handle`, symlinks resolved; `fallback` if unknown.
std::string LoadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr ||
      map->l_name == nullptr || *map->l_name == '\0') {
    return fallback;
  }
  char resolved[PATH_MAX];
  if (realpath(map->l_name, resolved) == nullptr) return map->l_name;
  return resolved;
}

template <typename Fn>
absl::Status Resolve(void* handle, const char* symbol, const std::string& path,
                     Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (out == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("CUDA backend unavailable: ", path, " has no symbol ",
                     symbol, " (NVRTC older than CUDA 11.1?)"));
  }
  return absl::OkStatus();
}

template <typename Fn>
void ResolveOptional(void* handle, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

absl::StatusOr<NvrtcApi> LoadOnce() {
  void* handle = nullptr;
  std::string opened;
  std::vector<std::string> errors;
  for (const std::string& path : CandidatePaths()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      opened = path;
      break;
    }
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : path);
  }
  if (handle == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA backend unavailable: NVRTC (libnvrtc.so) not found; tried ",
        absl::StrJoin(errors, "; ")));
  }
  // The handle stays open for the life of the process: the entry points are
  // used until exit.
  NvrtcApi api;
  api.library_path = LoadedPath(handle, opened);
  const std::string& p = api.library_path;
  absl::Status status = absl::OkStatus();
  for (absl::Status s :
       {Resolve(handle, "nvrtcGetErrorString", p, api.GetErrorString),
        Resolve(handle, "nvrtcVersion", p, api.Version),
        Resolve(handle, "nvrtcCreateProgram", p, api.CreateProgram),
        Resolve(handle, "nvrtcDestroyProgram", p, api.DestroyProgram),
        Resolve(handle, "nvrtcCompileProgram", p, api.CompileProgram),
        Resolve(handle, "nvrtcGetProgramLogSize", p, api.GetProgramLogSize),
        Resolve(handle, "nvrtcGetProgramLog", p, api.GetProgramLog),
        Resolve(handle, "nvrtcGetPTXSize", p, api.GetPTXSize),
        Resolve(handle, "nvrtcGetPTX", p, api.GetPTX),
        Resolve(handle, "nvrtcGetCUBINSize", p, api.GetCUBINSize),
        Resolve(handle, "nvrtcGetCUBIN", p, api.GetCUBIN)}) {
    status.Update(s);
  }
  if (!status.ok()) return status;
  ResolveOptional(handle, "nvrtcGetPCHCreateStatus", api.GetPCHCreateStatus);
  ResolveOptional(handle, "nvrtcGetPCHHeapSize", api.GetPCHHeapSize);
  ResolveOptional(handle, "nvrtcSetPCHHeapSize", api.SetPCHHeapSize);
  ResolveOptional(handle, "nvrtcGetPCHHeapSizeRequired",
                  api.GetPCHHeapSizeRequired);
  absl::Status version = NvrtcResultToStatus(
      api.Version(&api.version_major, &api.version_minor), "nvrtcVersion");
  if (!version.ok()) {
    return absl::UnavailableError(
        absl::StrCat("CUDA backend unavailable: ", p, ": ", version.message()));
  }
  return api;
}

}  // namespace

std::string NvrtcApi::VersionString() const {
  return absl::StrCat(version_major, ".", version_minor);
}

absl::StatusOr<const NvrtcApi*> LoadNvrtcApi() {
  static const absl::StatusOr<NvrtcApi>* const kApi =
      new absl::StatusOr<NvrtcApi>(LoadOnce());
  if (!kApi->ok()) return kApi->status();
  return &**kApi;
}

absl::string_view NvrtcResultName(int result) {
  switch (result) {
    case 0:
      return "NVRTC_SUCCESS";
    case 1:
      return "NVRTC_ERROR_OUT_OF_MEMORY";
    case 2:
      return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case 3:
      return "NVRTC_ERROR_INVALID_INPUT";
    case 4:
      return "NVRTC_ERROR_INVALID_PROGRAM";
    case 5:
      return "NVRTC_ERROR_INVALID_OPTION";
    case 6:
      return "NVRTC_ERROR_COMPILATION";
    case 7:
      return "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE";
    case 8:
      return "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case 9:
      return "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case 10:
      return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    case 11:
      return "NVRTC_ERROR_INTERNAL_ERROR";
    case 12:
      return "NVRTC_ERROR_TIME_FILE_WRITE_FAILED";
    case 13:
      return "NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED";
    case 14:
      return "NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED";
    case 15:
      return "NVRTC_ERROR_PCH_CREATE";
    case 16:
      return "NVRTC_ERROR_CANCELLED";
    case 17:
      return "NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED";
  }
  return "NVRTC_ERROR_UNKNOWN";
}

absl::Status NvrtcResultToStatus(int result, absl::string_view what) {
  const int code = result;
  if (code == 0) return absl::OkStatus();
  std::string message =
      absl::StrCat(std::string(what), ": ",
                   std::string(NvrtcResultName(result)), " (", code, ")");
  switch (code) {
    case 1:
      return absl::ResourceExhaustedError(message);
    case 3:
    case 4:
    case 5:
    case 8:
    case 9:
    case 10:
      return absl::InvalidArgumentError(message);
    case 16:
      return absl::CancelledError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tailor::cuda
