// Background JIT for the MoE family on the CUDA backend (label gpu; skips
// without a device): a cold moe::Experts call returns at once on the
// generic kernels (route, pack, grouped GEMM, combine: the image built into
// the library) while the specialized ones compile; every result matches the
// fp64 reference (outputs poisoned); the fallback count stops growing once
// the compiles land; the generic kernels alone (TAILOR_DISABLE_JIT: zero
// compiles) serve awkward ragged sizes (T 0, 1, 17, 577; empty experts;
// expert maps; tile rows 16, 17, 64, 128; ragged N and K, K % 8 != 0) and a
// CUDA graph; 16 threads on one cold step compile each kernel once; a GEMM
// template that does not compile leaves the generic GEMM serving and is
// reported once per key.
//
// FP8 layers (block, per tensor) on the Hopper and portable paths: the
// generic FP8 kernels first, then the specialized ones.
//
// Prints the first-call latency in both modes.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cuda/generic_image.h"
#include "backends/cuda/moe/kernels.h"
#include "core/logging.h"
#include "jit_test_util.h"
#include "ops/moe/cuda_test_util.h"
#include "ops/moe/fp8_test_util.h"
#include "spdlog/sinks/ostream_sink.h"
#include "tailor/status.h"

namespace tailor::moe::testing {
namespace {

using ::tailor::testing::MillisecondsOf;
using ::tailor::testing::WaitForCompiles;

using internal::KernelSource;
using internal::OpKind;
using internal::SpecKey;

Runtime::Options Options(Runtime::JitMode mode, bool disable_jit = false) {
  Runtime::Options options = CudaTestRuntime::DefaultOptions();
  options.jit_mode = mode;
  options.disable_jit = disable_jit;
  options.compile_threads = 2;
  // With disable_jit every queued resolve fails (logged): keep it quiet.
  options.log_level = disable_jit ? "off" : "error";
  return options;
}

// One moe::Experts step (H = 64, I = 32) on the device, its reference.
struct Step {
  Step(const cuda::DriverApi& api, DType dtype, int64_t experts, int64_t tokens,
       int64_t k, Spread spread, uint64_t seed, bool with_map = false)
      : rng(seed),
        dtype(dtype),
        experts(experts),
        tokens(tokens),
        k(k),
        with_map(with_map),
        hidden(dtype, {tokens, kHidden}),
        w13(dtype, {experts, 2 * kIntermediate, kHidden}),
        w2(dtype, {experts, kHidden, kIntermediate}),
        weights(DType::kF32, {tokens, k}),
        ids(RandomTopkIds(rng, tokens, k, with_map ? 2 * experts : experts,
                          spread)),
        map(RandomExpertMap(rng, 2 * experts, experts)),
        out(dtype, {tokens, kHidden}) {
    hidden.FillRandom(rng);
    w13.FillRandom(rng, 0.25);
    w2.FillRandom(rng, 0.25);
    weights.FillRandom(rng);
    out.Poison();
    for (HostTensor* t : {&hidden, &w13, &w2, &weights, &ids, &map, &out}) {
      device.push_back(std::make_unique<DeviceTensor>(api, *t));
    }
  }
  ExpertsArgs Args(RoutingPolicy policy, void* stream = nullptr) const {
    ExpertsArgs args = {.hidden = device[0]->ref(),
                        .w13 = device[1]->ref(),
                        .w2 = device[2]->ref(),
                        .topk_weights = device[3]->ref(),
                        .topk_ids = device[4]->ref(),
                        .policy = policy,
                        .out = device[6]->ref(),
                        .stream = stream};
    if (with_map) args.expert_map = device[5]->ref();
    return args;
  }
  double Error() const {
    return RelativeError(device[6]->Download(),
                         ReferenceExperts({hidden, w13, w2, weights, ids,
                                           with_map ? &map : nullptr},
                                          tokens, k));
  }
  std::mt19937_64 rng;
  DType dtype;
  int64_t experts, tokens, k;
  bool with_map;
  HostTensor hidden, w13, w2, weights, ids, map, out;
  std::vector<std::unique_ptr<DeviceTensor>> device;
};

class MoeCudaBackgroundJitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create(RuntimeOptions());
    if (!env.ok()) {
      ASSERT_EQ(env.status().code(), absl::StatusCode::kUnavailable)
          << env.status();
      GTEST_SKIP() << "no CUDA device here: " << env.status();
    }
    // The counts below assume the generic kernels need no compile.
    if (cuda::kNumGenericImages == 0) {
      GTEST_SKIP() << "library built without the generic CUDA image";
    }
    env_ = *std::move(env);
  }
  virtual Runtime::Options RuntimeOptions() const {
    return Options(Runtime::JitMode::kBackground);
  }
  Runtime& runtime() { return env_->runtime(); }
  const cuda::DriverApi& api() { return env_->api(); }

  // Runs `step` on `rt` (poisoned output) and syncs; its error. Reserves
  // `ws` for the step first (device workspaces are sized up front; not
  // timed). Any thread: makes the device's context current.
  absl::StatusOr<double> Run(Runtime& rt, Step& step, Workspace& ws,
                             RoutingPolicy policy = {}, double* ms = nullptr) {
    TAILOR_RETURN_IF_ERROR(env_->backend().device_context().MakeCurrent());
    TAILOR_RETURN_IF_ERROR(ReserveWorkspace(rt,
                                            {.max_tokens = step.tokens,
                                             .topk = step.k,
                                             .num_experts = step.experts,
                                             .hidden = kHidden,
                                             .intermediate = kIntermediate,
                                             .dtype = step.dtype,
                                             .policy = policy},
                                            ws));
    step.device[6]->Upload(step.out);  // the poison
    absl::Status ran;
    const double took =
        MillisecondsOf([&] { ran = Experts(rt, step.Args(policy), ws); });
    if (ms != nullptr) *ms = took;
    if (!ran.ok()) return ran;
    TAILOR_RETURN_IF_ERROR(ws.TakeErrors(rt));  // syncs
    return step.Error();
  }

  std::unique_ptr<CudaTestRuntime> env_;
};

class MoeCudaGenericOnlyTest : public MoeCudaBackgroundJitTest {
 protected:
  Runtime::Options RuntimeOptions() const override {
    return Options(Runtime::JitMode::kBackground, /*disable_jit=*/true);
  }
};

TEST_F(MoeCudaBackgroundJitTest, ColdCallServesAtOnceThenSpecializes) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> background =
        CudaTestRuntime::Create(Options(Runtime::JitMode::kBackground));
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> blocking =
        CudaTestRuntime::Create(Options(Runtime::JitMode::kBlocking));
    TAILOR_ASSERT_OK(background.status());
    TAILOR_ASSERT_OK(blocking.status());
    Runtime& bg = (*background)->runtime();
    Runtime& bl = (*blocking)->runtime();
    Step step(api(), dtype, 8, 577, 2, Spread::kSubset, TestSeed());
    Workspace ws_bg, ws_bl;
    double bg_ms = 0, bl_ms = 0;
    absl::StatusOr<double> error = Run(bg, step, ws_bg, {}, &bg_ms);
    TAILOR_ASSERT_OK(error.status());
    EXPECT_LT(*error, Tolerance(dtype));
    EXPECT_GT(bg.stats().fallback_launches, 0u);
    error = Run(bl, step, ws_bl, {}, &bl_ms);
    TAILOR_ASSERT_OK(error.status());
    EXPECT_LT(*error, Tolerance(dtype));
    EXPECT_EQ(bl.stats().fallback_launches, 0u);
    std::printf(
        "[ %s ] first Experts call: background %.2f ms, blocking "
        "%.2f ms\n",
        std::string(DTypeName(dtype)).c_str(), bg_ms, bl_ms);
    EXPECT_LT(bg_ms, bl_ms);  // the blocking call compiled every kernel

    WaitForCompiles(bg);
    const StatsSnapshot s = bg.stats();
    EXPECT_EQ(s.background_compile_failures, 0u);
    EXPECT_EQ(s.compiles, bl.stats().compiles);  // the same kernels
    for (int i = 0; i < 3; ++i) {
      error = Run(bg, step, ws_bg);
      TAILOR_ASSERT_OK(error.status());
      EXPECT_LT(*error, Tolerance(dtype));
    }
    EXPECT_EQ(bg.stats().fallback_launches, s.fallback_launches);
  }
}

TEST_F(MoeCudaGenericOnlyTest, ExpertsMatchTheReferenceOnRaggedSizes) {
  uint64_t seed = TestSeed();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int32_t tile_rows : {0, 16, 17, 128}) {
      Workspace ws;  // one workspace across the shapes, as a server's
      for (int64_t e : {1, 8, 64}) {
        for (int64_t t : {0, 1, 17, 577}) {
          for (int64_t k : {1, 2}) {
            if (k > e) continue;
            for (bool with_map : {false, true}) {
              SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " tile=", tile_rows,
                                        " E=", e, " T=", t, " k=", k,
                                        " map=", with_map));
              Step step(api(), dtype, e, t, k, Spread::kSubset, ++seed,
                        with_map);
              absl::StatusOr<double> error =
                  Run(runtime(), step, ws, {.tile_rows = tile_rows});
              TAILOR_ASSERT_OK(error.status());
              EXPECT_LT(*error, Tolerance(dtype));
            }
          }
        }
      }
    }
  }
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_GT(s.fallback_launches, 0u);
}

// Grouped GEMMs of awkward N and K (ragged, K % 8 != 0: SIMT), both
// epilogues, on the generic kernels.
TEST_F(MoeCudaGenericOnlyTest, GroupedGemmAwkwardDims) {
  std::mt19937_64 rng(TestSeed());
  const int64_t experts = 8, tokens = 577, topk = 2;
  struct Case {
    DType dtype;
    int64_t n, k;
    int32_t tile_rows;
    Epilogue epilogue;
  };
  for (const Case& g :
       std::vector<Case>{{DType::kBF16, 64, 64, 64, Epilogue::kNone},
                         {DType::kBF16, 64, 64, 128, Epilogue::kSiluAndMul},
                         {DType::kBF16, 520, 136, 100, Epilogue::kNone},
                         {DType::kBF16, 200, 72, 17, Epilogue::kNone},
                         {DType::kBF16, 96, 40, 16, Epilogue::kSiluAndMul},
                         {DType::kBF16, 30, 17, 64, Epilogue::kSiluAndMul},
                         {DType::kBF16, 1, 8, 64, Epilogue::kNone},
                         {DType::kF32, 200, 72, 17, Epilogue::kNone},
                         {DType::kF32, 96, 33, 64, Epilogue::kSiluAndMul}}) {
    SCOPED_TRACE(absl::StrCat(DTypeName(g.dtype), " N=", g.n, " K=", g.k,
                              " tile=", g.tile_rows,
                              " epilogue=", static_cast<int>(g.epilogue)));
    const bool gated = g.epilogue == Epilogue::kSiluAndMul;
    HostTensor ids = RandomTopkIds(rng, tokens, topk, experts, Spread::kSubset);
    DeviceTensor d_ids(api(), ids);
    const RoutingPolicy policy = {.tile_rows = g.tile_rows};
    Workspace ws;
    TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                      {.max_tokens = tokens,
                                       .topk = topk,
                                       .num_experts = experts,
                                       .policy = policy},
                                      ws));
    TAILOR_ASSERT_OK(Route(
        runtime(),
        {.topk_ids = d_ids.ref(), .num_experts = experts, .policy = policy},
        ws));
    const int64_t rows = ws.num_rows();
    HostTensor a(g.dtype, {rows, g.k}), w(g.dtype, {experts, g.n, g.k});
    HostTensor c(g.dtype, {rows, gated ? g.n / 2 : g.n});
    a.FillRandom(rng);
    w.FillRandom(rng, 0.5);
    c.Poison();
    DeviceTensor d_a(api(), a), d_w(api(), w), d_c(api(), c);
    TAILOR_ASSERT_OK(GroupedGemm(runtime(),
                                 {.a = d_a.ref(),
                                  .w = d_w.ref(),
                                  .c = d_c.ref(),
                                  .epilogue = g.epilogue},
                                 ws));
    ReferenceRouting ref = ReferenceRoute(ids, nullptr, experts, tokens, topk);
    EXPECT_LT(
        RelativeError(d_c.Download(),
                      ReferenceGroupedGemm(a, w, ref.offsets, g.n, g.k, gated)),
        Tolerance(g.dtype));
  }
  EXPECT_EQ(runtime().stats().compiles, 0u);
}

TEST_F(MoeCudaGenericOnlyTest, GraphReplaysOnTheGenericKernels) {
  cuda::testing::TestStream stream(api());
  ASSERT_TRUE(stream.ok());
  Step step(api(), DType::kBF16, 8, 64, 2, Spread::kUniform, TestSeed());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                    {.max_tokens = 64,
                                     .topk = 2,
                                     .num_experts = 8,
                                     .hidden = kHidden,
                                     .intermediate = kIntermediate},
                                    ws));
  const ExpertsArgs args = step.Args({}, stream.get());
  TAILOR_ASSERT_OK(Experts(runtime(), args, ws));  // outside the capture
  TAILOR_ASSERT_OK(stream.Synchronize());
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuStreamBeginCapture(stream.get(),
                                       CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS);
  const absl::Status captured = Experts(runtime(), args, ws);
  ASSERT_EQ(api().cuStreamEndCapture(stream.get(), &graph), CUDA_SUCCESS);
  TAILOR_ASSERT_OK(captured);
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 5; ++replay) {
    Step next(api(), DType::kBF16, 8, 64, 2, Spread::kSubset,
              TestSeed() + 1 + replay);
    const HostTensor* sources[] = {&next.hidden, &next.w13, &next.w2,
                                   &next.weights, &next.ids};
    for (int i = 0; i < 5; ++i) step.device[i]->Upload(*sources[i]);
    step.device[6]->Upload(next.out);  // poison
    ASSERT_EQ(api().cuGraphLaunch(exec, stream.get()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream.Synchronize());
    EXPECT_LT(RelativeError(step.device[6]->Download(),
                            ReferenceExperts({next.hidden, next.w13, next.w2,
                                              next.weights, next.ids, nullptr},
                                             64, 2)),
              Tolerance(DType::kBF16))
        << "replay " << replay;
  }
  api().cuGraphExecDestroy(exec);
  api().cuGraphDestroy(graph);
  EXPECT_EQ(runtime().stats().compiles, 0u);
}

TEST_F(MoeCudaBackgroundJitTest, SixteenThreadsOnOneColdStep) {
  constexpr int kThreads = 16;
  std::vector<std::unique_ptr<Step>> steps;
  for (int t = 0; t < kThreads; ++t) {
    steps.push_back(std::make_unique<Step>(api(), DType::kBF16, 8, 29, 2,
                                           Spread::kUniform, TestSeed() + t));
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
        errors[t] = Run(runtime(), *steps[t], ws);
        if (!errors[t].ok() || *errors[t] >= Tolerance(DType::kBF16)) return;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].ok()) << "thread " << t << ": " << errors[t].status();
    EXPECT_LT(*errors[t], Tolerance(DType::kBF16)) << "thread " << t;
  }
  WaitForCompiles(runtime());
  const StatsSnapshot s = runtime().stats();
  uint64_t kernels = 0;
  for (const auto& [op, n] : s.specializations_per_op) kernels += n;
  EXPECT_EQ(s.compiles, kernels);  // one compile per kernel
  EXPECT_GT(s.fallback_launches, 0u);
  EXPECT_EQ(s.background_compile_failures, 0u);
}

// FP8 (e4m3): a cold moe::Experts call runs the generic FP8 kernels (the
// quantizing Pack, the portable FP8 GEMM with the quantizing gate|up
// epilogue) for the Hopper path's keys and the portable path's, while the
// specialized ones compile; then only the specialized ones. Block and
// per-tensor scales; every step against fp64 on the dequantized inputs.
TEST_F(MoeCudaBackgroundJitTest, Fp8ColdCallServesAtOnceThenSpecializes) {
  std::mt19937_64 rng(TestSeed());
  for (const char* tuning : {"", "moe.gemm=portable"}) {
    for (ScaleMode mode : {ScaleMode::kBlock, ScaleMode::kPerTensor}) {
      SCOPED_TRACE(
          absl::StrCat("tuning=", tuning, " mode=", static_cast<int>(mode)));
      Runtime::Options options = Options(Runtime::JitMode::kBackground);
      options.tuning = tuning;
      absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
          CudaTestRuntime::Create(options);
      TAILOR_ASSERT_OK(env.status());
      Runtime& rt = (*env)->runtime();
      const Fp8Layer layer =
          MakeFp8Layer(rng, {.experts = 8, .hidden = 256, .intermediate = 256},
                       RandomTopkIds(rng, 129, 2, 8, Spread::kUniform), mode);
      std::vector<std::unique_ptr<DeviceTensor>> d;
      for (const HostTensor* t :
           {&layer.hidden, &layer.w13.q, &layer.w2.q, &layer.w13.scales,
            &layer.w2.scales, &layer.weights, &layer.ids, &layer.out, &layer.a1,
            &layer.a2}) {
        d.push_back(std::make_unique<DeviceTensor>(api(), *t));
      }
      ExpertsArgs args = layer.Args();
      args.hidden = d[0]->ref();
      args.w13 = d[1]->ref();
      args.w2 = d[2]->ref();
      args.quant.w13_scale = d[3]->ref();
      args.quant.w2_scale = d[4]->ref();
      args.topk_weights = d[5]->ref();
      args.topk_ids = d[6]->ref();
      args.out = d[7]->ref();
      if (mode == ScaleMode::kPerTensor) {
        args.quant.a1_scale = d[8]->ref();
        args.quant.a2_scale = d[9]->ref();
      }
      Workspace ws;
      TAILOR_ASSERT_OK(ReserveWorkspace(rt,
                                        {.max_tokens = layer.tokens(),
                                         .topk = 2,
                                         .num_experts = 8,
                                         .hidden = 256,
                                         .intermediate = 256,
                                         .dtype = DType::kBF16},
                                        ws));
      const std::vector<double> reference = layer.Reference();
      // One step, out poisoned first; whether its GEMMs ran generic.
      auto step = [&](bool generic) {
        d[7]->Upload(layer.out);
        TAILOR_ASSERT_OK(Experts(rt, args, ws));
        TAILOR_ASSERT_OK(ws.TakeErrors(rt));
        EXPECT_LT(RelativeError(d[7]->Download(), reference), 2e-2);
        ASSERT_EQ(ws.plan().gemms.size(), 2u);
        for (const GemmChoice& g : ws.plan().gemms) {
          EXPECT_EQ(g.kernel == "cuda.generic_mma_fp8", generic)
              << ws.plan().ToString();
        }
      };
      step(/*generic=*/true);
      EXPECT_GT(rt.stats().fallback_launches, 0u);
      WaitForCompiles(rt);
      const StatsSnapshot s = rt.stats();
      EXPECT_EQ(s.background_compile_failures, 0u);
      for (int i = 0; i < 2; ++i) step(/*generic=*/false);
      EXPECT_EQ(rt.stats().fallback_launches, s.fallback_launches);
      EXPECT_EQ(rt.stats().compiles, s.compiles);
      if (HasFailure()) return;
    }
  }
}

absl::StatusOr<KernelSource> BrokenGemm(const SpecKey&) {
  return KernelSource{
      .code = "#include \"templates/cuda/no_such_template.cuh\"\n",
      .entry = "tailor_entry"};
}

TEST_F(MoeCudaBackgroundJitTest, FailedCompileLeavesTheGenericGemmServing) {
  internal::Engine& engine = tailor::internal::EngineOf(runtime());
  engine.SetGeneratorOverride(OpKind::kMoeGroupedGemm, &BrokenGemm);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  internal::Logger().sinks().push_back(sink);
  const spdlog::level::level_enum level = internal::Logger().level();
  internal::Logger().set_level(spdlog::level::err);
  Step step(api(), DType::kBF16, 8, 21, 2, Spread::kUniform, TestSeed());
  Workspace ws;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<double> error = Run(runtime(), step, ws);
    TAILOR_ASSERT_OK(error.status());
    EXPECT_LT(*error, Tolerance(DType::kBF16));
    WaitForCompiles(runtime());
  }
  engine.SetGeneratorOverride(OpKind::kMoeGroupedGemm, nullptr);
  internal::Logger().sinks().pop_back();
  internal::Logger().set_level(level);
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.specializations_per_op.count("moe.grouped_gemm"), 0u);
  EXPECT_EQ(s.background_compile_failures, 2u);  // gate|up and down keys
  const std::string text = log.str();
  size_t reports = 0;
  for (size_t at = text.find("background compile of moe.grouped_gemm");
       at != std::string::npos;
       at = text.find("background compile of moe.grouped_gemm", at + 1)) {
    ++reports;
  }
  EXPECT_EQ(reports, s.background_compile_failures) << text;
  EXPECT_NE(text.find("no_such_template.cuh"), std::string::npos) << text;
  EXPECT_EQ(s.specializations_per_op.at("moe.pack"), 1u);
}

}  // namespace
}  // namespace tailor::moe::testing
