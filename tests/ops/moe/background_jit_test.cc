// Background JIT on the CPU MoE family: a cold call runs at once on the
// generic kernels while the specialized ones compile on the compile
// threads; every result matches the reference; the fallback count stops
// growing once the compiles land; 16 threads on one cold key cause one
// compile per kernel; a compile that fails leaves the generic path serving
// and is reported once.
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "api/internals.h"
#include "backends/cpu/moe/kernels.h"
#include "core/engine.h"
#include "core/logging.h"
#include "jit_test_util.h"
#include "ops/moe/moe_test_util.h"
#include "spdlog/sinks/ostream_sink.h"

namespace tailor::moe::testing {
namespace {

using ::tailor::testing::WaitForCompiles;

using internal::KernelSource;
using internal::OpKind;
using internal::SpecKey;

constexpr int64_t kExperts = 8;
constexpr int64_t kTopk = 2;

std::unique_ptr<Runtime> MakeRuntime(Runtime::JitMode mode) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;  // every key is cold
  options.jit_mode = mode;
  options.compile_threads = 2;
  options.log_level = "error";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status();
  return runtime.ok() ? *std::move(runtime) : nullptr;
}

// One moe::Experts call's inputs (H = 64, I = 32, E = 8, k = 2) and its
// double-precision reference.
struct Step {
  Step(DType dtype, int64_t tokens, uint64_t seed)
      : rng(seed),
        hidden(dtype, {tokens, kHidden}),
        w13(dtype, {kExperts, 2 * kIntermediate, kHidden}),
        w2(dtype, {kExperts, kHidden, kIntermediate}),
        weights(DType::kF32, {tokens, kTopk}),
        ids(RandomTopkIds(rng, tokens, kTopk, kExperts, Spread::kUniform)),
        out(dtype, {tokens, kHidden}),
        tokens(tokens) {
    hidden.FillRandom(rng);
    w13.FillRandom(rng, 0.25);
    w2.FillRandom(rng, 0.25);
    weights.FillRandom(rng);
  }
  // Runs the step into a poisoned `out`; its relative error.
  absl::StatusOr<double> Run(Runtime& runtime, Workspace& ws) {
    out.Poison();
    absl::Status s = Experts(runtime,
                             {.hidden = hidden.ref(),
                              .w13 = w13.ref(),
                              .w2 = w2.ref(),
                              .topk_weights = weights.ref(),
                              .topk_ids = ids.ref(),

                              .policy = {.tile_rows = 4},
                              .out = out.ref()},
                             ws);
    if (!s.ok()) return s;
    return RelativeError(
        out, ReferenceExperts({hidden, w13, w2, weights, ids, nullptr}, tokens,
                              kTopk));
  }
  std::mt19937_64 rng;
  HostTensor hidden, w13, w2, weights, ids, out;
  int64_t tokens;
};

// Waits (up to 60 s) until no background compile is queued or running.
double SecondsOf(const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(MoeBackgroundJitTest, ColdCallServesAtOnceThenSpecializes) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::unique_ptr<Runtime> background =
        MakeRuntime(Runtime::JitMode::kBackground);
    std::unique_ptr<Runtime> blocking =
        MakeRuntime(Runtime::JitMode::kBlocking);
    ASSERT_NE(background, nullptr);
    ASSERT_NE(blocking, nullptr);
    Step step(dtype, 37, TestSeed());
    Workspace ws_bg, ws_block;
    absl::StatusOr<double> error;
    const double cold_background =
        SecondsOf([&] { error = step.Run(*background, ws_bg); });
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, Tolerance(dtype));
    StatsSnapshot s = background->stats();
    EXPECT_GT(s.fallback_launches, 0u);
    const double cold_blocking =
        SecondsOf([&] { error = step.Run(*blocking, ws_block); });
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_EQ(blocking->stats().fallback_launches, 0u);
    std::printf("[ %s ] first call: background %.2f ms, blocking %.2f ms\n",
                std::string(DTypeName(dtype)).c_str(), cold_background * 1e3,
                cold_blocking * 1e3);
    // The blocking call compiled every kernel of the step; the background
    // call compiled none on its thread.
    EXPECT_LT(cold_background, cold_blocking);

    WaitForCompiles(*background);
    s = background->stats();
    EXPECT_EQ(s.background_compile_failures, 0u);
    EXPECT_EQ(s.compiles, blocking->stats().compiles);  // the same kernels
    const uint64_t fallbacks = s.fallback_launches;
    for (int i = 0; i < 3; ++i) {
      error = step.Run(*background, ws_bg);
      ASSERT_TRUE(error.ok()) << error.status();
      EXPECT_LT(*error, Tolerance(dtype));
    }
    EXPECT_EQ(background->stats().fallback_launches, fallbacks);
  }
}

TEST(MoeBackgroundJitTest, SixteenThreadsOnOneColdKey) {
  std::unique_ptr<Runtime> runtime = MakeRuntime(Runtime::JitMode::kBackground);
  ASSERT_NE(runtime, nullptr);
  constexpr int kThreads = 16;
  std::vector<std::unique_ptr<Step>> steps;
  for (int t = 0; t < kThreads; ++t) {
    steps.push_back(std::make_unique<Step>(DType::kF32, 29, TestSeed() + t));
  }
  std::atomic<int> ready{0};
  std::vector<absl::StatusOr<double>> errors(kThreads, 0.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Workspace ws;
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < 4; ++i) {
        errors[t] = steps[t]->Run(*runtime, ws);
        if (!errors[t].ok() || *errors[t] >= Tolerance(DType::kF32)) return;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].ok()) << "thread " << t << ": " << errors[t].status();
    EXPECT_LT(*errors[t], Tolerance(DType::kF32)) << "thread " << t;
  }
  WaitForCompiles(*runtime);
  const StatsSnapshot s = runtime->stats();
  // One compile per distinct kernel, however many threads missed it.
  uint64_t kernels = 0;
  for (const auto& [op, n] : s.specializations_per_op) kernels += n;
  EXPECT_EQ(s.compiles, kernels);
  EXPECT_GT(s.fallback_launches, 0u);
  EXPECT_EQ(s.background_compile_failures, 0u);
}

absl::StatusOr<KernelSource> BrokenGemm(const SpecKey&) {
  return KernelSource{.code = "#include \"templates/cpu/no_such_template.h\"\n",
                      .entry = "tailor_entry"};
}

TEST(MoeBackgroundJitTest, FailedCompileLeavesTheGenericPathServing) {
  std::unique_ptr<Runtime> runtime = MakeRuntime(Runtime::JitMode::kBackground);
  ASSERT_NE(runtime, nullptr);
  tailor::internal::EngineOf(*runtime).SetGeneratorOverride(
      OpKind::kMoeGroupedGemm, &BrokenGemm);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  internal::Logger().sinks().push_back(sink);
  const spdlog::level::level_enum level = internal::Logger().level();
  internal::Logger().set_level(spdlog::level::err);

  Step step(DType::kF32, 21, TestSeed());
  Workspace ws;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<double> error = step.Run(*runtime, ws);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, Tolerance(DType::kF32));
    WaitForCompiles(*runtime);
  }
  internal::Logger().sinks().pop_back();
  internal::Logger().set_level(level);
  const StatsSnapshot s = runtime->stats();
  // Every GEMM key of the step failed once, and only once; pack and combine
  // compiled and are in use.
  const uint64_t gemm_keys =
      s.specializations_per_op.count("moe.grouped_gemm")
          ? s.specializations_per_op.at("moe.grouped_gemm")
          : 0;
  EXPECT_EQ(gemm_keys, 0u);
  EXPECT_GT(s.background_compile_failures, 0u);
  EXPECT_EQ(s.compile_failures, s.background_compile_failures);
  const std::string text = log.str();
  size_t reports = 0;
  for (size_t at = text.find("background compile of moe.grouped_gemm");
       at != std::string::npos;
       at = text.find("background compile of moe.grouped_gemm", at + 1)) {
    ++reports;
  }
  EXPECT_EQ(reports, s.background_compile_failures) << text;
  EXPECT_NE(text.find("no_such_template.h"), std::string::npos) << text;
  EXPECT_EQ(s.specializations_per_op.at("moe.pack"), 1u);
}

TEST(MoeBackgroundJitTest, ModeFromOptionsAndEnvironment) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.log_level = "off";
  options.jit_mode = static_cast<Runtime::JitMode>(7);
  EXPECT_THAT(Runtime::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "jit_mode: must be kDefault, kBlocking or kBackground, "
                       "got 7"));
  options.jit_mode = Runtime::JitMode::kDefault;
  setenv("TAILOR_JIT_MODE", "background", 1);
  absl::StatusOr<std::unique_ptr<Runtime>> from_env = Runtime::Create(options);
  options.jit_mode = Runtime::JitMode::kBlocking;  // the option wins
  absl::StatusOr<std::unique_ptr<Runtime>> blocking = Runtime::Create(options);
  unsetenv("TAILOR_JIT_MODE");
  ASSERT_TRUE(from_env.ok() && blocking.ok());
  EXPECT_TRUE(tailor::internal::EngineOf(**from_env).background_jit());
  EXPECT_FALSE(tailor::internal::EngineOf(**blocking).background_jit());
  EXPECT_EQ((*from_env)->jit_mode(), Runtime::JitMode::kBackground);
  EXPECT_EQ((*blocking)->jit_mode(), Runtime::JitMode::kBlocking);
}

// TAILOR_DISABLE_JIT still means "never compile": background mode then
// serves every miss on the generic kernels and compiles nothing.
TEST(MoeBackgroundJitTest, DisableJitNeverCompiles) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.disable_jit = true;
  options.jit_mode = Runtime::JitMode::kBackground;
  options.log_level = "off";
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  Step step(DType::kBF16, 13, TestSeed());
  Workspace ws;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<double> error = step.Run(**runtime, ws);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, Tolerance(DType::kBF16));
    WaitForCompiles(**runtime);
  }
  EXPECT_EQ((*runtime)->stats().compiles, 0u);
}

}  // namespace
}  // namespace tailor::moe::testing
