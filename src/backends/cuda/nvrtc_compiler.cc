#include "backends/cuda/nvrtc_compiler.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/embedded_files.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

namespace fs = std::filesystem;

// The embedded files NVRTC may include: CUDA's own and what every GPU
// shares (templates/common/).
constexpr absl::string_view kHeaderPrefixes[] = {
    "runtime/cuda/", "templates/cuda/", "templates/common/"};

bool IsDir(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

// The toolkit include dir that belongs to the loaded NVRTC, else the one
// under $CUDA_HOME or /usr/local/cuda; empty when none has CUDA headers.
std::string FindToolkitIncludeDir(const std::string& nvrtc_path) {
  std::vector<fs::path> candidates;
  const fs::path lib_dir = fs::path(nvrtc_path).parent_path();
  candidates.push_back(lib_dir.parent_path() / "include");  // <root>/lib64
  candidates.push_back(lib_dir.parent_path().parent_path() /
                       "include");  // targets/<triple>/lib
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home) {
    candidates.push_back(fs::path(home) / "include");
  }
  candidates.push_back("/usr/local/cuda/include");
  for (const fs::path& dir : candidates) {
    std::error_code error;
    if (fs::exists(dir / "cuda_bf16.h", error) ||
        IsDir(dir / "cccl" / "cuda")) {
      fs::path canonical = fs::weakly_canonical(dir, error);
      return (error ? dir : canonical).string();
    }
  }
  return "";
}

// NVRTC's log for `program` (empty when it has none).
std::string ProgramLog(const NvrtcApi& api, nvrtcProgram program) {
  size_t size = 0;
  if (api.GetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) {
    return "";
  }
  std::string log(size, '\0');
  if (api.GetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the trailing NUL
  return log;
}

// Destroys an NVRTC program when it goes out of scope.
class ProgramGuard {
 public:
  ProgramGuard(const NvrtcApi& api, nvrtcProgram program)
      : api_(api), program_(program) {}
  ~ProgramGuard() { api_.DestroyProgram(&program_); }
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;

 private:
  const NvrtcApi& api_;
  nvrtcProgram program_;
};

absl::StatusOr<std::string> GetCubin(const NvrtcApi& api,
                                     nvrtcProgram program) {
  size_t size = 0;
  TAILOR_RETURN_IF_ERROR(NvrtcResultToStatus(api.GetCUBINSize(program, &size),
                                             "nvrtcGetCUBINSize"));
  std::string cubin(size, '\0');
  if (size > 0) {
    TAILOR_RETURN_IF_ERROR(NvrtcResultToStatus(
        api.GetCUBIN(program, cubin.data()), "nvrtcGetCUBIN"));
  }
  return cubin;
}

absl::StatusOr<std::string> GetPtx(const NvrtcApi& api, nvrtcProgram program) {
  size_t size = 0;
  TAILOR_RETURN_IF_ERROR(
      NvrtcResultToStatus(api.GetPTXSize(program, &size), "nvrtcGetPTXSize"));
  std::string ptx(size, '\0');
  if (size > 0) {
    TAILOR_RETURN_IF_ERROR(
        NvrtcResultToStatus(api.GetPTX(program, ptx.data()), "nvrtcGetPTX"));
    ptx.resize(size - 1);  // drop the trailing NUL
  }
  return ptx;
}

}  // namespace

absl::Status ValidateCudaArch(absl::string_view arch) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("arch: must be sm_<major><minor> with an optional a/f "
                     "suffix (e.g. sm_90a), got \"",
                     std::string(arch), "\""));
  };
  if (!absl::StartsWith(arch, "sm_")) return invalid();
  absl::string_view rest = arch.substr(3);
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    rest.remove_suffix(1);
  }
  if (rest.size() < 2 || rest.size() > 3) return invalid();
  for (char c : rest) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return invalid();
  }
  return absl::OkStatus();
}

absl::StatusOr<NvrtcCompiler> NvrtcCompiler::Create(
    const NvrtcCompilerOptions& options) {
  NvrtcCompiler compiler;
  TAILOR_ASSIGN_OR_RETURN(compiler.api_, LoadNvrtcApi());
  compiler.flags_ = {"-std=c++20", "-default-device"};
  const NvrtcApi& api = *compiler.api_;
  if (options.minimal && (api.version_major > 12 || (api.version_major == 12 &&
                                                     api.version_minor >= 4))) {
    compiler.flags_.push_back("-minimal");
  }
  if (options.line_info) compiler.flags_.push_back("-lineinfo");
  if (options.fast_math) compiler.flags_.push_back("--use_fast_math");
  if (options.precompiled_headers) compiler.flags_.push_back("-pch");
  if (options.toolkit_includes) {
    compiler.toolkit_include_dir_ =
        FindToolkitIncludeDir(compiler.api_->library_path);
    if (!compiler.toolkit_include_dir_.empty()) {
      const fs::path dir(compiler.toolkit_include_dir_);
      if (IsDir(dir / "cccl")) {
        compiler.flags_.push_back(absl::StrCat("-I", (dir / "cccl").string()));
      }
      compiler.flags_.push_back(
          absl::StrCat("-I", compiler.toolkit_include_dir_));
    }
  }
  for (const std::string& flag : options.extra_flags) {
    compiler.flags_.push_back(flag);
  }
  compiler.identity_ = absl::StrCat("nvrtc ", compiler.api_->VersionString(),
                                    " ", absl::StrJoin(compiler.flags_, " "));
  for (const tailor::internal::EmbeddedFile& file :
       tailor::internal::EmbeddedFiles()) {
    for (absl::string_view prefix : kHeaderPrefixes) {
      if (absl::string_view(file.path).substr(0, prefix.size()) == prefix) {
        // The embedder NUL-terminates every file, as NVRTC wants.
        compiler.header_names_.push_back(file.path);
        compiler.header_contents_.push_back(file.data);
        break;
      }
    }
  }
  return compiler;
}

absl::StatusOr<NvrtcCompiler::Output> NvrtcCompiler::Compile(
    const tailor::internal::KernelSource& source, absl::string_view arch,
    bool want_ptx) const {
  TAILOR_RETURN_IF_ERROR(ValidateCudaArch(arch));
  if (source.entry.empty()) {
    return absl::InvalidArgumentError(
        "source.entry: must name the extern \"C\" kernel, got \"\"");
  }
  const NvrtcApi& api = *api_;
  const std::string program_name = absl::StrCat(source.entry, ".cu");
  nvrtcProgram program = nullptr;
  TAILOR_RETURN_IF_ERROR(NvrtcResultToStatus(
      api.CreateProgram(&program, source.code.c_str(), program_name.c_str(),
                        static_cast<int>(header_names_.size()),
                        header_contents_.data(), header_names_.data()),
      "nvrtcCreateProgram"));
  ProgramGuard guard(api, program);

  const std::string arch_flag = absl::StrCat("-arch=", std::string(arch));
  std::vector<const char*> argv;
  argv.reserve(flags_.size() + 1);
  argv.push_back(arch_flag.c_str());
  for (const std::string& flag : flags_) argv.push_back(flag.c_str());
  const nvrtcResult compiled =
      api.CompileProgram(program, static_cast<int>(argv.size()), argv.data());
  Output output;
  output.log = ProgramLog(api, program);
  if (absl::Status status = NvrtcResultToStatus(
          compiled, absl::StrCat("nvrtc: compiling ", source.entry, " for ",
                                 std::string(arch)));
      !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), "\n", output.log));
  }
  TAILOR_ASSIGN_OR_RETURN(output.cubin, GetCubin(api, program));
  if (output.cubin.empty()) {
    return absl::InternalError(absl::StrCat("nvrtc: compiling ", source.entry,
                                            " for ", std::string(arch),
                                            " produced an empty cubin"));
  }
  if (want_ptx) {
    TAILOR_ASSIGN_OR_RETURN(output.ptx, GetPtx(api, program));
  }
  return output;
}

}  // namespace tailor::cuda
