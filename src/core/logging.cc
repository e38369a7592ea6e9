#include "core/logging.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/fork_handlers.h"
#include "spdlog/details/console_globals.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace tailor::internal {
namespace {

// spdlog's console sinks write under one process-wide mutex. A fork() while
// another thread writes a line would leave it locked forever in the child:
// hold it across the fork instead (core/fork_handlers.h). Registered before
// any Engine, so it is taken after the engines are quiesced (they log).
class ConsoleMutexAcrossFork final : public ForkParticipant {
 public:
  void Prepare() override { spdlog::details::console_mutex::mutex().lock(); }
  void AfterInParent() override {
    spdlog::details::console_mutex::mutex().unlock();
  }
  void AfterInChild() override {
    spdlog::details::console_mutex::mutex().unlock();
  }
};

}  // namespace

spdlog::logger& Logger() {
  static spdlog::logger* logger = [] {
    RegisterForkParticipant(new ConsoleMutexAcrossFork());  // lives forever
    std::shared_ptr<spdlog::logger> existing = spdlog::get("tailor");
    if (existing == nullptr) existing = spdlog::stderr_color_mt("tailor");
    existing->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [tailor] [%l] %v");
    return existing.get();  // kept alive by spdlog's registry
  }();
  return *logger;
}

absl::Status SetLogLevel(absl::string_view level) {
  constexpr absl::string_view kLevels =
      "trace, debug, info, warn, error, critical, off";
  auto parse = [](const std::string& name) {
    spdlog::level::level_enum parsed = spdlog::level::from_str(name);
    bool known = parsed != spdlog::level::off || name == "off";
    return known ? std::optional(parsed) : std::nullopt;
  };
  if (!level.empty()) {
    std::optional<spdlog::level::level_enum> parsed = parse(std::string(level));
    if (!parsed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "log_level: must be one of ", kLevels, "; got \"", level, "\""));
    }
    Logger().set_level(*parsed);
    return absl::OkStatus();
  }
  const char* env = std::getenv("TAILOR_LOG_LEVEL");
  std::string name = env != nullptr && *env != '\0' ? env : "info";
  std::optional<spdlog::level::level_enum> parsed = parse(name);
  if (!parsed) {
    // A typo in the environment must not stop a server, nor pass unseen.
    Logger().set_level(spdlog::level::info);
    Logger().warn(
        "TAILOR_LOG_LEVEL=\"{}\" is not a log level (one of {}); using info",
        name, kLevels);
    return absl::OkStatus();
  }
  Logger().set_level(*parsed);
  return absl::OkStatus();
}

}  // namespace tailor::internal
