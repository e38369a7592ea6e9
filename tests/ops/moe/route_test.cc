// moe::Route and moe::PlanRows: the routing invariants on a sweep of
// E x T x k x spreads x expert maps, determinism, the plan summary, workspace
// reuse, and every rejected input (code and message).
#include <algorithm>
#include <limits>
#include <vector>

#include "ops/moe/moe_test_util.h"

namespace tailor::moe::testing {
namespace {

using ::testing::HasSubstr;

struct RouteCase {
  int64_t experts;  // local E
  int64_t tokens;
  int64_t k;
  Spread spread;
  bool with_map;  // E_global = 2E, half of the globals are local
};

std::string Describe(const RouteCase& c) {
  return absl::StrCat("E=", c.experts, " T=", c.tokens, " k=", c.k,
                      " spread=", static_cast<int>(c.spread),
                      " map=", c.with_map);
}

std::vector<RouteCase> SweepCases() {
  std::vector<RouteCase> cases;
  for (int64_t e : {1, 8, 64, 256}) {
    for (int64_t t : {0, 1, 3, 17, 577}) {
      for (int64_t k : {1, 2, 8}) {
        for (Spread s :
             {Spread::kUniform, Spread::kOneExpert, Spread::kSubset}) {
          for (bool map : {false, true}) {
            if (k <= (map ? 2 * e : e)) cases.push_back({e, t, k, s, map});
          }
        }
      }
    }
  }
  return cases;
}

// The tail class of a tail of `rows` rows at tile 16, pow2 policy.
int64_t Pow2Class(int64_t rows) {
  int64_t c = 1;
  while (c < rows) c *= 2;
  return std::min<int64_t>(c, 16);
}

// Checks every output of Route against the definition.
void ExpectRouting(const Workspace& ws, const HostTensor& ids,
                   const HostTensor* map, const RouteCase& c) {
  const int64_t assignments = c.tokens * c.k;
  ASSERT_TRUE(ws.routed());
  EXPECT_EQ(ws.num_tokens(), c.tokens);
  EXPECT_EQ(ws.topk(), c.k);
  EXPECT_EQ(ws.num_experts(), c.experts);
  std::vector<int64_t> expected_counts(c.experts, 0);
  for (int64_t i = 0; i < assignments; ++i) {
    int32_t e = LocalExpert(ids, map, i);
    if (e >= 0) ++expected_counts[e];
  }
  const int32_t* counts = ws.counts().as<int32_t>();
  const int32_t* offsets = ws.offsets().as<int32_t>();
  const int32_t* perm = ws.permutation().as<int32_t>();
  const int32_t* inverse = ws.inverse().as<int32_t>();
  ASSERT_EQ(offsets[0], 0);
  int64_t core = 0, tails = 0, executed = 0;
  for (int64_t e = 0; e < c.experts; ++e) {
    ASSERT_EQ(counts[e], expected_counts[e]) << "expert " << e;
    ASSERT_EQ(offsets[e + 1], offsets[e] + counts[e]);
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      ASSERT_EQ(LocalExpert(ids, map, perm[r]), e) << "row " << r;
      if (r > offsets[e]) {
        ASSERT_LT(perm[r - 1], perm[r]) << "not stable at row " << r;
      }
      ASSERT_EQ(inverse[perm[r]], r);
    }
    core += counts[e] / 16;
    tails += counts[e] % 16 != 0;
    executed +=
        counts[e] / 16 * 16 + (counts[e] % 16 ? Pow2Class(counts[e] % 16) : 0);
  }
  EXPECT_EQ(ws.num_rows(), offsets[c.experts]);
  for (int64_t i = 0; i < assignments; ++i) {
    if (LocalExpert(ids, map, i) < 0) {
      ASSERT_EQ(inverse[i], -1) << "assignment " << i;
    }
  }
  PlanSummary plan = ws.plan();
  EXPECT_EQ(plan.tile_rows, 16);
  EXPECT_EQ(plan.core_tiles, core);
  EXPECT_EQ(plan.tail_pieces, tails);
  EXPECT_EQ(plan.useful_rows, ws.num_rows());
  EXPECT_EQ(plan.executed_rows, executed);
  EXPECT_LE(plan.variants, 6) << "core + tails 1, 2, 4, 8, 16";
}

TEST(MoeRouteTest, SweepMatchesDefinition) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  for (const RouteCase& c : SweepCases()) {
    SCOPED_TRACE(Describe(c));
    const int64_t global = c.with_map ? 2 * c.experts : c.experts;
    HostTensor ids = RandomTopkIds(rng, c.tokens, c.k, global, c.spread);
    HostTensor map = RandomExpertMap(rng, global, c.experts);
    RouteArgs args = {.topk_ids = ids.ref(), .num_experts = c.experts};
    if (c.with_map) args.expert_map = map.ref();
    TAILOR_ASSERT_OK(Route(SharedRuntime(), args, ws));
    ExpectRouting(ws, ids, c.with_map ? &map : nullptr, c);
    if (HasFailure()) return;
  }
}

TEST(MoeRouteTest, IsDeterministic) {
  std::mt19937_64 rng(TestSeed());
  HostTensor ids = RandomTopkIds(rng, 577, 8, 64, Spread::kUniform);
  Workspace first, second;
  TAILOR_ASSERT_OK(Route(SharedRuntime(),
                         {.topk_ids = ids.ref(), .num_experts = 64}, first));
  TAILOR_ASSERT_OK(Route(SharedRuntime(),
                         {.topk_ids = ids.ref(), .num_experts = 64}, second));
  ASSERT_EQ(first.num_rows(), second.num_rows());
  const int32_t* a = first.permutation().as<int32_t>();
  const int32_t* b = second.permutation().as<int32_t>();
  EXPECT_TRUE(std::equal(a, a + first.num_rows(), b));
  EXPECT_EQ(first.plan().ToString(), second.plan().ToString());
}

TEST(MoeRouteTest, AllNonLocalRoutesNothing) {
  HostTensor ids(DType::kI32, {3, 2});
  for (int i = 0; i < 6; ++i) ids.i32()[i] = i % 2;  // experts 0 and 1
  HostTensor map(DType::kI32, {4});
  for (int32_t g : {0, 1, 2, 3}) map.i32()[g] = g < 2 ? -1 : g - 2;
  Workspace ws;
  TAILOR_ASSERT_OK(Route(
      SharedRuntime(),
      {.topk_ids = ids.ref(), .num_experts = 2, .expert_map = map.ref()}, ws));
  EXPECT_EQ(ws.num_rows(), 0);
  EXPECT_EQ(ws.plan().variants, 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ws.inverse().as<int32_t>()[i], -1);
}

TEST(MoeRouteTest, TailPoliciesChooseClasses) {
  // counts {0, 1, 5, 16, 17}: tails 1, 5, 1 at tile 16.
  HostTensor counts(DType::kI32, {5});
  for (int32_t e : {0, 1, 2, 3, 4})
    counts.i32()[e] = std::vector<int32_t>{0, 1, 5, 16, 17}[e];
  Workspace ws;
  struct Expect {
    TailPolicy tail;
    int32_t variants;
    int64_t executed;
  };
  for (Expect x : {Expect{TailPolicy::kExact, 3, 39},
                   Expect{TailPolicy::kNextPowerOfTwo, 3, 42},
                   Expect{TailPolicy::kFullTile, 2, 80}}) {
    SCOPED_TRACE(static_cast<int>(x.tail));
    TAILOR_ASSERT_OK(PlanRows(
        SharedRuntime(),
        {.counts = counts.ref(), .policy = {.tile_rows = 16, .tail = x.tail}},
        ws));
    EXPECT_EQ(ws.num_rows(), 39);
    EXPECT_EQ(ws.num_tokens(), 0);
    EXPECT_EQ(ws.permutation().dims[0], 0);
    PlanSummary plan = ws.plan();
    EXPECT_EQ(plan.core_tiles, 2);
    EXPECT_EQ(plan.tail_pieces, 3);
    EXPECT_EQ(plan.variants, x.variants);
    EXPECT_EQ(plan.executed_rows, x.executed);
  }
}

TEST(MoeRouteTest, WorkspaceStopsGrowingAtTheLargestStep) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  HostTensor big = RandomTopkIds(rng, 577, 8, 64, Spread::kUniform);
  TAILOR_ASSERT_OK(
      Route(SharedRuntime(), {.topk_ids = big.ref(), .num_experts = 64}, ws));
  const size_t capacity = ws.CapacityBytes();
  EXPECT_GT(capacity, 0u);
  for (int64_t t : {0, 1, 3, 17, 300, 577}) {
    for (Spread s : {Spread::kUniform, Spread::kOneExpert, Spread::kSubset}) {
      HostTensor ids = RandomTopkIds(rng, t, 8, 64, s);
      TAILOR_ASSERT_OK(Route(SharedRuntime(),
                             {.topk_ids = ids.ref(), .num_experts = 64}, ws));
      EXPECT_EQ(ws.CapacityBytes(), capacity) << "T=" << t;
    }
  }
}

// ---- rejected inputs --------------------------------------------------------

class MoeRouteErrorTest : public ::testing::Test {
 protected:
  MoeRouteErrorTest() : ids_(DType::kI32, {6, 2}), map_(DType::kI32, {16}) {
    for (int i = 0; i < 12; ++i) ids_.i32()[i] = i % 8;
    for (int g = 0; g < 16; ++g) map_.i32()[g] = g < 8 ? g : -1;
  }
  absl::Status RouteWith(RouteArgs args) {
    return Route(SharedRuntime(), args, ws_);
  }

  HostTensor ids_;
  HostTensor map_;
  Workspace ws_;
};

TEST_F(MoeRouteErrorTest, ExpertIdOutsideRangeNamesThePosition) {
  ids_.i32()[5 * 2 + 1] = 9;
  EXPECT_THAT(
      RouteWith({.topk_ids = ids_.ref(), .num_experts = 8}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_ids[5,1]: expert id 9 is outside [0, 8)")));
  ids_.i32()[5 * 2 + 1] = 0;
  ids_.i32()[0] = -1;
  EXPECT_THAT(
      RouteWith({.topk_ids = ids_.ref(), .num_experts = 8}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_ids[0,0]: expert id -1 is outside [0, 8)")));
  ids_.i32()[0] = 16;  // with a map the range is the global one
  EXPECT_THAT(
      RouteWith(
          {.topk_ids = ids_.ref(), .num_experts = 8, .expert_map = map_.ref()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_ids[0,0]: expert id 16 is outside [0, 16)")));
  EXPECT_FALSE(ws_.routed());
}

TEST_F(MoeRouteErrorTest, ExpertMapEntriesAndShape) {
  map_.i32()[3] = 8;
  EXPECT_THAT(
      RouteWith(
          {.topk_ids = ids_.ref(), .num_experts = 8, .expert_map = map_.ref()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("expert_map[3]: local id 8 is outside [-1, 8)")));
  map_.i32()[3] = -2;
  EXPECT_THAT(
      RouteWith(
          {.topk_ids = ids_.ref(), .num_experts = 8, .expert_map = map_.ref()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("expert_map[3]: local id -2 is outside [-1, 8)")));
  HostTensor f32_map(DType::kF32, {16});
  EXPECT_THAT(RouteWith({.topk_ids = ids_.ref(),
                         .num_experts = 8,
                         .expert_map = f32_map.ref()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expert_map: expected dtype i32, got f32")));
  HostTensor empty_map(DType::kI32, {0});
  EXPECT_THAT(RouteWith({.topk_ids = ids_.ref(),
                         .num_experts = 8,
                         .expert_map = empty_map.ref()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expert_map: dims[0] (E_global): must be in "
                                 "[1, 1048576], got 0")));
}

TEST_F(MoeRouteErrorTest, TopkIdsShapeDtypeLayoutDevice) {
  HostTensor f32_ids(DType::kF32, {6, 2});
  EXPECT_THAT(RouteWith({.topk_ids = f32_ids.ref(), .num_experts = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids: expected dtype i32, got f32")));
  HostTensor flat(DType::kI32, {12});
  EXPECT_THAT(RouteWith({.topk_ids = flat.ref(), .num_experts = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids: expected rank 2, got 1")));
  TensorRef strided = ids_.ref();
  strided.dims[0] = 3;
  strided.strides[0] = 4;  // every other row
  EXPECT_THAT(RouteWith({.topk_ids = strided, .num_experts = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids: must be contiguous (row-major)")));
  TensorRef null_data = ids_.ref();
  null_data.data = nullptr;
  EXPECT_THAT(
      RouteWith({.topk_ids = null_data, .num_experts = 8}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("topk_ids: data is null but the tensor has 12 elements")));
  TensorRef on_gpu = ids_.ref();
  on_gpu.device = {.type = DeviceType::kCuda, .index = 0};
  EXPECT_THAT(RouteWith({.topk_ids = on_gpu, .num_experts = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids: must be on cpu (the runtime's "
                                 "device), got cuda:0")));
}

TEST_F(MoeRouteErrorTest, TopkAndExpertCountLimits) {
  HostTensor no_slots(DType::kI32, {6, 0});
  EXPECT_THAT(RouteWith({.topk_ids = no_slots.ref(), .num_experts = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids: k must be in [1, 64], got 0")));
  // Never read: the size check comes first.
  TensorRef huge = TensorRef::Contiguous(ids_.ref().data, DType::kI32,
                                         {int64_t{1} << 30, 4});
  EXPECT_THAT(
      RouteWith({.topk_ids = huge, .num_experts = 8}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("topk_ids: T * k = 1073741824 * 4 exceeds 2147483647 (row "
                    "indices are int32)")));
  EXPECT_THAT(
      RouteWith({.topk_ids = ids_.ref(), .num_experts = 0}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("num_experts: must be in [1, 1048576], got 0")));
}

// Each token picks k distinct experts, so k > E is refused before any id is
// read, as the serving profile refuses it; with an expert_map the bound is
// the global count (a rank may own fewer experts than k).
TEST_F(MoeRouteErrorTest, TopkAboveExpertCount) {
  HostTensor ids(DType::kI32, {3, 5});
  for (int i = 0; i < 15; ++i) ids.i32()[i] = i % 4;  // in range: E = 4
  EXPECT_THAT(RouteWith({.topk_ids = ids.ref(), .num_experts = 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::Eq("topk_ids: dims[1] (k): must be at most "
                                     "num_experts (4): a token is routed to k "
                                     "distinct experts, got 5")));
  HostTensor small_map(DType::kI32, {4});
  for (int g = 0; g < 4; ++g) small_map.i32()[g] = g;
  EXPECT_THAT(
      RouteWith({.topk_ids = ids.ref(),
                 .num_experts = 4,
                 .expert_map = small_map.ref()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::Eq("topk_ids: dims[1] (k): must be at most "
                             "expert_map: dims[0] (E_global) (4): a token is "
                             "routed to k distinct experts, got 5")));
  // 16 global experts, 4 of them local: k = 5 is a valid model.
  HostTensor map(DType::kI32, {16});
  for (int g = 0; g < 16; ++g) map.i32()[g] = g < 4 ? g : -1;
  TAILOR_EXPECT_OK(RouteWith(
      {.topk_ids = ids.ref(), .num_experts = 4, .expert_map = map.ref()}));
  TAILOR_EXPECT_OK(RouteWith({.topk_ids = ids.ref(), .num_experts = 5}));
}

TEST_F(MoeRouteErrorTest, Policy) {
  for (int32_t tile : {-1, 65}) {
    EXPECT_THAT(
        RouteWith({.topk_ids = ids_.ref(),
                   .num_experts = 8,
                   .policy = {.tile_rows = tile}}),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("policy.tile_rows: must be in [1, 64] "
                                        "(or 0: the backend's choice), got ",
                                        tile))));
  }
  // 0 resolves to the backend's choice: 16 rows on the CPU.
  Workspace ws;
  TAILOR_ASSERT_OK(
      Route(SharedRuntime(), {.topk_ids = ids_.ref(), .num_experts = 8}, ws));
  EXPECT_EQ(ws.plan().tile_rows, 16);
  EXPECT_THAT(RouteWith({.topk_ids = ids_.ref(),
                         .num_experts = 8,
                         .policy = {.tail = static_cast<TailPolicy>(7)}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.tail: not a TailPolicy value: 7")));
}

TEST_F(MoeRouteErrorTest, FailedRouteForgetsThePreviousOne) {
  TAILOR_ASSERT_OK(RouteWith({.topk_ids = ids_.ref(), .num_experts = 8}));
  EXPECT_EQ(ws_.num_rows(), 12);
  ids_.i32()[3] = 8;
  EXPECT_FALSE(RouteWith({.topk_ids = ids_.ref(), .num_experts = 8}).ok());
  EXPECT_FALSE(ws_.routed());
  EXPECT_EQ(ws_.num_rows(), 0);
  EXPECT_EQ(ws_.counts().dims[0], 0);
}

TEST_F(MoeRouteErrorTest, MovedFromWorkspace) {
  Workspace moved = std::move(ws_);
  EXPECT_THAT(RouteWith({.topk_ids = ids_.ref(), .num_experts = 8}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: this Workspace was moved from")));
  TAILOR_EXPECT_OK(Route(SharedRuntime(),
                         {.topk_ids = ids_.ref(), .num_experts = 8}, moved));
}

TEST(MoePlanRowsTest, RejectsBadCounts) {
  Workspace ws;
  HostTensor counts(DType::kI32, {3});
  counts.i32()[0] = 4;
  counts.i32()[1] = 0;
  counts.i32()[2] = -1;
  EXPECT_THAT(PlanRows(SharedRuntime(), {.counts = counts.ref()}, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("counts[2]: must be >= 0, got -1")));
  counts.i32()[0] = std::numeric_limits<int32_t>::max();
  counts.i32()[2] = 1;
  EXPECT_THAT(
      PlanRows(SharedRuntime(), {.counts = counts.ref()}, ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("counts: the sum 2147483648 exceeds 2147483647")));
  HostTensor none(DType::kI32, {0});
  EXPECT_THAT(
      PlanRows(SharedRuntime(), {.counts = none.ref()}, ws),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("counts: dims[0] (E): must be in [1, 1048576], got 0")));
}

TEST(MoeRouteTest, ValidTokensRouteOnlyThePrefix) {
  std::mt19937_64 rng(TestSeed());
  for (int32_t valid : {0, 1, 16, 17}) {
    SCOPED_TRACE(absl::StrCat("valid_tokens=", valid));
    HostTensor ids = RandomTopkIds(rng, 17, 2, 8, Spread::kUniform);
    HostTensor count(DType::kI32, {1});
    count.i32()[0] = valid;
    Workspace ws;
    TAILOR_ASSERT_OK(Route(
        SharedRuntime(),
        {.topk_ids = ids.ref(), .num_experts = 8, .valid_tokens = count.ref()},
        ws));
    EXPECT_EQ(ws.num_rows(), valid * 2);
    const int32_t* inverse = ws.inverse().as<int32_t>();
    for (int64_t i = 0; i < 17 * 2; ++i) {
      ASSERT_EQ(inverse[i] >= 0, i < valid * 2) << i;
    }
  }
}

TEST(MoeRouteErrorTest2, ValidTokens) {
  HostTensor ids(DType::kI32, {3, 1});
  HostTensor count(DType::kI32, {1});
  count.i32()[0] = 4;
  Workspace ws;
  EXPECT_THAT(Route(SharedRuntime(),
                    {.topk_ids = ids.ref(),
                     .num_experts = 8,
                     .valid_tokens = count.ref()},
                    ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("valid_tokens[0]: must be in [0, 3] (T = "
                                 "topk_ids.dims[0]), got 4")));
  HostTensor two(DType::kI32, {2});
  EXPECT_THAT(
      Route(
          SharedRuntime(),
          {.topk_ids = ids.ref(), .num_experts = 8, .valid_tokens = two.ref()},
          ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("valid_tokens: dims[0] must equal one count (1), "
                         "got 2")));
}

TEST(RuntimeMemoryTest, HostRuntimeAllocatesAndCopiesHostMemory) {
  absl::StatusOr<std::shared_ptr<void>> memory = SharedRuntime().Allocate(64);
  ASSERT_TRUE(memory.ok()) << memory.status();
  std::vector<uint8_t> in(64), out(64, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i);
  TAILOR_ASSERT_OK(SharedRuntime().CopyToDevice(memory->get(), in.data(), 64));
  TAILOR_ASSERT_OK(SharedRuntime().CopyToHost(out.data(), memory->get(), 64));
  TAILOR_ASSERT_OK(SharedRuntime().Synchronize());
  EXPECT_EQ(in, out);
}

// Host Route reports bad ids itself, so neither name of TakeErrors has
// anything to report afterwards.
TEST(MoeHostWorkspaceTest, TakeErrorsAndItsDeprecatedNameOnTheHost) {
  Workspace ws;
  HostTensor ids(DType::kI32, {2, 2});
  for (int i = 0; i < 4; ++i) ids.i32()[i] = i == 2 ? 9 : i;
  EXPECT_THAT(
      Route(SharedRuntime(), {.topk_ids = ids.ref(), .num_experts = 4}, ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "topk_ids[1,0]: expert id 9 is outside [0, 4)"));
  TAILOR_EXPECT_OK(ws.TakeErrors(SharedRuntime()));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  TAILOR_EXPECT_OK(ws.TakeRoutingErrors(SharedRuntime()));
#pragma GCC diagnostic pop
}

TEST(MoeHostWorkspaceTest, DeviceOnlyEntriesOnTheHost) {
  Workspace ws;
  EXPECT_EQ(ws.device(), Device{});
  TAILOR_EXPECT_OK(ws.TakeErrors(SharedRuntime()));
  absl::StatusOr<int64_t> bytes = WorkspaceBytes(
      SharedRuntime(), {.max_tokens = 8, .topk = 2, .num_experts = 4});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 0);
  int64_t memory[4];
  EXPECT_THAT(
      BindWorkspace(SharedRuntime(),
                    {.max_tokens = 8, .topk = 2, .num_experts = 4}, memory,
                    sizeof(memory), ws),
      StatusIs(absl::StatusCode::kUnimplemented,
               HasSubstr("moe.bind: the cpu backend keeps workspaces in host "
                         "memory")));
}

}  // namespace
}  // namespace tailor::moe::testing
