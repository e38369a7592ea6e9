#include "backends/hip/hip_api.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace tailor::hip {
namespace {

// comgr's C API (amd_comgr.h), the two calls tailor makes; declared here
// so the backend does not need the comgr headers.
using ComgrGetIsaCount = int (*)(size_t*);
using ComgrGetIsaName = int (*)(size_t, const char**);
constexpr absl::string_view kIsaPrefix = "amdgcn-amd-amdhsa--";

// Every candidate for `names`, in search order (see hip_api.h).
std::vector<std::string> CandidatePaths(
    std::initializer_list<const char*> names) {
  std::vector<std::string> paths(names.begin(), names.end());
  std::vector<std::string> dirs;
  if (const char* rocm = std::getenv("ROCM_PATH"); rocm != nullptr && *rocm) {
    dirs.push_back(absl::StrCat(rocm, "/lib"));
  }
  dirs.push_back("/opt/rocm/lib");
  for (const std::string& dir : dirs) {
    for (const char* name : names)
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

struct Opened {
  void* handle = nullptr;
  std::string path;
};

// The sanitizer runtimes end the process on any dlopen with RTLD_DEEPBIND
// (google/sanitizers#611), which ROCm's libraries need (see OpenFirst): in
// a sanitizer build (make asan, make tsan) the HIP backend is unavailable,
// as on a machine without ROCm, instead of killing every process that
// probes it (Options::backend kAuto does).
#if defined(TAILOR_UNDER_SANITIZER)
constexpr bool kDeepBindAllowed = false;
#else
constexpr bool kDeepBindAllowed = true;
#endif

// The first of `paths` that dlopens; Unavailable naming `what` and every
// error otherwise.
absl::StatusOr<Opened> OpenFirst(const std::vector<std::string>& paths,
                                 absl::string_view what) {
  if (!kDeepBindAllowed) {
    return absl::UnavailableError(
        absl::StrCat("HIP backend unavailable: no ", what,
                     " is loaded in a sanitizer build (ROCm's libraries need "
                     "RTLD_DEEPBIND, which the sanitizer runtimes refuse)"));
  }
  std::vector<std::string> errors;
  for (const std::string& path : paths) {
    // RTLD_DEEPBIND: ROCm's comgr links its own LLVM (15 on Debian 12);
    // without it, its calls into LLVM bind to the LLVM 14 that tailor's CPU
    // backend already loaded, and hiprtc crashes inside the optimizer.
    if (void* handle =
            dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
      return Opened{handle, LoadedPath(handle, path)};
    }
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : path);
  }
  return absl::UnavailableError(absl::StrCat("HIP backend unavailable: no ",
                                             what, " could be loaded (",
                                             absl::StrJoin(errors, "; "), ")"));
}

template <typename Fn>
absl::Status Resolve(const Opened& library, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library.handle, symbol));
  if (out == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "HIP backend unavailable: ", library.path, " has no symbol ", symbol));
  }
  return absl::OkStatus();
}

// comgr's ISA names (prefix stripped); empty when comgr does not load.
void ReadComgrTargets(HiprtcApi& api) {
  absl::StatusOr<Opened> comgr =
      OpenFirst(CandidatePaths({"libamd_comgr.so.3", "libamd_comgr.so.2",
                                "libamd_comgr.so"}),
                "code-object manager");
  if (!comgr.ok()) return;
  auto count = reinterpret_cast<ComgrGetIsaCount>(
      dlsym(comgr->handle, "amd_comgr_get_isa_count"));
  auto name = reinterpret_cast<ComgrGetIsaName>(
      dlsym(comgr->handle, "amd_comgr_get_isa_name"));
  size_t n = 0;
  if (count == nullptr || name == nullptr || count(&n) != 0) return;
  for (size_t i = 0; i < n; ++i) {
    const char* isa = nullptr;
    if (name(i, &isa) != 0 || isa == nullptr) continue;
    absl::string_view view(isa);
    if (absl::ConsumePrefix(&view, kIsaPrefix)) {
      api.comgr_targets.emplace_back(view);
    }
  }
  api.comgr_path = comgr->path;
}

absl::StatusOr<HiprtcApi> LoadHiprtcOnce() {
  // ROCm 6: libhiprtc; ROCm 5: hiprtc lives in libamdhip64.
  absl::StatusOr<Opened> library =
      OpenFirst(CandidatePaths({"libhiprtc.so.6", "libhiprtc.so",
                                "libamdhip64.so.5", "libamdhip64.so"}),
                "hiprtc (libhiprtc or libamdhip64)");
  if (!library.ok()) return library.status();
  HiprtcApi api;
  api.library_path = library->path;
  absl::Status s;
  for (absl::Status r :
       {Resolve(*library, "hiprtcGetErrorString", api.GetErrorString),
        Resolve(*library, "hiprtcVersion", api.Version),
        Resolve(*library, "hiprtcCreateProgram", api.CreateProgram),
        Resolve(*library, "hiprtcDestroyProgram", api.DestroyProgram),
        Resolve(*library, "hiprtcCompileProgram", api.CompileProgram),
        Resolve(*library, "hiprtcGetProgramLogSize", api.GetProgramLogSize),
        Resolve(*library, "hiprtcGetProgramLog", api.GetProgramLog),
        Resolve(*library, "hiprtcGetCodeSize", api.GetCodeSize),
        Resolve(*library, "hiprtcGetCode", api.GetCode)}) {
    if (!r.ok()) return r;
  }
  if (const int r = api.Version(&api.version_major, &api.version_minor);
      r != HIPRTC_SUCCESS) {
    return HiprtcResultToStatus(r, "hiprtcVersion");
  }
  ReadComgrTargets(api);
  return api;
}

absl::StatusOr<HipRuntimeApi> LoadRuntimeOnce() {
  absl::StatusOr<Opened> library =
      OpenFirst(CandidatePaths(
                    {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}),
                "HIP runtime (libamdhip64)");
  if (!library.ok()) return library.status();
  HipRuntimeApi api;
  api.library_path = library->path;
  for (absl::Status r :
       {Resolve(*library, "hipGetErrorName", api.GetErrorName),
        Resolve(*library, "hipInit", api.Init),
        Resolve(*library, "hipGetDeviceCount", api.GetDeviceCount),
        Resolve(*library, "hipGetDeviceProperties", api.GetDeviceProperties),
        Resolve(*library, "hipSetDevice", api.SetDevice),
        Resolve(*library, "hipModuleLoadData", api.ModuleLoadData),
        Resolve(*library, "hipModuleUnload", api.ModuleUnload),
        Resolve(*library, "hipModuleGetFunction", api.ModuleGetFunction),
        Resolve(*library, "hipModuleLaunchKernel", api.ModuleLaunchKernel),
        Resolve(*library, "hipMalloc", api.Malloc),
        Resolve(*library, "hipFree", api.Free),
        Resolve(*library, "hipMemsetAsync", api.MemsetAsync),
        Resolve(*library, "hipMemcpyAsync", api.MemcpyAsync),
        Resolve(*library, "hipStreamSynchronize", api.StreamSynchronize)}) {
    if (!r.ok()) return r;
  }
  return api;
}

}  // namespace

std::string HiprtcApi::VersionString() const {
  return absl::StrCat(version_major, ".", version_minor);
}

absl::StatusOr<const HiprtcApi*> LoadHiprtcApi() {
  static const absl::StatusOr<HiprtcApi>* const loaded =
      new absl::StatusOr<HiprtcApi>(LoadHiprtcOnce());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::StatusOr<const HipRuntimeApi*> LoadHipRuntimeApi() {
  static const absl::StatusOr<HipRuntimeApi>* const loaded =
      new absl::StatusOr<HipRuntimeApi>(LoadRuntimeOnce());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::string_view HiprtcResultName(int result) {
  switch (result) {
    case HIPRTC_SUCCESS:
      return "HIPRTC_SUCCESS";
    case HIPRTC_ERROR_OUT_OF_MEMORY:
      return "HIPRTC_ERROR_OUT_OF_MEMORY";
    case HIPRTC_ERROR_PROGRAM_CREATION_FAILURE:
      return "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case HIPRTC_ERROR_INVALID_INPUT:
      return "HIPRTC_ERROR_INVALID_INPUT";
    case HIPRTC_ERROR_INVALID_PROGRAM:
      return "HIPRTC_ERROR_INVALID_PROGRAM";
    case HIPRTC_ERROR_INVALID_OPTION:
      return "HIPRTC_ERROR_INVALID_OPTION";
    case HIPRTC_ERROR_COMPILATION:
      return "HIPRTC_ERROR_COMPILATION";
    case HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE:
      return "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE";
    case HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION:
      return "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION:
      return "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID:
      return "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    case HIPRTC_ERROR_INTERNAL_ERROR:
      return "HIPRTC_ERROR_INTERNAL_ERROR";
  }
  return "HIPRTC_ERROR_UNKNOWN";
}

absl::Status HiprtcResultToStatus(int result, absl::string_view what) {
  if (result == HIPRTC_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", HiprtcResultName(result), " (", result, ")");
  switch (result) {
    case HIPRTC_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case HIPRTC_ERROR_INVALID_INPUT:
    case HIPRTC_ERROR_INVALID_PROGRAM:
    case HIPRTC_ERROR_INVALID_OPTION:
    case HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION:
    case HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION:
    case HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status HipErrorToStatus(hipError_t error, absl::string_view what,
                              const HipRuntimeApi* api) {
  if (error == hipSuccess) return absl::OkStatus();
  const char* name = api != nullptr ? api->GetErrorName(error) : nullptr;
  const std::string message =
      absl::StrCat(what, ": ", name != nullptr ? name : "hipError", " (",
                   static_cast<int>(error), ")");
  switch (error) {
    case hipErrorOutOfMemory:
    case hipErrorLaunchOutOfResources:
      return absl::ResourceExhaustedError(message);
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorNoBinaryForGpu:
    case hipErrorInvalidDevice:
      return absl::UnavailableError(message);
    case hipErrorInvalidValue:
    case hipErrorInvalidImage:
    case hipErrorNotFound:
    case hipErrorInvalidKernelFile:
    case hipErrorInvalidDeviceFunction:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tailor::hip
