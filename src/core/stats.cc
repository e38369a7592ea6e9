#include "core/stats.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/fork_handlers.h"
#include "nlohmann/json.hpp"

namespace tailor::internal {
namespace {

std::vector<double> CompileBounds() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

std::vector<double> LoadBounds() {
  return {0.00001, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1};
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(upper_bounds_.size() + 1) {}

void Histogram::Observe(double value) {
  size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
      upper_bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  double old = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(old, old + value,
                                     std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.upper_bounds = upper_bounds_;
  for (const auto& c : counts_)
    s.counts.push_back(c.load(std::memory_order_relaxed));
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

Stats::Stats()
    : compile_seconds(CompileBounds()), disk_load_seconds(LoadBounds()) {}

void Stats::CountLaunch(OpKind op) {
  size_t index = static_cast<size_t>(op);
  if (index < launches_per_op_.size()) {
    launches_per_op_[index].fetch_add(1, std::memory_order_relaxed);
  }
}

void Stats::NoteSpecialization(const SpecKey& key) {
  absl::MutexLock lock(&specializations_mu_);
  if (!seen_keys_.insert(key.Hash()).second) return;
  if (recorded_keys_.size() < kMaxRecordedKeys) recorded_keys_.push_back(key);
  size_t index = static_cast<size_t>(key.op);
  if (index < specializations_per_op_.size()) ++specializations_per_op_[index];
}

std::vector<SpecKey> Stats::SeenKeys() const {
  absl::MutexLock lock(&specializations_mu_);
  return recorded_keys_;
}

void Stats::PrepareFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  specializations_mu_.Lock();
}

void Stats::AfterForkInParent() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  specializations_mu_.Unlock();
}

void Stats::AfterForkInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Not Unlock: a parent thread may be queued on it (ResetMutexInChild).
  ResetMutexInChild(specializations_mu_);
}

StatsSnapshot Stats::Snapshot() const {
  StatsSnapshot s;
  auto get = [](const std::atomic<uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  };
  s.lookups = get(lookups);
  s.memory_hits = get(memory_hits);
  s.disk_hits = get(disk_hits);
  s.misses = get(misses);
  s.single_flight_waits = get(single_flight_waits);
  s.compiles = get(compiles);
  s.compile_failures = get(compile_failures);
  s.corrupt_entries = get(corrupt_entries);
  s.stale_entries = get(stale_entries);
  s.disk_write_failures = get(disk_write_failures);
  s.disk_evictions = get(disk_evictions);
  s.memory_evictions = get(memory_evictions);
  s.fallback_launches = get(fallback_launches);
  s.pending_compiles = get(pending_compiles);
  s.background_compile_failures = get(background_compile_failures);
  s.plan_useful_rows = get(plan_useful_rows);
  s.plan_executed_rows = get(plan_executed_rows);
  s.workspace_bytes = workspace_bytes->load(std::memory_order_relaxed);
  for (size_t i = 0; i < launches_per_op_.size(); ++i) {
    uint64_t n = get(launches_per_op_[i]);
    if (n == 0) continue;
    s.launches += n;
    s.launches_per_op[std::string(GetOpInfo(static_cast<OpKind>(i)).name)] = n;
  }
  {
    absl::MutexLock lock(&specializations_mu_);
    for (size_t i = 0; i < specializations_per_op_.size(); ++i) {
      if (specializations_per_op_[i] == 0) continue;
      s.specializations_per_op[std::string(
          GetOpInfo(static_cast<OpKind>(i)).name)] = specializations_per_op_[i];
    }
  }
  s.compile_seconds = compile_seconds.Snapshot();
  s.disk_load_seconds = disk_load_seconds.Snapshot();
  return s;
}

}  // namespace tailor::internal

namespace tailor {
namespace {

nlohmann::json HistogramJson(const HistogramSnapshot& h) {
  nlohmann::json buckets = nlohmann::json::array();
  for (size_t i = 0; i < h.counts.size(); ++i) {
    nlohmann::json bound = i < h.upper_bounds.size()
                               ? nlohmann::json(h.upper_bounds[i])
                               : nlohmann::json("+Inf");
    buckets.push_back({{"le", bound}, {"count", h.counts[i]}});
  }
  return {{"count", h.count}, {"sum", h.sum}, {"buckets", buckets}};
}

}  // namespace

std::string StatsSnapshot::ToJson() const {
  nlohmann::json j = {
      {"lookups", lookups},
      {"memory_hits", memory_hits},
      {"disk_hits", disk_hits},
      {"misses", misses},
      {"single_flight_waits", single_flight_waits},
      {"compiles", compiles},
      {"compile_failures", compile_failures},
      {"corrupt_entries", corrupt_entries},
      {"stale_entries", stale_entries},
      {"disk_write_failures", disk_write_failures},
      {"disk_evictions", disk_evictions},
      {"memory_evictions", memory_evictions},
      {"launches", launches},
      {"fallback_launches", fallback_launches},
      {"pending_compiles", pending_compiles},
      {"background_compile_failures", background_compile_failures},
      {"plan_useful_rows", plan_useful_rows},
      {"plan_executed_rows", plan_executed_rows},
      {"workspace_bytes", workspace_bytes},
      {"launches_per_op", launches_per_op},
      {"specializations_per_op", specializations_per_op},
      {"backend_counters", backend_counters},
      {"compile_seconds", HistogramJson(compile_seconds)},
      {"disk_load_seconds", HistogramJson(disk_load_seconds)},
      {"tuning", tuning},
  };
  return j.dump(2);
}

std::string StatsSnapshot::ToPrometheus() const {
  return StatsToPrometheus({{.runtime = "", .stats = *this}});
}

}  // namespace tailor
