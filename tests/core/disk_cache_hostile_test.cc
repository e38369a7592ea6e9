// DiskCache::Read against files a hostile local user (or a broken disk) puts
// where an entry should be: FIFOs, device nodes, sockets, directories, huge
// sparse files, files of another user. Each must be a Corrupt miss, returned
// at once (the first of these, a FIFO, used to block every process that
// opened the cache forever), and a write must replace it.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/disk_cache.h"
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

class HostileEntryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DiskCache> cache = DiskCache::Open(dir_.path() + "/cache");
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_.emplace(*std::move(cache));
    path_ = cache_->EntryPath("k", Identity());
  }

  // Reads the entry on another thread and fails (instead of hanging) when
  // the read does not return within a few seconds; `unblock` then gets the
  // reader out (e.g. opens a FIFO's write end).
  ReadResult ReadWithDeadline(std::function<void()> unblock = [] {}) {
    auto read = std::async(std::launch::async,
                           [this] { return cache_->Read("k", Identity()); });
    if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ADD_FAILURE() << "Read blocked for 5 s on " << path_;
      unblock();
    }
    return read.get();
  }

  // After the hostile file is replaced by a good entry, it loads.
  void ExpectWriteReplacesIt() {
    TAILOR_ASSERT_OK(cache_->Write("k", Identity(), "payload"));
    ReadResult r = cache_->Read("k", Identity());
    EXPECT_EQ(r.problem, EntryProblem::kNone) << r.detail;
    EXPECT_EQ(r.payload, "payload");
  }

  TempDir dir_;
  std::optional<DiskCache> cache_;
  std::string path_;
};

TEST_F(HostileEntryTest, FifoIsCorruptAndDoesNotBlock) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  ReadResult r = ReadWithDeadline([&] {
    int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
  });
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is a FIFO, not a regular file"));
  ExpectWriteReplacesIt();
}

// A FIFO with a writer that never writes: even past the open, a blocking
// read would hang. Never opened at all, so nothing to wait for.
TEST_F(HostileEntryTest, FifoWithAnIdleWriterDoesNotBlock) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  int reader = open(path_.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  int writer = open(path_.c_str(), O_WRONLY);
  ASSERT_GE(writer, 0);
  ReadResult r = ReadWithDeadline([&] { close(writer), writer = -1; });
  if (writer >= 0) close(writer);
  close(reader);
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("a FIFO"));
}

TEST_F(HostileEntryTest, CharacterDeviceIsCorrupt) {
  // /dev/null's numbers: harmless if it were opened.
  if (mknod(path_.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs CAP_MKNOD: " << std::strerror(errno);
  }
  ReadResult r = ReadWithDeadline();
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is a character device"));
  ExpectWriteReplacesIt();
}

TEST_F(HostileEntryTest, SocketIsCorrupt) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) {
    close(fd);
    GTEST_SKIP() << "temp path too long for a unix socket";
  }
  std::strcpy(addr.sun_path, path_.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ReadResult r = ReadWithDeadline();
  close(fd);
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is a socket"));
  ExpectWriteReplacesIt();
}

// A directory at an entry's name used to block that kernel for good (every
// write failed: rename() cannot replace a directory). The write removes it,
// with what is inside, but never what a link inside points to.
TEST_F(HostileEntryTest, DirectoryIsCorruptAndWritingReplacesIt) {
  TempDir outside;
  const std::string target = outside.path() + "/kept";
  std::ofstream(target) << "not the cache's";
  std::filesystem::create_directories(path_ + "/sub");
  std::ofstream(path_ + "/sub/file") << "x";
  std::filesystem::create_symlink(target, path_ + "/sub/link");
  std::filesystem::create_directory_symlink(outside.path(), path_ + "/dirlink");
  ReadResult r = ReadWithDeadline();
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is a directory"));
  ExpectWriteReplacesIt();
  EXPECT_TRUE(std::filesystem::exists(target));
  int entries = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(dir_.path() + "/cache")) {
    EXPECT_EQ(e.path(), path_);  // no temp file left behind
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(HostileEntryTest, SymlinkIsCorruptAndWritingReplacesIt) {
  TempDir outside;
  const std::string target = outside.path() + "/kept";
  std::ofstream(target) << "not the cache's";
  std::filesystem::create_symlink(target, path_);
  ReadResult r = ReadWithDeadline();
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is a symlink; not followed"));
  ExpectWriteReplacesIt();
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}),
            "not the cache's");
}

TEST_F(HostileEntryTest, EnormousFileIsCorruptWithoutBeingRead) {
  int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{8} << 30), 0);  // sparse: costs no disk
  close(fd);
  auto start = std::chrono::steady_clock::now();
  ReadResult r = ReadWithDeadline();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr(absl::StrCat("entry is 8589934592 bytes, "
                                               "more than ",
                                               kMaxEntryBytes)));
  ExpectWriteReplacesIt();
}

// Bytes this process has read through read()/pread() (/proc/self/io).
uint64_t BytesReadSoFar() {
  std::ifstream io("/proc/self/io");
  std::string name;
  uint64_t value = 0;
  while (io >> name >> value) {
    if (name == "rchar:") return value;
  }
  return 0;
}

// Writes `bytes` at the start of a sparse file of `size` bytes at path_.
void WriteSparse(const std::string& path, const std::string& bytes,
                 off_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, size), 0);
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 0),
            static_cast<ssize_t>(bytes.size()));
  close(fd);
}

// Entries were read whole up to a 1 GiB cap before any check (a 900 MB file
// cost 900 MB and seconds). A file over what an entry can be is refused
// unread, and within the cap the prefix and header are checked before the
// payload is read.
TEST_F(HostileEntryTest, EntriesAreCappedAndReadLazily) {
  if (BytesReadSoFar() == 0) GTEST_SKIP() << "no /proc/self/io here";
  struct Case {
    const char* what;
    std::string head;
    off_t size;
    const char* detail;
  };
  EntryIdentity other = Identity();
  other.arch = "aarch64-neoverse-v2";
  const std::string stale_head = EntryHead(other, std::string(32 << 20, 'p'));
  const Case cases[] = {
      {"a 900 MB file", "TAILORKC", off_t{900} << 20, "bytes, more than"},
      {"junk within the cap", "NOTTAILOR", off_t{32} << 20, "bad magic"},
      {"another arch's entry", stale_head,
       static_cast<off_t>(stale_head.size() + (32 << 20)),
       "arch is \"aarch64-neoverse-v2\""},
  };
  for (const Case& c : cases) {
    WriteSparse(path_, c.head, c.size);
    const uint64_t before = BytesReadSoFar();
    ReadResult r = cache_->Read("k", Identity());
    EXPECT_LT(BytesReadSoFar() - before, kMaxEntryHeaderBytes) << c.what;
    EXPECT_NE(r.problem, EntryProblem::kNone) << c.what;
    EXPECT_THAT(r.detail, HasSubstr(c.detail)) << c.what;
    const uint64_t inspected = BytesReadSoFar();
    EXPECT_NE(InspectEntryFile(path_, /*verify_payload=*/false).problem,
              EntryProblem::kNone);
    EXPECT_LT(BytesReadSoFar() - inspected, kMaxEntryHeaderBytes) << c.what;
  }
}

TEST_F(HostileEntryTest, PayloadsOverTheCapAreNotWritten) {
  EXPECT_THAT(cache_->Write("k", Identity(),
                            std::string(kMaxEntryPayloadBytes + 1, 'p')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("payload: 67108865 bytes, more than the "
                                 "67108864 a cache entry can hold")));
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(HostileEntryTest, EntryOfAnotherUserIsCorrupt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a file";
  TAILOR_ASSERT_OK(cache_->Write("k", Identity(), "payload"));
  ASSERT_EQ(chown(path_.c_str(), 4242, 4242), 0);
  ReadResult r = ReadWithDeadline();
  EXPECT_EQ(r.problem, EntryProblem::kCorrupt);
  EXPECT_THAT(r.detail, HasSubstr("entry is owned by uid 4242, not by this "
                                  "user (uid 0)"));
  ExpectWriteReplacesIt();
}

// ParseEntry is Read minus the file: the same verdicts on the same bytes.
TEST(ParseEntryTest, AgreesWithRead) {
  TempDir dir;
  absl::StatusOr<DiskCache> cache = DiskCache::Open(dir.path());
  ASSERT_TRUE(cache.ok());
  TAILOR_ASSERT_OK(cache->Write("k", Identity(), "payload"));
  std::string path = cache->EntryPath("k", Identity());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ReadResult parsed = ParseEntry(bytes, Identity());
  EXPECT_EQ(parsed.problem, EntryProblem::kNone) << parsed.detail;
  EXPECT_EQ(parsed.payload, "payload");
  EXPECT_EQ(ParseEntry(bytes.substr(0, 20), Identity()).problem,
            EntryProblem::kCorrupt);
  EntryIdentity other = Identity();
  other.arch = "aarch64-neoverse-v2";
  ReadResult stale = ParseEntry(bytes, other);
  EXPECT_EQ(stale.problem, EntryProblem::kStale);
  EXPECT_THAT(stale.detail, HasSubstr("arch is \"x86_64-znver3\""));
}

}  // namespace
}  // namespace tailor::internal
