// InspectEntryFile: what tailor-cache verify and list rely on. It knows no
// expected identity, so it checks the entry against the identity its header
// states: consistent, and named for it, as the runtime would look it up.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "core/disk_cache.h"
#include "core/spec_key.h"
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
    stem_ = EntryFileStem(id.spec);
    TAILOR_ASSERT_OK(cache->Write(stem_, id, std::string(1000, 'p')));
    path_ = cache->EntryPath(stem_, id);
    id_ = id;
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
  std::string stem_;
  std::string path_;
  EntryIdentity id_;
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
  EXPECT_EQ(info.detail, "entry is a FIFO, not a regular file");

  std::string link = dir_.path() + "/link.tkc";
  std::filesystem::create_symlink(path_, link);
  info = InspectEntryFile(link, true);
  EXPECT_EQ(info.problem, EntryProblem::kCorrupt);
  EXPECT_EQ(info.detail, "entry is a symlink; not followed");

  std::string dir = dir_.path() + "/dir.tkc";
  std::filesystem::create_directory(dir);
  EXPECT_EQ(InspectEntryFile(dir, true).detail,
            "entry is a directory, not a regular file");

  EXPECT_EQ(InspectEntryFile(dir_.path() + "/gone.tkc", true).problem,
            EntryProblem::kMissing);
}

// A valid entry copied under another kernel's name used to count as good:
// the runtime, looking that kernel up, finds another identity (stale).
TEST_F(DiskInspectTest, EntryUnderAnotherNameIsStaleLikeTheRuntimeSaysIt) {
  EntryIdentity other = id_;
  other.spec = "moe.pack/cpu/x86_64-znver3/bf16/H=128";
  other.spec_hash = HashBytes("other spec");
  absl::StatusOr<DiskCache> cache = DiskCache::Open(dir_.path());
  ASSERT_TRUE(cache.ok());
  const std::string other_stem = EntryFileStem(other.spec);
  const std::string copy = cache->EntryPath(other_stem, other);
  std::filesystem::copy_file(path_, copy);
  EXPECT_EQ(cache->Read(other_stem, other).problem, EntryProblem::kStale);
  EntryInspection info = InspectEntryFile(copy, true);
  EXPECT_EQ(info.problem, EntryProblem::kStale);
  EXPECT_EQ(info.detail, "its header is the entry " +
                             EntryFileName(stem_, id_) +
                             ", not this file's name (copied or renamed?)");
  // The same identity under another stem: no lookup ever finds it.
  const std::string renamed =
      dir_.path() + "/" + EntryFileName("moe.pack_other", id_);
  std::filesystem::copy_file(path_, renamed);
  EXPECT_EQ(InspectEntryFile(renamed, true).problem, EntryProblem::kStale);
  EXPECT_EQ(InspectEntryFile(path_, true).problem, EntryProblem::kNone);
}

TEST_F(DiskInspectTest, HeaderWithoutAnIdentityFieldIsCorrupt) {
  const std::string bytes = EntryHead(id_, "payload") + "payload";
  EXPECT_EQ(InspectEntryBytes(bytes, EntryFileName(stem_, id_), true).problem,
            EntryProblem::kNone);
  for (const char* field : {"compiler=", "spec_hash="}) {
    std::string edited = bytes;
    edited.replace(edited.find(field), 1, "X");  // "Xompiler=", "Xpec_hash="
    // The header checksum now fails; re-frame it with a good checksum.
    const size_t header_begin = 16;
    const size_t header_len = edited.size() - header_begin - 8 - 7;
    absl::string_view header(edited.data() + header_begin, header_len);
    uint64_t sum = Checksum64(header);
    for (int i = 0; i < 8; ++i)
      edited[header_begin + header_len + i] = static_cast<char>(sum >> (8 * i));
    EntryInspection info =
        InspectEntryBytes(edited, EntryFileName(stem_, id_), true);
    EXPECT_EQ(info.problem, EntryProblem::kCorrupt) << field;
    EXPECT_THAT(info.detail, ::testing::StartsWith("no ")) << field;
  }
}

// The runtime names entries by SpecKey::FileStem(); the tools rebuild the
// name from the header's spec with EntryFileStem(). They must agree.
TEST(EntryFileStemTest, AgreesWithSpecKeyFileStem) {
  SpecKey key =
      KeyTarget{.backend = BackendKind::kCpu, .arch = "x86_64-znver3"}.MakeKey(
          OpKind::kMoeGroupedGemm);
  key.dtypes = {DType::kBF16, DType::kBF16, DType::kF32};
  key.dims = {4096, 14336};
  key.tail_class = 3;
  key.tile = {.m = 64, .n = 128, .k = 64, .stages = 4};
  EXPECT_EQ(EntryFileStem(key.ToString()), key.FileStem());
  key.SetArch("x86 64+~:weird");
  key.dims.fill(std::numeric_limits<int64_t>::max());  // over 120 characters
  ASSERT_GT(key.ToString().size(), 120u);
  EXPECT_EQ(EntryFileStem(key.ToString()), key.FileStem());
  EXPECT_EQ(EntryFileStem("a/b c=d"), "a_b_c_d");
}

}  // namespace
}  // namespace tailor::internal
