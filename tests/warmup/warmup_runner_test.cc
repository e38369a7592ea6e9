// The warm-up's account of itself: the summary table counts exactly the
// problems it lists, and a kernel gone by the end says why it is gone.
#include "warmup/warmup_runner.h"

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "api/internals.h"
#include "core/engine.h"
#include "tailor/runtime.h"
#include "test_util.h"
#include "warmup/kernel_catalog.h"
#include "warmup/profile.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::TempDir;
using ::testing::HasSubstr;

WarmupResult Result(bool ok, bool was_on_disk, bool persisted) {
  SpecKey key = {.op = OpKind::kMoePack, .dtypes = {DType::kF32}};
  key.SetArch("x86_64-znver3");
  WarmupResult r{.key = key};
  if (!ok) r.status = absl::InternalError("compile failed");
  r.precompile.was_on_disk = was_on_disk;
  if (!persisted) r.precompile.persisted = absl::NotFoundError("gone");
  return r;
}

// A kernel found on disk and evicted before the end used to count as "on
// disk" while the problem list named it: the table said 0 not saved.
TEST(WarmupSummaryTest, NotSavedAndFailedCountTheListedProblems) {
  std::vector<WarmupResult> results = {
      Result(true, /*was_on_disk=*/true, /*persisted=*/true),
      Result(true, /*was_on_disk=*/true, /*persisted=*/false),
      Result(true, /*was_on_disk=*/false, /*persisted=*/false),
      Result(true, /*was_on_disk=*/false, /*persisted=*/true),
      Result(false, false, false)};
  WarmupSummary summary = SummarizeWarmup(results, 1.0);
  EXPECT_EQ(summary.ready, 2);
  ASSERT_EQ(summary.problems.size(), 3u);
  std::smatch row;
  ASSERT_TRUE(std::regex_search(
      summary.table, row,
      std::regex(R"(total \(wall 1.00 s\) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+))")))
      << summary.table;
  EXPECT_EQ(row[1], "5");  // variants
  EXPECT_EQ(row[2], "2");  // found on disk
  EXPECT_EQ(row[3], "2");  // compiled
  EXPECT_EQ(row[4], "2");  // not saved: one found, one compiled
  EXPECT_EQ(row[5], "1");  // failed
}

class RecheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.cache_dir = dir_.path() + "/cache";
    options.log_level = "error";
    absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    runtime_ = *std::move(runtime);
    ServingProfile profile = {.moe = {{.experts = 8, .topk = 2, .hidden = 64,
                                       .intermediate = 32,
                                       .dtypes = {DType::kF32},
                                       .routing = {moe::RoutingPolicy{}}}}};
    absl::StatusOr<KernelList> kernels = KernelsForProfile(
        tailor::internal::EngineOf(*runtime_).target(), profile,
        tailor::internal::EngineOf(*runtime_).tuning());
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    jobs_ = {kernels->jobs.front()};  // one kernel is enough
    results_ = PrecompileAll(cache(), jobs_, 1, [](const WarmupProgress&) {});
    ASSERT_TRUE(results_[0].status.ok()) << results_[0].status;
    ASSERT_TRUE(results_[0].precompile.persisted.ok());
  }
  KernelCache& cache() { return tailor::internal::EngineOf(*runtime_).cache(); }
  std::string Recheck(uint64_t evictions) {
    std::vector<WarmupResult> results = results_;
    RecheckOnDisk(cache(), jobs_, evictions, results);
    return std::string(results[0].precompile.persisted.message());
  }

  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<KernelJob> jobs_;
  std::vector<WarmupResult> results_;
};

TEST_F(RecheckTest, SaysWhyAKernelIsGone) {
  EXPECT_EQ(Recheck(0), "");  // still there
  std::filesystem::remove(results_[0].precompile.entry_path);
  EXPECT_EQ(Recheck(3),
            "gone from the disk cache by the end of the warm-up (not in the "
            "disk cache): evicted by the cache's size limit (3 entries were "
            "evicted during the warm-up; TAILOR_CACHE_MAX_SIZE is too small "
            "for this profile)");
  EXPECT_EQ(Recheck(0),
            "gone from the disk cache by the end of the warm-up (not in the "
            "disk cache): removed by another process (this one evicted "
            "nothing)");
}

// A removed cache directory used to be reported as an eviction ("was it
// evicted? ... size limit may be too small") for every kernel.
TEST_F(RecheckTest, RemovedCacheDirectoryIsNamed) {
  std::filesystem::remove_all(dir_.path() + "/cache");
  EXPECT_EQ(Recheck(0), "the cache directory " + dir_.path() +
                            "/cache was removed during the warm-up");
}

}  // namespace
}  // namespace tailor::internal
