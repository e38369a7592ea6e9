// moe::Experts against a double-precision vLLM fused_experts on the
// E x T x k sweep (uniform, one expert, empty experts, expert maps), in
// place; the specialization budget (keys never depend on T; a warm runtime
// compiles nothing as routing changes); workspace reuse; rejected inputs.
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cpu/moe/kernels.h"
#include "core/engine.h"
#include "ops/moe/kernels.h"
#include "ops/moe/moe_test_util.h"
#include "ops/moe/workspace.h"

namespace tailor::moe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ExpertsCase {
  DType dtype;
  int64_t experts;  // local E
  int64_t tokens;
  int64_t k;
  Spread spread = Spread::kUniform;
  bool with_map = false;  // E_global = 2E, half of the globals are local
};

std::string Describe(const ExpertsCase& c) {
  return absl::StrCat(DTypeName(c.dtype), " E=", c.experts, " T=", c.tokens,
                      " k=", c.k, " spread=", static_cast<int>(c.spread),
                      " map=", c.with_map);
}

// The inputs of one case, random.
struct ExpertsData {
  ExpertsData(const ExpertsCase& c, std::mt19937_64& rng)
      : global(c.with_map ? 2 * c.experts : c.experts),
        hidden(c.dtype, {c.tokens, kHidden}),
        w13(c.dtype, {c.experts, 2 * kIntermediate, kHidden}),
        w2(c.dtype, {c.experts, kHidden, kIntermediate}),
        weights(DType::kF32, {c.tokens, c.k}),
        ids(RandomTopkIds(rng, c.tokens, c.k, global, c.spread)),
        map(RandomExpertMap(rng, global, c.experts)),
        out(c.dtype, {c.tokens, kHidden}) {
    hidden.FillRandom(rng);
    w13.FillRandom(rng, 0.25);
    w2.FillRandom(rng, 0.25);
    weights.FillRandom(rng);
    out.Poison();
  }
  ExpertsArgs Args(bool with_map) const {
    ExpertsArgs args = {.hidden = hidden.ref(),
                        .w13 = w13.ref(),
                        .w2 = w2.ref(),
                        .topk_weights = weights.ref(),
                        .topk_ids = ids.ref(),
                        .out = out.ref()};
    if (with_map) args.expert_map = map.ref();
    return args;
  }
  std::vector<double> Reference(const ExpertsCase& c) const {
    return ReferenceExperts(
        {hidden, w13, w2, weights, ids, c.with_map ? &map : nullptr}, c.tokens,
        c.k);
  }

  int64_t global;
  HostTensor hidden, w13, w2, weights, ids, map, out;
};

void ExpectExpertsMatch(const ExpertsCase& c, std::mt19937_64& rng,
                        Workspace& ws) {
  SCOPED_TRACE(Describe(c));
  ExpertsData data(c, rng);
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(c.with_map), ws));
  EXPECT_LT(RelativeError(data.out, data.Reference(c)), Tolerance(c.dtype));
}

TEST(MoeExpertsTest, Sweep) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;  // one workspace across all shapes, as a server would
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t e : {1, 8, 64, 256}) {
      for (int64_t t : {0, 1, 3, 17, 577}) {
        for (int64_t k : {1, 2, 8}) {
          if (k > e) continue;
          ExpectExpertsMatch({dtype, e, t, k}, rng, ws);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(MoeExpertsTest, SkewedRoutingAndExpertMaps) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t e : {1, 8, 64, 256}) {
      for (int64_t t : {1, 17, 577}) {
        for (Spread spread :
             {Spread::kUniform, Spread::kOneExpert, Spread::kSubset}) {
          for (bool with_map : {false, true}) {
            if (spread == Spread::kUniform && !with_map)
              continue;  // Sweep has it
            ExpectExpertsMatch(
                {dtype, e, t, std::min<int64_t>(e, 2), spread, with_map}, rng,
                ws);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(MoeExpertsTest, NoLocalExpertGivesZeros) {
  std::mt19937_64 rng(TestSeed());
  ExpertsCase c = {DType::kBF16, 4, 17, 2, Spread::kUniform, true};
  ExpertsData data(c, rng);
  for (int64_t g = 0; g < data.global; ++g) data.map.i32()[g] = -1;
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(true), ws));
  EXPECT_EQ(ws.num_rows(), 0);
  for (int64_t i = 0; i < data.out.numel(); ++i)
    ASSERT_EQ(data.out.at(i), 0.0) << i;
}

TEST(MoeExpertsTest, ValidTokensZeroThePadding) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ExpertsCase c = {dtype, 8, 17, 2};
    ExpertsData data(c, rng);
    HostTensor count(DType::kI32, {1});
    count.i32()[0] = 11;
    ExpertsArgs args = data.Args(false);
    args.valid_tokens = count.ref();
    Workspace ws;
    TAILOR_ASSERT_OK(Experts(SharedRuntime(), args, ws));
    // The first 11 tokens as if alone, zeros after them.
    std::vector<double> ref = data.Reference(c);
    std::fill(ref.begin() + 11 * kHidden, ref.end(), 0.0);
    EXPECT_LT(RelativeError(data.out, ref), Tolerance(dtype));
    for (int64_t i = 11 * kHidden; i < data.out.numel(); ++i)
      ASSERT_EQ(data.out.at(i), 0.0) << i;
  }
}

TEST(MoeExpertsTest, InPlace) {
  std::mt19937_64 rng(TestSeed());
  ExpertsCase c = {DType::kF32, 8, 17, 2};
  ExpertsData data(c, rng);
  std::vector<double> ref = data.Reference(c);
  ExpertsArgs args = data.Args(false);
  args.out = args.hidden;
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), args, ws));
  EXPECT_LT(RelativeError(data.hidden, ref), Tolerance(c.dtype));
}

TEST(MoeExpertsTest, WorkspaceStopsGrowingAtTheLargestStep) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  ExpertsCase largest = {DType::kBF16, 64, 577, 8};
  ExpectExpertsMatch(largest, rng, ws);
  const size_t capacity = ws.CapacityBytes();
  for (int64_t t : {1, 577, 3, 200, 17, 0}) {
    ExpertsData data({DType::kBF16, 64, t, 8, Spread::kSubset}, rng);
    TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(false), ws));
    EXPECT_EQ(ws.CapacityBytes(), capacity) << "T=" << t;
  }
}

TEST(MoeExpertsTest, ReservedWorkspaceNeverGrowsFromTheFirstStep) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(SharedRuntime(),
                                    {.max_tokens = 577,
                                     .topk = 8,
                                     .num_experts = 64,
                                     .hidden = kHidden,
                                     .intermediate = kIntermediate,
                                     .dtype = DType::kBF16},
                                    ws));
  const size_t capacity = ws.CapacityBytes();
  for (int64_t t : {577, 1, 3, 200, 17, 0}) {
    ExpertsData data({DType::kBF16, 64, t, 8, Spread::kSubset}, rng);
    TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(false), ws));
    EXPECT_EQ(ws.CapacityBytes(), capacity) << "T=" << t;
  }
}

TEST(MoeExpertsTest, ReserveRejectsBadLimits) {
  Workspace ws;
  EXPECT_THAT(
      ReserveWorkspace(SharedRuntime(),
                       {.max_tokens = 8, .topk = 0, .num_experts = 8}, ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("limits.topk: must be in [1, 64], got 0")));
  EXPECT_THAT(
      ReserveWorkspace(SharedRuntime(),
                       {.max_tokens = -1, .topk = 2, .num_experts = 8}, ws),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("limits.max_tokens: must be in [0, 1073741823], got -1")));
  EXPECT_THAT(
      ReserveWorkspace(SharedRuntime(),
                       {.max_tokens = 8, .topk = 2, .num_experts = 0}, ws),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("limits.num_experts: must be in [1, 1048576], got 0")));
  EXPECT_THAT(
      ReserveWorkspace(
          SharedRuntime(),
          {.max_tokens = 8, .topk = 2, .num_experts = 8, .dtype = DType::kI32},
          ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("limits.dtype: must be bf16 or f32, got i32")));
}

// ---- the specialization budget ----------------------------------------------

// Every GroupedGemm key a plan of T tokens needs is one of the 6 keys of the
// default policy (core + tail classes 1, 2, 4, 8, 16), whatever T is.
TEST(MoeSpecializationTest, GemmKeysNeverDependOnTokens) {
  std::mt19937_64 rng(TestSeed());
  internal::Engine& engine = tailor::internal::EngineOf(SharedRuntime());
  internal::GroupedGemmLaunch launch = {.dtype = DType::kBF16,
                                        .n = 2 * kIntermediate,
                                        .k = kHidden,
                                        .tile_rows = 16,
                                        .epilogue = Epilogue::kSiluAndMul};
  Workspace ws;
  std::set<std::string> expected;
  for (int32_t tail_class : {0, 1, 2, 4, 8, 16}) {
    TAILOR_ASSERT_OK(Route(
        SharedRuntime(),
        {.topk_ids = HostTensor(DType::kI32, {0, 1}).ref(), .num_experts = 8},
        ws));
    launch.plan = {.host = &tailor::internal::WorkspaceImplOf(ws)->plan};
    expected.insert(
        internal::cpu::GroupedGemmKey(engine, launch, tail_class).ToString());
  }
  std::set<std::string> seen;
  for (int64_t t = 0; t <= 600; t += 7) {
    HostTensor ids =
        RandomTopkIds(rng, t, 2, 8, t % 2 ? Spread::kUniform : Spread::kSubset);
    TAILOR_ASSERT_OK(
        Route(SharedRuntime(), {.topk_ids = ids.ref(), .num_experts = 8}, ws));
    launch.plan = {.host = &tailor::internal::WorkspaceImplOf(ws)->plan};
    ASSERT_LE(ws.plan().variants, 6);
    for (const plan::VariantRange& range :
         tailor::internal::WorkspaceImplOf(ws)->plan.variants()) {
      seen.insert(
          internal::cpu::GroupedGemmKey(engine, launch, range.tail_class)
              .ToString());
    }
  }
  for (const std::string& key : seen) {
    EXPECT_TRUE(expected.count(key))
        << key << " is not one of the 6 policy keys";
  }
  EXPECT_GE(seen.size(), 4u) << "the sweep should reach most tail classes";
}

// After one step that needs every variant, changing the routing (any T)
// looks kernels up but never compiles or loads one.
TEST(MoeSpecializationTest, WarmRuntimeCompilesNothingAsRoutingChanges) {
  std::mt19937_64 rng(TestSeed());
  Runtime& runtime = SharedRuntime();
  // k = 1; expert e gets counts[e] tokens: core + tails of class 1, 2, 4,
  // 8, 16.
  const std::vector<int32_t> counts = {17, 2, 4, 8, 9, 0, 0, 0};
  HostTensor warm_ids(DType::kI32, {40, 1});
  for (int32_t e = 0, t = 0; e < 8; ++e) {
    for (int32_t i = 0; i < counts[e]; ++i) warm_ids.i32()[t++] = e;
  }
  ExpertsData warm({DType::kBF16, 8, 40, 1}, rng);
  ExpertsArgs args = warm.Args(false);
  args.topk_ids = warm_ids.ref();
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(runtime, args, ws));
  EXPECT_EQ(ws.plan().variants, 6);
  const StatsSnapshot before = runtime.stats();
  for (int64_t t : {1, 2, 3, 5, 17, 64, 100, 255, 256, 577}) {
    ExpertsData data(
        {DType::kBF16, 8, t, 1, t % 3 ? Spread::kUniform : Spread::kOneExpert},
        rng);
    TAILOR_ASSERT_OK(Experts(runtime, data.Args(false), ws));
  }
  const StatsSnapshot after = runtime.stats();
  EXPECT_GT(after.lookups, before.lookups);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.specializations_per_op, before.specializations_per_op);
}

// The plan summary names the kernels Experts launched on it: gate/up (N =
// 2 I, K = H) then down (N = H, K = I); a new Route forgets them.
TEST(MoePlanSummaryTest, RecordsTheGemmChoicesOfTheLastLaunches) {
  std::mt19937_64 rng(TestSeed());
  ExpertsData data({DType::kBF16, 8, 17, 2}, rng);
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(false), ws));
  const PlanSummary plan = ws.plan();
  ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
  EXPECT_EQ(plan.gemms[0].kernel, "cpu");
  EXPECT_EQ(plan.gemms[0].n, 2 * kIntermediate);
  EXPECT_EQ(plan.gemms[0].k, kHidden);
  EXPECT_EQ(plan.gemms[0].cta_rows, plan.tile_rows);
  EXPECT_GT(plan.gemms[0].cta_cols, 0);
  EXPECT_EQ(plan.gemms[1].n, kHidden);
  EXPECT_EQ(plan.gemms[1].k, kIntermediate);
  EXPECT_THAT(plan.ToString(),
              HasSubstr(absl::StrCat(" | cpu N=", 2 * kIntermediate,
                                     " K=", kHidden, " cta=")));
  TAILOR_ASSERT_OK(Route(SharedRuntime(),
                         {.topk_ids = data.ids.ref(), .num_experts = 8}, ws));
  EXPECT_TRUE(ws.plan().gemms.empty());
}

// A choice's string prints its features text as the backend listed it,
// e.g. a decode step's swap-AB launch that splits K and streams W
// evict-first; a kernel without options prints none.
TEST(MoePlanSummaryTest, GemmChoicePrintsItsFeatures) {
  const GemmChoice swap = {
      .kernel = "cuda.sm90_tma_wgmma_swap_ab",
      .n = 1536,
      .k = 2048,
      .cta_rows = 8,
      .cta_cols = 256,
      .k_tile = 64,
      .stages = 6,
      .ctas = 96,
      .features =
          "tma_store=0,split_k=1,cluster=1,w_evict_first=1,"
          "wave_sync=0,expert_groups=fixed"};
  EXPECT_EQ(swap.ToString(),
            "cuda.sm90_tma_wgmma_swap_ab N=1536 K=2048 cta=8x256 k_tile=64 "
            "stages=6 ctas=96 [tma_store=0,split_k=1,cluster=1,"
            "w_evict_first=1,wave_sync=0,expert_groups=fixed]");
  EXPECT_EQ(swap.Feature("split_k"), "1");
  EXPECT_EQ(swap.Feature("expert_groups"), "fixed");
  EXPECT_EQ(swap.Feature("tma_store"), "0");
  EXPECT_EQ(swap.Feature("fp8_scales"), std::nullopt);
  const GemmChoice cpu = {
      .kernel = "cpu", .n = 64, .k = 32, .cta_rows = 16, .cta_cols = 16};
  EXPECT_EQ(cpu.ToString(), "cpu N=64 K=32 cta=16x16");
  EXPECT_EQ(cpu.Feature("split_k"), std::nullopt);
}

// The CPU kernel lists no options: its records' features text is empty.
TEST(MoePlanSummaryTest, CpuGemmsHaveNoFeatures) {
  std::mt19937_64 rng(TestSeed());
  ExpertsData data({DType::kF32, 8, 17, 2}, rng);
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), data.Args(false), ws));
  for (const GemmChoice& g : ws.plan().gemms) EXPECT_EQ(g.features, "");
  EXPECT_THAT(ws.plan().ToString(), Not(HasSubstr("[")));
}

// ---- rejected inputs --------------------------------------------------------

class MoeExpertsErrorTest : public ::testing::Test {
 protected:
  MoeExpertsErrorTest()
      : rng_(TestSeed()), data_({DType::kBF16, 8, 5, 2}, rng_) {}
  absl::Status Run(const ExpertsArgs& args) {
    return Experts(SharedRuntime(), args, ws_);
  }
  void ExpectOutUntouched() {
    for (int64_t i = 0; i < data_.out.numel(); ++i)
      ASSERT_TRUE(std::isnan(data_.out.at(i)));
  }

  std::mt19937_64 rng_;
  ExpertsData data_;
  Workspace ws_;
};

TEST_F(MoeExpertsErrorTest, Weights) {
  ExpertsArgs args = data_.Args(false);
  HostTensor w13_odd(DType::kBF16, {8, 63, kHidden});
  args.w13 = w13_odd.ref();
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w13: dims[1] (2I, gate | up) must be even, got 63")));
  args = data_.Args(false);
  HostTensor w2_short(DType::kBF16, {8, kHidden, 16});
  args.w2 = w2_short.ref();
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w2: dims[2] must equal I = w13.dims[1] / 2 (32), "
                         "got 16")));
  HostTensor w2_few(DType::kBF16, {7, kHidden, kIntermediate});
  args.w2 = w2_few.ref();
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w2: dims[0] must equal E = w13.dims[0] (8), got 7")));
  args = data_.Args(false);
  HostTensor w13_f32(DType::kF32, {8, 2 * kIntermediate, kHidden});
  args.w13 = w13_f32.ref();
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w13: dtype must match hidden (bf16), got f32")));
  ExpectOutUntouched();
}

TEST_F(MoeExpertsErrorTest, RoutingAndOutput) {
  ExpertsArgs args = data_.Args(false);
  HostTensor ids_short(DType::kI32, {4, 2});
  args.topk_ids = ids_short.ref();
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_ids: dims[0] must equal T = hidden.dims[0] "
                         "(5), got 4")));
  args = data_.Args(false);
  HostTensor weights_k3(DType::kF32, {5, 3});
  args.topk_weights = weights_k3.ref();
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_weights: dims[1] must equal k = "
                                 "topk_ids.dims[1] (2), got 3")));
  args = data_.Args(false);
  data_.ids.i32()[4 * 2 + 1] = 8;
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_ids[4,1]: expert id 8 is outside [0, 8)")));
  data_.ids.i32()[4 * 2 + 1] = 0;
  args.activation = static_cast<Activation>(3);
  EXPECT_THAT(
      Run(args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("activation: only Activation::kSilu is supported")));
  args = data_.Args(false);
  TensorRef shifted = args.hidden;  // overlaps hidden, one row down
  shifted.data = static_cast<uint16_t*>(args.hidden.data) + kHidden;
  shifted.dims[0] = 4;
  args.out = shifted;
  args.hidden.dims[0] = 4;
  args.topk_ids.dims[0] = 4;
  args.topk_weights.dims[0] = 4;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out: must not overlap hidden in memory")));
  ExpectOutUntouched();
}

}  // namespace
}  // namespace tailor::moe::testing
