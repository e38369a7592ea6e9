#include "core/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TempDir;
using ::testing::HasSubstr;

EntryIdentity Identity() {
  return EntryIdentity{.tailor_version = "0.1.0",
                       .compiler = "clang-14 -O3",
                       .arch = "x86_64-znver3",
                       .spec = "test.axpy/cpu",
                       .spec_hash = HashBytes("spec"),
                       .source_hash = HashBytes("source"),
                       .headers_hash = HashBytes("headers")};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DiskCache> cache = DiskCache::Open(dir_.path() + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_.emplace(*std::move(cache));
    TAILOR_ASSERT_OK(cache_->Write("k", Identity(), payload_));
    path_ = cache_->EntryPath("k", Identity());
  }
  TempDir dir_;
  std::optional<DiskCache> cache_;
  std::string payload_ = std::string(
      "\x7f"
      "ELF object bytes \0 with a NUL",
      30);
  std::string path_;
};

TEST_F(DiskCacheTest, RoundTrip) {
  ReadResult r = cache_->Read("k", Identity());
  EXPECT_EQ(r.problem, EntryProblem::kNone) << r.detail;
  EXPECT_EQ(r.payload, payload_);
  struct stat st;
  ASSERT_EQ(stat((dir_.path() + "/cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DiskCacheTest, MissingEntry) {
  EXPECT_EQ(cache_->Read("other", Identity()).problem, EntryProblem::kMissing);
}

TEST_F(DiskCacheTest, EveryTruncationIsCorrupt) {
  std::string bytes = ReadFile(path_);
  for (size_t len = 0; len < bytes.size(); ++len) {
    WriteFile(path_, bytes.substr(0, len));
    ReadResult r = cache_->Read("k", Identity());
    ASSERT_EQ(r.problem, EntryProblem::kCorrupt)
        << "length " << len << ": " << r.detail;
  }
}

TEST_F(DiskCacheTest, EveryBitFlipIsRejected) {
  std::string bytes = ReadFile(path_);
  std::mt19937_64 rng(::tailor::testing::TestSeed());
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    std::string flipped = bytes;
    flipped[pos] ^= static_cast<char>(1 << (rng() % 8));
    WriteFile(path_, flipped);
    ReadResult r = cache_->Read("k", Identity());
    ASSERT_NE(r.problem, EntryProblem::kNone) << "flip at byte " << pos;
    ASSERT_TRUE(r.payload.empty());
  }
}

TEST_F(DiskCacheTest, WrongFormatVersionIsStale) {
  std::string bytes = ReadFile(path_);
  bytes[8] = static_cast<char>(kDiskFormatVersion + 1);
  WriteFile(path_, bytes);
  ReadResult r = cache_->Read("k", Identity());
  EXPECT_EQ(r.problem, EntryProblem::kStale);
  EXPECT_THAT(r.detail, HasSubstr("format version 2, expected 1"));
}

TEST_F(DiskCacheTest, WrongArchOrVersionIsStale) {
  // An entry written under another identity but placed at this path (e.g.
  // copied between machines) must not load.
  for (auto edit :
       {+[](EntryIdentity& id) { id.arch = "x86_64-skylake"; },
        +[](EntryIdentity& id) { id.tailor_version = "0.0.9"; },
        +[](EntryIdentity& id) { id.compiler = "clang-15"; },
        +[](EntryIdentity& id) { id.source_hash = HashBytes("other"); }}) {
    EntryIdentity other = Identity();
    edit(other);
    TAILOR_ASSERT_OK(cache_->Write("k", other, payload_));
    ASSERT_EQ(rename(cache_->EntryPath("k", other).c_str(), path_.c_str()), 0);
    ReadResult r = cache_->Read("k", Identity());
    EXPECT_EQ(r.problem, EntryProblem::kStale) << r.detail;
  }
}

TEST_F(DiskCacheTest, SymlinkEntryIsNotFollowed) {
  std::string target = dir_.path() + "/elsewhere";
  ASSERT_EQ(rename(path_.c_str(), target.c_str()), 0);
  ASSERT_EQ(symlink(target.c_str(), path_.c_str()), 0);
  ReadResult r = cache_->Read("k", Identity());
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("symlink"));
}

TEST_F(DiskCacheTest, WriteReplacesAnExistingEntryAtomically) {
  std::string other = "new payload";
  TAILOR_ASSERT_OK(cache_->Write("k", Identity(), other));
  EXPECT_EQ(cache_->Read("k", Identity()).payload, other);
  // No temp files left behind.
  int files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(dir_.path() + "/cache")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(DiskCacheOpenTest, RefusesWorldWritableDirectory) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  EXPECT_THAT(
      DiskCache::Open(dir.path()),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          HasSubstr(
              "has mode 777: group/world-writable directories are refused")));
  ASSERT_EQ(chmod(dir.path().c_str(), 0770), 0);
  EXPECT_THAT(DiskCache::Open(dir.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has mode 770")));
}

TEST(DiskCacheOpenTest, RefusesDirectoryOwnedByAnotherUser) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to chown a directory to another user";
  TempDir dir;
  ASSERT_EQ(chown(dir.path().c_str(), 4242, 4242), 0);
  EXPECT_THAT(DiskCache::Open(dir.path()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is owned by uid 4242, not by this user")));
}

TEST(DiskCacheOpenTest, RefusesAFileAndAnEmptyPath) {
  TempDir dir;
  std::string file = dir.path() + "/file";
  WriteFile(file, "x");
  EXPECT_THAT(DiskCache::Open(file),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is not a directory")));
  EXPECT_THAT(DiskCache::Open(""),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no directory")));
}

TEST(DiskCacheOpenTest, SweepsTempFilesOfKilledWritersOnly) {
  TempDir dir;
  std::string old_tmp = dir.path() + "/k-0123.tkc.tmp.77.1";
  std::string live_tmp = dir.path() + "/k-0123.tkc.tmp.78.2";
  std::string entry = dir.path() + "/k-0123.tkc";
  for (const std::string& f : {old_tmp, live_tmp, entry})
    WriteFile(f, "partial");
  struct timespec times[2] = {{time(nullptr) - 2 * kStaleTempSeconds, 0},
                              {time(nullptr) - 2 * kStaleTempSeconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, old_tmp.c_str(), times, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, entry.c_str(), times, 0), 0);
  TAILOR_ASSERT_OK(DiskCache::Open(dir.path()).status());
  EXPECT_FALSE(std::filesystem::exists(old_tmp));  // a killed writer's leftover
  EXPECT_TRUE(std::filesystem::exists(live_tmp));  // may be a live writer's
  EXPECT_TRUE(std::filesystem::exists(entry));     // entries are never swept
}

TEST(DiskCacheOpenTest, DefaultDirectoryFollowsTheEnvironment) {
  setenv("TAILOR_CACHE_DIR", "/tmp/a", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/a");
  unsetenv("TAILOR_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/xdg/tailor");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/home/.cache/tailor");
}

}  // namespace
}  // namespace tailor::internal
