// moe::Experts and moe::GroupedGemm with FP8 (e4m3) operands on the CPU
// backend, against f64 on the dequantized inputs: every scale mode, awkward
// per-expert rows (empty experts, 1, 127, 128, 129, 577, all tokens in one
// expert), outputs NaN-poisoned first; and every argument rule with its
// exact code and message.
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/moe/fp8_test_util.h"
#include "ops/moe/moe_test_util.h"

namespace tailor::moe::testing {
namespace {

constexpr int64_t kH = 256;  // hidden: two K blocks of the gate|up GEMM
constexpr int64_t kI = 128;  // intermediate: one K block of the down GEMM
Fp8Layer MakeLayer(std::mt19937_64& rng, ScaleMode mode, DType dtype,
                   int64_t experts, HostTensor ids) {
  return MakeFp8Layer(rng,
                      {.experts = experts, .hidden = kH, .intermediate = kI},
                      std::move(ids), mode, dtype);
}

double Dot(const double* p, const double* q, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i] * q[i];
  return sum;
}

double Tolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2 : 5e-3; }

void RunAndCheck(Fp8Layer& layer, const std::string& what) {
  SCOPED_TRACE(what);
  Workspace ws;
  TAILOR_ASSERT_OK(Experts(SharedRuntime(), layer.Args(), ws));
  EXPECT_LT(RelativeError(layer.out, layer.Reference()),
            Tolerance(layer.dtype));
}

// ---- correctness -----------------------------------------------------------

// Block mode, and per channel (per-token scales of the hidden rows and of
// the bf16 silu_and_mul rows, which a second Pack quantizes, as on a device).
TEST(Fp8ExpertsTest, BlockAndPerChannelMatchTheReferenceOnAwkwardCounts) {
  std::mt19937_64 rng(TestSeed());
  const std::vector<std::vector<int64_t>> grids = {
      {0, 1, 127, 128, 129, 0, 577, 17},  // empty experts, T-1, T, T+1
      {0, 0, 0, 200, 0, 0, 0, 0},         // every token in one expert
      {0, 0, 0, 0, 0, 0, 0, 0},           // T = 0
  };
  for (ScaleMode mode : {ScaleMode::kBlock, ScaleMode::kPerChannel}) {
    for (const std::vector<int64_t>& counts : grids) {
      Fp8Layer layer =
          MakeLayer(rng, mode, DType::kBF16, 8, IdsWithCounts(rng, counts));
      RunAndCheck(layer, absl::StrCat("mode ", static_cast<int>(mode),
                                      " counts ", counts[0], ",", counts[1],
                                      ",", counts[3], " T=", layer.tokens()));
    }
  }
}

TEST(Fp8ExpertsTest, EveryModeAndDtypeWithTopTwoRouting) {
  std::mt19937_64 rng(TestSeed());
  for (ScaleMode mode :
       {ScaleMode::kBlock, ScaleMode::kPerChannel, ScaleMode::kPerTensor}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      Fp8Layer layer = MakeLayer(
          rng, mode, dtype, 8, RandomTopkIds(rng, 37, 2, 8, Spread::kUniform));
      RunAndCheck(layer, absl::StrCat("mode ", static_cast<int>(mode), " ",
                                      DTypeName(dtype)));
    }
  }
}

// One GroupedGemm in block mode, A quantized by the reference quantizer
// into the K-block-major scale layout: per-GEMM error < 5e-3; and the
// quantizing silu_and_mul epilogue against the reference quantizer on the
// f64 result.
TEST(Fp8ExpertsTest, BlockGroupedGemmMatchesTheReference) {
  std::mt19937_64 rng(TestSeed());
  const std::vector<int32_t> counts = {1, 0, 127, 128, 129, 577, 0, 33};
  HostTensor counts_t(DType::kI32, {8});
  std::memcpy(counts_t.i32(), counts.data(), counts.size() * 4);
  Workspace ws;
  TAILOR_ASSERT_OK(PlanRows(SharedRuntime(), {.counts = counts_t.ref()}, ws));
  const int64_t rows = ws.num_rows(), n = 2 * kI;
  const int64_t scale_rows = rows + 3;  // a padded row stride (S >= R)
  std::vector<float> x(static_cast<size_t>(rows * kH));
  std::uniform_real_distribution<float> dist(-3, 3);
  for (float& v : x) v = dist(rng);
  HostTensor a(DType::kF8E4M3, {rows, kH});
  HostTensor a_scale(DType::kF32, {Blocks128(kH), scale_rows});
  const std::vector<double> ad = QuantizeRows(
      x, rows, kH, ScaleMode::kBlock, 0, static_cast<uint8_t*>(a.ref().data),
      static_cast<float*>(a_scale.ref().data), scale_rows);
  const Fp8Weights w = MakeFp8Weights(rng, ScaleMode::kBlock, 8, n, kH);
  std::vector<int32_t> offsets = {0};
  for (int32_t c : counts) offsets.push_back(offsets.back() + c);
  std::vector<double> ref(static_cast<size_t>(rows * n));
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      for (int64_t col = 0; col < n; ++col) {
        ref[r * n + col] =
            Dot(&w.dequantized[(e * n + col) * kH], &ad[r * kH], kH);
      }
    }
  }
  HostTensor c(DType::kBF16, {rows, n});
  c.Poison();
  TAILOR_ASSERT_OK(GroupedGemm(SharedRuntime(),
                               {.a = a.ref(),
                                .w = w.q.ref(),
                                .c = c.ref(),
                                .quant = {.mode = ScaleMode::kBlock,
                                          .a_scale = a_scale.ref(),
                                          .w_scale = w.scales.ref()}},
                               ws));
  EXPECT_LT(RelativeError(c, ref), 5e-3);

  // The quantizing epilogue: e4m3 [R, I] and its 1 x 128 scales [I/128, R].
  HostTensor cq(DType::kF8E4M3, {rows, kI});
  HostTensor cq_scale(DType::kF32, {Blocks128(kI), scale_rows});
  std::memset(cq.ref().data, 0x7f, rows * kI);  // NaN codes
  cq_scale.Poison();
  TAILOR_ASSERT_OK(GroupedGemm(SharedRuntime(),
                               {.a = a.ref(),
                                .w = w.q.ref(),
                                .c = cq.ref(),
                                .epilogue = Epilogue::kSiluAndMul,
                                .quant = {.mode = ScaleMode::kBlock,
                                          .a_scale = a_scale.ref(),
                                          .w_scale = w.scales.ref(),
                                          .c_scale = cq_scale.ref()}},
                               ws));
  std::vector<float> act(static_cast<size_t>(rows * kI));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < kI; ++i) {
      act[r * kI + i] =
          static_cast<float>(Silu(ref[r * n + i]) * ref[r * n + kI + i]);
    }
  }
  std::vector<uint8_t> want(act.size());
  std::vector<float> want_scales(Blocks128(kI) * rows);
  const std::vector<double> want_d =
      QuantizeRows(act, rows, kI, ScaleMode::kBlock, 0, want.data(),
                   want_scales.data(), rows);
  const auto* got_q = static_cast<const uint8_t*>(cq.ref().data);
  const auto* got_s = static_cast<const float*>(cq_scale.ref().data);
  double diff = 0, norm = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < kI; ++i) {
      const double got = double{E4m3ToFloat(got_q[r * kI + i])} *
                         got_s[(i / 128) * scale_rows + r];
      ASSERT_FALSE(std::isnan(got)) << "row " << r << " col " << i;
      diff += (got - want_d[r * kI + i]) * (got - want_d[r * kI + i]);
      norm += want_d[r * kI + i] * want_d[r * kI + i];
    }
  }
  EXPECT_LT(std::sqrt(diff / norm), 5e-3);
}

}  // namespace
}  // namespace tailor::moe::testing
