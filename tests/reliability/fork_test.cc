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

// Generous: a child compiles, and CI's two cores are shared.
constexpr auto kChildDeadline = std::chrono::seconds(90);

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
