// fork() after a Runtime started: the child (a pre-forking server's worker)
// must be able to launch, compile, log, take stats, destroy its inherited
// Runtime and create a new one, without deadlocking on a lock or a thread
// that only existed in the parent: the CPU backend's worker threads, a
// compile in flight in another thread, the logger's sink mutex.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/logging.h"
#include "reliability/reliability_util.h"

namespace tailor::reliability {
namespace {

// Generous: a child compiles, and CI's two cores are shared. Sanitizer
// builds run several times slower: under ThreadSanitizer next to a cold
// build (load 7 on two cores) a busy parent's child once took over 90 s.
#ifdef TAILOR_UNDER_SANITIZER
constexpr auto kChildDeadline = std::chrono::seconds(300);
#else
constexpr auto kChildDeadline = std::chrono::seconds(90);
#endif
// How long a child waits for its background compiles (within the deadline).
constexpr auto kCompileWait = kChildDeadline * 2 / 3;

// What every child does with the Runtime it inherited.
std::string UseInheritedRuntime(std::unique_ptr<Runtime> runtime,
                                const std::vector<int32_t>& tiles) {
  moe::Workspace ws;
  ExpertsProblem warm(DType::kF32, 29, 1);
  if (std::string e = warm.RunAndCheck(*runtime, ws); !e.empty())
    return "warm kernel: " + e;
  // Kernels the parent may have been compiling when it forked, and new ones.
  ExpertsProblem cold(DType::kBF16, 29, 2);
  for (int32_t tile : tiles) {
    std::string e = cold.RunAndCheck(*runtime, ws, {.tile_rows = tile});
    if (!e.empty()) return absl::StrCat("tile ", tile, ": ", e);
  }
  // Two threads on it at once (the inherited locks must hand over).
  std::string other_thread;
  std::thread second([&] {
    moe::Workspace ws2;
    ExpertsProblem problem(DType::kF32, 13, 3);
    for (int i = 0; i < 20 && other_thread.empty(); ++i)
      other_thread = problem.RunAndCheck(*runtime, ws2);
  });
  for (int i = 0; i < 20; ++i) {
    if (std::string e = warm.RunAndCheck(*runtime, ws); !e.empty())
      return "next to another thread: " + e;
  }
  second.join();
  if (!other_thread.empty()) return "second thread: " + other_thread;
  internal::Logger().info("a log line from the child");
  StatsSnapshot stats = runtime->stats();
  if (stats.launches == 0) return "no launches counted";
  runtime.reset();  // joins (or lets go of) the pool's threads
  auto fresh = CpuRuntime({.cpu_threads = 2});
  if (!fresh.ok()) return "new runtime: " + fresh.status().ToString();
  return warm.RunAndCheck(**fresh, ws);
}

// Whether `runtime` has no background compile queued or running within
// `limit`.
bool WaitForBackgroundCompiles(Runtime& runtime, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (runtime.stats().pending_compiles > 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(ForkTest, ChildOfAQuietParentUsesItsRuntime) {
  auto runtime = CpuRuntime({.cpu_threads = 2});
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  moe::Workspace ws;
  ExpertsProblem warm(DType::kF32, 29, 1);
  ASSERT_EQ(warm.RunAndCheck(**runtime, ws), "");
  ChildOutcome outcome =
      RunInChild([&] { return UseInheritedRuntime(std::move(*runtime), {16}); },
                 kChildDeadline);
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
  // The parent's Runtime is unaffected.
  EXPECT_EQ(warm.RunAndCheck(**runtime, ws), "");
}

// Background JIT: the parent's compile workers do not exist in the child.
// Regression: the child kept their handles, so it never started workers of
// its own: a key it queued stayed pending forever (generic kernels only, and
// a blocking lookup of that key or a second fork() waited forever), and
// destroying the Runtime joined threads that were not there.
TEST(ForkTest, ChildOfABackgroundJitParentCompilesInTheBackground) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;  // the child's keys are cold
  options.jit_mode = Runtime::JitMode::kBackground;
  options.compile_threads = 1;
  options.log_level = "off";
  auto runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  moe::Workspace ws;
  ExpertsProblem parent_problem(DType::kF32, 29, 1);
  ASSERT_EQ(parent_problem.RunAndCheck(**runtime, ws), "");
  ASSERT_TRUE(WaitForBackgroundCompiles(**runtime, kCompileWait));
  ChildOutcome outcome = RunInChild(
      [&]() -> std::string {
        std::unique_ptr<Runtime> inherited = std::move(*runtime);
        moe::Workspace child_ws;
        ExpertsProblem cold(DType::kBF16, 29, 2);  // new kernels
        if (std::string e = cold.RunAndCheck(*inherited, child_ws); !e.empty())
          return "generic kernels: " + e;
        if (!WaitForBackgroundCompiles(*inherited, kCompileWait)) {
          return absl::StrCat("the child's background compiles never ran: ",
                              inherited->stats().pending_compiles,
                              " still pending");
        }
        const uint64_t fallbacks = inherited->stats().fallback_launches;
        if (std::string e = cold.RunAndCheck(*inherited, child_ws); !e.empty())
          return "specialized kernels: " + e;
        if (inherited->stats().fallback_launches != fallbacks)
          return "still on the generic kernels after the compiles";
        inherited.reset();  // joins the child's own workers only
        return "";
      },
      kChildDeadline);
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
  // The parent's workers still serve the parent.
  ExpertsProblem after(DType::kBF16, 13, 3);
  EXPECT_EQ(after.RunAndCheck(**runtime, ws), "");
  EXPECT_TRUE(WaitForBackgroundCompiles(**runtime, kCompileWait));
}

// Redirects stderr to /dev/null while alive: the busy parent logs a lot.
class QuietStderr {
 public:
  QuietStderr() : saved_(dup(2)) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
  }
  ~QuietStderr() {
    dup2(saved_, 2);
    close(saved_);
  }

 private:
  int saved_;
};

// The parent keeps launching, compiling (new tiles: new kernels), logging and
// taking stats on other threads while the test thread forks again and
// again: each child must still get through UseInheritedRuntime.
TEST(ForkTest, ChildrenOfABusyParentDoNotDeadlock) {
  QuietStderr quiet;
  auto runtime = CpuRuntime({.cpu_threads = 2, .log_level = "info"});
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  Runtime& shared = **runtime;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // launches warm kernels
    moe::Workspace ws;
    ExpertsProblem problem(DType::kF32, 29, 1);
    while (!stop) problem.RunAndCheck(shared, ws);
  });
  threads.emplace_back([&] {  // compiles: a new tile is a new kernel set
    moe::Workspace ws;
    ExpertsProblem problem(DType::kBF16, 29, 2);
    for (int32_t tile = 1; tile <= moe::kMaxTileRows && !stop; ++tile)
      problem.RunAndCheck(shared, ws, {.tile_rows = tile});
  });
  threads.emplace_back([&] {  // logs and takes stats
    while (!stop) {
      internal::Logger().info("parent is busy");
      shared.stats();
    }
  });
  std::mt19937_64 rng(::tailor::testing::TestSeed());
  for (int fork_round = 0; fork_round < 3; ++fork_round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    ChildOutcome outcome = RunInChild(
        [&] {
          // The child owns nothing of the parent's Runtime but its memory:
          // take it over without destroying the parent's (not ours).
          std::unique_ptr<Runtime> inherited(&shared);
          // One tile that the parent may be compiling right now: compiles
          // are slow (seconds under load), and the point is the locks.
          return UseInheritedRuntime(std::move(inherited), {1 + fork_round});
        },
        kChildDeadline);
    EXPECT_TRUE(outcome.ok())
        << "fork " << fork_round << ": " << outcome.Describe();
  }
  stop = true;
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace tailor::reliability
