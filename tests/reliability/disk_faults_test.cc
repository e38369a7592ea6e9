// Fault injection on the disk cache, through a real Runtime on the CPU
// backend. Every case asserts the same three things:
//   - the request is still served (the kernel runs and is right);
//   - nothing partial is ever visible (no temp file, no half entry left in
//     the cache directory);
//   - the runtime keeps working (later launches, later kernels, and a later
//     runtime on the same directory once the fault is gone).
// Write failures are injected (core/disk_cache.h, SetWriteFaultHookForTesting)
// because tests run as root on CI, where chmod cannot make a directory
// unwritable; the real chmod case runs when the tests are not root. Hostile
// entries (FIFO, device node, directory, enormous file) are real files, and
// each runtime that meets one runs in a child with a deadline, so a block is
// reported as a failure instead of hanging the suite.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/disk_cache.h"
#include "core/disk_eviction.h"
#include "kernels/test_ops.h"
#include "reliability/reliability_util.h"

namespace tailor::reliability {
namespace {

using internal::SetWriteFaultHookForTesting;
using internal::WriteStep;
using ::tailor::testing::TempDir;

constexpr auto kChildDeadline = std::chrono::seconds(60);

// Runs y = 2x + y on 100 elements with `block` (each block is its own
// kernel) and checks the result.
absl::Status ServeAxpy(Runtime& runtime, int block = 64) {
  std::vector<float> x(100, 1.0f), y(100, 0.5f);
  absl::Status s = internal::Axpy(
      runtime, 2.0f, TensorRef::Contiguous(x.data(), DType::kF32, {100}),
      TensorRef::Contiguous(y.data(), DType::kF32, {100}), block);
  if (s.ok() && y[99] != 2.5f) return absl::InternalError("wrong axpy result");
  return s;
}

// The files of a cache directory, less the eviction's size counter (core/
// disk_eviction.h), which is bookkeeping, not an entry.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() == internal::kSizeCounterFile) continue;
    files.push_back(e.path().filename());
  }
  return files;
}

class DiskFaultTest : public ::testing::Test {
 protected:
  void TearDown() override { SetWriteFaultHookForTesting(nullptr); }

  std::unique_ptr<Runtime> NewRuntime() {
    auto runtime = CpuRuntime({.cache_dir = dir_.path()});
    EXPECT_TRUE(runtime.ok()) << runtime.status();
    return runtime.ok() ? *std::move(runtime) : nullptr;
  }

  // `errno_value` from every `step` of every write while the runtime serves
  // twice: served from memory, counted, and nothing left on disk. Then the
  // fault goes away and the runtime, and the next one, use the disk again.
  void ExpectServedDespite(WriteStep failing_step, int errno_value) {
    SetWriteFaultHookForTesting(
        [=](WriteStep step) { return step == failing_step ? errno_value : 0; });
    auto runtime = NewRuntime();
    TAILOR_ASSERT_OK(ServeAxpy(*runtime));
    TAILOR_ASSERT_OK(ServeAxpy(*runtime));
    StatsSnapshot s = runtime->stats();
    EXPECT_EQ(s.compiles, 1u);
    EXPECT_EQ(s.memory_hits, 1u);
    EXPECT_EQ(s.disk_write_failures, 1u);
    EXPECT_EQ(s.launches, 2u);
    EXPECT_THAT(FilesIn(dir_.path()), ::testing::IsEmpty());

    SetWriteFaultHookForTesting(nullptr);
    TAILOR_ASSERT_OK(ServeAxpy(*runtime, 32));  // a new kernel: written
    EXPECT_EQ(runtime->stats().disk_write_failures, 1u);
    EXPECT_EQ(FilesIn(dir_.path()).size(), 1u);
    auto next = NewRuntime();
    TAILOR_ASSERT_OK(ServeAxpy(*next, 32));
    EXPECT_EQ(next->stats().disk_hits, 1u);
    EXPECT_EQ(next->stats().compiles, 0u);
  }

  TempDir dir_;
};

TEST_F(DiskFaultTest, DiskFullMidWrite) {
  ExpectServedDespite(WriteStep::kWrite, ENOSPC);
}

TEST_F(DiskFaultTest, QuotaExceededMidWrite) {
  ExpectServedDespite(WriteStep::kWrite, EDQUOT);
}

TEST_F(DiskFaultTest, ReadOnlyFilesystem) {
  ExpectServedDespite(WriteStep::kCreate, EROFS);
}

TEST_F(DiskFaultTest, IoErrorOnClose) {
  ExpectServedDespite(WriteStep::kClose, EIO);
}

TEST_F(DiskFaultTest, RenameFails) {
  ExpectServedDespite(WriteStep::kRename, EXDEV);
}

// The directory was writable when the runtime opened it, and stops being so
// while it runs: kernels compiled before stay on disk, kernels compiled
// during are served from memory, and writing resumes when it is writable.
TEST_F(DiskFaultTest, DirectoryBecomesUnwritableWhileRunning) {
  auto runtime = NewRuntime();
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 64));
  std::vector<std::string> before = FilesIn(dir_.path());
  ASSERT_EQ(before.size(), 1u);
  SetWriteFaultHookForTesting(
      [](WriteStep step) { return step == WriteStep::kCreate ? EACCES : 0; });
  for (int block : {32, 16, 8}) TAILOR_ASSERT_OK(ServeAxpy(*runtime, block));
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 64));
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.compiles, 4u);
  EXPECT_EQ(s.disk_write_failures, 3u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(FilesIn(dir_.path()), before);
  SetWriteFaultHookForTesting(nullptr);
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 128));
  EXPECT_EQ(FilesIn(dir_.path()).size(), 2u);
}

// The same with real permissions, which only bind a user who is not root.
TEST_F(DiskFaultTest, DirectoryChmodedReadOnlyWhileRunning) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories";
  auto runtime = NewRuntime();
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 64));
  ASSERT_EQ(chmod(dir_.path().c_str(), 0500), 0);
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 32));
  EXPECT_EQ(runtime->stats().disk_write_failures, 1u);
  EXPECT_EQ(FilesIn(dir_.path()).size(), 1u);
  ASSERT_EQ(chmod(dir_.path().c_str(), 0700), 0);
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 16));
  EXPECT_EQ(FilesIn(dir_.path()).size(), 2u);
}

// Hostile entries: the runtime that meets one runs in a child with a
// deadline, serves past it, and its rewrite takes the entry's place (a
// directory, which rename() cannot replace, is removed first).
class HostileEntryRuntimeTest : public DiskFaultTest {
 protected:
  void SetUp() override {
    TAILOR_ASSERT_OK(ServeAxpy(*NewRuntime()));
    std::vector<std::string> files = FilesIn(dir_.path());
    ASSERT_EQ(files.size(), 1u);
    entry_ = dir_.path() + "/" + files[0];
    ASSERT_EQ(unlink(entry_.c_str()), 0);
  }

  void ExpectServedPastIt() {
    ChildOutcome outcome = RunInChild(
        [&]() -> std::string {
          auto runtime = CpuRuntime({.cache_dir = dir_.path()});
          if (!runtime.ok()) return runtime.status().ToString();
          for (int i = 0; i < 3; ++i) {
            if (absl::Status s = ServeAxpy(**runtime); !s.ok())
              return s.ToString();
          }
          StatsSnapshot s = (*runtime)->stats();
          if (s.corrupt_entries != 1 || s.compiles != 1 || s.launches != 3)
            return absl::StrCat("corrupt ", s.corrupt_entries, " compiles ",
                                s.compiles, " launches ", s.launches);
          return "";
        },
        kChildDeadline);
    ASSERT_TRUE(outcome.ok()) << outcome.Describe();
    std::vector<std::string> files = FilesIn(dir_.path());
    ASSERT_EQ(files.size(), 1u) << "a temp file was left behind";
    struct stat st;
    ASSERT_EQ(lstat(entry_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    auto next = NewRuntime();
    TAILOR_ASSERT_OK(ServeAxpy(*next));
    EXPECT_EQ(next->stats().disk_hits, 1u);
  }

  std::string entry_;
};

TEST_F(HostileEntryRuntimeTest, Fifo) {
  ASSERT_EQ(mkfifo(entry_.c_str(), 0600), 0);
  ExpectServedPastIt();
}

TEST_F(HostileEntryRuntimeTest, DeviceNode) {
  if (mknod(entry_.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod needs CAP_MKNOD: " << std::strerror(errno);
  ExpectServedPastIt();
}

// A directory at the entry's name used to block that kernel for good: every
// start recompiled it and every write failed.
TEST_F(HostileEntryRuntimeTest, Directory) {
  ASSERT_EQ(mkdir(entry_.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((entry_ + "/inside").c_str(), 0700), 0);
  ExpectServedPastIt();
}

TEST_F(HostileEntryRuntimeTest, EnormousEntry) {
  int fd = open(entry_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{64} << 30), 0);  // sparse: costs no disk
  close(fd);
  ExpectServedPastIt();
}

// The cache directory is removed under a running runtime: writes fail (the
// directory is gone), the runtime serves from memory and keeps working.
TEST_F(DiskFaultTest, DirectoryRemovedWhileRunning) {
  auto runtime = NewRuntime();
  TAILOR_ASSERT_OK(ServeAxpy(*runtime, 64));
  std::filesystem::remove_all(dir_.path());
  for (int block : {64, 32, 16}) TAILOR_ASSERT_OK(ServeAxpy(*runtime, block));
  StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.compiles, 3u);
  EXPECT_EQ(s.disk_write_failures, 2u);
  EXPECT_EQ(s.launches, 4u);
  std::filesystem::create_directory(dir_.path());  // for TempDir's cleanup
}

// Writers SIGKILLed at random moments (while compiling, writing, renaming),
// again and again on one directory: whatever they leave, a later runtime
// never sees a partial entry (no corrupt entry is ever met) and serves
// every kernel; temp files of killed writers are the only debris.
TEST_F(DiskFaultTest, WritersKilledAtRandomMomentsLeaveNoPartialEntry) {
  std::mt19937_64 rng(::tailor::testing::TestSeed());
  for (int round = 0; round < 4; ++round) {
    // New kernels every round, so that every round's writer writes.
    std::vector<int> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(8 * (1 + 5 * round + i));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto runtime = CpuRuntime({.cache_dir = dir_.path()});
      if (runtime.ok())
        for (int block : blocks) (void)ServeAxpy(**runtime, block);
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1000));
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    auto check = NewRuntime();
    for (int block : blocks) TAILOR_ASSERT_OK(ServeAxpy(*check, block));
    StatsSnapshot s = check->stats();
    ASSERT_EQ(s.corrupt_entries, 0u) << "round " << round;
    ASSERT_EQ(s.stale_entries, 0u) << "round " << round;
    ASSERT_EQ(s.disk_hits + s.compiles, blocks.size());
  }
  for (const std::string& file : FilesIn(dir_.path())) {
    EXPECT_TRUE(file.ends_with(".tkc") || file.find(".tmp.") != file.npos)
        << file;
  }
}

}  // namespace
}  // namespace tailor::reliability
