// moe::Pack, moe::GroupedGemm and moe::Combine against double-precision
// references on routed and hand-made row distributions, plus their
// rejected inputs. Outputs are NaN-poisoned before every run.
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/moe/moe_test_util.h"

namespace tailor::moe::testing {
namespace {

using ::testing::HasSubstr;

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16};

struct Shape {
  int64_t experts;
  int64_t tokens;
  int64_t k;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int64_t e : {1, 8, 64, 256}) {
    for (int64_t t : {0, 1, 3, 17, 577}) {
      for (int64_t k : {1, 2, 8}) {
        if (k <= e) shapes.push_back({e, t, k});
      }
    }
  }
  return shapes;
}

std::string Describe(DType dtype, const Shape& s) {
  return absl::StrCat(DTypeName(dtype), " E=", s.experts, " T=", s.tokens,
                      " k=", s.k);
}

// Routes random ids for `s` (uniform, with a map keeping half the experts
// when `with_map`) into `ws`.
absl::Status RouteRandom(std::mt19937_64& rng, const Shape& s, Spread spread,
                         bool with_map, Workspace& ws) {
  int64_t global = with_map ? 2 * s.experts : s.experts;
  HostTensor ids = RandomTopkIds(rng, s.tokens, s.k, global, spread);
  HostTensor map = RandomExpertMap(rng, global, s.experts);
  RouteArgs args = {.topk_ids = ids.ref(), .num_experts = s.experts};
  if (with_map) args.expert_map = map.ref();
  return Route(SharedRuntime(), args, ws);
}

std::vector<int32_t> OffsetsOf(const Workspace& ws) {
  const int32_t* o = ws.offsets().as<int32_t>();
  return std::vector<int32_t>(o, o + ws.num_experts() + 1);
}

// ---- Pack -------------------------------------------------------------------

void ExpectPackExact(int64_t hidden_dim, DType dtype, const Shape& s,
                     Spread spread, std::mt19937_64& rng) {
  SCOPED_TRACE(absl::StrCat(Describe(dtype, s), " H=", hidden_dim));
  Workspace ws;
  TAILOR_ASSERT_OK(RouteRandom(rng, s, spread, /*with_map=*/s.experts > 1, ws));
  HostTensor hidden(dtype, {s.tokens, hidden_dim});
  hidden.FillRandom(rng);
  HostTensor a(dtype, {ws.num_rows(), hidden_dim});
  a.Poison();
  TAILOR_ASSERT_OK(Pack(SharedRuntime(), {.hidden = hidden.ref(),
                                          .permutation = ws.permutation(),
                                          .topk = s.k,
                                          .a = a.ref()}));
  const int32_t* perm = ws.permutation().as<int32_t>();
  for (int64_t r = 0; r < ws.num_rows(); ++r) {
    for (int64_t h = 0; h < hidden_dim; ++h) {
      ASSERT_EQ(a.at(r * hidden_dim + h),
                hidden.at(perm[r] / s.k * hidden_dim + h))
          << "row " << r << " col " << h;
    }
  }
}

TEST(MoePackTest, CopiesRowsInExpertOrder) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : kFloatTypes) {
    for (const Shape& s : Shapes())
      ExpectPackExact(kHidden, dtype, s, Spread::kUniform, rng);
    ExpectPackExact(kHidden, dtype, {8, 577, 2}, Spread::kOneExpert, rng);
    // 12 elements: 48 or 24 bytes, the latter with an 8-byte remainder.
    ExpectPackExact(12, dtype, {8, 17, 2}, Spread::kSubset, rng);
  }
}

// ---- GroupedGemm ------------------------------------------------------------

struct GemmCase {
  DType dtype;
  int64_t n;
  int64_t k;
  Epilogue epilogue;
};

std::string Describe(const GemmCase& g) {
  return absl::StrCat(
      DTypeName(g.dtype), " N=", g.n, " K=", g.k,
      g.epilogue == Epilogue::kSiluAndMul ? " silu_and_mul" : "");
}

// Runs GroupedGemm on the plan in `ws` with random A, W and checks C.
void ExpectGemmMatches(const GemmCase& g, const Workspace& ws,
                       std::mt19937_64& rng) {
  SCOPED_TRACE(absl::StrCat(Describe(g), " ", ws.plan().ToString()));
  const bool gated = g.epilogue == Epilogue::kSiluAndMul;
  const int64_t rows = ws.num_rows();
  HostTensor a(g.dtype, {rows, g.k});
  HostTensor w(g.dtype, {ws.num_experts(), g.n, g.k});
  HostTensor c(g.dtype, {rows, gated ? g.n / 2 : g.n});
  a.FillRandom(rng);
  w.FillRandom(rng, 0.25);
  c.Poison();
  TAILOR_ASSERT_OK(GroupedGemm(
      SharedRuntime(),
      {.a = a.ref(), .w = w.ref(), .c = c.ref(), .epilogue = g.epilogue}, ws));
  std::vector<double> ref =
      ReferenceGroupedGemm(a, w, OffsetsOf(ws), g.n, g.k, gated);
  EXPECT_LT(RelativeError(c, ref), Tolerance(g.dtype));
}

TEST(MoeGroupedGemmTest, RoutedSweep) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : kFloatTypes) {
    for (const GemmCase& g :
         {GemmCase{dtype, 2 * kIntermediate, kHidden, Epilogue::kSiluAndMul},
          GemmCase{dtype, kHidden, kIntermediate, Epilogue::kNone}}) {
      for (const Shape& s : Shapes()) {
        if (s.k != 2 && s.experts != 8) continue;  // k matters little here
        SCOPED_TRACE(Describe(dtype, s));
        Workspace ws;
        TAILOR_ASSERT_OK(
            RouteRandom(rng, s, Spread::kUniform, /*with_map=*/false, ws));
        ExpectGemmMatches(g, ws, rng);
        if (HasFailure()) return;
      }
    }
  }
}

// Hand-made counts: empty experts, everything in one expert, exact tile
// multiples, one expert per tail size.
std::vector<std::vector<int32_t>> CountPatterns() {
  std::vector<int32_t> every_tail;
  for (int32_t rows = 0; rows <= 33; ++rows) every_tail.push_back(rows);
  return {{0},
          {577},
          {0, 0, 0, 577, 0, 0, 0, 0},
          {16, 32, 0, 48},
          {1, 0, 1, 0, 1},
          every_tail};
}

TEST(MoeGroupedGemmTest, CountPatterns) {
  std::mt19937_64 rng(TestSeed());
  Workspace ws;
  for (const std::vector<int32_t>& pattern : CountPatterns()) {
    HostTensor counts(DType::kI32, {static_cast<int64_t>(pattern.size())});
    std::copy(pattern.begin(), pattern.end(), counts.i32());
    TAILOR_ASSERT_OK(PlanRows(SharedRuntime(), {.counts = counts.ref()}, ws));
    for (DType dtype : kFloatTypes) {
      ExpectGemmMatches(
          {dtype, 2 * kIntermediate, kHidden, Epilogue::kSiluAndMul}, ws, rng);
      ExpectGemmMatches({dtype, kHidden, kIntermediate, Epilogue::kNone}, ws,
                        rng);
    }
  }
}

// N not a multiple of the 32-row N tile (odd for the plain case), K with
// several 256-wide chunks and a remainder that is not a multiple of 8, a
// tile of 6 rows (core = one 4-row and one 2-row micro-tile) and exact
// tails 1..5 (class 5 pads to two micro-tiles).
TEST(MoeGroupedGemmTest, AwkwardDimsAndTiles) {
  std::mt19937_64 rng(TestSeed());
  std::vector<int32_t> pattern = {0, 1, 2, 3, 4, 5, 6, 7, 13, 29};
  HostTensor counts(DType::kI32, {static_cast<int64_t>(pattern.size())});
  std::copy(pattern.begin(), pattern.end(), counts.i32());
  Workspace ws;
  TAILOR_ASSERT_OK(
      PlanRows(SharedRuntime(),
               {.counts = counts.ref(),
                .policy = {.tile_rows = 6, .tail = TailPolicy::kExact}},
               ws));
  EXPECT_EQ(ws.plan().variants, 6);
  ExpectGemmMatches({DType::kF32, 37, 555, Epilogue::kNone}, ws, rng);
  ExpectGemmMatches({DType::kBF16, 38, 555, Epilogue::kSiluAndMul}, ws, rng);
}

// ---- Combine ----------------------------------------------------------------

void ExpectCombineMatches(DType dtype, const Shape& s, bool with_map,
                          std::mt19937_64& rng) {
  SCOPED_TRACE(absl::StrCat(Describe(dtype, s), " map=", with_map));
  Workspace ws;
  TAILOR_ASSERT_OK(RouteRandom(rng, s, Spread::kUniform, with_map, ws));
  HostTensor c(dtype, {ws.num_rows(), kHidden});
  HostTensor weights(DType::kF32, {s.tokens, s.k});
  HostTensor out(dtype, {s.tokens, kHidden});
  c.FillRandom(rng);
  weights.FillRandom(rng);
  out.Poison();
  TAILOR_ASSERT_OK(Combine(SharedRuntime(), {.c = c.ref(),
                                             .topk_weights = weights.ref(),
                                             .inverse = ws.inverse(),
                                             .out = out.ref()}));
  std::vector<double> ref(static_cast<size_t>(s.tokens * kHidden), 0.0);
  const int32_t* inverse = ws.inverse().as<int32_t>();
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t j = 0; j < s.k; ++j) {
      int32_t row = inverse[t * s.k + j];
      if (row < 0) continue;
      for (int64_t h = 0; h < kHidden; ++h) {
        ref[t * kHidden + h] +=
            weights.at(t * s.k + j) * c.at(row * kHidden + h);
      }
    }
  }
  EXPECT_LT(RelativeError(out, ref), Tolerance(dtype));
}

TEST(MoeCombineTest, WeightedSumOfLocalRows) {
  std::mt19937_64 rng(TestSeed());
  for (DType dtype : kFloatTypes) {
    for (const Shape& s : Shapes()) {
      ExpectCombineMatches(dtype, s, /*with_map=*/false, rng);
      ExpectCombineMatches(dtype, s, /*with_map=*/true, rng);
      if (HasFailure()) return;
    }
  }
}

// ---- rejected inputs --------------------------------------------------------

class MoeKernelsErrorTest : public ::testing::Test {
 protected:
  MoeKernelsErrorTest()
      : ids_(DType::kI32, {6, 2}),
        hidden_(DType::kBF16, {6, kHidden}),
        a_(DType::kBF16, {12, kHidden}),
        w_(DType::kBF16, {8, 2 * kIntermediate, kHidden}),
        c_(DType::kBF16, {12, kIntermediate}),
        weights_(DType::kF32, {6, 2}),
        out_(DType::kBF16, {6, kHidden}) {
    for (int i = 0; i < 12; ++i) ids_.i32()[i] = i % 8;
    EXPECT_TRUE(
        Route(SharedRuntime(), {.topk_ids = ids_.ref(), .num_experts = 8}, ws_)
            .ok());
    out_.Poison();
  }
  GroupedGemmArgs Gated() const {
    return {.a = a_.ref(),
            .w = w_.ref(),
            .c = c_.ref(),
            .epilogue = Epilogue::kSiluAndMul};
  }

  HostTensor ids_, hidden_, a_, w_, c_, weights_, out_;
  Workspace ws_;
};

TEST_F(MoeKernelsErrorTest, Pack) {
  HostTensor perm(DType::kI32, {12});
  std::copy_n(ws_.permutation().as<int32_t>(), 12, perm.i32());
  perm.i32()[2] = 99;
  PackArgs args = {.hidden = hidden_.ref(),
                   .permutation = perm.ref(),
                   .topk = 2,
                   .a = a_.ref()};
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "permutation[2]: assignment 99 is outside [0, 12) (T * topk)")));
  args.permutation = ws_.permutation();
  HostTensor a_f32(DType::kF32, {12, kHidden});
  args.a = a_f32.ref();
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("a: dtype must match hidden (bf16), got f32")));
  HostTensor a_short(DType::kBF16, {11, kHidden});
  args.a = a_short.ref();
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "a: dims[0] must equal R = permutation.dims[0] (12), got 11")));
  HostTensor a_narrow(DType::kBF16, {12, kHidden / 2});
  args.a = a_narrow.ref();
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("a: dims[1] must equal H = hidden.dims[1] (64), got 32")));
  args.a = a_.ref();
  args.topk = 0;
  EXPECT_THAT(Pack(SharedRuntime(), args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("topk: k must be in [1, 64], got 0")));
  args.topk = 2;
  HostTensor ints(DType::kI32, {6, kHidden});
  args.hidden = ints.ref();
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("hidden: dtype must be bf16 or f32, got i32")));
  // Never read: the dim check comes first.
  args.hidden =
      TensorRef::Contiguous(hidden_.ref().data, DType::kBF16, {1, 70000});
  EXPECT_THAT(
      Pack(SharedRuntime(), args),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("hidden: dims[1] (H): must be in [1, 65536] (compiled into "
                    "kernels), got 70000")));
}

TEST_F(MoeKernelsErrorTest, PackRejectsOverlap) {
  HostTensor both(DType::kBF16,
                  {18, kHidden});  // hidden rows 0..5, A rows 5..16
  TensorRef hidden =
      TensorRef::Contiguous(both.ref().data, DType::kBF16, {6, kHidden});
  TensorRef a = TensorRef::Contiguous(
      static_cast<uint16_t*>(both.ref().data) + 5 * kHidden, DType::kBF16,
      {12, kHidden});
  EXPECT_THAT(Pack(SharedRuntime(), {.hidden = hidden,
                                     .permutation = ws_.permutation(),
                                     .topk = 2,
                                     .a = a}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a: must not overlap hidden in memory")));
}

TEST_F(MoeKernelsErrorTest, GroupedGemm) {
  Workspace unrouted;
  EXPECT_THAT(
      GroupedGemm(SharedRuntime(), Gated(), unrouted),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          HasSubstr("ws: not routed; call moe::Route or moe::PlanRows first")));
  GroupedGemmArgs args = Gated();
  HostTensor w_short_k(DType::kBF16, {8, 2 * kIntermediate, 32});
  args.w = w_short_k.ref();
  EXPECT_THAT(
      GroupedGemm(SharedRuntime(), args, ws_),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w: dims[2] must equal K = a.dims[1] (64), got 32")));
  HostTensor w_few(DType::kBF16, {4, 2 * kIntermediate, kHidden});
  args.w = w_few.ref();
  EXPECT_THAT(
      GroupedGemm(SharedRuntime(), args, ws_),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("w: dims[0] must equal E = ws.num_experts() (8), got 4")));
  HostTensor w_odd(DType::kBF16, {8, 63, kHidden});
  args.w = w_odd.ref();
  EXPECT_THAT(
      GroupedGemm(SharedRuntime(), args, ws_),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "w: dims[1] (N) must be even for Epilogue::kSiluAndMul (gate | "
              "up), got 63")));
  args = Gated();
  HostTensor c_wide(DType::kBF16, {12, 2 * kIntermediate});
  args.c = c_wide.ref();
  EXPECT_THAT(
      GroupedGemm(SharedRuntime(), args, ws_),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "c: dims[1] must equal N / 2 = w.dims[1] / 2 (32), got 64")));
  args = Gated();
  args.c =
      TensorRef::Contiguous(a_.ref().data, DType::kBF16, {12, kIntermediate});
  EXPECT_THAT(GroupedGemm(SharedRuntime(), args, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("c: must not overlap a in memory")));
  args = Gated();
  HostTensor w_f32(DType::kF32, {8, 2 * kIntermediate, kHidden});
  args.w = w_f32.ref();
  EXPECT_THAT(GroupedGemm(SharedRuntime(), args, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w: dtype must match a (bf16), got f32")));
  args = Gated();
  args.epilogue = static_cast<Epilogue>(9);
  EXPECT_THAT(GroupedGemm(SharedRuntime(), args, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("epilogue: not an Epilogue value: 9")));
}

TEST_F(MoeKernelsErrorTest, Combine) {
  HostTensor c(DType::kBF16, {12, kHidden});
  HostTensor inverse(DType::kI32, {6, 2});
  std::copy_n(ws_.inverse().as<int32_t>(), 12, inverse.i32());
  inverse.i32()[2] = 12;
  CombineArgs args = {.c = c.ref(),
                      .topk_weights = weights_.ref(),
                      .inverse = inverse.ref(),
                      .out = out_.ref()};
  EXPECT_THAT(Combine(SharedRuntime(), args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inverse[1,0]: row 12 is outside [-1, 12)")));
  args.inverse = ws_.inverse();
  HostTensor bf16_weights(DType::kBF16, {6, 2});
  args.topk_weights = bf16_weights.ref();
  EXPECT_THAT(
      Combine(SharedRuntime(), args),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("topk_weights: expected dtype f32, got bf16")));
  args.topk_weights = weights_.ref();
  HostTensor short_inverse(DType::kI32, {5, 2});
  args.inverse = short_inverse.ref();
  EXPECT_THAT(Combine(SharedRuntime(), args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inverse: dims[0] must equal T = "
                                 "topk_weights.dims[0] (6), got 5")));
  args.inverse = ws_.inverse();
  HostTensor out_narrow(DType::kBF16, {6, 32});
  args.out = out_narrow.ref();
  EXPECT_THAT(
      Combine(SharedRuntime(), args),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("out: dims[1] must equal H = c.dims[1] (64), got 32")));
  // Nothing was written by any rejected call.
  for (int64_t i = 0; i < out_.numel(); ++i)
    ASSERT_TRUE(std::isnan(out_.at(i)));
}

}  // namespace
}  // namespace tailor::moe::testing
