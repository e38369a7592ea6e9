#include "backends/hip/hiprtc_compiler.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/embedded_files.h"
#include "tailor/status.h"

namespace tailor::hip {
namespace {

// HIP templates include their own runtime and templates, and the
// vendor-neutral CUDA sources they reuse (runtime/hip/cuda_compat.h).
constexpr absl::string_view kHeaderPrefixes[] = {
    "runtime/hip/", "templates/hip/", "runtime/cuda/", "templates/cuda/",
    "templates/common/"};

// Destroys a hiprtc program on every path out of Compile.
class ProgramGuard {
 public:
  ProgramGuard(const HiprtcApi& api, hiprtcProgram program)
      : api_(api), program_(program) {}
  ~ProgramGuard() { api_.DestroyProgram(&program_); }
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;

 private:
  const HiprtcApi& api_;
  hiprtcProgram program_;
};

std::string ProgramLog(const HiprtcApi& api, hiprtcProgram program) {
  size_t size = 0;
  if (api.GetProgramLogSize(program, &size) != HIPRTC_SUCCESS || size <= 1) {
    return "";
  }
  std::string log(size, '\0');
  if (api.GetProgramLog(program, log.data()) != HIPRTC_SUCCESS) return "";
  log.resize(std::min(log.size(), log.find('\0')));
  return log;
}

absl::StatusOr<std::string> GetCode(const HiprtcApi& api,
                                    hiprtcProgram program) {
  size_t size = 0;
  TAILOR_RETURN_IF_ERROR(HiprtcResultToStatus(api.GetCodeSize(program, &size),
                                              "hiprtcGetCodeSize"));
  std::string code(size, '\0');
  if (size > 0) {
    TAILOR_RETURN_IF_ERROR(HiprtcResultToStatus(
        api.GetCode(program, code.data()), "hiprtcGetCode"));
  }
  return code;
}

// The file name of `path` ("libamdhip64.so.5.2.21153").
absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::Status ValidateGfxTarget(absl::string_view target) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "target: must be gfx<3 or 4 hex digits> with optional :feature+/- "
        "parts (e.g. gfx90a, gfx942:sramecc+:xnack-), got \"",
        std::string(target), "\""));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(target, ':');
  absl::string_view processor = parts[0];
  if (!absl::ConsumePrefix(&processor, "gfx")) return invalid();
  if (processor.size() < 3 || processor.size() > 4) return invalid();
  for (char c : processor) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) {
      return invalid();
    }
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    absl::string_view feature = parts[i];
    if (feature.size() < 2 ||
        (feature.back() != '+' && feature.back() != '-')) {
      return invalid();
    }
  }
  return absl::OkStatus();
}

absl::string_view GfxProcessor(absl::string_view target) {
  return target.substr(0, target.find(':'));
}

bool IsCdnaProcessor(absl::string_view processor) {
  for (absl::string_view cdna :
       {"gfx908", "gfx90a", "gfx940", "gfx941", "gfx942"}) {
    if (processor == cdna) return true;
  }
  return false;
}

bool HasMfmaBf16(absl::string_view processor) {
  return IsCdnaProcessor(processor) && processor != "gfx908";
}

absl::StatusOr<HiprtcCompiler> HiprtcCompiler::Create(
    const HiprtcCompilerOptions& options) {
  HiprtcCompiler compiler;
  TAILOR_ASSIGN_OR_RETURN(compiler.api_, LoadHiprtcApi());
  compiler.flags_ = {"-O3", "-std=c++17"};
  for (const std::string& flag : options.extra_flags) {
    compiler.flags_.push_back(flag);
  }
  compiler.identity_ = absl::StrCat("hiprtc ", compiler.api_->VersionString(),
                                    " (", BaseName(compiler.api_->library_path),
                                    ") ", absl::StrJoin(compiler.flags_, " "));
  for (const tailor::internal::EmbeddedFile& file :
       tailor::internal::EmbeddedFiles()) {
    for (absl::string_view prefix : kHeaderPrefixes) {
      if (absl::StartsWith(file.path, prefix)) {
        // The embedder NUL-terminates every file, as hiprtc wants.
        compiler.header_names_.push_back(file.path);
        compiler.header_contents_.push_back(file.data);
        break;
      }
    }
  }
  return compiler;
}

absl::Status HiprtcCompiler::CheckTarget(absl::string_view target) const {
  TAILOR_RETURN_IF_ERROR(ValidateGfxTarget(target));
  const std::vector<std::string>& known = api_->comgr_targets;
  const absl::string_view processor = GfxProcessor(target);
  if (known.empty() ||
      std::find(known.begin(), known.end(), processor) != known.end()) {
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "target ", processor, ": hiprtc ", api_->VersionString(),
      " cannot compile for it: its code-object manager (", api_->comgr_path,
      ") does not know it (MI300, gfx940/gfx941/gfx942, needs a newer ROCm: "
      "6.0 or later supports MI300X; this comgr knows ",
      absl::StrJoin(known, " "), ")"));
}

absl::StatusOr<HiprtcCompiler::Output> HiprtcCompiler::Compile(
    const tailor::internal::KernelSource& source,
    absl::string_view target) const {
  TAILOR_RETURN_IF_ERROR(CheckTarget(target));
  if (source.entry.empty()) {
    return absl::InvalidArgumentError(
        "source.entry: must name the extern \"C\" kernel, got \"\"");
  }
  const HiprtcApi& api = *api_;
  const std::string program_name = absl::StrCat(source.entry, ".hip");
  hiprtcProgram program = nullptr;
  TAILOR_RETURN_IF_ERROR(HiprtcResultToStatus(
      api.CreateProgram(&program, source.code.c_str(), program_name.c_str(),
                        static_cast<int>(header_names_.size()),
                        // ROCm 5.2 declares these non-const; it only reads.
                        const_cast<const char**>(header_contents_.data()),
                        const_cast<const char**>(header_names_.data())),
      "hiprtcCreateProgram"));
  ProgramGuard guard(api, program);

  const std::string target_flag =
      absl::StrCat("--gpu-architecture=", std::string(target));
  std::vector<const char*> argv = {target_flag.c_str()};
  for (const std::string& flag : flags_) argv.push_back(flag.c_str());
  const int compiled =
      api.CompileProgram(program, static_cast<int>(argv.size()), argv.data());
  Output output;
  output.log = ProgramLog(api, program);
  if (absl::Status status = HiprtcResultToStatus(
          compiled, absl::StrCat("hiprtc: compiling ", source.entry, " for ",
                                 std::string(target)));
      !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), "\n", output.log));
  }
  TAILOR_ASSIGN_OR_RETURN(output.code_object, GetCode(api, program));
  if (output.code_object.empty()) {
    return absl::InternalError(absl::StrCat("hiprtc: compiling ", source.entry,
                                            " for ", std::string(target),
                                            " produced an empty code object"));
  }
  return output;
}

}  // namespace tailor::hip
