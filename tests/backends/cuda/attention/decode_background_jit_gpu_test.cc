// Background JIT for paged decode on the CUDA backend (label gpu; skips
// without a device): a cold RunDecode returns at once on the generic
// cp.async kernel (the image built into the library) while the specialized
// kernel compiles; every result matches the fp64 reference (outputs
// poisoned first); the fallback count stops growing once the compile lands;
// the generic kernel alone (TAILOR_DISABLE_JIT: zero compiles) serves every
// awkward case of decode_gpu_test and a CUDA graph; 16 threads on one cold
// key compile it once; a template that does not compile leaves the generic
// kernel serving and is reported once.
//
// Prints the first-call latency in both modes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/decode_gpu_test_util.h"
#include "backends/cuda/generic_image.h"
#include "core/logging.h"
#include "jit_test_util.h"
#include "spdlog/sinks/ostream_sink.h"

namespace tailor::attention::testing {
namespace {

using ::tailor::testing::MillisecondsOf;
using ::tailor::testing::WaitForCompiles;

using internal::KernelSource;
using internal::SpecKey;

Runtime::Options BackgroundOptions(bool disable_jit) {
  return CudaTestRuntime::BackgroundJit(CudaTestRuntime::DefaultOptions(),
                                        disable_jit);
}

class DecodeBackgroundJitTest : public DecodeGpuTest {
 protected:
  Runtime::Options RuntimeOptions() const override {
    return BackgroundOptions(/*disable_jit=*/false);
  }
  // The counts below assume the generic kernels need no compile (without
  // the image they are compiled at run time and counted too).
  void SetUp() override {
    if (cuda::kNumGenericImages == 0) {
      GTEST_SKIP() << "library built without the generic CUDA image";
    }
    DecodeGpuTest::SetUp();
  }

  // Plans and runs `p` on `runtime` into poisoned outputs; the errors
  // against the reference. `ms`: how long RunDecode took to return.
  Errors RunChecked(Runtime& rt, const PagedBatch& p, DeviceBatch& d,
                    DecodeWorkspace& ws, double* ms = nullptr) {
    EXPECT_TRUE(d.Upload(p).ok());
    EXPECT_TRUE(PlanDecode(rt, PlanArgsOf(p, stream()), ws).ok());
    absl::Status ran;
    const double took = MillisecondsOf(
        [&] { ran = RunDecode(rt, d.Args(p, rt.device(), stream()), ws); });
    if (ms != nullptr) *ms = took;
    EXPECT_TRUE(ran.ok()) << ran;
    EXPECT_TRUE(stream_->Synchronize().ok());
    EXPECT_TRUE(ws.TakeErrors(rt, stream()).ok());
    return Check(d, p, 1.0 / std::sqrt(double(p.c.head_dim)));
  }
};

// The generic kernel alone: never compiles anything.
class DecodeGenericOnlyTest : public DecodeBackgroundJitTest {
 protected:
  Runtime::Options RuntimeOptions() const override {
    return BackgroundOptions(/*disable_jit=*/true);
  }
};

PagedCase SmallCase(DType dtype, int64_t head_dim, int64_t page) {
  return {.lens = {577, 1, 17, 0, 3},
          .page_size = page,
          .num_qo_heads = 8,
          .num_kv_heads = 2,
          .head_dim = head_dim,
          .dtype = dtype,
          .layout = KvLayout::kNhd,
          .shared_prefix_pages = 1,
          .seed = TestSeed()};
}

TEST_F(DecodeBackgroundJitTest, ColdCallServesAtOnceThenSpecializes) {
  for (const PagedCase& c :
       {SmallCase(DType::kBF16, 128, 16), SmallCase(DType::kF16, 64, 5)}) {
    SCOPED_TRACE(c.ToString());
    // Fresh runtimes: every key is cold.
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> background =
        CudaTestRuntime::Create(BackgroundOptions(false));
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> blocking =
        CudaTestRuntime::Create(CudaTestRuntime::DefaultOptions());
    TAILOR_ASSERT_OK(background.status());
    TAILOR_ASSERT_OK(blocking.status());
    Runtime& bg = (*background)->runtime();
    Runtime& bl = (*blocking)->runtime();
    PagedBatch p = BuildPagedBatch(c);
    DeviceBatch d(api(), p);
    DecodeWorkspace ws_bg, ws_bl;
    TAILOR_ASSERT_OK(ReserveDecodeWorkspace(bg, LimitsOf(c, c.batch()), ws_bg));
    TAILOR_ASSERT_OK(ReserveDecodeWorkspace(bl, LimitsOf(c, c.batch()), ws_bl));

    double bg_ms = 0, bl_ms = 0;
    Errors err = RunChecked(bg, p, d, ws_bg, &bg_ms);
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << err.worst;
    EXPECT_EQ(bg.stats().fallback_launches, 1u);
    err = RunChecked(bl, p, d, ws_bl, &bl_ms);
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << err.worst;
    EXPECT_EQ(bl.stats().fallback_launches, 0u);
    std::printf(
        "[ %s D=%lld page=%lld ] first RunDecode: background %.2f ms, "
        "blocking %.2f ms\n",
        std::string(DTypeName(c.dtype)).c_str(),
        static_cast<long long>(c.head_dim), static_cast<long long>(c.page_size),
        bg_ms, bl_ms);
    EXPECT_LT(bg_ms, bl_ms);  // the blocking call compiled; this one did not

    WaitForCompiles(bg);
    const StatsSnapshot s = bg.stats();
    EXPECT_EQ(s.background_compile_failures, 0u);
    EXPECT_EQ(s.compiles, bl.stats().compiles);  // the same kernel
    for (int i = 0; i < 3; ++i) {
      err = RunChecked(bg, p, d, ws_bg);
      EXPECT_LE(err.out_rel, Bound(c.dtype)) << err.worst;
    }
    EXPECT_EQ(bg.stats().fallback_launches, s.fallback_launches);
  }
}

TEST_F(DecodeGenericOnlyTest, MatchesReferenceOnEveryCase) {
  uint64_t calls = 0;
  for (const PagedCase& c : Cases()) {
    SCOPED_TRACE(c.ToString());
    PagedBatch p = BuildPagedBatch(c);
    DeviceBatch d(api(), p);
    DecodeWorkspace ws;
    Reserve(LimitsOf(c, c.batch()), ws);
    const Errors err = RunChecked(runtime(), p, d, ws);
    ++calls;
    std::printf("generic rel %.2e lse %.2e | %s | %s\n", err.out_rel,
                err.lse_abs, c.ToString().c_str(),
                ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << "worst " << err.worst;
    EXPECT_LE(err.lse_abs, 2e-3);
  }
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_EQ(s.fallback_launches, calls);
}

// A graph captured on the generic kernel replays with new queries.
TEST_F(DecodeGenericOnlyTest, GraphReplaysOnTheGenericKernel) {
  PagedCase c = SmallCase(DType::kBF16, 128, 16);
  PagedBatch p = BuildPagedBatch(c);
  DeviceBatch d(api(), p);
  DecodeWorkspace ws;
  Reserve(LimitsOf(c, c.batch()), ws);
  Errors err = RunChecked(runtime(), p, d, ws);  // warm-up, outside capture
  EXPECT_LE(err.out_rel, Bound(c.dtype));
  const RunDecodeArgs args = d.Args(p, device(), stream());
  DecodeGraph graph(api());
  TAILOR_ASSERT_OK(graph.Capture(runtime(), args, ws));
  for (int step = 0; step < 3; ++step) {
    c.seed = TestSeed() + 100 + step;  // same lengths, new data
    PagedBatch next = BuildPagedBatch(c);
    TAILOR_ASSERT_OK(d.Upload(next));
    ASSERT_EQ(graph.Launch(stream()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    err = Check(d, next, 1.0 / std::sqrt(128.0));
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << "step " << step;
  }
  EXPECT_EQ(runtime().stats().compiles, 0u);
}

TEST_F(DecodeBackgroundJitTest, SixteenThreadsOnOneColdKey) {
  constexpr int kThreads = 16;
  const PagedCase c = SmallCase(DType::kBF16, 128, 16);
  const PagedBatch p = BuildPagedBatch(c);
  std::vector<std::unique_ptr<DeviceBatch>> batches;
  std::vector<std::unique_ptr<TestStream>> streams;
  std::vector<DecodeWorkspace> workspaces(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    batches.push_back(std::make_unique<DeviceBatch>(api(), p));
    TAILOR_ASSERT_OK(batches.back()->Upload(p));
    streams.push_back(std::make_unique<TestStream>(api()));
    TAILOR_ASSERT_OK(ReserveDecodeWorkspace(runtime(), LimitsOf(c, c.batch()),
                                            workspaces[t]));
  }
  std::atomic<int> ready{0};
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CUstream s = streams[t]->get();
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < 4 && results[t].ok(); ++i) {
        results[t] = PlanDecode(runtime(), PlanArgsOf(p, s), workspaces[t]);
        if (!results[t].ok()) break;
        results[t] = RunDecode(runtime(), batches[t]->Args(p, device(), s),
                               workspaces[t]);
      }
      if (results[t].ok()) results[t] = streams[t]->Synchronize();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].ok()) << "thread " << t << ": " << results[t];
    const Errors err = Check(*batches[t], p, 1.0 / std::sqrt(128.0));
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << "thread " << t;
  }
  WaitForCompiles(runtime());
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.compiles, 1u);  // one key, however many threads missed it
  EXPECT_EQ(s.specializations_per_op.at("attention.decode"), 1u);
  EXPECT_GT(s.fallback_launches, 0u);
  EXPECT_EQ(s.background_compile_failures, 0u);
}

absl::StatusOr<KernelSource> BrokenDecode(const SpecKey&) {
  return KernelSource{
      .code = "#include \"templates/cuda/no_such_template.cuh\"\n",
      .entry = "tailor_entry"};
}

TEST_F(DecodeBackgroundJitTest, FailedCompileLeavesTheGenericKernelServing) {
  env_->engine().SetGeneratorOverride(
      tailor::internal::OpKind::kAttentionDecode, &BrokenDecode);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  internal::Logger().sinks().push_back(sink);
  const spdlog::level::level_enum level = internal::Logger().level();
  internal::Logger().set_level(spdlog::level::err);
  const PagedCase c = SmallCase(DType::kF16, 256, 64);
  PagedBatch p = BuildPagedBatch(c);
  DeviceBatch d(api(), p);
  DecodeWorkspace ws;
  Reserve(LimitsOf(c, c.batch()), ws);
  for (int i = 0; i < 3; ++i) {
    const Errors err = RunChecked(runtime(), p, d, ws);
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << err.worst;
    WaitForCompiles(runtime());
  }
  env_->engine().SetGeneratorOverride(
      tailor::internal::OpKind::kAttentionDecode, nullptr);
  internal::Logger().sinks().pop_back();
  internal::Logger().set_level(level);
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.background_compile_failures, 1u);  // one key, reported once
  EXPECT_EQ(s.fallback_launches, 3u);
  EXPECT_EQ(s.specializations_per_op.count("attention.decode"), 0u);
  const std::string text = log.str();
  EXPECT_EQ(text.find("background compile of attention.decode"),
            text.rfind("background compile of attention.decode"))
      << text;
  EXPECT_THAT(text, HasSubstr("no_such_template.cuh"));
}

}  // namespace
}  // namespace tailor::attention::testing
