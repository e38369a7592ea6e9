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
// (stale, kept beside the new ones) are never counted. The profile is
// written beside `dir`, not into the shared folder: tests run in parallel,
// and one rewriting a shared profile while another's tailor-warmup reads it
// gave that one a truncated file.
void FillCache(const std::string& dir) {
  const std::string shared =
      absl::StrCat(TAILOR_TOOLS_TEST_CACHE_DIR, "/",
                   std::filesystem::last_write_time(TAILOR_WARMUP_PATH)
                       .time_since_epoch()
                       .count());
  std::filesystem::create_directories(shared);
  const std::string profile = dir + "-small-profile.json";
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

// What the runtime would not load, verify calls bad: a valid entry copied
// under another kernel's name (the runtime finds it stale), and a symlink,
// FIFO or directory at an entry's name (the runtime finds them corrupt, and
// a directory kept the kernel from ever being written). All used to count
// as good or be skipped.
TEST(CacheToolTest, VerifyRemovesWhatTheRuntimeWouldNotLoad) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  std::vector<std::string> names = CacheEntries(dir);
  std::sort(names.begin(), names.end());
  std::filesystem::copy_file(dir + "/" + names[0], dir + "/" + names[1],
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::create_directories(dir + "/dir.tkc/inside");
  ASSERT_EQ(mkfifo((dir + "/fifo.tkc").c_str(), 0600), 0);
  std::filesystem::create_symlink(dir + "/" + names[2], dir + "/link.tkc");

  ToolRun run = Cache(dir, {"verify"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("removed  " + names[1] +
                                    ": its header is the entry " + names[0] +
                                    ", not this file's name (copied or "
                                    "renamed?)\n"));
  EXPECT_THAT(run.output, HasSubstr("removed  dir.tkc: entry is a directory, "
                                    "not a regular file\n"));
  EXPECT_THAT(run.output, HasSubstr("removed  fifo.tkc: entry is a FIFO, not "
                                    "a regular file\n"));
  EXPECT_THAT(run.output, HasSubstr("removed  link.tkc: entry is a symlink; "
                                    "not followed\n"));
  EXPECT_THAT(run.output,
              HasSubstr("verified 17 entries: 13 good, 4 bad (removed)\n"));
  std::vector<std::string> left = CacheEntries(dir);
  std::sort(left.begin(), left.end());
  names.erase(names.begin() + 1);
  EXPECT_EQ(left, names);  // the link's target is kept
}

TEST(CacheToolTest, ClearRemovesNonRegularFilesAtEntryNames) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  std::filesystem::create_directories(dir + "/dir.tkc/inside");
  ASSERT_EQ(mkfifo((dir + "/fifo.tkc").c_str(), 0600), 0);
  ToolRun run = Cache(dir, {"clear"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr(" and 2 non-regular files\n"));
  EXPECT_TRUE(CacheEntries(dir).empty());
}

// A directory, symlink or FIFO at the size counter's name used to make
// prune fail (exit 1) and turn the size limit off for every writer.
TEST(CacheToolTest, PruneReplacesANonRegularSizeCounter) {
  for (const std::string kind : {"directory", "symlink", "fifo"}) {
    TempDir tmp;
    std::string dir = tmp.path() + "/cache";
    FillCache(dir);
    const std::string counter = dir + "/size-counter";
    std::filesystem::remove(counter);
    if (kind == "directory") std::filesystem::create_directory(counter);
    if (kind == "symlink")
      std::filesystem::create_symlink("/dev/null", counter);
    if (kind == "fifo") {
      ASSERT_EQ(mkfifo(counter.c_str(), 0600), 0);
    }
    ToolRun run = Cache(dir, {"prune", "--max-size", "20K"});
    EXPECT_EQ(run.exit_code, 0) << kind << ": " << run.output;
    EXPECT_LE(TotalBytes(dir), 20u * 1024) << kind;
    EXPECT_TRUE(std::filesystem::is_regular_file(
        std::filesystem::symlink_status(counter)))
        << kind;
  }
}

// A read-only precompiled deployment: verify used to refuse it (it opened
// the size counter for writing first). Mounted read-only in a private mount
// namespace (needs root or unprivileged user namespaces; skipped otherwise).
TEST(CacheToolTest, VerifyServesAReadOnlyCache) {
  TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  FillCache(dir);
  auto verify_read_only = [&] {
    std::string script = "mount --bind " + dir + " " + dir +
                         " && mount -o remount,ro,bind " + dir +
                         " || exit 99; exec " + TAILOR_CACHE_PATH +
                         " --cache-dir " + dir + " verify";
    return RunTool({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script});
  };
  ToolRun run = verify_read_only();
  if (run.exit_code == 99 || run.exit_code == 127 ||
      absl::StrContains(run.output, "unshare failed")) {
    GTEST_SKIP() << "cannot mount read-only here: " << run.output;
  }
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "verified 14 entries: 14 good, 0 bad (removed)\n");

  std::vector<std::string> names = CacheEntries(dir);
  std::filesystem::resize_file(dir + "/" + names[0], 30);
  run = verify_read_only();
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("CANNOT REMOVE  " + names[0] + ": truncated header\n"));
  EXPECT_THAT(run.output, HasSubstr("verified 14 entries: 13 good, 1 bad (1 "
                                    "could not be removed)\n"));
}

TEST(CacheToolTest, MistypedCacheDirIsNotCreated) {
  TempDir tmp;
  const std::string typo = tmp.path() + "/cahce";
  for (const char* command : {"stats", "list", "verify", "prune", "clear"}) {
    ToolRun run = Cache(typo, {command});
    EXPECT_EQ(run.exit_code, 1) << command;
    EXPECT_EQ(run.output,
              "tailor-cache: cache_dir " + typo + " does not exist\n")
        << command;
    EXPECT_FALSE(std::filesystem::exists(typo)) << command;
  }
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
