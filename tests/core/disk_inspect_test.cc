// InspectEntryFile: what tailor-cache verify and list rely on. It knows no
// expected identity, so it checks the entry's own consistency.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/disk_cache.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::TempDir;

class DiskInspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DiskCache> cache = DiskCache::Open(dir_.path());
    ASSERT_TRUE(cache.ok()) << cache.status();
    EntryIdentity id = {.tailor_version = "0.1.0",
                        .compiler = "clang-14 -O3",
                        .arch = "x86_64-znver3",
                        .spec = "moe.pack/cpu/x86_64-znver3/bf16/H=64",
                        .spec_hash = HashBytes("spec"),
                        .source_hash = HashBytes("source"),
                        .headers_hash = HashBytes("headers")};
    TAILOR_ASSERT_OK(cache->Write("k", id, std::string(1000, 'p')));
    path_ = cache->EntryPath("k", id);
  }
  // Overwrites one byte `from_end` bytes before the end of the entry.
  void FlipByteFromEnd(off_t from_end) {
    int fd = open(path_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    ASSERT_EQ(pwrite(fd, "X", 1, size - from_end), 1);
    close(fd);
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(DiskInspectTest, GoodEntryShowsItsHeader) {
  EntryInspection info = InspectEntryFile(path_, /*verify_payload=*/true);
  EXPECT_EQ(info.problem, EntryProblem::kNone) << info.detail;
  EXPECT_EQ(info.Field("spec"), "moe.pack/cpu/x86_64-znver3/bf16/H=64");
  EXPECT_EQ(info.Field("tailor_version"), "0.1.0");
  EXPECT_EQ(info.Field("payload_size"), "1000");
  EXPECT_EQ(info.Field("no_such_field"), "");
}

TEST_F(DiskInspectTest, PayloadDamageNeedsThePayloadCheck) {
  FlipByteFromEnd(10);
  EXPECT_EQ(InspectEntryFile(path_, false).problem, EntryProblem::kNone);
  EntryInspection info = InspectEntryFile(path_, true);
  EXPECT_EQ(info.problem, EntryProblem::kCorrupt);
  EXPECT_EQ(info.detail, "payload checksum mismatch");
}

TEST_F(DiskInspectTest, TruncatedPayload) {
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 7);
  EntryInspection info = InspectEntryFile(path_, true);
  EXPECT_EQ(info.problem, EntryProblem::kCorrupt);
  EXPECT_EQ(info.detail, "payload is 993 bytes, header says 1000 (truncated?)");
}

TEST_F(DiskInspectTest, DamagedHeaderAndPrefix) {
  std::filesystem::resize_file(path_, 40);
  EXPECT_EQ(InspectEntryFile(path_, false).detail, "truncated header");
  std::ofstream(path_, std::ios::trunc) << "NOTTAILOR and more bytes";
  EXPECT_EQ(InspectEntryFile(path_, false).detail,
            "bad magic or truncated prefix");
}

TEST_F(DiskInspectTest, NeverFollowsOrBlocksOnOddFiles) {
  std::string fifo = dir_.path() + "/fifo.tkc";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EntryInspection info = InspectEntryFile(fifo, true);  // must not block
  EXPECT_EQ(info.problem, EntryProblem::kCorrupt);
  EXPECT_EQ(info.detail, "not a regular file of sane size");

  std::string link = dir_.path() + "/link.tkc";
  std::filesystem::create_symlink(path_, link);
  info = InspectEntryFile(link, true);
  EXPECT_EQ(info.problem, EntryProblem::kCorrupt);
  EXPECT_EQ(info.detail, "open: Too many levels of symbolic links");

  EXPECT_EQ(InspectEntryFile(dir_.path() + "/gone.tkc", true).problem,
            EntryProblem::kMissing);
}

}  // namespace
}  // namespace tailor::internal
