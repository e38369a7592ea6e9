// The Hopper grouped GEMM's two consumer schedules on the CUDA backend
// (label gpu; skipped without a device): ping-pong consumers (a tile per
// consumer warpgroup, mainloops in turns; templates/cuda/moe/sm90/
// kernel_pingpong.cuh) and the cooperative kernel, each forced through the
// tuning key moe.consumers, and the cost model's choice (cooperative), all
// against fp64 with NaN-poisoned outputs: tails of every size beside full
// tiles and an empty expert, awkward T, K of one block or less and ending on
// a partial block, ragged N, several tiles per CTA, with the options the
// ping-pong kernel shares (register stores, wave sync, raster groups), and
// moe::Experts end to end. Each GEMM launches twice on one plan: the second
// finds the counters the first reset.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/moe/cuda_test_util.h"

namespace tailor::moe::testing {
namespace {

constexpr int64_t kExperts = 8, kTopk = 2;

struct GemmCase {
  int64_t n, k;
  Epilogue epilogue;
};

std::string Describe(const GemmCase& g) {
  return absl::StrCat("N=", g.n, " K=", g.k,
                      " epilogue=", static_cast<int>(g.epilogue));
}

// A runtime with the tuning keys `tuning` (MoeCudaTest::SetUpWith: shared
// by the tests of the same keys), or the shared one for "".
class MoeCudaConsumersTest : public MoeCudaTest {
 protected:
  bool hopper() { return env_->backend().arch() == "sm_90a"; }

  // Routes `ids` [T, kTopk] over kExperts, launches `g` twice on that plan
  // against fp64 (CheckGroupedGemmTwice) and returns the plan's summary.
  PlanSummary CheckTwoLaunches(const GemmCase& g, const HostTensor& ids,
                               std::mt19937_64& rng,
                               RoutingPolicy policy = {}) {
    Workspace ws;
    CheckGroupedGemmTwice({.n = g.n,
                           .k = g.k,
                           .epilogue = g.epilogue,
                           .experts = kExperts,
                           .topk = kTopk,
                           .policy = policy},
                          ids, rng, ws);
    return ws.plan();
  }

  // On sm_90a, a 128-row plan's last launch ran `kernel` with `pingpong`.
  void ExpectSchedule(const PlanSummary& plan, const std::string& kernel,
                      bool pingpong) {
    if (!hopper() || plan.tile_rows != 128) return;
    ASSERT_FALSE(plan.gemms.empty()) << plan.ToString();
    const GemmChoice& gemm = plan.gemms.back();
    EXPECT_EQ(gemm.kernel, kernel) << plan.ToString();
    EXPECT_EQ(gemm.Feature("pingpong"), pingpong ? "1" : "0")
        << plan.ToString();
    if (pingpong) {
      EXPECT_EQ(gemm.Feature("split_k"), "0") << plan.ToString();
      EXPECT_EQ(gemm.cta_rows, 64) << plan.ToString();  // a consumer's half
    }
  }

  // The sweep of shapes both forced schedules run.
  void CheckSweep(const std::string& kernel, bool pingpong) {
    std::mt19937_64 rng(TestSeed());
    // Tails of 1, 32, 63, 64, 65, 96 and 127 rows beside full tiles and an
    // empty expert (a tail's rows past its end hold the next expert's rows,
    // which must never reach C).
    const HostTensor tails = IdsWithCounts({129, 64, 65, 127, 0, 319, 32, 96});
    for (const GemmCase& g : std::vector<GemmCase>{
             {520, 136, Epilogue::kNone},          // ragged N, K ends mid-block
             {1280, 1000, Epilogue::kSiluAndMul},  // 16 K blocks, 4 stages
             {4096, 256, Epilogue::kNone},
             {1280, 40, Epilogue::kSiluAndMul},  // K of less than a block
             {2048, 64, Epilogue::kNone}}) {     // one K block
      SCOPED_TRACE(absl::StrCat("every tail size, ", Describe(g)));
      ExpectSchedule(CheckTwoLaunches(g, tails, rng), kernel, pingpong);
      if (HasFailure()) return;
    }
    // Awkward T (uniform routing); 2001 and 4500 give each CTA several
    // tiles, so the consumers alternate over many halves.
    for (const int64_t t : {1, 17, 127, 129, 577, 2001}) {
      const GemmCase g = {2048, 264, Epilogue::kNone};
      SCOPED_TRACE(absl::StrCat("T=", t, " ", Describe(g)));
      const HostTensor ids =
          RandomTopkIds(rng, t, kTopk, kExperts, Spread::kUniform);
      ExpectSchedule(CheckTwoLaunches(g, ids, rng), kernel, pingpong);
      if (HasFailure()) return;
    }
    const GemmCase many = {1280, 128, Epilogue::kSiluAndMul};
    SCOPED_TRACE(absl::StrCat("T=4500 ", Describe(many)));
    ExpectSchedule(
        CheckTwoLaunches(
            many, RandomTopkIds(rng, 4500, kTopk, kExperts, Spread::kUniform),
            rng),
        kernel, pingpong);
  }
};

class MoeCudaPingPongTest : public MoeCudaConsumersTest {
 protected:
  void SetUp() override { SetUpWith("moe.consumers=pingpong"); }
};
TEST_F(MoeCudaPingPongTest, GroupedGemmMatchesFp64) {
  CheckSweep("cuda.sm90_tma_wgmma_pingpong", true);
}

// Plan tiles of 65 to 127 rows (a routing policy's) run on the 128-row CTA
// tile: consumer 1's half of a core tile is part full, and every tile
// leaves by register stores (TMA stores need the plan tile to be the CTA's).
TEST_F(MoeCudaPingPongTest, GroupedGemmOfPolicyTileRows) {
  std::mt19937_64 rng(TestSeed());
  const HostTensor tails = IdsWithCounts({129, 64, 65, 127, 0, 319, 32, 96});
  for (const int32_t tile_rows : {65, 100, 127}) {
    for (const GemmCase& g : std::vector<GemmCase>{
             {520, 136, Epilogue::kNone}, {1280, 200, Epilogue::kSiluAndMul}}) {
      SCOPED_TRACE(absl::StrCat("tile_rows=", tile_rows, " ", Describe(g)));
      const PlanSummary plan =
          CheckTwoLaunches(g, tails, rng, {.tile_rows = tile_rows});
      if (hopper()) {
        EXPECT_EQ(plan.tile_rows, tile_rows) << plan.ToString();
        ASSERT_FALSE(plan.gemms.empty()) << plan.ToString();
        EXPECT_EQ(plan.gemms.back().kernel, "cuda.sm90_tma_wgmma_pingpong")
            << plan.ToString();
        EXPECT_EQ(plan.gemms.back().Feature("tma_store"), "0")
            << plan.ToString();
      }
    }
  }
}

// moe::Experts end to end (route, pack, gate|up with silu_and_mul, down,
// combine) with both GEMMs on ping-pong consumers: 577 tokens over 8
// experts, 144 rows an expert, so 128-row tiles with tails.
TEST_F(MoeCudaPingPongTest, ExpertsMatchFp64) {
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kTokens = 577;
  HostTensor hidden(DType::kBF16, {kTokens, kHidden});
  HostTensor w13(DType::kBF16, {kExperts, 2 * kIntermediate, kHidden});
  HostTensor w2(DType::kBF16, {kExperts, kHidden, kIntermediate});
  HostTensor weights(DType::kF32, {kTokens, kTopk});
  HostTensor out(DType::kBF16, {kTokens, kHidden});
  const HostTensor ids =
      RandomTopkIds(rng, kTokens, kTopk, kExperts, Spread::kUniform);
  hidden.FillRandom(rng);
  w13.FillRandom(rng, 0.25);
  w2.FillRandom(rng, 0.25);
  weights.FillRandom(rng);
  out.Poison();
  DeviceTensor d_hidden = ToDevice(hidden), d_w13 = ToDevice(w13),
               d_w2 = ToDevice(w2), d_weights = ToDevice(weights),
               d_ids = ToDevice(ids), d_out = ToDevice(out);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                    {.max_tokens = kTokens,
                                     .topk = kTopk,
                                     .num_experts = kExperts,
                                     .hidden = kHidden,
                                     .intermediate = kIntermediate,
                                     .dtype = DType::kBF16},
                                    ws));
  TAILOR_ASSERT_OK(Experts(runtime(),
                           {.hidden = d_hidden.ref(),
                            .w13 = d_w13.ref(),
                            .w2 = d_w2.ref(),
                            .topk_weights = d_weights.ref(),
                            .topk_ids = d_ids.ref(),
                            .out = d_out.ref()},
                           ws));
  const std::vector<double> ref = ReferenceExperts(
      {hidden, w13, w2, weights, ids, nullptr}, kTokens, kTopk);
  EXPECT_LT(RelativeError(d_out.Download(), ref), Tolerance(DType::kBF16));
  const PlanSummary plan = ws.plan();
  ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
  for (const GemmChoice& gemm : plan.gemms) {
    if (hopper()) {
      EXPECT_EQ(gemm.kernel, "cuda.sm90_tma_wgmma_pingpong") << plan.ToString();
    }
  }
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
}

// Ping-pong with the options it shares with the cooperative kernel: every
// tile stored from registers, waves that start together, raster groups
// moved back to expert starts.
class MoeCudaPingPongOptionsTest : public MoeCudaConsumersTest {
 protected:
  void SetUp() override {
    SetUpWith(
        "moe.consumers=pingpong,moe.store=registers,moe.wave_sync=on,"
        "moe.expert_groups=back");
  }
};
TEST_F(MoeCudaPingPongOptionsTest, GroupedGemmMatchesFp64) {
  std::mt19937_64 rng(TestSeed());
  const HostTensor groups =
      IdsWithCounts({129, 500, 1, 640, 1600, 0, 385, 127});
  for (const GemmCase& g : std::vector<GemmCase>{
           {1280, 256, Epilogue::kSiluAndMul}, {520, 136, Epilogue::kNone}}) {
    SCOPED_TRACE(Describe(g));
    const PlanSummary plan = CheckTwoLaunches(g, groups, rng);
    ExpectSchedule(plan, "cuda.sm90_tma_wgmma_pingpong", true);
    if (hopper()) {
      EXPECT_THAT(plan.gemms.back().ToString(),
                  ::testing::HasSubstr(
                      "tma_store=0,split_k=0,cluster=1,w_evict_first=0,"
                      "wave_sync=1,expert_groups=back,pingpong=1"));
    }
  }
}

class MoeCudaCooperativeTest : public MoeCudaConsumersTest {
 protected:
  void SetUp() override { SetUpWith("moe.consumers=cooperative"); }
};
TEST_F(MoeCudaCooperativeTest, GroupedGemmMatchesFp64) {
  CheckSweep("cuda.sm90_tma_wgmma", false);
}

// The cost model never picks ping-pong consumers (slower than cooperative at
// every compute-bound step measured): without the key, 128-row plans at 256
// and 1024 rows an expert (T * k / E) run the cooperative kernel.
class MoeCudaConsumersRuleTest : public MoeCudaConsumersTest {
 protected:
  void SetUp() override { SetUpWith(""); }
};
TEST_F(MoeCudaConsumersRuleTest, CooperativeAtComputeBoundSteps) {
  std::mt19937_64 rng(TestSeed());
  const GemmCase g = {1536, 512, Epilogue::kSiluAndMul};
  for (const int64_t t : {1024, 4096}) {
    SCOPED_TRACE(absl::StrCat("T=", t));
    const HostTensor ids =
        RandomTopkIds(rng, t, kTopk, kExperts, Spread::kUniform);
    const PlanSummary plan = CheckTwoLaunches(g, ids, rng);
    if (hopper()) {
      EXPECT_EQ(plan.tile_rows, 128) << plan.ToString();
    }
    ExpectSchedule(plan, "cuda.sm90_tma_wgmma", false);
  }
}

}  // namespace
}  // namespace tailor::moe::testing
