// core/logging.h — the one "tailor" spdlog logger.
#ifndef TAILOR_CORE_LOGGING_H_
#define TAILOR_CORE_LOGGING_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Lets log lines format absl::string_view (Debian's Abseil has its own type).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(
        fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace tailor::internal {

// The process-wide logger named "tailor" (stderr, created on first use).
spdlog::logger& Logger();

// Sets the level from a name (trace, debug, info, warn, error, critical, off;
// "warning" and "err" too). InvalidArgument for an unknown name. Empty:
// $TAILOR_LOG_LEVEL, else "info"; an unknown $TAILOR_LOG_LEVEL is logged as a
// warning and "info" applies (a typo in the environment must not stop a
// server from starting, nor go unnoticed).
absl::Status SetLogLevel(absl::string_view level);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_LOGGING_H_
