// Background JIT for ragged attention on the CUDA backend (label gpu; skips
// without a device or without the generic image): a cold RunRagged returns
// at once on the generic portable kernel (runtime pack and page size, built
// into the library) while the specialized kernel compiles; every result
// matches the fp64 reference (outputs poisoned first); the fallback count
// stops growing once the compile lands. The generic kernel alone
// (TAILOR_DISABLE_JIT: zero compiles) runs the plans of both specialized
// kernels: the Hopper kernel's 128-row tiles (as 64-row strips; on sm_90a
// at its page sizes) and the portable kernel's 64-row tiles
// (ragged.kernel=portable), over the mixed, head, split and portable cases
// of ragged_gpu_test, and a CUDA graph replayed with new lengths. A
// template that does not compile leaves the generic kernel serving and is
// reported once.
//
// Prints the first-call latency in both modes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/attention/ragged_gpu_test_util.h"
#include "backends/cuda/generic_image.h"
#include "core/logging.h"
#include "jit_test_util.h"
#include "spdlog/sinks/ostream_sink.h"

namespace tailor::attention::testing {
namespace {

using ::tailor::testing::WaitForCompiles;
using ::testing::HasSubstr;

using internal::KernelSource;
using internal::SpecKey;

// Background-mode options over the suite's tuning and `keys`; with
// `disable_jit` nothing compiles (the generic kernels only).
Runtime::Options BackgroundOptions(bool disable_jit,
                                   const std::string& keys = "") {
  return CudaTestRuntime::BackgroundJit(OptionsWith(keys), disable_jit);
}

class RaggedBackgroundJitTest : public RaggedGpuTest {
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
    RaggedGpuTest::SetUp();
  }
};

// The generic kernels alone: never compiles anything.
class RaggedGenericOnlyTest : public RaggedBackgroundJitTest {
 protected:
  Runtime::Options RuntimeOptions() const override {
    return BackgroundOptions(/*disable_jit=*/true);
  }

  // A generic-only runtime with the tuning `keys` (created once per keys).
  Runtime& RuntimeWith(const std::string& keys) {
    std::unique_ptr<cuda::testing::CudaTestRuntime>& env = runtimes_[keys];
    if (env == nullptr) {
      absl::StatusOr<std::unique_ptr<cuda::testing::CudaTestRuntime>> created =
          cuda::testing::CudaTestRuntime::Create(
              BackgroundOptions(/*disable_jit=*/true, keys));
      EXPECT_TRUE(created.ok()) << created.status();
      if (created.ok()) env = *std::move(created);
    }
    return env != nullptr ? env->runtime() : runtime();
  }

  std::map<std::string, std::unique_ptr<cuda::testing::CudaTestRuntime>>
      runtimes_;
};

TEST_F(RaggedBackgroundJitTest, ColdCallServesAtOnceThenSpecializes) {
  RaggedCase f16 = MixedWith(5, 64, 8, 2);  // the portable kernel's page
  f16.dtype = DType::kF16;
  for (const RaggedCase& c : {MixedStep(), f16}) {
    SCOPED_TRACE(c.ToString().substr(0, 90));
    // Fresh runtimes: every key is cold.
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> background =
        CudaTestRuntime::Create(BackgroundOptions(false));
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> blocking =
        CudaTestRuntime::Create(OptionsWith(""));
    TAILOR_ASSERT_OK(background.status());
    TAILOR_ASSERT_OK(blocking.status());
    Runtime& bg = (*background)->runtime();
    Runtime& bl = (*blocking)->runtime();

    EXPECT_LE(RunCase(c, bg).out_rel, 1e-2);
    const double bg_ms = last_run_ms_;
    EXPECT_GE(bg.stats().fallback_launches, 1u);
    EXPECT_LE(RunCase(c, bl).out_rel, 1e-2);
    const double bl_ms = last_run_ms_;
    EXPECT_EQ(bl.stats().fallback_launches, 0u);
    std::printf(
        "[ %s D=%lld page=%lld ] first RunRagged: background %.2f ms, "
        "blocking %.2f ms\n",
        std::string(DTypeName(c.dtype)).c_str(),
        static_cast<long long>(c.head_dim), static_cast<long long>(c.page_size),
        bg_ms, bl_ms);
    EXPECT_LT(bg_ms, bl_ms);  // the blocking call compiled; this one did not

    WaitForCompiles(bg);
    const StatsSnapshot s = bg.stats();
    EXPECT_EQ(s.background_compile_failures, 0u);
    EXPECT_EQ(s.compiles, bl.stats().compiles);  // the same kernels
    for (int i = 0; i < 3; ++i) EXPECT_LE(RunCase(c, bg).out_rel, 1e-2);
    EXPECT_EQ(bg.stats().fallback_launches, s.fallback_launches);
  }
}

// A case on the generic kernel, under the tuning `keys`.
struct GenericCase {
  std::string name;
  RaggedCase c;
  std::string keys;
};

// The mixed step's masks and dtypes, head dims / groups / pages, a split
// long sequence: on the backend's own plan (the Hopper kernel's on sm_90a)
// and on the portable kernel's; then every portable case.
std::vector<GenericCase> GenericCases() {
  std::vector<GenericCase> cases;
  RaggedCase f16_hnd = MixedStep();
  f16_hnd.layout = KvLayout::kHnd;
  f16_hnd.dtype = DType::kF16;
  RaggedCase window = MixedStep();
  window.window_left = 100;
  RaggedCase capped = MixedStep();
  capped.causal = false;
  capped.soft_cap = 20.0f;
  RaggedCase split = {.q_lens = {1, 64, 300},
                      .kv_lens = {32768, 20000, 9000},
                      .num_qo_heads = 8,
                      .num_kv_heads = 2,
                      .head_dim = 128};
  const std::vector<GenericCase> own = {
      {"Mixed", MixedStep(), ""},
      {"MixedF16Hnd", f16_hnd, ""},
      {"MixedWindow", window, ""},
      {"MixedNonCausalCap", capped, ""},
      {"D64Pack8", MixedWith(16, 64, 32, 4), ""},
      {"D256Pack1Page32", MixedWith(32, 256, 8, 8), ""},
      {"D256Pack4Page32", MixedWith(32, 256, 16, 4), ""},
      {"Pack16Page128", MixedWith(128, 128, 16, 1), ""},
      {"Pack4Page8", MixedWith(8, 128, 32, 8), ""},
      {"SplitLong", split, ""}};
  for (const GenericCase& g : own) {
    cases.push_back(g);
    cases.push_back({g.name + "/portable", g.c, "ragged.kernel=portable"});
  }
  for (const PortableVariant& v : PortableVariants()) {
    cases.push_back({"portable/" + v.name, v.c,
                     v.tuning.empty() ? "ragged.kernel=portable"
                                      : "ragged.kernel=portable," + v.tuning});
  }
  return cases;
}

TEST_F(RaggedGenericOnlyTest, MatchesTheReferenceOnEveryCase) {
  for (const GenericCase& g : GenericCases()) {
    SCOPED_TRACE(g.name);
    Runtime& rt = RuntimeWith(g.keys);
    const uint64_t before = rt.stats().fallback_launches;
    RaggedCase c = g.c;
    c.seed = TestSeed();
    const Errors err = RunCase(c, rt);
    std::printf("generic %-28s tile rows %d\n", g.name.c_str(),
                last_plan_.tile_rows);
    EXPECT_LE(err.out_rel, 1e-2) << err.worst;
    // tanh.approx: the soft-capped lse bound of ragged_gpu_test.
    EXPECT_LE(err.lse_abs, c.soft_cap > 0 ? 2e-2 : kDecodeLseBound);
    EXPECT_GT(last_plan_.tiles, 0) << last_plan_.ToString();
    EXPECT_GT(rt.stats().fallback_launches, before);
    if (absl::StrContains(g.name, "Split")) {
      EXPECT_GT(last_plan_.split_tiles, 0) << last_plan_.ToString();
    }
    EXPECT_EQ(rt.stats().compiles, 0u);
  }
}

// Graphs captured on the generic kernels replay with new lengths, on both
// kernels' plans.
TEST_F(RaggedGenericOnlyTest, GraphReplaysOnTheGenericKernel) {
  for (const char* keys : {"", "ragged.kernel=portable"}) {
    SCOPED_TRACE(keys);
    Runtime& rt = RuntimeWith(keys);
    // Warm-up outside the capture (the device queries of a first call).
    EXPECT_LE(RunCase(ReplaySteps().front(), rt).out_rel, 1e-2);
    ExpectGraphReplays(rt, ReplaySteps());
    EXPECT_EQ(rt.stats().compiles, 0u);
    EXPECT_GT(rt.stats().fallback_launches, 0u);
  }
}

absl::StatusOr<KernelSource> BrokenRagged(const SpecKey&) {
  return KernelSource{
      .code = "#include \"templates/cuda/no_such_template.cuh\"\n",
      .entry = "tailor_entry"};
}

TEST_F(RaggedBackgroundJitTest, FailedCompileLeavesTheGenericKernelServing) {
  env_->engine().SetGeneratorOverride(
      tailor::internal::OpKind::kAttentionRagged, &BrokenRagged);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  internal::Logger().sinks().push_back(sink);
  const spdlog::level::level_enum level = internal::Logger().level();
  internal::Logger().set_level(spdlog::level::err);
  RaggedCase c = MixedWith(16, 256, 16, 4);
  c.dtype = DType::kF16;
  for (int i = 0; i < 3; ++i) {
    c.seed = TestSeed() + i;
    EXPECT_LE(RunCase(c).out_rel, 1e-2);
    WaitForCompiles(runtime());
  }
  env_->engine().SetGeneratorOverride(
      tailor::internal::OpKind::kAttentionRagged, nullptr);
  internal::Logger().sinks().pop_back();
  internal::Logger().set_level(level);
  const StatsSnapshot s = runtime().stats();
  EXPECT_EQ(s.background_compile_failures, 1u);  // one key, reported once
  EXPECT_GE(s.fallback_launches, 3u);
  EXPECT_EQ(s.specializations_per_op.count("attention.ragged"), 0u);
  const std::string text = log.str();
  EXPECT_EQ(text.find("background compile of attention.ragged"),
            text.rfind("background compile of attention.ragged"))
      << text;
  EXPECT_THAT(text, HasSubstr("no_such_template.cuh"));
}

}  // namespace
}  // namespace tailor::attention::testing
