// tailor/stats.h — counters and histograms a Runtime keeps, as a snapshot.
//
// Every kernel lookup ends in exactly one of: a memory hit, a disk hit, or a
// miss (which compiles, or fails). So lookups == memory_hits + disk_hits +
// misses, always. Threads that waited for another thread's in-flight compile
// of the same key count as memory hits (and in single_flight_waits).
//
// Example:
//   tailor::StatsSnapshot s = runtime->stats();
//   std::string json = s.ToJson();          // for logs and the stats endpoint
//   std::string prom = s.ToPrometheus();    // Prometheus text exposition
//
// Runtime::Options::stats_addr (or $TAILOR_STATS_ADDR) serves the same
// over HTTP: /metrics, /stats (JSON), /healthz.
#ifndef TAILOR_STATS_H_
#define TAILOR_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tailor {

struct HistogramSnapshot {
  std::vector<double> upper_bounds;  // seconds; ascending; +Inf implicit
  std::vector<uint64_t>
      counts;  // per bucket, non-cumulative; size = bounds + 1
  uint64_t count = 0;
  double sum = 0;
};

struct StatsSnapshot {
  uint64_t lookups = 0;
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;
  uint64_t single_flight_waits = 0;
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  uint64_t corrupt_entries =
      0;                       // bad magic/size/checksum: recompiled, replaced
  uint64_t stale_entries = 0;  // other version/compiler/arch/source: replaced
  uint64_t disk_write_failures = 0;
  uint64_t disk_evictions = 0;  // entries this process evicted (size limit)
  uint64_t memory_evictions = 0;
  uint64_t launches = 0;
  // Background JIT (Runtime::Options::jit_mode): launches of a generic
  // kernel standing in for a specialization not ready yet (0 once every
  // kernel in use has landed); resolves queued or compiling now; background
  // compiles that failed (one per key: its generic kernel keeps serving).
  uint64_t fallback_launches = 0;
  uint64_t pending_compiles = 0;
  uint64_t background_compile_failures = 0;
  // Rows of the piecewise plans made on the host (Route, PlanRows): what the
  // layer needs (useful) and what the grouped GEMMs run, tail padding
  // included (executed). Device plans live on the device and are not
  // counted. Wasted rows = executed - useful.
  uint64_t plan_useful_rows = 0;
  uint64_t plan_executed_rows = 0;
  // Bytes (host or device) held now by the MoE workspaces reserved or bound
  // through this runtime (as of each one's last ReserveWorkspace /
  // BindWorkspace); freed workspaces no longer count.
  int64_t workspace_bytes = 0;
  std::map<std::string, uint64_t> launches_per_op;
  std::map<std::string, uint64_t> specializations_per_op;  // distinct keys seen
  // Counters of the runtime's backend, "<backend>.<counter>" -> value; empty
  // for a backend without any (cpu). CUDA: its TMA descriptor pool's
  // cuda.descriptor_{encodes,reuses,evictions,rejections,encode_failures}.
  // A backend adds names without changing this struct.
  std::map<std::string, uint64_t> backend_counters;
  HistogramSnapshot compile_seconds;
  HistogramSnapshot disk_load_seconds;
  // The runtime's active tuning overrides (Runtime::Options::tuning), key
  // -> value; empty when none is set.
  std::map<std::string, std::string> tuning;

  std::string ToJson() const;
  // The Prometheus text exposition (version 0.0.4): StatsToPrometheus of
  // this snapshot alone, without a runtime label.
  std::string ToPrometheus() const;
};

// One runtime's snapshot, labelled runtime="<name>" in an exposition of
// several ("" for no label).
struct NamedStats {
  std::string runtime;
  StatsSnapshot stats;
};

// The Prometheus text exposition of several runtimes (e.g. one per device,
// as the stats endpoint serves them): every family once, with HELP and
// TYPE, then its samples for each runtime. Families:
//   tailor_kernel_lookups_total, tailor_kernel_hits_total{tier=memory|disk},
//   tailor_kernel_misses_total, tailor_kernel_single_flight_waits_total,
//   tailor_kernel_compiles_total, tailor_kernel_compile_failures_total,
//   tailor_kernel_evictions_total{tier=memory},
//   tailor_disk_{corrupt_entries,stale_entries,write_failures}_total,
//   tailor_launches_total{op}, tailor_kernel_specializations{op} (gauge),
//   tailor_backend_events_total{counter} (backend_counters),
//   tailor_plan_rows_total{kind=useful|executed},
//   tailor_workspace_bytes (gauge),
//   tailor_compile_seconds, tailor_disk_load_seconds (histograms),
//   tailor_tuning_override{key,value} (gauge, 1 per active override),
//   tailor_build_info{version} (gauge, 1).
std::string StatsToPrometheus(const std::vector<NamedStats>& runtimes);

}  // namespace tailor

#endif  // TAILOR_STATS_H_
