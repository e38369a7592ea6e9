// The disk cache size limit: LRU order by mtime, the shared size counter,
// what counts as an entry, and the size syntax of TAILOR_CACHE_MAX_SIZE.
#include "core/disk_eviction.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// Writes an entry-like file of `bytes` bytes whose mtime is `age_seconds` in
// the past.
void WriteFile(const std::string& dir, const std::string& name, size_t bytes,
               int age_seconds = 0) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << std::string(bytes, 'x');
  timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= age_seconds;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  absl::StatusOr<std::vector<EntryFile>> entries = ListEntryFiles(dir);
  EXPECT_TRUE(entries.ok()) << entries.status();
  for (const EntryFile& e : *entries) names.push_back(e.name);
  return names;
}

TEST(DiskEvictionTest, ListsOnlyRegularEntryFiles) {
  TempDir dir;
  WriteFile(dir.path(), "a.tkc", 10);
  WriteFile(dir.path(), "b.tkc.tmp.123.456", 10);  // a writer in flight
  WriteFile(dir.path(), "notes.txt", 10);
  std::filesystem::create_symlink(dir.path() + "/a.tkc", dir.path() + "/l.tkc");
  std::filesystem::create_directory(dir.path() + "/d.tkc");
  ASSERT_EQ(mkfifo((dir.path() + "/f.tkc").c_str(), 0600), 0);
  EXPECT_THAT(Names(dir.path()), UnorderedElementsAre("a.tkc"));
}

TEST(DiskEvictionTest, EvictsLeastRecentlyUsedFirst) {
  TempDir dir;
  WriteFile(dir.path(), "old.tkc", 100, 300);
  WriteFile(dir.path(), "middle.tkc", 100, 200);
  WriteFile(dir.path(), "touched.tkc", 100, 400);
  WriteFile(dir.path(), "new.tkc", 100, 100);
  TouchEntryFile(dir.path() + "/touched.tkc");  // used just now
  absl::StatusOr<EvictionReport> report = EvictToSize(dir.path(), 250);
  TAILOR_ASSERT_OK(report.status());
  EXPECT_EQ(report->removed_entries, 2u);
  EXPECT_EQ(report->removed_bytes, 200u);
  EXPECT_EQ(report->kept_entries, 2u);
  EXPECT_EQ(report->kept_bytes, 200u);
  EXPECT_THAT(Names(dir.path()),
              UnorderedElementsAre("new.tkc", "touched.tkc"));
  absl::StatusOr<uint64_t> counter = ReadSizeCounter(dir.path());
  TAILOR_ASSERT_OK(counter.status());
  EXPECT_EQ(*counter, 200u);
}

TEST(DiskEvictionTest, EvictToZeroRemovesEveryEntryButNothingElse) {
  TempDir dir;
  WriteFile(dir.path(), "a.tkc", 10);
  WriteFile(dir.path(), "b.tkc", 10);
  WriteFile(dir.path(), "c.tkc.tmp.1.2", 10);
  absl::StatusOr<EvictionReport> report = EvictToSize(dir.path(), 0);
  TAILOR_ASSERT_OK(report.status());
  EXPECT_EQ(report->removed_entries, 2u);
  EXPECT_TRUE(Names(dir.path()).empty());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/c.tkc.tmp.1.2"));
}

TEST(DiskEvictionTest, CounterAddsWritesAndEvictsPastTheLimit) {
  TempDir dir;
  // No counter yet: the first note counts the directory (the new entry is
  // already in place).
  WriteFile(dir.path(), "a.tkc", 400, 30);
  absl::StatusOr<EvictionReport> report =
      NoteEntryWritten(dir.path(), 400, 1000);
  TAILOR_ASSERT_OK(report.status());
  EXPECT_EQ(report->removed_entries, 0u);
  EXPECT_EQ(*ReadSizeCounter(dir.path()), 400u);

  WriteFile(dir.path(), "b.tkc", 400, 20);
  TAILOR_ASSERT_OK(NoteEntryWritten(dir.path(), 400, 1000).status());
  EXPECT_EQ(*ReadSizeCounter(dir.path()), 800u);

  // 1200 > 1000: evict the oldest down to 90% (900 bytes).
  WriteFile(dir.path(), "c.tkc", 400, 10);
  report = NoteEntryWritten(dir.path(), 400, 1000);
  TAILOR_ASSERT_OK(report.status());
  EXPECT_EQ(report->removed_entries, 1u);
  EXPECT_EQ(report->kept_bytes, 800u);
  EXPECT_THAT(Names(dir.path()), UnorderedElementsAre("b.tkc", "c.tkc"));
  EXPECT_EQ(*ReadSizeCounter(dir.path()), 800u);
}

TEST(DiskEvictionTest, DamagedCounterIsRebuiltByAScan) {
  TempDir dir;
  WriteFile(dir.path(), "a.tkc", 300);
  std::ofstream(dir.path() + "/" + kSizeCounterFile) << "garbage";
  EXPECT_EQ(*ReadSizeCounter(dir.path()), 300u);
}

// A directory, symlink or FIFO where the counter belongs used to turn the
// size limit off for good (every write warned, prune failed): it is removed
// and the counter rebuilt by a scan, and the limit applies again.
TEST(DiskEvictionTest, CounterThatIsNotARegularFileIsReplaced) {
  TempDir outside;
  const std::string target = outside.path() + "/not-ours";
  std::ofstream(target) << "must survive";
  const std::vector<std::pair<const char*, std::function<void(std::string)>>>
      kinds = {
          {"FIFO",
           [](std::string p) { ASSERT_EQ(mkfifo(p.c_str(), 0600), 0); }},
          {"directory",
           [](std::string p) {
             std::filesystem::create_directories(p + "/inner");
             std::ofstream(p + "/inner/file") << "x";
           }},
          {"symlink",
           [&](std::string p) { std::filesystem::create_symlink(target, p); }},
      };
  for (const auto& [kind, make] : kinds) {
    TempDir dir;
    const std::string counter = dir.path() + "/" + kSizeCounterFile;
    make(counter);
    WriteFile(dir.path(), "old.tkc", 600, 60);
    WriteFile(dir.path(), "new.tkc", 600, 0);
    absl::StatusOr<EvictionReport> report =
        NoteEntryWritten(dir.path(), 600, 1000);
    ASSERT_TRUE(report.ok()) << kind << ": " << report.status();
    EXPECT_EQ(report->removed_entries, 1u) << kind;
    EXPECT_THAT(Names(dir.path()), UnorderedElementsAre("new.tkc")) << kind;
    EXPECT_TRUE(std::filesystem::is_regular_file(
        std::filesystem::symlink_status(counter)))
        << kind;
    EXPECT_EQ(*ReadSizeCounter(dir.path()), 600u) << kind;
  }
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "must survive");  // a symlink's target is never touched
}

TEST(DiskEvictionTest, ListsNonRegularEntryNames) {
  TempDir dir;
  WriteFile(dir.path(), "a.tkc", 10);
  WriteFile(dir.path(), "notes.txt", 10);
  std::filesystem::create_symlink(dir.path() + "/a.tkc", dir.path() + "/l.tkc");
  std::filesystem::create_directory(dir.path() + "/d.tkc");
  std::filesystem::create_directory(dir.path() + "/d.other");
  ASSERT_EQ(mkfifo((dir.path() + "/f.tkc").c_str(), 0600), 0);
  absl::StatusOr<std::vector<std::string>> names =
      ListNonRegularEntryNames(dir.path());
  TAILOR_ASSERT_OK(names.status());
  EXPECT_THAT(*names, UnorderedElementsAre("l.tkc", "d.tkc", "f.tkc"));
}

TEST(DiskEvictionTest, ParsesSizes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("1234"), 1234u);
  EXPECT_EQ(*ParseByteSize("64k"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize(" 3gb "), uint64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("1T"), uint64_t{1} << 40);
  for (const char* bad :
       {"", "M", "-1", "1.5G", "12X", "1Gx", "99999999999T"}) {
    EXPECT_THAT(ParseByteSize(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("\"", bad,
                                                "\" is not a size (bytes, or a "
                                                "number with K, M, G or T"))))
        << bad;
  }
}

TEST(DiskEvictionTest, FormatsSizes) {
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(20 * 1024), "20.0 KiB");
  EXPECT_EQ(FormatByteSize(1536), "1.50 KiB");
  EXPECT_EQ(FormatByteSize(uint64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace tailor::internal
