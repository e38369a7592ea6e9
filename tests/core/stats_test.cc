#include "core/stats.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::testing::HasSubstr;

TEST(StatsTest, SnapshotCountsAndPerOpMaps) {
  Stats stats;
  stats.Add(stats.lookups, 5);
  stats.Add(stats.memory_hits, 3);
  stats.Add(stats.misses, 2);
  stats.CountLaunch(OpKind::kMoePack);
  stats.CountLaunch(OpKind::kMoePack);
  stats.CountLaunch(OpKind::kMoeCombine);
  SpecKey a;
  a.op = OpKind::kMoePack;
  SpecKey b = a;
  b.dims[0] = 7;
  stats.NoteSpecialization(a);
  stats.NoteSpecialization(a);  // same key: counted once
  stats.NoteSpecialization(b);
  StatsSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.lookups, 5u);
  EXPECT_EQ(s.launches, 3u);
  EXPECT_EQ(s.launches_per_op.at("moe.pack"), 2u);
  EXPECT_EQ(s.launches_per_op.at("moe.combine"), 1u);
  EXPECT_EQ(s.specializations_per_op.at("moe.pack"), 2u);
}

TEST(StatsTest, HistogramBuckets) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // upper bounds are inclusive (Prometheus "le")
  h.Observe(0.5);
  h.Observe(7);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 7.65);
}

TEST(StatsTest, PrometheusExposition) {
  Stats stats;
  stats.Add(stats.compiles, 2);
  stats.compile_seconds.Observe(0.02);
  stats.compile_seconds.Observe(3);
  stats.CountLaunch(OpKind::kMoeGroupedGemm);
  std::string text = stats.Snapshot().ToPrometheus();
  EXPECT_THAT(text, HasSubstr("# TYPE tailor_kernel_compiles_total counter\n"
                              "tailor_kernel_compiles_total 2\n"));
  EXPECT_THAT(text,
              HasSubstr("tailor_launches_total{op=\"moe.grouped_gemm\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tailor_compile_seconds histogram\n"));
  EXPECT_THAT(text,
              HasSubstr("tailor_compile_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("tailor_compile_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tailor_compile_seconds_count 2\n"));
}

// Backend counters are a map by name: JSON keeps the names, Prometheus has
// one family with a sample per counter.
TEST(StatsTest, BackendCountersByName) {
  Stats stats;
  StatsSnapshot s = stats.Snapshot();
  EXPECT_TRUE(s.backend_counters.empty());
  s.backend_counters["cuda.descriptor_encodes"] = 3;
  s.backend_counters["cuda.descriptor_reuses"] = 40;
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["backend_counters"],
            nlohmann::json::parse(R"({"cuda.descriptor_encodes": 3,
                                      "cuda.descriptor_reuses": 40})"));
  EXPECT_FALSE(j.contains("descriptor_encodes"));
  EXPECT_THAT(
      s.ToPrometheus(),
      HasSubstr("# TYPE tailor_backend_events_total counter\n"
                "tailor_backend_events_total{counter=\"cuda.descriptor_"
                "encodes\"} 3\n"
                "tailor_backend_events_total{counter=\"cuda.descriptor_"
                "reuses\"} 40\n"));
}

TEST(StatsTest, JsonIsParseableAndComplete) {
  Stats stats;
  stats.Add(stats.disk_hits, 4);
  nlohmann::json j = nlohmann::json::parse(stats.Snapshot().ToJson());
  EXPECT_EQ(j["disk_hits"], 4);
  for (const char* key :
       {"lookups", "memory_hits", "misses", "compiles", "compile_failures",
        "corrupt_entries", "stale_entries", "launches",
        "specializations_per_op", "backend_counters", "compile_seconds"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

}  // namespace
}  // namespace tailor::internal
