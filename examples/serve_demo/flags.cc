#include "flags.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace serve_demo {
namespace {

absl::Status SetBackend(const std::string& name, DemoFlags& flags) {
  if (name == "auto") {
    flags.backend = tailor::BackendKind::kAuto;
  } else if (name == "cpu") {
    flags.backend = tailor::BackendKind::kCpu;
  } else if (name == "cuda") {
    flags.backend = tailor::BackendKind::kCuda;
  } else if (name == "hip") {
    flags.backend = tailor::BackendKind::kHip;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend: must be auto, cpu, cuda or hip, got \"", name, "\""));
  }
  return absl::OkStatus();
}

absl::Status SetSteps(const std::string& text, DemoFlags& flags) {
  int64_t steps = 0;
  if (!absl::SimpleAtoi(text, &steps) || steps < 1 || steps > kMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps: must be an integer in [1, ", kMaxSteps,
                     "], got \"", text, "\""));
  }
  flags.steps = static_cast<int>(steps);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DemoFlags> ParseDemoFlags(int argc, char** argv) {
  DemoFlags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      flags.help = true;
      return flags;
    }
    if (arg != "--steps" && arg != "--backend") {
      return absl::InvalidArgumentError(
          arg.rfind("-", 0) == 0 ? absl::StrCat("unknown flag ", arg)
                                 : absl::StrCat("unexpected argument ", arg));
    }
    if (i + 1 >= argc)
      return absl::InvalidArgumentError(absl::StrCat(arg, ": needs a value"));
    const std::string value = argv[++i];
    absl::Status set =
        arg == "--steps" ? SetSteps(value, flags) : SetBackend(value, flags);
    if (!set.ok()) return set;
  }
  return flags;
}

}  // namespace serve_demo
