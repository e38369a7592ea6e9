// core/stats.h — the live counters behind tailor::StatsSnapshot.
//
// Counters are relaxed atomics (incremented on hot paths, read by snapshot);
// the per-op maps are fixed arrays indexed by OpKind so that counting a launch
// never allocates or locks.
#ifndef TAILOR_CORE_STATS_H_
#define TAILOR_CORE_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/spec_key.h"
#include "tailor/stats.h"

namespace tailor::internal {

// Fixed-bucket histogram; Observe is lock-free.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  HistogramSnapshot Snapshot() const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // bounds + 1 (+Inf)
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// One holder's share of a gauge (e.g. a workspace's bytes in
// Stats::workspace_bytes): Set replaces the share, destruction removes it.
class GaugeShare {
 public:
  GaugeShare() = default;
  GaugeShare(const GaugeShare&) = delete;
  GaugeShare& operator=(const GaugeShare&) = delete;
  ~GaugeShare() { Set(nullptr, 0); }

  void Set(std::shared_ptr<std::atomic<int64_t>> gauge, int64_t value) {
    if (gauge_) gauge_->fetch_sub(value_, std::memory_order_relaxed);
    gauge_ = std::move(gauge);
    value_ = gauge_ ? value : 0;
    if (gauge_) gauge_->fetch_add(value_, std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<std::atomic<int64_t>> gauge_;
  int64_t value_ = 0;
};

class Stats {
 public:
  Stats();

  void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  void CountLaunch(OpKind op);
  // Records `key` as a specialization of its op if not seen before.
  void NoteSpecialization(const SpecKey& key);
  // Every key NoteSpecialization recorded (at most kMaxRecordedKeys), in
  // the order first seen.
  std::vector<SpecKey> SeenKeys() const;

  // Keys kept for SeenKeys(); later ones are still counted per op.
  static constexpr size_t kMaxRecordedKeys = size_t{1} << 16;

  StatsSnapshot Snapshot() const;

  // Around fork() (core/fork_handlers.h, called by the Engine): the
  // specializations lock is taken before and released after, in both
  // processes.
  void PrepareFork();
  void AfterForkInParent();
  void AfterForkInChild();

  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> memory_hits{0};
  std::atomic<uint64_t> disk_hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> single_flight_waits{0};
  std::atomic<uint64_t> compiles{0};
  std::atomic<uint64_t> compile_failures{0};
  std::atomic<uint64_t> corrupt_entries{0};
  std::atomic<uint64_t> stale_entries{0};
  std::atomic<uint64_t> disk_write_failures{0};
  std::atomic<uint64_t> disk_evictions{0};
  std::atomic<uint64_t> memory_evictions{0};
  // Background JIT: launches of a generic kernel standing in for a
  // specialization not ready yet; resolves queued or running; background
  // resolves that failed (one per key).
  std::atomic<uint64_t> fallback_launches{0};
  std::atomic<uint64_t> pending_compiles{0};
  std::atomic<uint64_t> background_compile_failures{0};
  std::atomic<uint64_t> plan_useful_rows{0};
  std::atomic<uint64_t> plan_executed_rows{0};
  // Shared with the workspaces that hold a share of it (GaugeShare), so
  // either may outlive the other.
  std::shared_ptr<std::atomic<int64_t>> workspace_bytes =
      std::make_shared<std::atomic<int64_t>>(0);
  Histogram compile_seconds;
  Histogram disk_load_seconds;

 private:
  std::array<std::atomic<uint64_t>, kNumOpKinds> launches_per_op_{};
  mutable absl::Mutex specializations_mu_;
  absl::flat_hash_set<Hash128> seen_keys_ ABSL_GUARDED_BY(specializations_mu_);
  std::vector<SpecKey> recorded_keys_ ABSL_GUARDED_BY(specializations_mu_);
  std::array<uint64_t, kNumOpKinds> specializations_per_op_
      ABSL_GUARDED_BY(specializations_mu_) = {};
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_STATS_H_
