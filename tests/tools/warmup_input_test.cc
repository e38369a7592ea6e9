// tailor-warmup against input that costs too much before it is refused, or
// that is refused with the wrong words: profile and history paths that are
// not regular files (a FIFO used to hang it, /dev/zero to read until memory
// ran out), documents nested 100,000 deep (a stack overflow), flag errors
// that depended on where the flag stood, and a dry run that skipped the
// real run's arch check. Every run has a deadline (timeout(1)), so that a
// regression fails instead of hanging the suite.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"
#include "tool_runner.h"

namespace tailor {
namespace {

using ::tailor::testing::RunTool;
using ::tailor::testing::SmallProfileJson;
using ::tailor::testing::TempDir;
using ::tailor::testing::ToolRun;
using ::tailor::testing::WriteTextFile;
using ::testing::HasSubstr;

// tailor-warmup `args`, killed after 20 s (exit 124).
ToolRun WarmupWithDeadline(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-s", "KILL", "20",
                                   TAILOR_WARMUP_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunTool(argv);
}

TEST(WarmupInputTest, DocumentsThatAreNotRegularFilesAreRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const struct {
    const char* flag;
    const char* what;
    std::string path;
    const char* kind;
  } cases[] = {
      {"--profile", "profile", fifo, "a FIFO"},
      {"--from-history", "history", fifo, "a FIFO"},
      {"--profile", "profile", "/dev/zero", "a character device"},
      {"--profile", "profile", dir.path(), "a directory"},
      {"--from-history", "history", dir.path(), "a directory"},
  };
  for (const auto& c : cases) {
    ToolRun run = WarmupWithDeadline({c.flag, c.path, "--dry-run"});
    EXPECT_EQ(run.exit_code, 2) << c.flag << " " << c.path << run.output;
    EXPECT_EQ(run.output, std::string("tailor-warmup: ") + c.what + " " +
                              c.path + ": is " + c.kind +
                              ", not a regular file\n");
  }
}

TEST(WarmupInputTest, OversizedDocumentIsRefusedUnread) {
  TempDir dir;
  const std::string path = dir.path() + "/huge.json";
  WriteTextFile(path, "{}");
  std::filesystem::resize_file(path, std::uintmax_t{1} << 34);  // sparse
  ToolRun run = WarmupWithDeadline({"--profile", path, "--dry-run"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output, "tailor-warmup: profile " + path +
                            ": is more than 16777216 bytes (a profile is far "
                            "smaller)\n");
}

TEST(WarmupInputTest, DeeplyNestedDocumentsAreRefusedNotACrash) {
  TempDir dir;
  const std::string arrays = dir.path() + "/arrays.json";
  const std::string objects = dir.path() + "/objects.json";
  constexpr int kDepth = 100000;
  WriteTextFile(arrays, std::string(kDepth, '[') + std::string(kDepth, ']'));
  std::string nested;
  for (int i = 0; i < kDepth; ++i) nested += "{\"a\":";
  WriteTextFile(objects, nested + "1" + std::string(kDepth, '}'));
  for (const auto& [flag, what] :
       {std::pair{"--profile", "profile"}, {"--from-history", "history"}}) {
    for (const std::string& path : {arrays, objects}) {
      ToolRun run = WarmupWithDeadline({flag, path, "--dry-run"});
      EXPECT_EQ(run.exit_code, 2) << flag << " " << path << run.output;
      EXPECT_EQ(run.output, std::string("tailor-warmup: ") + what +
                                ": nested deeper than 32 levels (at byte " +
                                (path == arrays ? "32" : "160") + ")\n");
    }
  }
}

// "--bogus" last used to say "needs a value", "--bogus x" "unknown flag".
TEST(WarmupInputTest, FlagErrorsDoNotDependOnWhereTheFlagIs) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--bogus"}, {"--bogus", "x"}, {"--profile", "p.json", "--bogus"}}) {
    ToolRun run = WarmupWithDeadline(args);
    EXPECT_EQ(run.exit_code, 2) << args.size();
    EXPECT_EQ(run.output,
              "tailor-warmup: unknown flag --bogus\n"
              "(tailor-warmup --help prints the usage)\n");
  }
  ToolRun run = WarmupWithDeadline({"profile.json"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output,
              HasSubstr("tailor-warmup: unexpected argument profile.json\n"));
  run = WarmupWithDeadline({"--cache-dir"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("tailor-warmup: --cache-dir: needs a "
                                    "value\n"));
}

// The dry run used to skip the arch check the real run makes: it accepted
// an arch this machine cannot build for, and the real run then refused it.
TEST(WarmupInputTest, DryRunRefusesAnotherMachinesArchLikeTheRealRun) {
  TempDir dir;
  const std::string profile = dir.path() + "/profile.json";
  WriteTextFile(profile, SmallProfileJson(R"(, "arch": "sm_00")"));
  ToolRun dry = WarmupWithDeadline(
      {"--profile", profile, "--dry-run", "--cache-dir", dir.path()});
  ToolRun real =
      WarmupWithDeadline({"--profile", profile, "--cache-dir", dir.path()});
  EXPECT_EQ(dry.exit_code, 2) << dry.output;
  EXPECT_EQ(real.exit_code, 2) << real.output;
  EXPECT_EQ(dry.output, real.output);
  EXPECT_THAT(dry.output, HasSubstr("tailor-warmup: target.arch: this "
                                    "machine's cpu backend builds for "));
}

// The legacy flags describe a profile, checked as one (k <= E).
TEST(WarmupInputTest, LegacyFlagsFollowTheProfileRules) {
  ToolRun run =
      WarmupWithDeadline({"--experts", "8", "--topk", "64", "--hidden", "64",
                          "--intermediate", "32", "--dry-run"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output,
            "tailor-warmup: profile: moe.topk: must be at most experts (8): a "
            "token is routed to k distinct experts, got 64\n");
}

// Shapes the runtime refuses were accepted by the profile: head_dim 100 or
// a GQA group of 32 passed --dry-run, then failed to compile (exit 1); page
// size 1000 compiled a kernel no launch can use (exit 0). Now exit 2 naming
// the field, dry run or not.
TEST(WarmupInputTest, DecodeShapesTheRuntimeRefusesAreBadInput) {
  TempDir dir;
  const std::string profile = dir.path() + "/profile.json";
  const struct {
    const char* fields;
    const char* message;
  } cases[] = {
      {R"("heads_q": 32, "heads_kv": 8, "head_dim": 100, "page_size": 16)",
       "paged_decode.head_dim: must be 64, 128 or 256, got 100"},
      {R"("heads_q": 256, "heads_kv": 8, "head_dim": 128, "page_size": 16)",
       "paged_decode.heads_q: heads_q / heads_kv (the GQA group) must be <= "
       "16, got 32"},
      {R"("heads_q": 32, "heads_kv": 8, "head_dim": 128, "page_size": 1000)",
       "paged_decode.page_size: must be in [1, 256], got 1000"},
  };
  for (const auto& c : cases) {
    WriteTextFile(profile, std::string(R"({"schema": "tailor.profile/1",
      "name": "t", "target": {"backend": "cuda", "arch": "sm_90a"},
      "paged_decode": {)") + c.fields +
                               R"(, "dtypes": ["bf16"]}})");
    for (bool dry_run : {true, false}) {
      std::vector<std::string> args = {"--profile", profile, "--cache-dir",
                                       dir.path() + "/cache"};
      if (dry_run) args.push_back("--dry-run");
      ToolRun run = WarmupWithDeadline(args);
      EXPECT_EQ(run.exit_code, 2) << c.message << "\n" << run.output;
      EXPECT_EQ(run.output,
                std::string("tailor-warmup: profile: ") + c.message + "\n");
    }
  }
}

}  // namespace
}  // namespace tailor
