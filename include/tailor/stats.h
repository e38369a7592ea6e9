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
  uint64_t descriptor_encodes = 0;
  uint64_t descriptor_reuses = 0;
  std::map<std::string, uint64_t> launches_per_op;
  std::map<std::string, uint64_t> specializations_per_op;  // distinct keys seen
  HistogramSnapshot compile_seconds;
  HistogramSnapshot disk_load_seconds;

  std::string ToJson() const;
  std::string ToPrometheus() const;
};

}  // namespace tailor

#endif  // TAILOR_STATS_H_
