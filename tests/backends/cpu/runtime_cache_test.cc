// The kernel cache through a real Runtime on the CPU backend: single flight,
// disk reuse across processes, every disk failure mode, TAILOR_DISABLE_JIT,
// and option validation. Stats are asserted exactly.
#include <stdio.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "api/internals.h"
#include "core/disk_eviction.h"
#include "core/engine.h"
#include "core/kernel_cache.h"
#include "kernels/test_ops.h"
#include "nlohmann/json.hpp"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TempDir;
using ::testing::HasSubstr;

std::unique_ptr<Runtime> MakeRuntime(const std::string& cache_dir,
                                     bool disable_jit = false) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = cache_dir;
  options.disable_jit = disable_jit;
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

// Runs y = 2x + y on 100 elements and checks the result.
absl::Status RunAxpy(Runtime& runtime, int block = 64) {
  std::vector<float> x(100, 1.0f), y(100, 0.5f);
  absl::Status s = internal::Axpy(
      runtime, 2.0f, TensorRef::Contiguous(x.data(), DType::kF32, {100}),
      TensorRef::Contiguous(y.data(), DType::kF32, {100}), block);
  if (s.ok() && y[99] != 2.5f) return absl::InternalError("wrong axpy result");
  return s;
}

void ExpectLookupInvariant(const StatsSnapshot& s) {
  EXPECT_EQ(s.lookups, s.memory_hits + s.disk_hits + s.misses);
}

// Every file of the cache directory but the size limit's counter.
std::vector<std::string> EntryFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() == internal::kSizeCounterFile) continue;
    files.push_back(e.path());
  }
  return files;
}

TEST(RuntimeCacheTest, MemoryHitAfterCompile) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path());
  TAILOR_ASSERT_OK(RunAxpy(*runtime));
  TAILOR_ASSERT_OK(RunAxpy(*runtime));
  TAILOR_ASSERT_OK(RunAxpy(*runtime, 128));  // another specialization
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.lookups, 3u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.compiles, 2u);
  EXPECT_EQ(s.launches, 3u);
  EXPECT_EQ(s.specializations_per_op.at("test.axpy"), 2u);
  EXPECT_EQ(s.compile_seconds.count, 2u);
  ExpectLookupInvariant(s);
}

TEST(RuntimeCacheTest, SixteenThreadsMissingOneKeyCompileOnce) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path());
  constexpr int kThreads = 16;
  absl::Barrier* start = new absl::Barrier(kThreads);
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (start->Block()) delete start;
      results[t] = RunAxpy(*runtime);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) TAILOR_EXPECT_OK(r);
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.lookups, 16u);
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.memory_hits, 15u);
  EXPECT_EQ(s.launches, 16u);
  ExpectLookupInvariant(s);
}

TEST(RuntimeCacheTest, SecondRuntimeLoadsFromDiskWithoutCompiling) {
  TempDir dir;
  TAILOR_ASSERT_OK(RunAxpy(*MakeRuntime(dir.path())));
  auto second = MakeRuntime(dir.path());
  TAILOR_ASSERT_OK(RunAxpy(*second));
  StatsSnapshot s = second->stats();
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.disk_load_seconds.count, 1u);
  ExpectLookupInvariant(s);
}

nlohmann::json RunProbe(const std::string& dir) {
  std::string command = std::string(TAILOR_CACHE_PROBE_PATH) + " " + dir;
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  return nlohmann::json::parse(out);
}

TEST(RuntimeCacheTest, SecondProcessLoadsFromDiskWithZeroCompiles) {
  TempDir dir;
  nlohmann::json first = RunProbe(dir.path());
  EXPECT_EQ(first["compiles"], 1);
  EXPECT_EQ(first["disk_hits"], 0);
  nlohmann::json second = RunProbe(dir.path());
  EXPECT_EQ(second["compiles"], 0);
  EXPECT_EQ(second["disk_hits"], 1);
  EXPECT_EQ(second["misses"], 0);
}

// Several processes starting cold on one cache directory: all succeed, one
// good entry remains (last rename wins; all are identical), no temp files.
TEST(RuntimeCacheTest, ConcurrentProcessesShareOneCache) {
  TempDir dir;
  std::string command = std::string(TAILOR_CACHE_PROBE_PATH) + " " + dir.path();
  std::vector<FILE*> probes;
  for (int i = 0; i < 4; ++i) probes.push_back(popen(command.c_str(), "r"));
  for (FILE* p : probes) {
    char buf[4096];
    while (fread(buf, 1, sizeof(buf), p) > 0) {
    }
    EXPECT_EQ(pclose(p), 0);
  }
  std::vector<std::string> files = EntryFiles(dir.path());
  ASSERT_EQ(files.size(), 1u) << "temp files left behind?";
  EXPECT_TRUE(files[0].ends_with(".tkc"));
  nlohmann::json after = RunProbe(dir.path());
  EXPECT_EQ(after["compiles"], 0);
  EXPECT_EQ(after["disk_hits"], 1);
}

// Each damaged entry is a counted miss: recompiled, replaced, never loaded.
class DamagedEntryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TAILOR_ASSERT_OK(RunAxpy(*MakeRuntime(dir_.path())));
    auto files = EntryFiles(dir_.path());
    ASSERT_EQ(files.size(), 1u);
    entry_ = files[0];
    std::ifstream in(entry_, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
  }
  void Overwrite(const std::string& bytes) {
    std::ofstream(entry_, std::ios::binary | std::ios::trunc) << bytes;
  }
  // Runs a fresh runtime and checks it recompiled and rewrote a good entry.
  void ExpectRecompiled(uint64_t corrupt, uint64_t stale) {
    auto runtime = MakeRuntime(dir_.path());
    TAILOR_ASSERT_OK(RunAxpy(*runtime));
    StatsSnapshot s = runtime->stats();
    EXPECT_EQ(s.corrupt_entries, corrupt);
    EXPECT_EQ(s.stale_entries, stale);
    EXPECT_EQ(s.disk_hits, 0u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.compiles, 1u);
    ExpectLookupInvariant(s);
    // Replaced: the next runtime loads it from disk.
    auto third = MakeRuntime(dir_.path());
    TAILOR_ASSERT_OK(RunAxpy(*third));
    EXPECT_EQ(third->stats().disk_hits, 1u);
  }
  TempDir dir_;
  std::string entry_;
  std::string bytes_;
};

TEST_F(DamagedEntryTest, Truncated) {
  Overwrite(bytes_.substr(0, bytes_.size() / 2));
  ExpectRecompiled(1, 0);
}

TEST_F(DamagedEntryTest, EmptyFile) {
  Overwrite("");
  ExpectRecompiled(1, 0);
}

TEST_F(DamagedEntryTest, BitFlippedPayload) {
  std::string flipped = bytes_;
  flipped[flipped.size() - 10] ^= 0x10;
  Overwrite(flipped);
  ExpectRecompiled(1, 0);
}

TEST_F(DamagedEntryTest, WrongFormatVersion) {
  std::string other = bytes_;
  other[8] = 9;
  Overwrite(other);
  ExpectRecompiled(0, 1);
}

TEST_F(DamagedEntryTest, WrongArch) {
  std::string other = bytes_;
  size_t pos = other.find("arch=");
  ASSERT_NE(pos, std::string::npos);
  other[pos + 5] = 'y';  // header checksum now fails too: still never loaded
  Overwrite(other);
  ExpectRecompiled(1, 0);
}

TEST_F(DamagedEntryTest, SymlinkIsNotFollowed) {
  std::string target = entry_ + ".real";
  ASSERT_EQ(rename(entry_.c_str(), target.c_str()), 0);
  ASSERT_EQ(symlink(target.c_str(), entry_.c_str()), 0);
  auto runtime = MakeRuntime(dir_.path());
  TAILOR_ASSERT_OK(RunAxpy(*runtime));
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.corrupt_entries, 1u);
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.disk_hits, 0u);
}

TEST(RuntimeCacheTest, HostileDirectoryFallsBackToMemory) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  auto runtime = MakeRuntime(dir.path());
  EXPECT_EQ(runtime->cache_dir(), "");
  TAILOR_ASSERT_OK(RunAxpy(*runtime));
  TAILOR_ASSERT_OK(RunAxpy(*runtime));
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_TRUE(EntryFiles(dir.path()).empty());
}

TEST(RuntimeCacheTest, DisableJitMakesAMissingKernelAnError) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path(), /*disable_jit=*/true);
  EXPECT_THAT(
      RunAxpy(*runtime),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          HasSubstr("TAILOR_DISABLE_JIT is set and kernel test.axpy/cpu/")));
  EXPECT_EQ(runtime->stats().compiles, 0u);
  // Precompiled (by a JIT-enabled runtime): served from disk.
  TAILOR_ASSERT_OK(RunAxpy(*MakeRuntime(dir.path())));
  auto strict = MakeRuntime(dir.path(), /*disable_jit=*/true);
  TAILOR_ASSERT_OK(RunAxpy(*strict));
  EXPECT_EQ(strict->stats().disk_hits, 1u);
}

TEST(RuntimeCacheTest, DisableJitFromTheEnvironment) {
  TempDir dir;
  setenv("TAILOR_DISABLE_JIT", "1", 1);
  auto runtime = MakeRuntime(dir.path());
  unsetenv("TAILOR_DISABLE_JIT");
  EXPECT_THAT(RunAxpy(*runtime),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("precompile it with tailor-warmup")));
}

TEST(RuntimeCacheTest, LruEvictionKeepsCapacity) {
  TempDir dir;
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = dir.path();
  options.memory_cache_capacity = 2;
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok());
  for (int block : {64, 128, 256, 64})
    TAILOR_ASSERT_OK(RunAxpy(**runtime, block));
  StatsSnapshot s = (*runtime)->stats();
  EXPECT_EQ(s.memory_evictions, 2u);
  EXPECT_EQ(s.compiles, 3u);
  EXPECT_EQ(s.disk_hits, 1u);  // 64 was evicted, then reloaded from disk
  EXPECT_EQ(tailor::internal::EngineOf(**runtime).cache().memory_size(), 2u);
}

TEST(RuntimeOptionsTest, BadOptionsAreNamed) {
  auto expect_bad = [](Runtime::Options o, const std::string& message) {
    EXPECT_THAT(Runtime::Create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr(message)));
  };
  Runtime::Options o;
  o.memory_cache_capacity = 0;
  expect_bad(o, "memory_cache_capacity: must be >= 1, got 0");
  o = {};
  o.device_index = -1;
  expect_bad(o, "device_index: must be >= 0, got -1");
  o = {};
  o.backend = BackendKind::kCpu;
  o.device_index = 1;
  expect_bad(o, "device_index: must be 0 for the cpu backend, got 1");
  o = {};
  o.compile_threads = -3;
  expect_bad(o, "compile_threads: must be in [0, 1024], got -3");
  o = {};
  o.log_level = "loud";
  expect_bad(o,
             "log_level: must be one of trace, debug, info, warn, error, "
             "critical, off");
  o = {};
  o.backend = static_cast<BackendKind>(9);
  expect_bad(o, "backend: must be kAuto, kCpu, kCuda or kHip");
}

TEST(RuntimeOptionsTest, HipIsUnavailable) {
  Runtime::Options o;
  o.backend = BackendKind::kHip;
  EXPECT_THAT(Runtime::Create(o),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("hip")));
}

TEST(RuntimeOptionsTest, AutoPicksAnAvailableBackend) {
  Runtime::Options o;
  o.disable_disk_cache = true;
  o.log_level = "error";
  auto runtime = Runtime::Create(o);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_NE((*runtime)->backend(), BackendKind::kAuto);
}

TEST(OpValidationTest, AxpyRejectsBadInput) {
  auto runtime = MakeRuntime("", false);
  std::vector<float> x(8), y(9);
  auto tx = TensorRef::Contiguous(x.data(), DType::kF32, {8});
  auto ty = TensorRef::Contiguous(y.data(), DType::kF32, {9});
  EXPECT_THAT(
      internal::Axpy(*runtime, 1, tx, ty),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("y: dims[0] must equal x.dims[0] (8), got 9")));
  EXPECT_THAT(
      internal::Axpy(*runtime, 1, tx, tx, 12),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("block: must be a multiple of 8 in [8, 65536], got 12")));
  TensorRef huge = tx;
  huge.dims[0] = int64_t{1} << 40;  // never dereferenced: rejected first
  EXPECT_THAT(internal::Axpy(*runtime, 1, huge, huge, 8),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x: dims[0] / block must fit a 32-bit grid")));
  EXPECT_EQ(runtime->stats().lookups, 0u);  // rejected before any lookup
}

}  // namespace
}  // namespace tailor
