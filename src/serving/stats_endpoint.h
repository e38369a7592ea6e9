// serving/stats_endpoint.h — the opt-in HTTP stats endpoint of a process.
//
// One endpoint per listening address serves every runtime attached to it:
//   GET /metrics  Prometheus text exposition (StatsToPrometheus), each
//                 sample labelled runtime="<device>" ("cpu", "cuda:0", ...)
//   GET /stats    {"runtimes": {"<device>": <StatsSnapshot::ToJson>, ...}}
//   GET /healthz  "ok"
// Requests are answered on the endpoint's own two threads from snapshots
// (relaxed atomic loads), so a launching thread never waits for it. The
// first attachment to an address starts the endpoint; the last detachment
// stops it. Runtime::Create attaches when Options::stats_addr (or
// $TAILOR_STATS_ADDR) is set; ~Runtime detaches.
#ifndef TAILOR_SERVING_STATS_ENDPOINT_H_
#define TAILOR_SERVING_STATS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tailor/stats.h"

namespace tailor::internal {

// A runtime's place on an endpoint; destroying it detaches the runtime
// (waiting for a request that is reading its snapshot).
class StatsAttachment {
 public:
  virtual ~StatsAttachment() = default;
  // The address the endpoint listens on, port resolved: "127.0.0.1:9464".
  virtual const std::string& address() const = 0;
};

// Serves `snapshot()` (called on the endpoint's threads, while attached) as
// runtime `name` on the endpoint at `address`: "host:port", ":port" or
// "port" (host 127.0.0.1); port 0 starts a new endpoint on a free port.
// InvalidArgument("stats_addr: ...") for an address that does not parse;
// Unavailable when it cannot listen there; Unimplemented when tailor was
// built without cpp-httplib.
absl::StatusOr<std::unique_ptr<StatsAttachment>> AttachStatsEndpoint(
    absl::string_view address, absl::string_view name,
    std::function<StatsSnapshot()> snapshot);

}  // namespace tailor::internal

#endif  // TAILOR_SERVING_STATS_ENDPOINT_H_
