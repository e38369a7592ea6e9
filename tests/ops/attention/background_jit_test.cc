// Background JIT on CPU paged decode: a cold RunDecode runs at once on the
// generic kernels (backends/cpu/attention/decode_generic.h) while the specialized
// ones compile on the compile threads; every result matches the fp64
// reference (awkward lengths 0, 1, page - 1, page, page + 1, 577, split
// pairs merged); the fallback count stops growing once the compiles land;
// 16 threads on one cold key cause one compile per kernel; a compile that
// fails leaves the generic path serving and is reported once. With
// disable_jit the generic kernels serve every shape PlanDecode accepts.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cpu/attention/decode_kernels.h"
#include "core/engine.h"
#include "core/logging.h"
#include "jit_test_util.h"
#include "ops/attention/decode_host_test_util.h"
#include "spdlog/sinks/ostream_sink.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

using ::tailor::testing::WaitForCompiles;

using internal::KernelSource;
using internal::OpKind;
using internal::SpecKey;
using ::tailor::testing::TestSeed;

struct RuntimeConfig {
  Runtime::JitMode mode = Runtime::JitMode::kBackground;
  bool disable_jit = false;
};

// A memory-only runtime (every key is cold) with 2 CPU threads (4 plan
// workers, so that the long sequences below are split and merged).
std::unique_ptr<Runtime> MakeRuntime(RuntimeConfig config) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.jit_mode = config.mode;
  options.disable_jit = config.disable_jit;
  options.compile_threads = 2;
  options.cpu_threads = 2;
  // disable_jit logs every key it cannot compile (once): quiet here.
  options.log_level = config.disable_jit ? "off" : "error";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

// One decode step of `c`: plan, run into poisoned outputs, compare.
struct Step {
  explicit Step(const PagedCase& c) : batch(BuildPagedBatch(c)) {}
  // The errors against the reference, or the call's error.
  absl::StatusOr<Errors> Run(Runtime& runtime) {
    DecodeWorkspace ws;
    absl::Status s = PlanDecode(runtime, PlanArgsOf(batch), ws);
    if (!s.ok()) return s;
    split_pairs = ws.plan().split_pairs;
    Outputs o = PoisonedOutputs(batch);
    s = RunDecode(runtime, RunArgsOf(batch, o), ws);
    if (!s.ok()) return s;
    return ErrorsOf(batch, o);
  }
  // True when `errors` are within the bounds of the case's dtype.
  bool Passes(const Errors& errors) const {
    return errors.out_rel <= OutBound(batch.c.dtype) &&
           errors.lse_abs <= kLseBound;
  }
  PagedBatch batch;
  int64_t split_pairs = 0;
};

#define EXPECT_STEP_PASSES(step, runtime)                                 \
  do {                                                                    \
    absl::StatusOr<Errors> errors_ = (step).Run(runtime);                 \
    ASSERT_TRUE(errors_.ok()) << errors_.status();                        \
    EXPECT_TRUE((step).Passes(*errors_))                                  \
        << (step).batch.c.ToString() << ": out rel " << errors_->out_rel  \
        << " (worst " << errors_->worst << "), lse " << errors_->lse_abs; \
  } while (false)

PagedCase LlamaCase(DType dtype, uint64_t seed) {
  return PagedCase{.lens = {0, 1, 15, 16, 17, 577, 3},
                   .page_size = 16,
                   .num_qo_heads = 8,
                   .num_kv_heads = 2,
                   .head_dim = 128,
                   .dtype = dtype,
                   .shared_prefix_pages = 2,
                   .padding_rows = 1,
                   .seed = seed};
}

// Waits (up to 60 s) until no background compile is queued or running.
double SecondsOf(const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(AttentionBackgroundJitTest, ColdCallServesAtOnceThenSpecializes) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::unique_ptr<Runtime> background = MakeRuntime({});
    std::unique_ptr<Runtime> blocking =
        MakeRuntime({.mode = Runtime::JitMode::kBlocking});
    ASSERT_NE(background, nullptr);
    ASSERT_NE(blocking, nullptr);
    Step step(LlamaCase(dtype, TestSeed()));
    const double cold_background =
        SecondsOf([&] { EXPECT_STEP_PASSES(step, *background); });
    ASSERT_GT(step.split_pairs, 0) << "the merge must run too";
    StatsSnapshot s = background->stats();
    EXPECT_EQ(s.fallback_launches, 2u);  // attention and merge, generic
    const double cold_blocking =
        SecondsOf([&] { EXPECT_STEP_PASSES(step, *blocking); });
    EXPECT_EQ(blocking->stats().fallback_launches, 0u);
    std::printf(
        "[ %s ] first decode call: background %.2f ms, blocking %.2f "
        "ms\n",
        std::string(DTypeName(dtype)).c_str(), cold_background * 1e3,
        cold_blocking * 1e3);
    // The blocking call compiled both kernels on its thread; the background
    // call compiled none there.
    EXPECT_LT(cold_background, cold_blocking);

    WaitForCompiles(*background);
    s = background->stats();
    EXPECT_EQ(s.background_compile_failures, 0u);
    EXPECT_EQ(s.compiles, blocking->stats().compiles);  // the same kernels
    EXPECT_EQ(s.compiles, 2u);
    const uint64_t fallbacks = s.fallback_launches;
    for (int i = 0; i < 3; ++i) EXPECT_STEP_PASSES(step, *background);
    EXPECT_EQ(background->stats().fallback_launches, fallbacks);
  }
}

// The generic kernels alone (disable_jit: nothing ever compiles) over the
// shapes PlanDecode accepts: head_dim 64/128/256, groups 1..16, page sizes
// 1, 5, 16, 256, NHD and HND, soft cap, one long sequence split 4 ways.
TEST(AttentionBackgroundJitTest, GenericKernelsMatchTheReference) {
  std::unique_ptr<Runtime> runtime = MakeRuntime({.disable_jit = true});
  ASSERT_NE(runtime, nullptr);
  const uint64_t seed = TestSeed();
  const std::vector<PagedCase> cases = {
      LlamaCase(DType::kBF16, seed),
      {.lens = {0, 1, 2, 577, 3},
       .page_size = 1,
       .num_qo_heads = 3,
       .num_kv_heads = 3,
       .head_dim = 64,
       .dtype = DType::kF16,
       .layout = KvLayout::kHnd,
       .shared_prefix_pages = 5,
       .seed = seed + 1},
      {.lens = {0, 1, 4, 5, 6, 577},
       .page_size = 5,
       .num_qo_heads = 6,
       .num_kv_heads = 2,
       .head_dim = 64,
       .dtype = DType::kBF16,
       .shared_prefix_pages = 3,
       .padding_rows = 1,
       .q_padding = 8,
       .seed = seed + 2},
      {.lens = {577, 0, 255, 256, 257, 1},
       .page_size = 256,
       .num_qo_heads = 16,
       .num_kv_heads = 1,
       .head_dim = 256,
       .dtype = DType::kF16,
       .layout = KvLayout::kHnd,
       .shared_prefix_pages = 1,
       .seed = seed + 3},
      {.lens = {0, 1, 15, 16, 17, 577},
       .page_size = 16,
       .num_qo_heads = 16,
       .num_kv_heads = 2,
       .head_dim = 128,
       .dtype = DType::kF16,
       .soft_cap = 5.0f,
       .seed = seed + 4},
      {.lens = {4099},
       .page_size = 32,
       .num_qo_heads = 4,
       .num_kv_heads = 1,
       .head_dim = 256,
       .dtype = DType::kBF16,
       .seed = seed + 5},
  };
  for (const PagedCase& c : cases) {
    Step step(c);
    EXPECT_STEP_PASSES(step, *runtime);
  }
  const StatsSnapshot s = runtime->stats();
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_GE(s.fallback_launches, cases.size());
}

TEST(AttentionBackgroundJitTest, SixteenThreadsOnOneColdKey) {
  std::unique_ptr<Runtime> runtime = MakeRuntime({});
  ASSERT_NE(runtime, nullptr);
  constexpr int kThreads = 16;
  std::vector<std::unique_ptr<Step>> steps;
  for (int t = 0; t < kThreads; ++t) {
    steps.push_back(
        std::make_unique<Step>(LlamaCase(DType::kBF16, TestSeed() + t)));
  }
  std::atomic<int> ready{0};
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < 4; ++i) {
        absl::StatusOr<Errors> errors = steps[t]->Run(*runtime);
        if (!errors.ok()) {
          failures[t] = errors.status().ToString();
        } else if (!steps[t]->Passes(*errors)) {
          failures[t] = absl::StrCat("out rel ", errors->out_rel, " lse ",
                                     errors->lse_abs, " at ", errors->worst);
        }
        if (!failures[t].empty()) return;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], "") << "thread " << t;
  }
  WaitForCompiles(*runtime);
  const StatsSnapshot s = runtime->stats();
  // One compile per kernel (attention, merge), however many threads missed.
  EXPECT_EQ(s.compiles, 2u);
  EXPECT_GT(s.fallback_launches, 0u);
  EXPECT_EQ(s.background_compile_failures, 0u);
}

absl::StatusOr<KernelSource> BrokenAttention(const SpecKey&) {
  return KernelSource{.code = "#include \"templates/cpu/no_such_template.h\"\n",
                      .entry = "tailor_entry"};
}

TEST(AttentionBackgroundJitTest, FailedCompileLeavesTheGenericPathServing) {
  std::unique_ptr<Runtime> runtime = MakeRuntime({});
  ASSERT_NE(runtime, nullptr);
  tailor::internal::EngineOf(*runtime).SetGeneratorOverride(
      OpKind::kAttentionDecode, &BrokenAttention);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  internal::Logger().sinks().push_back(sink);
  const spdlog::level::level_enum level = internal::Logger().level();
  internal::Logger().set_level(spdlog::level::err);

  Step step(LlamaCase(DType::kBF16, TestSeed()));
  for (int i = 0; i < 3; ++i) {
    EXPECT_STEP_PASSES(step, *runtime);
    WaitForCompiles(*runtime);
  }
  internal::Logger().sinks().pop_back();
  internal::Logger().set_level(level);
  const StatsSnapshot s = runtime->stats();
  // The attention key failed once, and only once; the merge compiled and is
  // in use.
  EXPECT_EQ(s.background_compile_failures, 1u);
  EXPECT_EQ(s.compile_failures, 1u);
  EXPECT_EQ(s.specializations_per_op.count("attention.decode"), 0u);
  EXPECT_EQ(s.specializations_per_op.at("attention.decode_merge"), 1u);
  const std::string text = log.str();
  const size_t first = text.find("background compile of attention.decode/");
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("background compile of attention.decode/", first + 1),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("no_such_template.h"), std::string::npos) << text;
}

}  // namespace
}  // namespace tailor::attention::testing
