// The moe:: ops on the CUDA backend (label gpu; skipped without a device):
// the device Route against the host Route's definition (bit for bit, work
// list included), Experts and every executor against fp64 references on the
// awkward-shape sweep with NaN-poisoned outputs, bad routing data dropped
// and reported, device workspaces (reserved, bound, too small), valid
// tokens, and a CUDA graph replayed with 50 routings and token counts.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/moe/checks.h"
#include "ops/moe/cuda_test_util.h"
#include "ops/moe/workspace.h"
#include "templates/cuda/moe/params.h"

namespace tailor::moe::testing {
namespace {

using ::testing::HasSubstr;

WorkspaceLimits Limits(int64_t max_tokens, int64_t k, int64_t experts,
                       DType dtype = DType::kBF16, RoutingPolicy policy = {}) {
  return {.max_tokens = max_tokens,
          .topk = k,
          .num_experts = experts,
          .hidden = kHidden,
          .intermediate = kIntermediate,
          .dtype = dtype,
          .policy = policy};
}

// The route header of a device workspace: num_work, num_rows, blocks_done.
std::vector<int32_t> RouteHeader(const cuda::DriverApi& api,
                                 const Workspace& ws) {
  const internal::MoeDeviceBuffers& d = *tailor::internal::WorkspaceImplOf(ws)->device;
  return DownloadI32(api,
                     static_cast<const char*>(d.at(d.scratch)) +
                         offsetof(cuda::MoeRouteHeader, num_work),
                     3);
}

// ---- Route ------------------------------------------------------------------

struct RouteCase {
  int64_t experts;
  int64_t tokens;
  int64_t k;
  Spread spread = Spread::kUniform;
  bool with_map = false;
  RoutingPolicy policy = {};
  int64_t valid_tokens = -1;  // -1: all
};

std::string Describe(const RouteCase& c) {
  return absl::StrCat("E=", c.experts, " T=", c.tokens, " k=", c.k,
                      " spread=", static_cast<int>(c.spread),
                      " map=", c.with_map, " tile=", c.policy.tile_rows,
                      " tail=", static_cast<int>(c.policy.tail),
                      " valid=", c.valid_tokens);
}

class MoeCudaRouteTest : public MoeCudaTest {
 protected:
  void ExpectRouting(const RouteCase& c, std::mt19937_64& rng, Workspace& ws) {
    SCOPED_TRACE(Describe(c));
    const int64_t global = c.with_map ? 2 * c.experts : c.experts;
    HostTensor ids = RandomTopkIds(rng, c.tokens, c.k, global, c.spread);
    HostTensor map = RandomExpertMap(rng, global, c.experts);
    HostTensor valid(DType::kI32, {1});
    valid.i32()[0] = static_cast<int32_t>(c.valid_tokens);
    DeviceTensor d_ids = ToDevice(ids), d_map = ToDevice(map),
                 d_valid = ToDevice(valid);
    RouteArgs args = {
        .topk_ids = d_ids.ref(), .num_experts = c.experts, .policy = c.policy};
    if (c.with_map) args.expert_map = d_map.ref();
    if (c.valid_tokens >= 0) args.valid_tokens = d_valid.ref();
    TAILOR_ASSERT_OK(Route(runtime(), args, ws));

    const int64_t valid_tokens =
        c.valid_tokens >= 0 ? c.valid_tokens : c.tokens;
    ReferenceRouting ref = ReferenceRoute(ids, c.with_map ? &map : nullptr,
                                          c.experts, valid_tokens, c.k);
    const int64_t assignments = c.tokens * c.k;
    EXPECT_EQ(ws.num_rows(), assignments);
    EXPECT_EQ(DownloadI32(api(), ws.counts().data, c.experts), ref.counts);
    EXPECT_EQ(DownloadI32(api(), ws.offsets().data, c.experts + 1),
              ref.offsets);
    std::vector<int32_t> perm =
        DownloadI32(api(), ws.permutation().data, assignments);
    std::vector<int32_t> expected_perm = ref.permutation;
    expected_perm.resize(assignments, -1);  // -1 past R
    EXPECT_EQ(perm, expected_perm);
    EXPECT_EQ(DownloadI32(api(), ws.inverse().data, assignments), ref.inverse);

    // The tile the backend resolved (policy 0: 128 on Hopper, else 64).
    absl::StatusOr<plan::PlanParams> params =
        internal::ResolvePolicy(c.policy, ws.plan().tile_rows, 128);
    ASSERT_TRUE(params.ok()) << params.status();
    // The host plan's items, expert-major (each expert's core tiles, then
    // its tail): the device order.
    std::vector<plan::WorkItem> expected_work =
        ReferenceWork(ref.counts, *params);
    std::stable_sort(expected_work.begin(), expected_work.end(),
                     [](const plan::WorkItem& a, const plan::WorkItem& b) {
                       return a.group != b.group ? a.group < b.group
                                                 : a.row_begin < b.row_begin;
                     });
    std::vector<int32_t> header = RouteHeader(api(), ws);
    ASSERT_EQ(header[0], static_cast<int32_t>(expected_work.size()));
    EXPECT_EQ(header[1], ref.offsets.back());
    EXPECT_EQ(header[2], 0) << "blocks_done must be reset for the next route";
    std::vector<int32_t> work =
        DownloadI32(api(), tailor::internal::WorkspaceImplOf(ws)->device->work_items(),
                    4 * header[0]);
    for (size_t i = 0; i < expected_work.size(); ++i) {
      const plan::WorkItem& w = expected_work[i];
      ASSERT_EQ(
          std::vector<int32_t>(work.begin() + 4 * i, work.begin() + 4 * i + 4),
          std::vector<int32_t>({w.row_begin, w.rows, w.group, w.tail_class}))
          << "work item " << i;
    }
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
  }
};

TEST_F(MoeCudaRouteTest, SweepIsTheHostRoute) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(
      runtime(), Limits(4096, 8, 256, DType::kBF16, {.tile_rows = 16}), ws));
  for (int64_t e : {1, 8, 64, 256}) {
    for (int64_t t : {0, 1, 3, 17, 577, 4096}) {
      for (int64_t k : {1, 2, 8}) {
        for (Spread s :
             {Spread::kUniform, Spread::kOneExpert, Spread::kSubset}) {
          for (bool map : {false, true}) {
            if (k > (map ? 2 * e : e)) continue;
            ExpectRouting({e, t, k, s, map}, rng, ws);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(MoeCudaRouteTest, TailPoliciesTilesAndValidTokens) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(
      runtime(), Limits(577, 8, 64, DType::kBF16, {.tile_rows = 1}), ws));
  for (RoutingPolicy policy :
       {RoutingPolicy{.tile_rows = 16, .tail = TailPolicy::kExact},
        RoutingPolicy{.tile_rows = 64, .tail = TailPolicy::kExact},
        RoutingPolicy{.tile_rows = 128, .tail = TailPolicy::kExact},
        RoutingPolicy{.tile_rows = 17, .tail = TailPolicy::kNextPowerOfTwo},
        RoutingPolicy{.tile_rows = 48, .tail = TailPolicy::kFullTile},
        RoutingPolicy{.tile_rows = 100}, RoutingPolicy{.tile_rows = 1}}) {
    for (int64_t t : {1, 17, 577}) {
      ExpectRouting({64, t, 8, Spread::kSubset, true, policy}, rng, ws);
      ExpectRouting({64, t, 8, Spread::kOneExpert, false, policy, t / 2}, rng,
                    ws);
      if (HasFailure()) return;
    }
  }
}

TEST_F(MoeCudaRouteTest, ManyExpertsUseNarrowerScatterBlocks) {
  std::mt19937_64 rng(TestSeed());
  for (int64_t e : {3000, 8192}) {
    Workspace ws;
    TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(577, 8, e), ws));
    ExpectRouting({e, 577, 8, Spread::kUniform, false}, rng, ws);
    ExpectRouting({e, 577, 8, Spread::kSubset, true}, rng, ws);
  }
}

// ---- Experts ----------------------------------------------------------------

struct ExpertsCase {
  DType dtype;
  int64_t experts;
  int64_t tokens;
  int64_t k;
  Spread spread = Spread::kUniform;
  bool with_map = false;
};

// The inputs of one case on the host (random) and on the device.
class ExpertsData {
 public:
  ExpertsData(const ExpertsCase& c, std::mt19937_64& rng)
      : c_(c),
        global_(c.with_map ? 2 * c.experts : c.experts),
        hidden_(c.dtype, {c.tokens, kHidden}),
        w13_(c.dtype, {c.experts, 2 * kIntermediate, kHidden}),
        w2_(c.dtype, {c.experts, kHidden, kIntermediate}),
        weights_(DType::kF32, {c.tokens, c.k}),
        ids_(RandomTopkIds(rng, c.tokens, c.k, global_, c.spread)),
        map_(RandomExpertMap(rng, global_, c.experts)),
        out_(c.dtype, {c.tokens, kHidden}) {
    hidden_.FillRandom(rng);
    w13_.FillRandom(rng, 0.25);
    w2_.FillRandom(rng, 0.25);
    weights_.FillRandom(rng);
    out_.Poison();
  }
  HostTensor& ids() { return ids_; }
  HostTensor& map() { return map_; }
  const HostTensor& hidden() const { return hidden_; }
  const HostTensor& w13() const { return w13_; }
  const HostTensor& w2() const { return w2_; }
  const HostTensor& weights() const { return weights_; }
  std::vector<double> Reference() const {
    return ReferenceExperts(
        {hidden_, w13_, w2_, weights_, ids_, c_.with_map ? &map_ : nullptr},
        c_.tokens, c_.k);
  }

  // Device copies and the args over them.
  struct OnDevice {
    DeviceTensor hidden, w13, w2, weights, ids, map, out;
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
  };
  OnDevice Upload(const cuda::DriverApi& api) const {
    return {DeviceTensor(api, hidden_), DeviceTensor(api, w13_),
            DeviceTensor(api, w2_),     DeviceTensor(api, weights_),
            DeviceTensor(api, ids_),    DeviceTensor(api, map_),
            DeviceTensor(api, out_)};
  }

 private:
  ExpertsCase c_;
  int64_t global_;
  HostTensor hidden_, w13_, w2_, weights_, ids_, map_, out_;
};

class MoeCudaExpertsTest : public MoeCudaTest {
 protected:
  void ExpectExpertsMatch(const ExpertsCase& c, std::mt19937_64& rng,
                          Workspace& ws) {
    SCOPED_TRACE(absl::StrCat(
        DTypeName(c.dtype), " E=", c.experts, " T=", c.tokens, " k=", c.k,
        " spread=", static_cast<int>(c.spread), " map=", c.with_map));
    ExpertsData data(c, rng);
    ExpertsData::OnDevice d = data.Upload(api());
    TAILOR_ASSERT_OK(Experts(runtime(), d.Args(c.with_map), ws));
    EXPECT_LT(RelativeError(d.out.Download(), data.Reference()),
              Tolerance(c.dtype));
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
  }
};

TEST_F(MoeCudaExpertsTest, Sweep) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Workspace ws;  // one workspace across all shapes, as a server would
    TAILOR_ASSERT_OK(
        ReserveWorkspace(runtime(), Limits(4096, 8, 256, dtype), ws));
    for (int64_t e : {1, 8, 64, 256}) {
      for (int64_t t : {0, 1, 3, 17, 577, 4096}) {
        for (int64_t k : {1, 2, 8}) {
          if (k > e) continue;
          ExpectExpertsMatch({dtype, e, t, k}, rng, ws);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// A server's steps: one workspace, one set of weights, a different T every
// step. The Hopper GEMMs' tensor maps span the workspace's reserved rows,
// not the step's, so only the first step of each tile class encodes
// descriptors; every later step reuses them (no driver encode on the launch
// path once warm).
TEST_F(MoeCudaExpertsTest, StepsOfEveryTEncodeNoNewDescriptors) {
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kTokens = 577, kK = 8, kE = 64;
  // Maps depend on the kernel's tile (its box rows), never on T: the first
  // step of each tile class the cost model picks may encode its A and C maps
  // (at most these many classes: 128, 64 and the two swap-AB tiles), and a
  // second pass over the same steps encodes nothing.
  constexpr uint64_t kMaxNewMapsPerPass = 4 * 2;
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(
      runtime(), Limits(kTokens, kK, kE, DType::kBF16, {.tile_rows = 128}),
      ws));
  ExpertsData data({DType::kBF16, kE, kTokens, kK}, rng);
  ExpertsData::OnDevice d = data.Upload(api());
  auto encodes = [&] {
    return runtime().stats().backend_counters.at("cuda.descriptor_encodes");
  };
  std::vector<uint64_t> encodes_after_pass;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t t : {kTokens, int64_t{1}, int64_t{2}, int64_t{17},
                      int64_t{64}, int64_t{100}, int64_t{255}, int64_t{256},
                      int64_t{300}, int64_t{511}, kTokens - 1}) {
      SCOPED_TRACE(absl::StrCat("pass ", pass, ", T=", t));
      // The first t tokens of the data: views of the same device buffers.
      ExpertsArgs args = d.Args(false);
      for (TensorRef* view :
           {&args.hidden, &args.topk_weights, &args.topk_ids, &args.out}) {
        view->dims[0] = t;
      }
      TAILOR_ASSERT_OK(Experts(runtime(), args, ws));
      const std::vector<double> ref =
          ReferenceExperts({data.hidden(), data.w13(), data.w2(),
                            data.weights(), data.ids(), nullptr},
                           t, kK);
      const HostTensor out = d.out.Download();
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < t * kHidden; ++i) {
        ASSERT_FALSE(std::isnan(out.at(i))) << i;
        diff += (out.at(i) - ref[i]) * (out.at(i) - ref[i]);
        norm += ref[i] * ref[i];
      }
      EXPECT_LT(std::sqrt(diff / norm), Tolerance(DType::kBF16));
      if (encodes_after_pass.empty() && t == kTokens) {
        encodes_after_pass.push_back(encodes());
      }
    }
    encodes_after_pass.push_back(encodes());
  }
  // [after the first step, after pass 0, after pass 1]
  EXPECT_LE(encodes_after_pass[1] - encodes_after_pass[0], kMaxNewMapsPerPass);
  EXPECT_EQ(encodes_after_pass[2], encodes_after_pass[1]);
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
}

TEST_F(MoeCudaExpertsTest, SkewedRoutingAndExpertMaps) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Workspace ws;
    TAILOR_ASSERT_OK(
        ReserveWorkspace(runtime(), Limits(577, 2, 256, dtype), ws));
    for (int64_t e : {1, 8, 64, 256}) {
      for (int64_t t : {1, 17, 577}) {
        for (Spread spread :
             {Spread::kUniform, Spread::kOneExpert, Spread::kSubset}) {
          ExpectExpertsMatch(
              {dtype, e, t, std::min<int64_t>(e, 2), spread, true}, rng, ws);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_F(MoeCudaExpertsTest, TileRowsAndTailPolicies) {
  std::mt19937_64 rng(TestSeed());
  for (RoutingPolicy policy :
       {RoutingPolicy{.tile_rows = 16}, RoutingPolicy{.tile_rows = 17},
        RoutingPolicy{.tile_rows = 48, .tail = TailPolicy::kExact},
        RoutingPolicy{.tile_rows = 64}, RoutingPolicy{.tile_rows = 100},
        RoutingPolicy{.tile_rows = 128}, RoutingPolicy{.tile_rows = 1}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat("tile_rows=", policy.tile_rows));
      Workspace ws;
      TAILOR_ASSERT_OK(
          ReserveWorkspace(runtime(), Limits(577, 8, 64, dtype, policy), ws));
      ExpertsCase c = {dtype, 64, 577, 8, Spread::kSubset};
      ExpertsData data(c, rng);
      ExpertsData::OnDevice d = data.Upload(api());
      ExpertsArgs args = d.Args(false);
      args.policy = policy;
      TAILOR_ASSERT_OK(Experts(runtime(), args, ws));
      EXPECT_EQ(ws.plan().tile_rows, policy.tile_rows);
      EXPECT_LT(RelativeError(d.out.Download(), data.Reference()),
                Tolerance(dtype));
    }
  }
}

TEST_F(MoeCudaExpertsTest, InPlaceAndValidTokens) {
  std::mt19937_64 rng(TestSeed());
  ExpertsCase c = {DType::kBF16, 8, 17, 2};
  ExpertsData data(c, rng);
  std::vector<double> ref = data.Reference();
  ExpertsData::OnDevice d = data.Upload(api());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(17, 2, 8), ws));
  ExpertsArgs args = d.Args(false);
  args.out = args.hidden;
  TAILOR_ASSERT_OK(Experts(runtime(), args, ws));
  EXPECT_LT(RelativeError(d.hidden.Download(), ref), Tolerance(c.dtype));

  ExpertsData fresh(c, rng);
  ExpertsData::OnDevice e = fresh.Upload(api());
  HostTensor count(DType::kI32, {1});
  count.i32()[0] = 11;
  DeviceTensor d_count = ToDevice(count);
  args = e.Args(false);
  args.valid_tokens = d_count.ref();
  TAILOR_ASSERT_OK(Experts(runtime(), args, ws));
  std::vector<double> prefix = fresh.Reference();
  std::fill(prefix.begin() + 11 * kHidden, prefix.end(), 0.0);
  HostTensor out = e.out.Download();
  EXPECT_LT(RelativeError(out, prefix), Tolerance(c.dtype));
  for (int64_t i = 11 * kHidden; i < out.numel(); ++i)
    ASSERT_EQ(out.at(i), 0.0) << i;
}

// ---- executors on their own, awkward model dims -----------------------------

struct GemmCase {
  DType dtype;
  int64_t n, k;
  int32_t tile_rows;
  Epilogue epilogue;
};

TEST_F(MoeCudaTest, GroupedGemmAwkwardDims) {
  std::mt19937_64 rng(TestSeed());
  const int64_t experts = 8, tokens = 577, topk = 2;
  for (const GemmCase& g : std::vector<GemmCase>{
           {DType::kBF16, 64, 64, 64, Epilogue::kNone},
           {DType::kBF16, 64, 64, 128, Epilogue::kSiluAndMul},
           {DType::kBF16, 520, 136, 100, Epilogue::kNone},
           {DType::kBF16, 200, 72, 17, Epilogue::kNone},  // ragged N and K
           {DType::kBF16, 96, 40, 16, Epilogue::kSiluAndMul},
           {DType::kBF16, 520, 136, 8, Epilogue::kNone},  // swap-AB tiles
           {DType::kBF16, 200, 72, 32, Epilogue::kSiluAndMul},
           {DType::kBF16, 96, 40, 5, Epilogue::kSiluAndMul},
           {DType::kBF16, 30, 17, 64, Epilogue::kSiluAndMul},  // K % 8: SIMT
           {DType::kBF16, 1, 8, 64, Epilogue::kNone},
           {DType::kF32, 200, 72, 17, Epilogue::kNone},
           {DType::kF32, 72, 40, 128, Epilogue::kNone},
           {DType::kF32, 96, 33, 64, Epilogue::kSiluAndMul}}) {
    SCOPED_TRACE(absl::StrCat(DTypeName(g.dtype), " N=", g.n, " K=", g.k,
                              " tile=", g.tile_rows,
                              " epilogue=", static_cast<int>(g.epilogue)));
    const bool gated = g.epilogue == Epilogue::kSiluAndMul;
    HostTensor ids = RandomTopkIds(rng, tokens, topk, experts, Spread::kSubset);
    DeviceTensor d_ids = ToDevice(ids);
    Workspace ws;
    TAILOR_ASSERT_OK(ReserveWorkspace(runtime(),
                                      {.max_tokens = tokens,
                                       .topk = topk,
                                       .num_experts = experts,
                                       .policy = {.tile_rows = g.tile_rows}},
                                      ws));
    TAILOR_ASSERT_OK(Route(runtime(),
                           {.topk_ids = d_ids.ref(),
                            .num_experts = experts,
                            .policy = {.tile_rows = g.tile_rows}},
                           ws));
    const int64_t rows = ws.num_rows();
    HostTensor a(g.dtype, {rows, g.k}), w(g.dtype, {experts, g.n, g.k});
    HostTensor c(g.dtype, {rows, gated ? g.n / 2 : g.n});
    a.FillRandom(rng);
    w.FillRandom(rng, 0.5);
    c.Poison();
    DeviceTensor d_a = ToDevice(a), d_w = ToDevice(w), d_c = ToDevice(c);
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
}

// One grouped GEMM of bf16 random data over a fresh routing (8 experts,
// k = 2), launched twice on the same plan so that the second launch must find
// the split-K arrival counters the first one reset; both against fp64.
class MoeCudaSplitTest : public MoeCudaTest {
 protected:
  struct Case {
    int64_t tokens, n, k;
    Epilogue epilogue;
  };
  static constexpr int64_t kExperts = 8, kTopk = 2;

  // Routes into `ws` and checks two launches of `g`.
  void CheckTwoLaunches(const Case& g, Spread spread, std::mt19937_64& rng,
                        Workspace& ws) {
    CheckTwoLaunches(g, RandomTopkIds(rng, g.tokens, kTopk, kExperts, spread),
                     rng, ws);
  }

  // The same over the routing `ids` [g.tokens, kTopk].
  void CheckTwoLaunches(const Case& g, const HostTensor& ids,
                        std::mt19937_64& rng, Workspace& ws) {
    ASSERT_EQ(ids.numel(), g.tokens * kTopk) << "ids must be [tokens, k]";
    CheckGroupedGemmTwice({.n = g.n,
                           .k = g.k,
                           .epilogue = g.epilogue,
                           .experts = kExperts,
                           .topk = kTopk},
                          ids, rng, ws);
  }
};

// Decode-sized steps: few tiles and a long K, so on an H100 (132 SMs) the
// Hopper kernel splits K (MoeSm90ScheduleOf: swap-AB steps of fewer than 40
// tiles, >= 4 K blocks per split; T=2 N=4096's up to 64 tiles stay whole),
// with K blocks that do not divide evenly (K = 4160: 65 blocks).
TEST_F(MoeCudaSplitTest, GroupedGemmSplitsKOnFewTiles) {
  std::mt19937_64 rng(TestSeed());
  for (const Case& g : std::vector<Case>{{1, 256, 1024, Epilogue::kNone},
                                         {1, 512, 4160, Epilogue::kSiluAndMul},
                                         {3, 768, 2048, Epilogue::kNone},
                                         {17, 256, 7168, Epilogue::kSiluAndMul},
                                         {2, 4096, 14336, Epilogue::kNone}}) {
    SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k));
    Workspace ws;
    CheckTwoLaunches(g, Spread::kUniform, rng, ws);
  }
}

// Launches of more tiles than SMs whose last wave is partial: the Hopper
// kernel splits the last wave's tiles along K (MoeSm90ScheduleOf). N = 2048
// makes 8 N tiles per item, so these token counts give ~16-40 items, i.e.
// 128-320 tiles: on an H100 (132 SMs) several land on a last wave of at most
// 66 tiles. K = 1088 (17 K blocks) splits in 2 uneven halves, K = 2112 in up
// to 4.
TEST_F(MoeCudaSplitTest, GroupedGemmSplitsThePartialLastWave) {
  std::mt19937_64 rng(TestSeed());
  for (const Case& g :
       std::vector<Case>{{300, 2048, 1088, Epilogue::kNone},
                         {577, 2048, 2112, Epilogue::kNone},
                         {1000, 2048, 1088, Epilogue::kNone},
                         {577, 4096, 1024, Epilogue::kSiluAndMul}}) {
    SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k));
    Workspace ws;
    CheckTwoLaunches(g, Spread::kOneExpert, rng, ws);
    // The plan summary records the kernel and its configuration.
    const PlanSummary plan = ws.plan();
    ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
    const GemmChoice& gemm = plan.gemms.back();
    EXPECT_EQ(gemm.n, g.n);
    EXPECT_EQ(gemm.k, g.k);
    if (env_->backend().arch() == "sm_90a") {
      EXPECT_EQ(gemm.kernel, "cuda.sm90_tma_wgmma") << plan.ToString();
      EXPECT_EQ(gemm.cta_rows, 128);
      EXPECT_EQ(gemm.cta_cols, 256);
      EXPECT_GE(gemm.stages, 3);
      // (A run with moe.cluster=2 pairs CTAs instead.)
      if (gemm.Feature("cluster") == "1") {
        EXPECT_EQ(gemm.Feature("split_k"), "1") << plan.ToString();
      }
      // Every Hopper option is listed, in the backend's order.
      EXPECT_THAT(
          gemm.features,
          ::testing::MatchesRegex("tma_store=[01],split_k=[01],cluster=[124],"
                                  "w_evict_first=[01],wave_sync=[01],"
                                  "expert_groups=(fixed|forward|back),"
                                  "pingpong=0"));
    } else {
      EXPECT_EQ(gemm.kernel, "cuda.sm80_mma") << plan.ToString();
    }
  }
}

// Decode steps: the cost model gives steps of at most 8 tokens 8-row tiles,
// of at most 32 tokens 32-row tiles, which the Hopper kernel runs swap-AB
// (W rows as wgmma's M, the tokens as its N), K split when tiles are few.
// Ragged N (a last W box past N), K ending on a partial block (K = 136,
// 4160), tails of 1 to 32 rows, everything in one expert.
TEST_F(MoeCudaSplitTest, GroupedGemmSwapsABOnDecodeSteps) {
  std::mt19937_64 rng(TestSeed());
  for (const Spread spread : {Spread::kUniform, Spread::kOneExpert}) {
    for (const Case& g :
         std::vector<Case>{{1, 520, 136, Epilogue::kNone},
                           {1, 1536, 2048, Epilogue::kSiluAndMul},
                           {8, 2048, 768, Epilogue::kNone},
                           {9, 1000, 4160, Epilogue::kSiluAndMul},
                           {17, 200, 72, Epilogue::kNone},
                           {32, 4096, 1024, Epilogue::kSiluAndMul}}) {
      SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k,
                                " spread=", static_cast<int>(spread)));
      Workspace ws;
      CheckTwoLaunches(g, spread, rng, ws);
      const PlanSummary plan = ws.plan();
      ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
      if (env_->backend().arch() == "sm_90a") {
        const int32_t tile = g.tokens <= 8 ? 8 : 32;
        EXPECT_EQ(plan.tile_rows, tile);
        EXPECT_EQ(plan.gemms.back().kernel, "cuda.sm90_tma_wgmma_swap_ab");
        EXPECT_EQ(plan.gemms.back().cta_rows, tile);
        EXPECT_EQ(plan.gemms.back().stages, 6);
        // W evict-first (MoeSm90EvictFirstW): at T=1 (2 rows, at most 25 MB
        // of W) on every Hopper L2; never where an expert may hold 2 tiles.
        if (g.tokens == 1) {
          EXPECT_EQ(plan.gemms.back().Feature("w_evict_first"), "1");
          EXPECT_THAT(plan.ToString(), HasSubstr(",w_evict_first=1,"));
        }
        if (kTopk * g.tokens > tile) {
          EXPECT_EQ(plan.gemms.back().Feature("w_evict_first"), "0");
        }
      }
    }
  }
}

// 128-row tiles with tails of every kind of size: 1, 32, 63, 64, 65, 96 and
// 127 rows beside full tiles and an empty expert (a tail's MMAs cover rows
// of the next expert, which must never reach C); ragged N, K ending on a
// partial block, gated and plain, split-K over the few tiles.
TEST_F(MoeCudaSplitTest, GroupedGemmFullTilesWithEveryTailSize) {
  std::mt19937_64 rng(TestSeed());
  const HostTensor ids = IdsWithCounts({129, 64, 65, 127, 0, 319, 32, 96});
  for (const Case& g :
       std::vector<Case>{{416, 520, 136, Epilogue::kNone},
                         {416, 1280, 4160, Epilogue::kSiluAndMul},
                         {416, 8192, 256, Epilogue::kNone}}) {
    SCOPED_TRACE(absl::StrCat("N=", g.n, " K=", g.k));
    Workspace ws;
    CheckTwoLaunches(g, ids, rng, ws);
    EXPECT_EQ(ws.plan().tile_rows, 128) << ws.plan().ToString();
  }
}

// A runtime of its own, created with the tuning keys `tuning` (the CUDA
// backend reads its moe.* keys when a runtime is created).
class MoeCudaKnobTest : public MoeCudaSplitTest {
 protected:
  void SetUpWith(const std::string& tuning) {
    MoeCudaSplitTest::SetUp();
    if (IsSkipped()) return;
    Runtime::Options options = CudaTestRuntime::DefaultOptions();
    options.tuning = tuning;
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> own =
        CudaTestRuntime::Create(options);
    ASSERT_TRUE(own.ok()) << own.status();
    own_ = *std::move(own);
    env_ = own_.get();
  }
  std::unique_ptr<CudaTestRuntime> own_;
};

// The Hopper kernel in clusters whose CTAs share tiles by TMA multicast,
// forced (moe.cluster=2 or 4): the cost model picks clusters
// only for launches too large for an fp64 reference here (>= 16 waves, K >=
// 2048).
class MoeCudaClusterTest : public MoeCudaKnobTest {
 protected:
  // 5 N tiles (gated, 640 outputs) per item make odd tile counts likely
  // (the last unit's spare ranks then repeat a tile without storing it; with
  // clusters of 4 the last N tile pair is half empty too); 8 experts put
  // some units across an expert boundary (no W shared); K = 200 ends on a
  // partial K block; T = 3 has fewer tiles than CTAs.
  void CheckClusters(int cluster) {
    std::mt19937_64 rng(TestSeed());
    for (const Case& g :
         std::vector<Case>{{3, 1280, 256, Epilogue::kSiluAndMul},
                           {577, 1280, 200, Epilogue::kSiluAndMul},
                           {2001, 2048, 264, Epilogue::kNone},
                           {4500, 1280, 128, Epilogue::kSiluAndMul}}) {
      SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k));
      Workspace ws;
      CheckTwoLaunches(g, Spread::kUniform, rng, ws);
      const PlanSummary plan = ws.plan();
      ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
      if (env_->backend().arch() == "sm_90a" && plan.tile_rows == 128) {
        EXPECT_EQ(plan.gemms.back().Feature("cluster"), absl::StrCat(cluster))
            << plan.ToString();
        EXPECT_EQ(plan.gemms.back().Feature("split_k"), "0") << plan.ToString();
        EXPECT_EQ(plan.gemms.back().ctas % cluster, 0) << plan.ToString();
      }
    }
  }
};

class MoeCudaPairClusterTest : public MoeCudaClusterTest {
 protected:
  void SetUp() override { SetUpWith("moe.cluster=2"); }
};
TEST_F(MoeCudaPairClusterTest, GroupedGemmPairsCtas) { CheckClusters(2); }

class MoeCudaQuadClusterTest : public MoeCudaClusterTest {
 protected:
  void SetUp() override { SetUpWith("moe.cluster=4"); }
};
TEST_F(MoeCudaQuadClusterTest, GroupedGemmSharesAAndWInFours) {
  CheckClusters(4);
}

// Clusters of 4 over tails of every size (1 to 127 rows beside full tiles
// and an empty expert): a tail's A box is multicast to its two CTAs, and
// units straddle experts.
TEST_F(MoeCudaQuadClusterTest, GroupedGemmFullTilesWithEveryTailSize) {
  std::mt19937_64 rng(TestSeed());
  const HostTensor ids = IdsWithCounts({129, 64, 65, 127, 0, 319, 32, 96});
  for (const Case& g :
       std::vector<Case>{{416, 1280, 4160, Epilogue::kSiluAndMul},
                         {416, 1536, 256, Epilogue::kNone}}) {
    SCOPED_TRACE(absl::StrCat("N=", g.n, " K=", g.k));
    Workspace ws;
    CheckTwoLaunches(g, ids, rng, ws);
    if (env_->backend().arch() == "sm_90a") {
      EXPECT_EQ(ws.plan().gemms.back().Feature("cluster"), "4")
          << ws.plan().ToString();
    }
  }
}

// Raster group bounds moved to expert starts, forced
// (moe.expert_groups=forward or back; the cost model takes back
// bounds only for experts of at least twice the L2's weight bytes). 30 work
// items of 128 rows over 8 experts of 2, 4, 1, 5, 13, 0, 4 and 1 items:
// forward bounds make groups [0, 12) [12, 16) [16, 25) [25, 30), back
// bounds [0, 7) [7, 12) [12, 24) [24, 30) (the 13-item expert keeps its
// bound at 24). A tile the bounds skip leaves NaN-poisoned rows.
class MoeCudaExpertGroupsTest : public MoeCudaKnobTest {
 protected:
  void CheckGroups(const char* bounds) {
    std::mt19937_64 rng(TestSeed());
    const HostTensor ids = IdsWithCounts({129, 500, 1, 640, 1600, 0, 385, 127});
    for (const Case& g :
         std::vector<Case>{{1691, 1280, 256, Epilogue::kSiluAndMul},
                           {1691, 520, 136, Epilogue::kNone}}) {
      SCOPED_TRACE(absl::StrCat("N=", g.n, " K=", g.k));
      Workspace ws;
      CheckTwoLaunches(g, ids, rng, ws);
      if (env_->backend().arch() == "sm_90a") {
        EXPECT_EQ(ws.plan().tile_rows, 128) << ws.plan().ToString();
        EXPECT_THAT(ws.plan().gemms.back().ToString(),
                    HasSubstr(absl::StrCat(",expert_groups=", bounds)));
      }
    }
  }
};
class MoeCudaForwardGroupsTest : public MoeCudaExpertGroupsTest {
 protected:
  void SetUp() override { SetUpWith("moe.expert_groups=forward"); }
};
TEST_F(MoeCudaForwardGroupsTest, GroupedGemmRunsEveryTileOnce) {
  CheckGroups("forward");
}
class MoeCudaBackGroupsTest : public MoeCudaExpertGroupsTest {
 protected:
  void SetUp() override { SetUpWith("moe.expert_groups=back"); }
};
TEST_F(MoeCudaBackGroupsTest, GroupedGemmRunsEveryTileOnce) {
  CheckGroups("back");
}

// Waves that start together, forced on every Hopper launch
// (moe.wave_sync=on; the cost model takes them only at K >=
// 6144, too large for an fp64 reference of many waves here), with and
// without clusters. On an H100 (132 CTAs, 66 clusters): T = 2001 and 4500
// run 2-3 waves of tiles (256 and ~360); T = 1300 one whole wave, then ~60
// tiles split in halves (without clusters; the split units make a second
// wave); T = 3 one wave, nothing to wait for; T = 17 the swap-AB kernel.
class MoeCudaWaveSyncTest : public MoeCudaKnobTest {
 protected:
  void SetUp() override { SetUpWith("moe.wave_sync=on"); }
  void CheckWaves() {
    std::mt19937_64 rng(TestSeed());
    for (const Case& g :
         std::vector<Case>{{3, 1280, 256, Epilogue::kSiluAndMul},
                           {17, 2048, 1024, Epilogue::kNone},
                           {1300, 2048, 1088, Epilogue::kNone},
                           {2001, 2048, 264, Epilogue::kNone},
                           {4500, 1280, 128, Epilogue::kSiluAndMul}}) {
      SCOPED_TRACE(absl::StrCat("T=", g.tokens, " N=", g.n, " K=", g.k));
      Workspace ws;
      CheckTwoLaunches(g, Spread::kUniform, rng, ws);
      const PlanSummary plan = ws.plan();
      ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
      if (env_->backend().arch() == "sm_90a") {
        EXPECT_EQ(plan.gemms.back().Feature("wave_sync"), "1")
            << plan.ToString();
      }
    }
  }
};
TEST_F(MoeCudaWaveSyncTest, GroupedGemmStartsWavesTogether) { CheckWaves(); }

class MoeCudaWaveSyncClusterTest : public MoeCudaWaveSyncTest {
 protected:
  void SetUp() override { SetUpWith("moe.wave_sync=on,moe.cluster=2"); }
};
TEST_F(MoeCudaWaveSyncClusterTest, GroupedGemmStartsClusterWavesTogether) {
  CheckWaves();
}

class MoeCudaWaveSyncQuadTest : public MoeCudaWaveSyncTest {
 protected:
  void SetUp() override { SetUpWith("moe.wave_sync=on,moe.cluster=4"); }
};
TEST_F(MoeCudaWaveSyncQuadTest, GroupedGemmStartsQuadWavesTogether) {
  CheckWaves();
}

// The cost model's choice: 128-row tiles (50 rows an expert) at K = 6144
// (96 K blocks) sync their waves, at K = 6080 (95) they do not.
TEST_F(MoeCudaSplitTest, GroupedGemmSyncsWavesFromNinetySixKBlocks) {
  std::mt19937_64 rng(TestSeed());
  for (const int64_t k : {int64_t{6080}, int64_t{6144}}) {
    SCOPED_TRACE(absl::StrCat("K=", k));
    Workspace ws;
    CheckTwoLaunches({200, 256, k, Epilogue::kNone}, Spread::kUniform, rng, ws);
    const PlanSummary plan = ws.plan();
    ASSERT_EQ(plan.gemms.size(), 2u) << plan.ToString();
    if (env_->backend().arch() == "sm_90a") {
      EXPECT_EQ(plan.tile_rows, 128) << plan.ToString();
      EXPECT_EQ(plan.gemms.back().Feature("wave_sync"), k == 6144 ? "1" : "0")
          << plan.ToString();
    }
  }
}

TEST_F(MoeCudaTest, PackAndCombineOnTheirOwn) {
  std::mt19937_64 rng(TestSeed());
  const int64_t experts = 8, tokens = 577, topk = 2;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int64_t h : {int64_t{64}, int64_t{17}, int64_t{2048}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " H=", h));
      HostTensor ids =
          RandomTopkIds(rng, tokens, topk, 2 * experts, Spread::kUniform);
      HostTensor map = RandomExpertMap(rng, 2 * experts, experts);
      DeviceTensor d_ids = ToDevice(ids), d_map = ToDevice(map);
      Workspace ws;
      TAILOR_ASSERT_OK(ReserveWorkspace(
          runtime(),
          {.max_tokens = tokens, .topk = topk, .num_experts = experts}, ws));
      TAILOR_ASSERT_OK(Route(runtime(),
                             {.topk_ids = d_ids.ref(),
                              .num_experts = experts,
                              .expert_map = d_map.ref()},
                             ws));
      ReferenceRouting ref = ReferenceRoute(ids, &map, experts, tokens, topk);
      HostTensor hidden(dtype, {tokens, h}), a(dtype, {tokens * topk, h});
      hidden.FillRandom(rng);
      a.Poison();
      DeviceTensor d_hidden = ToDevice(hidden), d_a = ToDevice(a);
      TAILOR_ASSERT_OK(Pack(runtime(), {.hidden = d_hidden.ref(),
                                        .permutation = ws.permutation(),
                                        .topk = topk,
                                        .a = d_a.ref()}));
      HostTensor packed = d_a.Download();
      const int64_t rows = ref.offsets.back();
      for (int64_t r = 0; r < tokens * topk; ++r) {
        for (int64_t x = 0; x < h; ++x) {
          if (r < rows) {
            ASSERT_EQ(packed.at(r * h + x),
                      hidden.at(ref.permutation[r] / topk * h + x))
                << r;
          } else {
            ASSERT_TRUE(std::isnan(packed.at(r * h + x))) << "row " << r;
          }
        }
      }
      HostTensor weights(DType::kF32, {tokens, topk}), out(dtype, {tokens, h});
      weights.FillRandom(rng);
      out.Poison();
      DeviceTensor d_weights = ToDevice(weights), d_out = ToDevice(out);
      TAILOR_ASSERT_OK(Combine(runtime(), {.c = d_a.ref(),
                                           .topk_weights = d_weights.ref(),
                                           .inverse = ws.inverse(),
                                           .out = d_out.ref()}));
      std::vector<double> expected(tokens * h, 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t j = 0; j < topk; ++j) {
          const int32_t row = ref.inverse[t * topk + j];
          if (row < 0) continue;
          for (int64_t x = 0; x < h; ++x) {
            expected[t * h + x] +=
                weights.at(t * topk + j) * packed.at(row * h + x);
          }
        }
      }
      EXPECT_LT(RelativeError(d_out.Download(), expected), Tolerance(dtype));
    }
  }
}

// ---- bad routing data, found on the device ----------------------------------

TEST_F(MoeCudaExpertsTest, BadIdsAreDroppedAndReportedOnce) {
  std::mt19937_64 rng(TestSeed());
  ExpertsCase c = {DType::kBF16, 8, 17, 2};
  ExpertsData data(c, rng);
  data.ids().i32()[5 * 2 + 1] = 9;   // outside [0, 8)
  data.ids().i32()[7 * 2 + 0] = -3;  // later position: not the one reported
  ExpertsData::OnDevice d = data.Upload(api());
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(17, 2, 8), ws));
  TAILOR_ASSERT_OK(Experts(runtime(), d.Args(false), ws));
  HostTensor out = d.out.Download();
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_FALSE(std::isnan(out.at(i)));
  EXPECT_THAT(ws.TakeErrors(runtime()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk_ids[5,1]: expert id 9 is outside [0, "
                                 "8)")));
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));  // taken: forgotten

  HostTensor map = RandomExpertMap(rng, 16, 8);
  map.i32()[3] = 99;
  DeviceTensor d_map = ToDevice(map);
  HostTensor ids = RandomTopkIds(rng, 17, 2, 16, Spread::kUniform);
  ids.i32()[0] = 3;
  DeviceTensor d_ids = ToDevice(ids);
  TAILOR_ASSERT_OK(Route(
      runtime(),
      {.topk_ids = d_ids.ref(), .num_experts = 8, .expert_map = d_map.ref()},
      ws));
  EXPECT_THAT(ws.TakeErrors(runtime()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expert_map[3]: local id 99 is outside [-1, "
                                 "8)")));
}

// The deprecated name of TakeErrors reports and forgets the same errors.
TEST_F(MoeCudaExpertsTest, DeprecatedTakeRoutingErrorsIsTakeErrors) {
  std::mt19937_64 rng(TestSeed());
  HostTensor ids = RandomTopkIds(rng, 17, 2, 8, Spread::kUniform);
  ids.i32()[3 * 2 + 0] = 8;  // outside [0, 8)
  DeviceTensor d_ids = ToDevice(ids);
  Workspace ws;
  TAILOR_ASSERT_OK(ReserveWorkspace(runtime(), Limits(17, 2, 8), ws));
  TAILOR_ASSERT_OK(
      Route(runtime(), {.topk_ids = d_ids.ref(), .num_experts = 8}, ws));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_THAT(ws.TakeRoutingErrors(runtime()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "topk_ids[3,0]: expert id 8 is outside [0, 8)"));
#pragma GCC diagnostic pop
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));  // taken by the old name
}

// ---- device workspaces ------------------------------------------------------

TEST_F(MoeCudaTest, WorkspaceMustBeReservedAndLargeEnough) {
  HostTensor ids(DType::kI32, {32, 1});
  DeviceTensor d_ids = ToDevice(ids);
  Workspace ws;
  EXPECT_THAT(Route(runtime(), {.topk_ids = d_ids.ref(), .num_experts = 8}, ws),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: not reserved on cuda:0")));
  TAILOR_ASSERT_OK(ReserveWorkspace(
      runtime(), {.max_tokens = 16, .topk = 1, .num_experts = 8}, ws));
  EXPECT_THAT(Route(runtime(), {.topk_ids = d_ids.ref(), .num_experts = 8}, ws),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: reserved for T * k assignments <= 16, "
                                 "this step needs 32")));
  EXPECT_THAT(
      ReserveWorkspace(runtime(),
                       {.max_tokens = 16, .topk = 1, .num_experts = 20000}, ws),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("limits.num_experts: the device route supports at "
                         "most 12288 local experts, got 20000")));
}

TEST_F(MoeCudaExpertsTest, BoundCallerMemory) {
  std::mt19937_64 rng(TestSeed());
  const WorkspaceLimits limits = Limits(64, 2, 8);
  absl::StatusOr<int64_t> bytes = WorkspaceBytes(runtime(), limits);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  DeviceBuffer memory(api(), static_cast<size_t>(*bytes) + 256);
  ASSERT_TRUE(memory.ok());
  Workspace ws;
  EXPECT_THAT(BindWorkspace(runtime(), limits,
                            static_cast<char*>(memory.data()) + 16, *bytes, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory: must be non-null device memory "
                                 "aligned to 256 bytes")));
  EXPECT_THAT(BindWorkspace(runtime(), limits, memory.data(), *bytes - 1, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(
                           "bytes: must be >= WorkspaceBytes(limits) "
                           "= ",
                           *bytes))));
  TAILOR_ASSERT_OK(BindWorkspace(runtime(), limits, memory.data(), *bytes, ws));
  EXPECT_EQ(ws.device(), kCuda0);
  ExpectExpertsMatch({DType::kBF16, 8, 64, 2}, rng, ws);
  ExpectExpertsMatch({DType::kBF16, 8, 5, 2, Spread::kOneExpert}, rng, ws);
}

TEST_F(MoeCudaTest, MisalignedActivationsAreRejected) {
  HostTensor hidden(DType::kBF16, {4, kHidden + 8});
  DeviceTensor d_hidden = ToDevice(hidden);
  TensorRef shifted = d_hidden.ref();
  shifted.data = static_cast<char*>(shifted.data) + 2;
  shifted.dims[1] = kHidden;
  shifted.strides[0] = kHidden;
  Workspace ws;
  EXPECT_THAT(Experts(runtime(), {.hidden = shifted}, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden: data must be 16-byte aligned on "
                                 "cuda:0")));
}

// ---- Runtime memory (what the examples and C++ servers use) -----------------

TEST_F(MoeCudaTest, RuntimeMemoryRoundTrip) {
  absl::StatusOr<std::shared_ptr<void>> memory = runtime().Allocate(4096);
  ASSERT_TRUE(memory.ok()) << memory.status();
  std::vector<uint8_t> in(4096), out(4096, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  TAILOR_ASSERT_OK(runtime().CopyToDevice(memory->get(), in.data(), 4096));
  TAILOR_ASSERT_OK(runtime().CopyToHost(out.data(), memory->get(), 4096));
  TAILOR_ASSERT_OK(runtime().Synchronize());
  EXPECT_EQ(in, out);
}

// ---- CUDA graphs ------------------------------------------------------------

TEST_F(MoeCudaExpertsTest, GraphReplaysEveryTokenCountOfItsBucket) {
  std::mt19937_64 rng(TestSeed());
  constexpr int64_t kBucket = 64, kExperts = 8, kTopk = 2;
  cuda::testing::TestStream stream(api());
  ASSERT_TRUE(stream.ok());
  ExpertsCase c = {DType::kBF16, kExperts, kBucket, kTopk};
  ExpertsData data(c, rng);
  ExpertsData::OnDevice d = data.Upload(api());
  HostTensor count(DType::kI32, {1});
  count.i32()[0] = kBucket;
  DeviceTensor d_count = ToDevice(count);
  Workspace ws;
  TAILOR_ASSERT_OK(
      ReserveWorkspace(runtime(), Limits(kBucket, kTopk, kExperts), ws));
  ExpertsArgs args = d.Args(false);
  args.valid_tokens = d_count.ref();
  args.stream = stream.get();
  // Once outside the capture: every kernel compiled, loaded and configured.
  TAILOR_ASSERT_OK(Experts(runtime(), args, ws));
  TAILOR_ASSERT_OK(stream.Synchronize());

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuStreamBeginCapture(stream.get(),
                                       CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS);
  absl::Status captured = Experts(runtime(), args, ws);
  ASSERT_EQ(api().cuStreamEndCapture(stream.get(), &graph), CUDA_SUCCESS);
  TAILOR_ASSERT_OK(captured);
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  const StatsSnapshot before = runtime().stats();

  for (int replay = 0; replay < 50; ++replay) {
    const int64_t tokens =
        std::uniform_int_distribution<int64_t>(0, kBucket)(rng);
    SCOPED_TRACE(absl::StrCat("replay ", replay, " T=", tokens));
    ExpertsData step({DType::kBF16, kExperts, kBucket, kTopk,
                      replay % 2 ? Spread::kSubset : Spread::kOneExpert},
                     rng);
    // New data into the buffers the graph captured.
    d.hidden.Upload(step.hidden());
    d.ids.Upload(step.ids());
    d.weights.Upload(step.weights());
    d.w13.Upload(step.w13());
    d.w2.Upload(step.w2());
    count.i32()[0] = static_cast<int32_t>(tokens);
    d_count.Upload(count);
    ASSERT_EQ(api().cuGraphLaunch(exec, stream.get()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream.Synchronize());
    std::vector<double> ref = step.Reference();
    std::fill(ref.begin() + tokens * kHidden, ref.end(), 0.0);
    EXPECT_LT(RelativeError(d.out.Download(), ref), Tolerance(DType::kBF16));
    if (HasFailure()) break;
  }
  EXPECT_EQ(runtime().stats().compiles, before.compiles);
  api().cuGraphExecDestroy(exec);
  api().cuGraphDestroy(graph);
}

}  // namespace
}  // namespace tailor::moe::testing
