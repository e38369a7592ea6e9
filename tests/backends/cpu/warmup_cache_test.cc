// The kernel cache's warm-up side on the CPU backend: Precompile and
// CheckOnDisk, the history of used keys, the disk size limit (recency on
// memory hits; eviction shared by four processes) and the size knob.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cpu/moe/kernels.h"
#include "core/disk_cache.h"
#include "core/disk_eviction.h"
#include "core/engine.h"
#include "core/kernel_cache.h"
#include "core/logging.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"
#include "warmup/history.h"

namespace tailor {
namespace {

using internal::KernelCache;
using internal::KernelSource;
using internal::SpecKey;
using ::tailor::testing::StatusIs;
using ::tailor::testing::TempDir;
using ::testing::HasSubstr;

std::unique_ptr<Runtime> MakeRuntime(const std::string& cache_dir,
                                     uint64_t cache_max_bytes = 0,
                                     bool disable_jit = false) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = cache_dir;
  options.cache_max_bytes = cache_max_bytes;
  options.disable_jit = disable_jit;
  options.cpu_threads = 1;
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

SpecKey PackKey(Runtime& runtime, int64_t hidden) {
  return internal::cpu::PackKey(tailor::internal::EngineOf(runtime).target(),
                                DType::kF32, hidden);
}

absl::StatusOr<KernelSource> BrokenSource(const SpecKey&) {
  return KernelSource{.code = "this is not C++;\n", .entry = "tailor_entry"};
}

// Packs 3 rows of width `hidden` and checks them.
absl::Status RunPack(Runtime& runtime, int64_t hidden) {
  std::vector<float> x(3 * hidden), a(3 * hidden, -1);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::vector<int32_t> permutation = {2, 0, 1};  // topk 1: rows 2, 0, 1
  absl::Status s = moe::Pack(
      runtime,
      {.hidden = TensorRef::Contiguous(x.data(), DType::kF32, {3, hidden}),
       .permutation =
           TensorRef::Contiguous(permutation.data(), DType::kI32, {3}),
       .topk = 1,
       .a = TensorRef::Contiguous(a.data(), DType::kF32, {3, hidden})});
  if (s.ok() && (a[0] != x[2 * hidden] || a[hidden] != x[0]))
    return absl::InternalError("wrong pack result");
  return s;
}

TEST(PrecompileTest, WritesWithoutLoadingThenFindsItOnDisk) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path());
  KernelCache& cache = tailor::internal::EngineOf(*runtime).cache();
  SpecKey key = PackKey(*runtime, 64);
  EXPECT_THAT(cache.CheckOnDisk(key, internal::cpu::GenerateMoeKernel),
              StatusIs(absl::StatusCode::kNotFound, "not in the disk cache"));

  auto first = cache.Precompile(key, internal::cpu::GenerateMoeKernel);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->was_on_disk);
  TAILOR_EXPECT_OK(first->persisted);
  EXPECT_GT(first->compile_seconds, 0);
  EXPECT_GT(first->compile_cpu_seconds, 0);
  EXPECT_TRUE(std::filesystem::exists(first->entry_path));
  EXPECT_EQ(cache.memory_size(), 0u);  // nothing loaded
  TAILOR_EXPECT_OK(cache.CheckOnDisk(key, internal::cpu::GenerateMoeKernel));

  auto second = cache.Precompile(key, internal::cpu::GenerateMoeKernel);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->was_on_disk);
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.lookups, 0u);  // precompiling is not a lookup

  // A damaged entry is reported, then repaired by the next Precompile.
  std::filesystem::resize_file(
      first->entry_path, std::filesystem::file_size(first->entry_path) - 8);
  EXPECT_THAT(
      cache.CheckOnDisk(key, internal::cpu::GenerateMoeKernel),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt: payload is ")));
  auto repaired = cache.Precompile(key, internal::cpu::GenerateMoeKernel);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_FALSE(repaired->was_on_disk);
  EXPECT_EQ(runtime->stats().corrupt_entries, 1u);
  TAILOR_EXPECT_OK(cache.CheckOnDisk(key, internal::cpu::GenerateMoeKernel));
}

TEST(PrecompileTest, ABrokenTemplateIsAnErrorWithTheCompilerLog) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path());
  auto result = tailor::internal::EngineOf(*runtime).cache().Precompile(
      PackKey(*runtime, 64), BrokenSource);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kInternal,
                               HasSubstr("kernel failed to compile:")));
  EXPECT_EQ(runtime->stats().compile_failures, 1u);
}

TEST(PrecompileTest, NeedsADiskAndTheJit) {
  TempDir dir;
  auto strict = MakeRuntime(dir.path(), 0, /*disable_jit=*/true);
  EXPECT_THAT(
      tailor::internal::EngineOf(*strict).cache().Precompile(
          PackKey(*strict, 64), internal::cpu::GenerateMoeKernel),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("TAILOR_DISABLE_JIT is set and kernel moe.pack/")));
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.log_level = "error";
  auto memory_only = Runtime::Create(options);
  ASSERT_TRUE(memory_only.ok());
  EXPECT_THAT(tailor::internal::EngineOf(**memory_only)
                  .cache()
                  .Precompile(PackKey(**memory_only, 64),
                              internal::cpu::GenerateMoeKernel),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the disk cache is off, so nothing would "
                                 "persist")));
}

TEST(RuntimeHistoryTest, ListsExactlyTheKeysARuntimeUsed) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path());
  TAILOR_ASSERT_OK(RunPack(*runtime, 64));
  TAILOR_ASSERT_OK(RunPack(*runtime, 64));  // a memory hit: no new key
  TAILOR_ASSERT_OK(RunPack(*runtime, 72));
  absl::StatusOr<internal::History> history =
      internal::ParseHistory(runtime->SpecializationHistoryJson());
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_EQ(history->backend, BackendKind::kCpu);
  EXPECT_EQ(history->arch, runtime->arch());
  EXPECT_EQ(history->tailor_version, "0.1.0");
  EXPECT_THAT(history->keys, ::testing::ElementsAre(PackKey(*runtime, 64),
                                                    PackKey(*runtime, 72)));
  // A second runtime that loads them from disk reports them too.
  auto second = MakeRuntime(dir.path());
  TAILOR_ASSERT_OK(RunPack(*second, 72));
  history = internal::ParseHistory(second->SpecializationHistoryJson());
  ASSERT_TRUE(history.ok());
  EXPECT_THAT(history->keys, ::testing::ElementsAre(PackKey(*runtime, 72)));
}

int64_t MtimeSeconds(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mtime : -1;
}

void SetMtimeSecondsAgo(const std::string& path, int seconds) {
  timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(DiskRecencyTest, LoadsAndSteadyMemoryHitsKeepEntriesYoung) {
  TempDir dir;
  TAILOR_ASSERT_OK(RunPack(*MakeRuntime(dir.path()), 64));
  std::string entry;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().extension() == ".tkc") entry = e.path();
  }
  SetMtimeSecondsAgo(entry, 3600);
  auto runtime = MakeRuntime(dir.path());
  TAILOR_ASSERT_OK(RunPack(*runtime, 64));  // loads it from disk: a use
  EXPECT_GT(MtimeSeconds(entry), time(nullptr) - 60);

  SetMtimeSecondsAgo(entry, 3600);
  internal::Engine& engine = tailor::internal::EngineOf(*runtime);
  SpecKey key = PackKey(*runtime, 64);
  // Hits 1 .. kHitsPerTouch - 1 touch nothing; hit kHitsPerTouch does.
  for (uint32_t i = 0; i + 1 < internal::kHitsPerTouch; ++i) {
    ASSERT_TRUE(engine.GetKernel(key, internal::cpu::GenerateMoeKernel).ok());
  }
  EXPECT_LT(MtimeSeconds(entry), time(nullptr) - 3000);  // not yet
  ASSERT_TRUE(engine.GetKernel(key, internal::cpu::GenerateMoeKernel).ok());
  EXPECT_GT(MtimeSeconds(entry), time(nullptr) - 60);
}

TEST(DiskLimitTest, ServingEvictsTheOldestEntriesPastTheLimit) {
  TempDir dir;
  auto runtime = MakeRuntime(dir.path(), /*cache_max_bytes=*/8 * 1024);
  for (int64_t hidden = 8; hidden <= 64; hidden += 8) {
    TAILOR_ASSERT_OK(RunPack(*runtime, hidden));
  }
  EXPECT_GT(runtime->stats().disk_evictions, 0u);
  absl::StatusOr<std::vector<internal::EntryFile>> entries =
      internal::ListEntryFiles(dir.path());
  ASSERT_TRUE(entries.ok());
  uint64_t total = 0;
  for (const auto& e : *entries) total += e.bytes;
  EXPECT_LE(total, 8u * 1024);
  // The newest entry is the last one written.
  EXPECT_TRUE(std::filesystem::exists(
      tailor::internal::EngineOf(*runtime).cache().disk()->EntryPath(
          PackKey(*runtime, 64).FileStem(),
          tailor::internal::EngineOf(*runtime).cache().IdentityFor(
              PackKey(*runtime, 64),
              *internal::cpu::GenerateMoeKernel(PackKey(*runtime, 64))))));
}

// Captures what the "tailor" logger writes while it lives.
class LogCapture {
 public:
  LogCapture()
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    internal::Logger().sinks().push_back(sink_);
  }
  ~LogCapture() { internal::Logger().sinks().pop_back(); }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST(DiskLimitTest, MalformedSizeVariableIsReportedAndTheDefaultApplies) {
  TempDir dir;
  LogCapture log;
  setenv("TAILOR_CACHE_MAX_SIZE", "lots", 1);
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = dir.path();
  options.log_level = "warn";
  auto runtime = Runtime::Create(options);
  unsetenv("TAILOR_CACHE_MAX_SIZE");
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_THAT(log.text(),
              HasSubstr("TAILOR_CACHE_MAX_SIZE: \"lots\" is not a size (bytes, "
                        "or a number with K, M, G or T, e.g. 512M); using the "
                        "default limit, 2.00 GiB"));
}

// $TAILOR_DISABLE_JIT fails closed: a value it does not know ("yes" used to
// be one, and "2", " 1", "1x" still are) forbids compiling, with a warning;
// those values used to leave compiling on without a word.
TEST(DisableJitTest, EnvironmentFailsClosed) {
  const struct {
    const char* value;
    bool disabled;
    bool warns;
  } cases[] = {
      {"1", true, false},      {"true", true, false}, {"YES", true, false},
      {"on", true, false},     {"2", true, true},     {" 1", true, true},
      {"1x", true, true},      {"", false, false},    {"0", false, false},
      {"false", false, false}, {"No", false, false},  {"off", false, false},
  };
  for (const auto& c : cases) {
    TempDir dir;
    LogCapture log;
    setenv("TAILOR_DISABLE_JIT", c.value, 1);
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.cache_dir = dir.path();
    options.log_level = "warn";
    auto runtime = Runtime::Create(options);
    unsetenv("TAILOR_DISABLE_JIT");
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    absl::Status s = RunPack(**runtime, 8);
    if (c.disabled) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("TAILOR_DISABLE_JIT is set")))
          << '"' << c.value << '"';
    } else {
      EXPECT_TRUE(s.ok()) << '"' << c.value << "\": " << s;
    }
    const std::string warning = absl::StrCat(
        "TAILOR_DISABLE_JIT=\"", c.value,
        "\" is none of 1, true, yes, on (disable) or 0, false, no, off "
        "(allow); compiling is disabled");
    EXPECT_EQ(absl::StrContains(log.text(), warning), c.warns)
        << '"' << c.value << "\": " << log.text();
  }
}

// Four processes serving different kernels into one cache with a limit far
// below what they write: all succeed, the cache ends within its limit, and
// what remains is intact.
TEST(DiskLimitTest, FourProcessesShareOneLimit) {
  TempDir dir;
  constexpr int kProcesses = 4;
  constexpr uint64_t kLimit = 12 * 1024;
  for (int round = 0; round < 2; ++round) {
    std::vector<FILE*> pipes;
    for (int p = 0; p < kProcesses; ++p) {
      std::string command = std::string(TAILOR_EVICTION_PROBE_PATH) + " " +
                            dir.path() + " " + std::to_string(kLimit) + " " +
                            std::to_string(p);
      pipes.push_back(popen(command.c_str(), "r"));
    }
    uint64_t evictions = 0;
    for (FILE* pipe : pipes) {
      std::string out;
      char buffer[4096];
      while (size_t n = fread(buffer, 1, sizeof(buffer), pipe))
        out.append(buffer, n);
      ASSERT_EQ(pclose(pipe), 0) << out;
      evictions += nlohmann::json::parse(out)["disk_evictions"].get<uint64_t>();
    }
    EXPECT_GT(evictions, 0u) << "round " << round;
  }
  absl::StatusOr<std::vector<internal::EntryFile>> entries =
      internal::ListEntryFiles(dir.path());
  ASSERT_TRUE(entries.ok());
  uint64_t total = 0;
  for (const auto& e : *entries) {
    total += e.bytes;
    internal::EntryInspection info = internal::InspectEntryFile(
        dir.path() + "/" + e.name, /*verify_payload=*/true);
    EXPECT_EQ(info.problem, internal::EntryProblem::kNone)
        << e.name << ": " << info.detail;
  }
  EXPECT_GT(entries->size(), 0u);
  EXPECT_LE(total, kLimit);
  absl::StatusOr<uint64_t> counter = internal::ReadSizeCounter(dir.path());
  ASSERT_TRUE(counter.ok());
  EXPECT_GE(*counter, total);  // the counter may overestimate, never under
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos)
        << "temp file left: " << e.path();
  }
}

}  // namespace
}  // namespace tailor
