// tailor-cache end to end: verify removes and reports corrupted entries;
// stats, list, prune and clear; unsafe directories and bad usage.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "test_util.h"
#include "tool_runner.h"

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
using ::testing::StartsWith;

ToolRun Cache(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), {TAILOR_CACHE_PATH, "--cache-dir", dir});
  return RunTool(args);
}

// Fills `dir` with the small profile's kernels. They are compiled once per
// build of the tools (ctest runs every test in its own process) and copied:
// a folder per tailor-warmup binary, so that entries of an older build
// (stale, kept beside the new ones) are never counted.
void FillCache(const std::string& dir) {
  const std::string shared =
      absl::StrCat(TAILOR_TOOLS_TEST_CACHE_DIR, "/",
                   std::filesystem::last_write_time(TAILOR_WARMUP_PATH)
                       .time_since_epoch()
                       .count());
  std::filesystem::create_directories(shared);
  std::string profile = shared + "/../small-profile.json";
  WriteTextFile(profile, SmallProfileJson());
  ToolRun run = RunTool({TAILOR_WARMUP_PATH, "--profile", profile,
                         "--cache-dir", shared, "--quiet"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::filesystem::create_directories(dir);
  chmod(dir.c_str(), 0700);
  for (const std::string& name : CacheEntries(shared)) {
    std::filesystem::copy_file(shared + "/" + name, dir + "/" + name);
  }
  ASSERT_EQ(CacheEntries(dir).size(),
            static_cast<size_t>(kSmallProfileKernels));
}

uint64_t TotalBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& name : CacheEntries(dir))
    total += std::filesystem::file_size(dir + "/" + name);
  return total;
}

TEST(CacheToolTest, VerifyRemovesAndReportsCorruptedEntries) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  std::vector<std::string> names = CacheEntries(dir);
  std::sort(names.begin(), names.end());
  // One bit-flipped payload, one truncated entry.
  int fd = open((dir + "/" + names[0]).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  off_t size = lseek(fd, 0, SEEK_END);
  char byte;
  ASSERT_EQ(pread(fd, &byte, 1, size - 1), 1);
  byte ^= 0x01;
  ASSERT_EQ(pwrite(fd, &byte, 1, size - 1), 1);
  close(fd);
  std::filesystem::resize_file(dir + "/" + names[1], 30);

  ToolRun run = Cache(dir, {"verify"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("removed  " + names[0] +
                                    ": payload checksum mismatch\n"));
  EXPECT_THAT(run.output,
              HasSubstr("removed  " + names[1] + ": truncated header\n"));
  EXPECT_THAT(run.output,
              HasSubstr("verified 14 entries: 12 good, 2 bad (removed)\n"));
  EXPECT_EQ(CacheEntries(dir).size(), 12u);

  run = Cache(dir, {"verify"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("verified 12 entries: 12 good, 0 bad (removed)\n"));
}

TEST(CacheToolTest, StatsAndListDescribeTheEntries) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  ToolRun run = Cache(dir, {"stats"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("cache directory  " + dir + "\n"));
  EXPECT_THAT(run.output, HasSubstr("entries          14, "));
  EXPECT_THAT(run.output, HasSubstr("size limit       2.00 GiB (default)\n"));
  EXPECT_THAT(run.output, HasSubstr("  moe.grouped_gemm "));
  EXPECT_THAT(run.output, HasSubstr("  tailor "));

  run = Cache(dir, {"list"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, StartsWith("      size  last used            key\n"));
  EXPECT_THAT(run.output, HasSubstr("  moe.combine/cpu/"));
  EXPECT_THAT(run.output, HasSubstr("\n14 entries\n"));
}

TEST(CacheToolTest, PruneEvictsToTheLimitAndClearEmpties) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  ToolRun run = Cache(dir, {"prune", "--max-size", "20K"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              StartsWith("pruned to 20.0 KiB (--max-size): removed "));
  EXPECT_LE(TotalBytes(dir), 20u * 1024);
  EXPECT_GT(CacheEntries(dir).size(), 0u);

  run = RunTool({TAILOR_CACHE_PATH, "--cache-dir", dir, "prune"});
  EXPECT_THAT(run.output,
              StartsWith("pruned to 2.00 GiB (default): removed 0 "));

  run = Cache(dir, {"clear"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, StartsWith("removed "));
  EXPECT_TRUE(CacheEntries(dir).empty());
}

TEST(CacheToolTest, RefusesUnsafeDirectoriesAndBadUsage) {
  TempDir tmp;
  std::string dir = tmp.path() + "/shared";
  std::filesystem::create_directory(dir);
  chmod(dir.c_str(), 0777);
  ToolRun run = Cache(dir, {"clear"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("group/world-writable directories are "
                                    "refused"));

  run = RunTool({TAILOR_CACHE_PATH, "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output, StartsWith("usage: tailor-cache [--cache-dir DIR] "
                                     "COMMAND"));
  for (const auto& [args, message] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{}, "give a command"},
           {{"compact"}, "unknown command compact"},
           {{"prune", "--max-size", "lots"},
            "--max-size: \"lots\" is not a size"},
           {{"list", "--max-size", "1M"}, "--max-size: only for prune"}}) {
    std::vector<std::string> argv = {TAILOR_CACHE_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    run = RunTool(argv);
    EXPECT_EQ(run.exit_code, 2) << message;
    EXPECT_THAT(run.output, StartsWith("tailor-cache: " + message)) << message;
  }
}

}  // namespace
}  // namespace tailor
