// The stats endpoint when tailor is built without cpp-httplib.
#include "serving/stats_endpoint.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<StatsAttachment>> AttachStatsEndpoint(
    absl::string_view address, absl::string_view name,
    std::function<StatsSnapshot()> snapshot) {
  return absl::UnimplementedError(
      "stats_addr: tailor was built without cpp-httplib (Debian: "
      "libcpp-httplib-dev), so it has no stats endpoint");
}

}  // namespace tailor::internal
