// Soak: kWorkers threads share one CPU Runtime and each makes
// TAILOR_SOAK_ITERATIONS mixed calls (default 2000: the short version in
// `make test`; `make soak` runs 100000) over every op: Experts, Route,
// PlanRows, Pack, GroupedGemm, Combine and the test op Axpy, with a fixed
// share (one call in ten) of invalid arguments, while another thread takes
// stats snapshots. Asserted at the end:
//   - every valid call succeeded (Experts' results are checked against the
//     reference every 64th call) and every invalid one was InvalidArgument;
//   - stats are exact: per op, launches == the launches of the successful
//     calls (measured per call during warm-up); errors never count;
//   - no compile after warm-up;
//   - no leak: memory in use after the run is within kMaxGrowth of memory in
//     use after warm-up (resident memory; in sanitizer builds the live heap
//     bytes, see FootprintBytes).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#if defined(TAILOR_UNDER_SANITIZER)
#include <sanitizer/allocator_interface.h>
#endif

#include "kernels/test_ops.h"
#include "reliability/reliability_util.h"

namespace tailor::reliability {
namespace {

using moe::testing::kHidden;
using moe::testing::kIntermediate;
using ::tailor::testing::StatusIs;

constexpr int kWorkers = 4;
constexpr int64_t kTokens = 29;
constexpr int64_t kMaxGrowth = int64_t{16} << 20;

int64_t Iterations() {
  const char* env = std::getenv("TAILOR_SOAK_ITERATIONS");
  return env != nullptr ? std::atoll(env) : 2000;
}

[[maybe_unused]] int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return int64_t{resident} * sysconf(_SC_PAGESIZE);
}

// What the leak check compares. The sanitizer allocators keep freed memory
// (ASan: a 256 MiB quarantine), so resident memory grows without any leak
// there (make asan: +19 MiB over the short soak); their count of live heap
// bytes is the sharper measure.
int64_t FootprintBytes() {
#if defined(TAILOR_UNDER_SANITIZER)
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  return ResidentBytes();
#endif
}

// One worker's requests: its own problem, routing and buffers.
class Worker {
 public:
  explicit Worker(uint64_t seed)
      : experts_(DType::kF32, kTokens, seed),
        hidden_(DType::kF32, {kTokens, kHidden}),
        weights_(DType::kF32, {kTokens, ExpertsProblem::kTopk}),
        a_(DType::kF32, {kTokens * ExpertsProblem::kTopk, kHidden}),
        c_(DType::kF32, {kTokens * ExpertsProblem::kTopk, kIntermediate}),
        w13_(DType::kF32,
             {ExpertsProblem::kExperts, 2 * kIntermediate, kHidden}),
        out_(DType::kF32, {kTokens, kHidden}),
        x_(100, 1.0f),
        y_(100, 0.5f) {
    std::mt19937_64 rng(seed);
    ids_ = moe::testing::RandomTopkIds(rng, kTokens, ExpertsProblem::kTopk,
                                       ExpertsProblem::kExperts,
                                       moe::testing::Spread::kUniform);
    for (moe::testing::HostTensor* t : {&hidden_, &weights_, &w13_})
      for (int64_t i = 0; i < t->numel(); ++i) t->set(i, 0.25);
    counts_ = moe::testing::HostTensor(DType::kI32, {4});
    for (int64_t i = 0; i < 4; ++i) counts_.set(i, 7 * i);
  }

  static constexpr int kKinds = 10;  // Call(kind) for kind in [0, kKinds)
  static const char* Name(int kind) {
    static const char* kNames[kKinds] = {
        "experts",   "experts", "experts", "axpy",         "route",
        "plan_rows", "pack",    "combine", "grouped_gemm", "invalid"};
    return kNames[kind];
  }

  // Makes call `kind` (its `i`-th): "" when it behaved.
  std::string Call(Runtime& runtime, int kind, int64_t i) {
    switch (kind) {
      case 0:
      case 1:
      case 2:
        if (i % 64 == 0) return experts_.RunAndCheck(runtime, experts_ws_);
        return Describe(moe::Experts(runtime, experts_.Args(), experts_ws_));
      case 3:
        return Describe(internal::Axpy(
            runtime, 2.0f, TensorRef::Contiguous(x_.data(), DType::kF32, {100}),
            TensorRef::Contiguous(y_.data(), DType::kF32, {100}), 64));
      case 4:
        return Describe(Route(runtime));
      case 5:
        return Describe(
            moe::PlanRows(runtime, {.counts = counts_.ref()}, plan_ws_));
      case 6:
        return Describe(
            moe::Pack(runtime, {.hidden = hidden_.ref(),
                                .permutation = route_ws_.permutation(),
                                .topk = ExpertsProblem::kTopk,
                                .a = a_.ref()}));
      case 7:
        return Describe(moe::Combine(runtime, {.c = a_.ref(),
                                               .topk_weights = weights_.ref(),
                                               .inverse = route_ws_.inverse(),
                                               .out = out_.ref()}));
      case 8:
        return Describe(
            moe::GroupedGemm(runtime,
                             {.a = a_.ref(),
                              .w = w13_.ref(),
                              .c = c_.ref(),
                              .epilogue = moe::Epilogue::kSiluAndMul},
                             route_ws_));
      default:
        return Invalid(runtime, i);
    }
  }

  absl::Status Route(Runtime& runtime) {
    return moe::Route(
        runtime,
        {.topk_ids = ids_.ref(), .num_experts = ExpertsProblem::kExperts},
        route_ws_);
  }

 private:
  static std::string Describe(const absl::Status& s) {
    return s.ok() ? "" : s.ToString();
  }

  // One of several invalid calls (each would launch if it were valid).
  std::string Invalid(Runtime& runtime, int64_t i) {
    absl::Status s;
    switch (i % 4) {
      case 0: {  // out of the wrong dtype
        moe::ExpertsArgs args = experts_.Args();
        args.out.dtype = DType::kBF16;
        s = moe::Experts(runtime, args, experts_ws_);
        break;
      }
      case 1:
        s = moe::Pack(runtime, {.hidden = hidden_.ref(),
                                .permutation = route_ws_.permutation(),
                                .topk = 0,
                                .a = a_.ref()});
        break;
      case 2:
        s = internal::Axpy(
            runtime, 2.0f, TensorRef::Contiguous(x_.data(), DType::kF32, {100}),
            TensorRef::Contiguous(y_.data(), DType::kF32, {99}), 64);
        break;
      default:
        s = moe::Combine(runtime, {.c = a_.ref(),
                                   .topk_weights = weights_.ref(),
                                   .inverse = route_ws_.inverse(),
                                   .out = a_.ref()});
        break;
    }
    if (s.code() == absl::StatusCode::kInvalidArgument) return "";
    return "invalid call " + std::to_string(i % 4) + " returned " +
           s.ToString();
  }

  ExpertsProblem experts_;
  moe::testing::HostTensor hidden_, weights_, a_, c_, w13_, out_, ids_, counts_;
  std::vector<float> x_, y_;
  moe::Workspace experts_ws_, route_ws_, plan_ws_;
};

std::map<std::string, uint64_t> LaunchesPerOp(Runtime& runtime) {
  return runtime.stats().launches_per_op;
}

// launches_per_op of `after` minus `before`, zeros dropped.
std::map<std::string, uint64_t> Delta(
    std::map<std::string, uint64_t> after,
    const std::map<std::string, uint64_t>& before) {
  for (const auto& [op, n] : before) after[op] -= n;
  std::erase_if(after, [](const auto& kv) { return kv.second == 0; });
  return after;
}

TEST(SoakTest, MixedLaunchesFromManyThreads) {
  auto created = CpuRuntime({.cpu_threads = 2});
  ASSERT_TRUE(created.ok()) << created.status();
  Runtime& runtime = **created;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.push_back(std::make_unique<Worker>(100 + w));

  // Warm-up, one thread: compiles everything and measures what each kind of
  // call launches (the same for every call of a kind of one worker).
  std::vector<std::array<std::map<std::string, uint64_t>, Worker::kKinds>>
      launches(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    TAILOR_ASSERT_OK(workers[w]->Route(runtime));
    for (int pass = 0; pass < 2; ++pass) {
      for (int kind = 0; kind < Worker::kKinds; ++kind) {
        auto before = LaunchesPerOp(runtime);
        ASSERT_EQ(workers[w]->Call(runtime, kind, 1), "") << Worker::Name(kind);
        launches[w][kind] = Delta(LaunchesPerOp(runtime), before);
      }
    }
  }
  for (int kind = 0; kind < Worker::kKinds; ++kind) {
    bool launches_nothing = kind == 4 || kind == 5 || kind == 9;
    EXPECT_EQ(launches[0][kind].empty(), launches_nothing)
        << Worker::Name(kind);
  }
  const StatsSnapshot warm = runtime.stats();
  const int64_t warm_footprint = FootprintBytes();

  const int64_t iterations = Iterations();
  std::vector<std::map<std::string, uint64_t>> expected(kWorkers);
  std::vector<std::string> failures(kWorkers);
  std::atomic<bool> done{false};
  std::thread observer([&] {  // stats snapshots during the launches
    uint64_t last = 0;
    while (!done.load()) {
      uint64_t now = runtime.stats().launches;
      EXPECT_GE(now, last);
      last = now;
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t i = 0; i < iterations && failures[w].empty(); ++i) {
        int kind = static_cast<int>((i + w) % Worker::kKinds);
        failures[w] = workers[w]->Call(runtime, kind, i);
        for (const auto& [op, n] : launches[w][kind]) expected[w][op] += n;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  observer.join();
  for (int w = 0; w < kWorkers; ++w)
    ASSERT_EQ(failures[w], "") << "worker " << w;

  const StatsSnapshot end = runtime.stats();
  std::map<std::string, uint64_t> total;
  for (const auto& m : expected)
    for (const auto& [op, n] : m) total[op] += n;
  EXPECT_EQ(Delta(end.launches_per_op, warm.launches_per_op), total);
  EXPECT_EQ(end.compiles, warm.compiles) << "compiled after warm-up";
  EXPECT_EQ(end.misses, warm.misses);
  EXPECT_EQ(end.lookups, end.memory_hits + end.disk_hits + end.misses);
  const int64_t growth = FootprintBytes() - warm_footprint;
  EXPECT_LE(growth, kMaxGrowth)
      << "memory in use grew by " << growth << " bytes over " << iterations
      << " iterations per thread";
#if defined(TAILOR_UNDER_SANITIZER)
  const char* measure = "live heap";
#else
  const char* measure = "RSS";
#endif
  std::printf("soak: %d threads x %lld calls, %llu launches, %s %+lld KiB\n",
              kWorkers, static_cast<long long>(iterations),
              static_cast<unsigned long long>(end.launches - warm.launches),
              measure, static_cast<long long>(growth >> 10));
}

}  // namespace
}  // namespace tailor::reliability
