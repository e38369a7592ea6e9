// tailor-warmup end to end: after a warm-up a runtime with the JIT disabled
// serves any routing; --help, --dry-run, --check and schema errors; a
// warm-up that cannot persist a kernel says so and exits 1; --from-history
// precompiles exactly what a runtime used; an unknown TAILOR_LOG_LEVEL is
// reported.
#include <stdio.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <regex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/disk_cache.h"
#include "ops/attention/ragged_host_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"
#include "tool_runner.h"

// Built with ThreadSanitizer (Clang's feature test, GCC's macro).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TAILOR_TEST_UNDER_TSAN 1
#endif
#elif defined(__SANITIZE_THREAD__)
#define TAILOR_TEST_UNDER_TSAN 1
#endif

namespace tailor {
namespace {

using ::tailor::testing::CacheEntries;
using ::tailor::testing::kSmallProfileKernels;
using ::tailor::testing::RunTool;
using ::tailor::testing::SmallProfileJson;
using ::tailor::testing::TempDir;
using ::tailor::testing::ToolRun;
using ::tailor::testing::WriteTextFile;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int kTopk = 2, kHidden = 64, kIntermediate = 32, kExperts = 8;

ToolRun Warmup(std::vector<std::string> args,
               const ::tailor::testing::ToolOptions& options = {}) {
  args.insert(args.begin(), TAILOR_WARMUP_PATH);
  return RunTool(args, options);
}

// A profile file in `dir` (SmallProfileJson unless `json` is given).
std::string WriteProfile(const TempDir& dir, const std::string& json = "") {
  std::string path = dir.path() + "/profile.json";
  WriteTextFile(path, json.empty() ? SmallProfileJson() : json);
  return path;
}

int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n'))
    n += absl::StartsWith(line, prefix);
  return n;
}

std::unique_ptr<Runtime> StrictRuntime(const std::string& cache_dir) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = cache_dir;
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

// Runs `steps` random ragged MoE steps (0..199 tokens, random experts) of
// the small profile's shape; every call must succeed.
void ServeRandomTrace(Runtime& runtime, int steps) {
  std::mt19937 rng(::tailor::testing::TestSeed());
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w13(kExperts * 2 * kIntermediate * kHidden),
      w2(kExperts * kHidden * kIntermediate);
  for (auto& w : w13) w = dist(rng);
  for (auto& w : w2) w = dist(rng);
  moe::Workspace ws;
  for (int step = 0; step < steps; ++step) {
    int tokens = static_cast<int>(rng() % 200);
    std::vector<float> hidden(tokens * kHidden), out(tokens * kHidden),
        weights(tokens * kTopk, 0.5f);
    std::vector<int32_t> ids(tokens * kTopk);
    for (auto& x : hidden) x = dist(rng);
    for (int t = 0; t < tokens; ++t) {
      ids[t * kTopk] = static_cast<int32_t>(rng() % kExperts);
      ids[t * kTopk + 1] =
          (ids[t * kTopk] + 1 + static_cast<int32_t>(rng() % (kExperts - 1))) %
          kExperts;
    }
    absl::Status s = moe::Experts(
        runtime,
        {.hidden = TensorRef::Contiguous(hidden.data(), DType::kF32,
                                         {tokens, kHidden}),
         .w13 = TensorRef::Contiguous(w13.data(), DType::kF32,
                                      {kExperts, 2 * kIntermediate, kHidden}),
         .w2 = TensorRef::Contiguous(w2.data(), DType::kF32,
                                     {kExperts, kHidden, kIntermediate}),
         .topk_weights = TensorRef::Contiguous(weights.data(), DType::kF32,
                                               {tokens, kTopk}),
         .topk_ids =
             TensorRef::Contiguous(ids.data(), DType::kI32, {tokens, kTopk}),
         .out =
             TensorRef::Contiguous(out.data(), DType::kF32, {tokens, kHidden})},
        ws);
    ASSERT_TRUE(s.ok()) << "step " << step << " tokens " << tokens << ": " << s;
  }
}

TEST(WarmupTest, ProfileWarmupThenDisabledJitServesARandomTrace) {
  TempDir dir;
  ToolRun run = Warmup(
      {"--profile", WriteProfile(dir), "--cache-dir", dir.path() + "/cache"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("profile small-test: 14 kernels for cpu"));
  EXPECT_THAT(run.output, HasSubstr("[14/14] 100%  elapsed"));
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: 14 kernels ready in " +
                                    dir.path() + "/cache"));
  EXPECT_EQ(CacheEntries(dir.path() + "/cache").size(),
            static_cast<size_t>(kSmallProfileKernels));

  setenv("TAILOR_DISABLE_JIT", "1", 1);
  std::unique_ptr<Runtime> runtime = StrictRuntime(dir.path() + "/cache");
  unsetenv("TAILOR_DISABLE_JIT");
  ASSERT_NE(runtime, nullptr);
  ServeRandomTrace(*runtime, 40);
  EXPECT_EQ(runtime->stats().compiles, 0u);
  EXPECT_GT(runtime->stats().disk_hits, 0u);

  // A second warm-up finds everything on disk and compiles nothing.
  run = Warmup({"--profile", WriteProfile(dir), "--cache-dir",
                dir.path() + "/cache", "--quiet"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("total (wall"));  // the summary table's last row
  EXPECT_TRUE(std::regex_search(
      run.output, std::regex(R"(total \(wall [0-9.]+ s\) +14 +14 +0 +0 +0)")))
      << run.output;
}

// An attention layer's profile warms its decode kernels and its ragged
// kernels (prefill and mixed steps): a runtime that may not compile then
// runs a mixed ragged step, right, from the disk cache.
TEST(WarmupTest, AttentionProfileWarmsTheRaggedKernels) {
  TempDir dir;
  ToolRun run = Warmup({"--profile", WriteProfile(dir, R"({
      "schema": "tailor.profile/1", "name": "attention-test",
      "target": {"backend": "cpu"},
      "paged_decode": {"heads_q": 4, "heads_kv": 1, "head_dim": 64,
                       "page_size": 16, "dtypes": ["bf16"]}})"),
                        "--cache-dir", dir.path() + "/cache"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // decode + its merge, ragged (causal) + its merge
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: 4 kernels ready in " +
                                    dir.path() + "/cache"));

  setenv("TAILOR_DISABLE_JIT", "1", 1);
  std::unique_ptr<Runtime> runtime = StrictRuntime(dir.path() + "/cache");
  unsetenv("TAILOR_DISABLE_JIT");
  ASSERT_NE(runtime, nullptr);
  attention::testing::RaggedCase c;  // 4/1 heads x 64, pages of 16, bf16
  c.q_lens = {40, 1, 4, 0};
  c.kv_lens = {100, 33, 20, 7};
  attention::testing::RaggedBatch p = attention::testing::BuildRaggedBatch(c);
  attention::testing::Outputs o = attention::testing::PoisonedOutputs(p);
  attention::RaggedWorkspace ws;
  ASSERT_TRUE(
      attention::PlanRagged(*runtime, attention::testing::PlanArgsOf(p), ws)
          .ok());
  absl::Status ran =
      attention::RunRagged(*runtime, attention::testing::RunArgsOf(p, o), ws);
  ASSERT_TRUE(ran.ok()) << ran;
  EXPECT_LE(attention::testing::RaggedErrorsOf(p, o).out_rel, 1e-2);
  EXPECT_EQ(runtime->stats().compiles, 0u);
}

TEST(WarmupTest, LegacyModelFlagsStillWork) {
  TempDir dir;
  ToolRun run =
      Warmup({"--topk", "2", "--hidden", "64", "--intermediate", "32",
              "--dtype", "f32", "--cache-dir", dir.path(), "--quiet"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("14 kernels ready"));
}

TEST(WarmupTest, HelpPrintsUsage) {
  ToolRun run = Warmup({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output,
              StartsWith("usage: tailor-warmup --profile FILE.json"));
  EXPECT_THAT(run.output, HasSubstr("--dry-run"));
  run = Warmup({"--profile"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.output,
            "tailor-warmup: --profile: needs a value\n"
            "(tailor-warmup --help prints the usage)\n");
}

TEST(WarmupTest, BadProfileNamesTheField) {
  TempDir dir;
  std::string json = SmallProfileJson();
  json.replace(json.find("\"hidden\": 64"), 12, "\"hidden\": -64");
  ToolRun run = Warmup({"--profile", WriteProfile(dir, json), "--dry-run"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.output,
            "tailor-warmup: profile: moe.hidden: must be an integer in [1, "
            "65536], got -64\n");
  run = Warmup({"--profile", dir.path() + "/missing.json"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("cannot read " + dir.path() +
                                    "/missing.json: No such file"));
}

TEST(WarmupTest, DryRunListsKeysAndCompilesNothing) {
  TempDir dir;
  ToolRun run = Warmup({"--profile", WriteProfile(dir), "--dry-run",
                        "--cache-dir", dir.path() + "/cache"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(CountLines(run.output, "moe."), kSmallProfileKernels);
  EXPECT_THAT(run.output,
              HasSubstr("\nmoe.grouped_gemm/cpu/"));  // arch resolved
  EXPECT_TRUE(CacheEntries(dir.path() + "/cache").empty());
}

TEST(WarmupTest, ArchOfAnotherMachineIsRefused) {
  TempDir dir;
  ToolRun run = Warmup(
      {"--profile", WriteProfile(dir, SmallProfileJson(R"(, "arch": "sm_00")")),
       "--cache-dir", dir.path()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output,
              HasSubstr("tailor-warmup: target.arch: this machine's cpu "
                        "backend builds for "));
  EXPECT_THAT(run.output, HasSubstr(", not sm_00 (use \"native\""));
}

TEST(WarmupTest, CheckNamesEveryMissingKernel) {
  TempDir dir;
  std::string profile = WriteProfile(dir);
  std::string cache = dir.path() + "/cache";
  ToolRun run = Warmup({"--profile", profile, "--check", "--cache-dir", cache});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(CountLines(run.output, "missing: moe."), kSmallProfileKernels);
  EXPECT_THAT(run.output, HasSubstr("missing: moe.pack/cpu/"));
  EXPECT_THAT(run.output, HasSubstr("(not in the disk cache)"));
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: 14 of 14 kernels are "
                                    "missing from " +
                                    cache));
  ASSERT_EQ(
      Warmup({"--profile", profile, "--cache-dir", cache, "--quiet"}).exit_code,
      0);
  run = Warmup({"--profile", profile, "--check", "--cache-dir", cache});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("tailor-warmup: all 14 kernels are in " + cache));
}

// The disk fills up half way (RLIMIT_FSIZE: writes past it fail): the
// warm-up must not claim the kernels it could not write.
TEST(WarmupTest, KernelsThatCannotBeSavedFailTheWarmup) {
#if defined(TAILOR_TEST_UNDER_TSAN)
  // ThreadSanitizer's runtime dies with SIGBUS while libLLVM-14 initializes
  // under a small RLIMIT_FSIZE: an empty program linked with -lLLVM-14 and
  // -fsanitize=thread does at `ulimit -f 64` (KiB) and not at 1024; ASan
  // does not. Not tailor's: this case runs in every other build.
  GTEST_SKIP() << "RLIMIT_FSIZE of a few KiB kills TSan processes that load "
                  "LLVM";
#endif
  TempDir dir;
  // A file-size limit just under the largest kernel's entry: that one (at
  // least) cannot be written, the smaller ones can. Measured, because entry
  // sizes move with the CPU compiler's options.
  const std::string full = dir.path() + "/full";
  ASSERT_EQ(
      Warmup({"--profile", WriteProfile(dir), "--cache-dir", full, "--quiet"})
          .exit_code,
      0);
  uintmax_t largest = 0;
  for (const std::string& entry : CacheEntries(full)) {
    largest = std::max(largest, std::filesystem::file_size(full + "/" + entry));
  }
  ASSERT_GT(largest, 0u);
  std::string cache = dir.path() + "/cache";
  ToolRun run = Warmup(
      {"--profile", WriteProfile(dir), "--cache-dir", cache, "--jobs", "1"},
      {.max_file_bytes = static_cast<rlim_t>(largest - 1)});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  size_t saved = CacheEntries(cache).size();
  ASSERT_GT(saved, 0u) << run.output;  // the small ones fit
  ASSERT_LT(saved, static_cast<size_t>(kSmallProfileKernels)) << run.output;
  int unsaved = kSmallProfileKernels - static_cast<int>(saved);
  EXPECT_THAT(
      run.output,
      HasSubstr("tailor-warmup: INCOMPLETE: " + std::to_string(unsaved) +
                " of 14 kernels are not in " + cache + ":"));
  EXPECT_EQ(CountLines(run.output, "  not saved  moe."), unsaved) << run.output;
  EXPECT_THAT(run.output, HasSubstr("File too large"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("kernels ready")));
  // What it says matches the disk.
  run =
      Warmup({"--profile", WriteProfile(dir), "--check", "--cache-dir", cache});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(CountLines(run.output, "missing: "), unsaved);
}

// The same with a real full disk: a tiny tmpfs, mounted in a private mount
// namespace (needs root or unprivileged user namespaces; skipped otherwise).
TEST(WarmupTest, FullTmpfsFailsTheWarmup) {
  TempDir dir;
  std::string cache = dir.path() + "/tmpfs";
  std::filesystem::create_directory(cache);
  chmod(cache.c_str(), 0700);
  std::string script = "mount -t tmpfs -o size=24k,mode=0700 tailor-test " +
                       cache + " || exit 99; exec " + TAILOR_WARMUP_PATH +
                       " --profile " + WriteProfile(dir) + " --cache-dir " +
                       cache + " --jobs 1";
  ToolRun run = RunTool({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script});
  if (run.exit_code == 99 || run.exit_code == 127 ||
      absl::StrContains(run.output, "unshare failed")) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << run.output;
  }
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: INCOMPLETE: "));
  EXPECT_THAT(run.output, HasSubstr("No space left on device"));
}

// A size limit smaller than the profile: kernels written early are evicted
// by later ones; the warm-up looks again at the end and says so.
TEST(WarmupTest, KernelsEvictedDuringTheWarmupAreReported) {
  TempDir dir;
  ToolRun run = Warmup({"--profile", WriteProfile(dir), "--cache-dir",
                        dir.path() + "/cache", "--quiet"},
                       {.env = {{"TAILOR_CACHE_MAX_SIZE", "20K"}}});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("gone from the disk cache by the end of "
                                    "the warm-up (not in the disk cache): "
                                    "evicted by the cache's size limit ("));
  EXPECT_THAT(run.output, HasSubstr(" entries were evicted during the "
                                    "warm-up; TAILOR_CACHE_MAX_SIZE is too "
                                    "small for this profile)"));
}

// The table's "not saved" and "failed" columns count exactly the kernels
// the INCOMPLETE list names. Kernels found on disk and then evicted by the
// kernel compiled after them used to count as "on disk" in the table.
TEST(WarmupTest, TableAgreesWithTheIncompleteListUnderEviction) {
  TempDir dir;
  const std::string cache = dir.path() + "/cache";
  const std::string profile = WriteProfile(dir);
  ASSERT_EQ(Warmup({"--profile", profile, "--cache-dir", cache, "--quiet",
                    "--jobs", "1"})
                .exit_code,
            0);
  // Without the last kernel's entry, the warm-up finds the others first,
  // then writes that one, which evicts the oldest of them.
  ToolRun keys =
      Warmup({"--profile", profile, "--cache-dir", cache, "--dry-run"});
  std::vector<std::string> lines =
      absl::StrSplit(keys.output, '\n', absl::SkipEmpty());
  const std::string stem = internal::EntryFileStem(lines.back());
  for (const std::string& name : CacheEntries(cache)) {
    if (absl::StartsWith(name, stem + "-"))
      std::filesystem::remove(cache + "/" + name);
  }
  ASSERT_EQ(CacheEntries(cache).size(),
            static_cast<size_t>(kSmallProfileKernels - 1));
  ToolRun run = Warmup(
      {"--profile", profile, "--cache-dir", cache, "--quiet", "--jobs", "1"},
      {.env = {{"TAILOR_CACHE_MAX_SIZE", "20K"}}});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  std::smatch total, incomplete;
  ASSERT_TRUE(std::regex_search(
      run.output, total,
      std::regex(
          R"(total \(wall [0-9.]+ s\) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+))")))
      << run.output;
  ASSERT_TRUE(std::regex_search(run.output, incomplete,
                                std::regex(R"(INCOMPLETE: (\d+) of 14)")))
      << run.output;
  EXPECT_GT(std::stoi(total[2]), 0) << run.output;  // found on disk
  EXPECT_EQ(std::stoi(total[4]) + std::stoi(total[5]), std::stoi(incomplete[1]))
      << run.output;
  EXPECT_EQ(CountLines(run.output, "  not saved  ") +
                CountLines(run.output, "  failed     "),
            std::stoi(incomplete[1]));
}

// A directory at an entry's name used to fail every warm-up ("cannot rename
// ... Is a directory") and make every server start recompile that kernel.
TEST(WarmupTest, DirectoryAtAnEntryNameNoLongerBlocksTheWarmup) {
  TempDir dir;
  const std::string cache = dir.path() + "/cache";
  const std::string profile = WriteProfile(dir);
  ASSERT_EQ(
      Warmup({"--profile", profile, "--cache-dir", cache, "--quiet"}).exit_code,
      0);
  const std::string entry = cache + "/" + CacheEntries(cache).front();
  std::filesystem::remove(entry);
  std::filesystem::create_directories(entry + "/inside");
  WriteTextFile(entry + "/inside/file", "x");
  ToolRun run = Warmup({"--profile", profile, "--cache-dir", cache, "--quiet"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: 14 kernels ready"));
  EXPECT_TRUE(std::filesystem::is_regular_file(entry));
  run = Warmup({"--profile", profile, "--cache-dir", cache, "--check"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(WarmupTest, UnknownLogLevelIsReported) {
  TempDir dir;
  ToolRun run = Warmup(
      {"--profile", WriteProfile(dir), "--dry-run", "--cache-dir", dir.path()},
      {.env = {{"TAILOR_LOG_LEVEL", "verbose"}}});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("[warning] TAILOR_LOG_LEVEL=\"verbose\" is not a log "
                        "level (one of trace, debug, info, warn, error, "
                        "critical, off); using info"));
}

TEST(WarmupTest, FromHistoryPrecompilesExactlyWhatWasUsed) {
  TempDir dir;
  std::string history = dir.path() + "/history.json";
  size_t used = 0;
  {
    std::unique_ptr<Runtime> server = StrictRuntime(dir.path() + "/server");
    ASSERT_NE(server, nullptr);
    ServeRandomTrace(*server, 3);
    for (const auto& [op, n] : server->stats().specializations_per_op)
      used += n;
    WriteTextFile(history, server->SpecializationHistoryJson());
  }
  ASSERT_GT(used, 0u);
  std::string fresh = dir.path() + "/fresh";
  ToolRun run =
      Warmup({"--from-history", history, "--cache-dir", fresh, "--quiet"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: history " + history + " (" +
                                    std::to_string(used) +
                                    " keys used by "
                                    "tailor "));
  EXPECT_EQ(CacheEntries(fresh).size(), used);

  setenv("TAILOR_DISABLE_JIT", "1", 1);
  std::unique_ptr<Runtime> replacement = StrictRuntime(fresh);
  unsetenv("TAILOR_DISABLE_JIT");
  ASSERT_NE(replacement, nullptr);
  ServeRandomTrace(*replacement, 3);  // the same seed: the same steps
  EXPECT_EQ(replacement->stats().compiles, 0u);
}

// A stats endpoint with two runtimes answers /specializations with both
// documents: tailor-warmup reads them together (one backend and arch) or
// the one --runtime names.
TEST(WarmupTest, FromHistoryOfAnEndpointWithSeveralRuntimes) {
  TempDir dir;
  std::string history = dir.path() + "/specializations.json";
  std::string cpu_doc;
  size_t used = 0;
  {
    std::unique_ptr<Runtime> server = StrictRuntime(dir.path() + "/server");
    ASSERT_NE(server, nullptr);
    ServeRandomTrace(*server, 3);
    for (const auto& [op, n] : server->stats().specializations_per_op)
      used += n;
    cpu_doc = server->SpecializationHistoryJson();
  }
  WriteTextFile(history, R"({"runtimes": {"cpu": )" + cpu_doc +
                             R"(, "cpu#2": )" + cpu_doc + "}}");
  ToolRun both = Warmup({"--from-history", history, "--cache-dir",
                         dir.path() + "/both", "--quiet"});
  ASSERT_EQ(both.exit_code, 0) << both.output;
  EXPECT_EQ(CacheEntries(dir.path() + "/both").size(), used);
  ToolRun picked = Warmup({"--from-history", history, "--runtime", "cpu#2",
                           "--cache-dir", dir.path() + "/one", "--quiet"});
  EXPECT_EQ(picked.exit_code, 0) << picked.output;
  ToolRun missing =
      Warmup({"--from-history", history, "--runtime", "cuda:0", "--dry-run"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output,
              HasSubstr("history: no runtime \"cuda:0\" (cpu, cpu#2); pick "
                        "one with --runtime NAME"));
  ToolRun alone = Warmup({"--profile", WriteProfile(dir), "--runtime", "cpu"});
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_THAT(alone.output, HasSubstr("--runtime: only with --from-history"));
}

// --tuning takes a value like every other option (it used to be refused as
// an unknown flag), and is validated as Options::tuning.
TEST(WarmupTest, TuningFlagTakesAValue) {
  TempDir dir;
  ToolRun run = Warmup({"--profile", WriteProfile(dir), "--tuning",
                        "no.such_key=1", "--dry-run"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--tuning: "));
  EXPECT_THAT(run.output, Not(HasSubstr("unknown flag")));
}

// An exported TAILOR_STATS_ADDR that cannot be served (malformed here) is a
// warning, not a failed warm-up.
TEST(WarmupTest, UnservableStatsAddressInTheEnvironmentOnlyWarns) {
  TempDir dir;
  ToolRun run = Warmup(
      {"--profile", WriteProfile(dir), "--cache-dir", dir.path(), "--quiet"},
      {.env = {{"TAILOR_STATS_ADDR", "localhost:http"},
               {"TAILOR_LOG_LEVEL", "warn"}}});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("TAILOR_STATS_ADDR=\"localhost:http\""));
}

}  // namespace
}  // namespace tailor
