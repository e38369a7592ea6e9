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

// Sets the level from a name (trace, debug, info, warn, error, critical, off).
// Empty: $TAILOR_LOG_LEVEL, else "info". InvalidArgument for unknown names.
absl::Status SetLogLevel(absl::string_view level);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_LOGGING_H_
