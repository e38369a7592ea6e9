// tests/reliability/reliability_util.h — pieces the reliability tests share.
//
// - RunInChild(): runs a function in a forked child process with a deadline
//   and reports how it ended (exit code, signal, timeout) plus everything
//   the child said, so tests can provoke crashes, hangs, mount namespaces
//   and rlimits without taking the test binary down with them.
// - CpuRuntime(): a CPU Runtime with the options the tests vary.
// - ExpertsProblem: one small moe::Experts call (H = 64, I = 32, the dims of
//   tests/ops) with its inputs, run and checked against the double-precision
//   reference: the "request" every fault-injection case must still serve.
#ifndef TAILOR_TESTS_RELIABILITY_RELIABILITY_UTIL_H_
#define TAILOR_TESTS_RELIABILITY_RELIABILITY_UTIL_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/moe/moe_test_util.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor::reliability {

using moe::testing::HostTensor;

struct ChildOutcome {
  bool timed_out = false;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it
  std::string output;  // what the child returned or wrote to the pipe

  bool ok() const { return !timed_out && signal == 0 && exit_code == 0; }
  std::string Describe() const {
    if (timed_out) return "timed out (killed): " + output;
    if (signal != 0)
      return absl::StrCat("killed by signal ", signal, ": ", output);
    return absl::StrCat("exit code ", exit_code, ": ", output);
  }
};

// With TAILOR_TEST_HANG_STACKS=1 (and gdb installed), the stacks of a child
// that hangs, for the report.
inline std::string HangStacks(pid_t pid) {
  const char* enabled = std::getenv("TAILOR_TEST_HANG_STACKS");
  if (enabled == nullptr || std::string(enabled) != "1") return "";
  std::string command = absl::StrCat("gdb -batch -p ", pid,
                                     " -ex 'thread apply all bt' 2>/dev/null");
  std::string stacks = "\n";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe))
      stacks.append(buffer, n);
    pclose(pipe);
  }
  return stacks;
}

// Forks; the child runs `body` and exits 0 when it returns "" (else 1, with
// the returned text, or the exception that escaped, as output). The parent
// waits up to `deadline`, then SIGKILLs the child and reports a timeout
// (with the child's stacks, see HangStacks).
inline ChildOutcome RunInChild(std::function<std::string()> body,
                               std::chrono::seconds deadline) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {.output = "pipe failed"};
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return {.output = "fork failed"};
  if (pid == 0) {
    close(fds[0]);
    std::string message;
    try {
      message = body();
    } catch (const std::exception& e) {  // the child must not unwind into
      message = absl::StrCat("exception: ", e.what());  // the test runner
    } catch (...) {
      message = "exception";
    }
    if (!message.empty()) {
      ssize_t ignored = write(fds[1], message.data(), message.size());
      (void)ignored;
    }
    _exit(message.empty() ? 0 : 1);
  }
  close(fds[1]);
  ChildOutcome outcome;
  auto end = std::chrono::steady_clock::now() + deadline;
  char buffer[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      outcome.timed_out = true;
      outcome.output += HangStacks(pid);
      kill(pid, SIGKILL);
      break;
    }
    pollfd p = {.fd = fds[0], .events = POLLIN};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // the child closed the pipe: it is exiting
    outcome.output.append(buffer, n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !outcome.timed_out)
    outcome.signal = WTERMSIG(status);
  return outcome;
}

struct RuntimeConfig {
  std::string cache_dir;  // empty: no disk cache
  int cpu_threads = 1;
  bool disable_jit = false;
  std::string log_level = "off";
};

inline absl::StatusOr<std::unique_ptr<Runtime>> CpuRuntime(
    const RuntimeConfig& config) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = config.cache_dir;
  options.disable_disk_cache = config.cache_dir.empty();
  options.cpu_threads = config.cpu_threads;
  options.disable_jit = config.disable_jit;
  options.log_level = config.log_level;
  return Runtime::Create(options);
}

// One moe::Experts call: T tokens, k = 2, E = 4, H = 64, I = 32.
class ExpertsProblem {
 public:
  static constexpr int64_t kExperts = 4, kTopk = 2;

  ExpertsProblem(DType dtype, int64_t tokens, uint64_t seed)
      : hidden_(dtype, {tokens, moe::testing::kHidden}),
        w13_(dtype, {kExperts, 2 * moe::testing::kIntermediate,
                     moe::testing::kHidden}),
        w2_(dtype,
            {kExperts, moe::testing::kHidden, moe::testing::kIntermediate}),
        weights_(DType::kF32, {tokens, kTopk}),
        out_(dtype, {tokens, moe::testing::kHidden}) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> value(-1, 1);
    for (HostTensor* t : {&hidden_, &w13_, &w2_, &weights_})
      for (int64_t i = 0; i < t->numel(); ++i) t->set(i, value(rng));
    ids_ = moe::testing::RandomTopkIds(rng, tokens, kTopk, kExperts,
                                       moe::testing::Spread::kUniform);
    reference_ = moe::testing::ReferenceExperts(
        {hidden_, w13_, w2_, weights_, ids_, nullptr}, tokens, kTopk);
  }

  moe::ExpertsArgs Args(moe::RoutingPolicy policy = {}) const {
    return {.hidden = hidden_.ref(),
            .w13 = w13_.ref(),
            .w2 = w2_.ref(),
            .topk_weights = weights_.ref(),
            .topk_ids = ids_.ref(),
            .policy = policy,
            .out = out_.ref()};
  }

  // Runs Experts on `runtime` and checks the result: "" when correct.
  std::string RunAndCheck(Runtime& runtime, moe::Workspace& ws,
                          moe::RoutingPolicy policy = {}) {
    out_.Poison();
    absl::Status s = moe::Experts(runtime, Args(policy), ws);
    if (!s.ok()) return absl::StrCat("Experts failed: ", s.ToString());
    double error = moe::testing::RelativeError(out_, reference_);
    if (!(error <= moe::testing::Tolerance(out_.dtype()))) {
      return absl::StrCat("Experts result is wrong: relative error ", error);
    }
    return "";
  }

  // Kernel launches one successful call makes: pack, the gemm variants
  // (twice), combine.
  static int64_t LaunchesPerCall(const moe::Workspace& ws) {
    if (ws.num_rows() == 0) return ws.num_tokens() > 0 ? 1 : 0;
    return 2 + 2 * int64_t{ws.plan().variants};
  }

 private:
  HostTensor hidden_, w13_, w2_, weights_, ids_, out_;
  std::vector<double> reference_;
};

}  // namespace tailor::reliability

#endif  // TAILOR_TESTS_RELIABILITY_RELIABILITY_UTIL_H_
