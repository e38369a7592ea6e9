// The host FP8 reference (ops/moe/fp8_quant.h): the e4m3 encoding against a
// brute-force nearest-value search, every code's round trip, ties, saturation
// and NaN; the block quantization rule on activations (1 x 128, K-block major
// scales), weights (128 x 128, a ragged last block), per-row and per-tensor
// blocks; and the rejected arguments.
#include "ops/moe/fp8_quant.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tailor::internal {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The finite non-negative e4m3 values, codes 0x00 .. 0x7e, from the format's
// definition (independent of E4m3ToFloat).
std::vector<double> FiniteValues() {
  std::vector<double> values;
  for (int code = 0; code <= 0x7e; ++code) {
    const int e = code >> 3, m = code & 7;
    values.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
  }
  return values;
}

// Nearest finite e4m3 code to x, ties to the even code, above 448 the
// largest: a linear search.
uint8_t BruteForceE4m3(float x) {
  static const std::vector<double> values = FiniteValues();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int code = 1; code < static_cast<int>(values.size()); ++code) {
    const double d = std::fabs(values[code] - a);
    const double d_best = std::fabs(values[best] - a);
    if (d < d_best || (d == d_best && code % 2 == 0)) best = code;
  }
  return sign | static_cast<uint8_t>(best);
}

TEST(Fp8FormatTest, DecodesTheFormatsLandmarks) {
  EXPECT_EQ(E4m3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0x80)));
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xff)));
  const std::vector<double> values = FiniteValues();
  for (int code = 0; code <= 0x7e; ++code) {
    EXPECT_EQ(E4m3ToFloat(static_cast<uint8_t>(code)), values[code]) << code;
  }
}

TEST(Fp8FormatTest, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const auto bits = static_cast<uint8_t>(code);
    EXPECT_EQ(E4m3FromFloat(E4m3ToFloat(bits)), bits) << code;
  }
}

TEST(Fp8FormatTest, TiesRoundToTheEvenCode) {
  const std::vector<double> values = FiniteValues();
  for (int code = 0; code + 1 <= 0x7e; ++code) {
    const auto mid = static_cast<float>((values[code] + values[code + 1]) / 2);
    const uint8_t even = static_cast<uint8_t>(code % 2 == 0 ? code : code + 1);
    EXPECT_EQ(E4m3FromFloat(mid), even) << code;
    EXPECT_EQ(E4m3FromFloat(-mid), 0x80 | even) << code;
    EXPECT_EQ(E4m3FromFloat(std::nextafter(mid, kInf)), code + 1) << code;
    EXPECT_EQ(E4m3FromFloat(std::nextafter(mid, 0.0f)), code) << code;
  }
}

TEST(Fp8FormatTest, SaturatesAndKeepsNaN) {
  for (float big : {448.0f, 448.01f, 464.0f, 480.0f, 1e9f, kInf}) {
    EXPECT_EQ(E4m3FromFloat(big), 0x7e) << big;
    EXPECT_EQ(E4m3FromFloat(-big), 0xfe) << big;
  }
  EXPECT_EQ(E4m3FromFloat(std::nanf("")), 0x7f);
  EXPECT_EQ(E4m3FromFloat(-std::nanf("")), 0xff);
  EXPECT_EQ(E4m3FromFloat(std::ldexp(1.0f, -10)), 0x00);  // tie to 0
  EXPECT_EQ(E4m3FromFloat(1e-30f), 0x00);
  EXPECT_EQ(E4m3FromFloat(-1e-30f), 0x80);
  EXPECT_EQ(E4m3FromFloat(-0.0f), 0x80);
}

TEST(Fp8FormatTest, MatchesTheNearestValueSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> log2_magnitude(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(log2_magnitude(rng));
    if (i % 2) x = -x;
    ASSERT_EQ(E4m3FromFloat(x), BruteForceE4m3(x)) << x;
  }
}

TEST(Fp8ScaleTest, FollowsTheRule) {
  EXPECT_EQ(Fp8Scale(448.0f), 1.0f);
  EXPECT_EQ(Fp8Scale(0.0f), kFp8ScaleEpsilon / 448.0f);
  EXPECT_EQ(Fp8Scale(3.0f), 3.0f / 448.0f);
  EXPECT_TRUE(std::isnan(Fp8Scale(std::nanf(""))));
  EXPECT_EQ(Fp8Scale(kInf), kInf);
}

uint16_t Bf16Bits(float x) {  // truncation: the values are made exact
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
}
float Bf16Value(float x) {
  return std::bit_cast<float>(uint32_t{Bf16Bits(x)} << 16);
}

// Activations [5, 384] (3 groups a row) in bf16: scales K-block major, an
// all-zero group, a NaN group, every other group within its rounding.
TEST(Fp8QuantizeTest, ActivationGroupsInTheGemmLayout) {
  constexpr int64_t kRows = 5, kCols = 384, kScaleRows = 8;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<uint16_t> x(kRows * kCols);
  for (auto& v : x) v = Bf16Bits(normal(rng));
  for (int c = 0; c < 128; ++c) x[2 * kCols + c] = 0;  // row 2, group 0
  x[3 * kCols + 200] = Bf16Bits(std::nanf(""));        // row 3, group 1
  std::vector<uint8_t> q(kRows * kCols, 0x55);
  std::vector<float> scales(3 * kScaleRows, -1.0f);
  const TensorRef xt =
      TensorRef::Contiguous(x.data(), DType::kBF16, {kRows, kCols});
  ASSERT_TRUE(Fp8Quantize(xt, kFp8ActivationBlock, q.data(),
                          {scales.data(), 1, kScaleRows})
                  .ok());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t g = 0; g < 3; ++g) {
      const float scale = scales[g * kScaleRows + r];
      if (r == 2 && g == 0) {
        EXPECT_EQ(scale, kFp8ScaleEpsilon / 448.0f);
      } else if (r == 3 && g == 1) {
        EXPECT_TRUE(std::isnan(scale));
      }
      float amax = 0.0f;
      for (int64_t c = 128 * g; c < 128 * (g + 1); ++c) {
        const float v = std::bit_cast<float>(uint32_t{x[r * kCols + c]} << 16);
        amax = std::max(amax, std::fabs(v));
        const uint8_t code = q[r * kCols + c];
        if (std::isnan(scale)) {
          EXPECT_EQ(code & 0x7f, 0x7f) << r << " " << c;
        } else {
          EXPECT_EQ(code, E4m3FromFloat(v / scale)) << r << " " << c;
        }
      }
      if (!std::isnan(scale) && amax > 0) {
        EXPECT_EQ(scale, amax / 448.0f) << r << " " << g;
      }
    }
  }
  for (int64_t r = kRows; r < kScaleRows; ++r) {
    EXPECT_EQ(scales[r], -1.0f) << "scale rows past R stay untouched";
  }
}

// Weights [200, 256] f32 in 128 x 128 blocks: 2 x 2 scales as shipped
// ([N/128, K/128], the last row block 72 rows), within half an e4m3 step.
TEST(Fp8QuantizeTest, WeightBlocksWithARaggedLastBlock) {
  constexpr int64_t kN = 200, kK = 256;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(kN * kK);
  for (auto& v : w) v = normal(rng);
  w[150 * kK + 3] = 0.5f;  // block (1, 0)'s largest
  std::vector<uint8_t> q(kN * kK);
  std::vector<float> scales(4);
  ASSERT_TRUE(
      Fp8Quantize(TensorRef::Contiguous(w.data(), DType::kF32, {kN, kK}),
                  kFp8WeightBlock, q.data(), {scales.data(), 2, 1})
          .ok());
  EXPECT_EQ(scales[2], 0.5f / 448.0f);
  EXPECT_EQ(q[150 * kK + 3], 0x7e);
  const std::vector<double> deq =
      Fp8Dequantize(q.data(), kN, kK, kFp8WeightBlock, {scales.data(), 2, 1});
  for (int64_t i = 0; i < kN * kK; ++i) {
    const double scale = scales[(i / kK) / 128 * 2 + (i % kK) / 128];
    // Half a step: 2^-4 relative for normals, 2^-10 x scale below 2^-6.
    const double bound = std::max(std::fabs(w[i]) / 16.0, scale / 1024.0);
    ASSERT_LE(std::fabs(deq[i] - w[i]), bound * (1 + 1e-5)) << i;
  }
}

TEST(Fp8QuantizeTest, PerRowAndPerTensorBlocks) {
  const std::vector<float> x = {1.0f, -2.0f, 4.0f, 0.5f, 0.25f, 0.125f};
  const TensorRef xt = TensorRef::Contiguous(x.data(), DType::kF32, {2, 3});
  std::vector<uint8_t> q(6);
  std::vector<float> scales(2);
  ASSERT_TRUE(Fp8Quantize(xt, {1, 3}, q.data(), {scales.data(), 1, 0}).ok());
  EXPECT_EQ(scales[0], 4.0f / 448.0f);
  EXPECT_EQ(scales[1], 0.5f / 448.0f);
  EXPECT_EQ(q[2], 0x7e);
  EXPECT_EQ(q[3], 0x7e);
  EXPECT_EQ(q[0], E4m3FromFloat(1.0f / (4.0f / 448.0f)));  // 112
  ASSERT_TRUE(Fp8Quantize(xt, {2, 3}, q.data(), {scales.data(), 0, 0}).ok());
  EXPECT_EQ(scales[0], 4.0f / 448.0f);
  EXPECT_EQ(q[5], E4m3FromFloat(0.125f / (4.0f / 448.0f)));  // 14
  EXPECT_EQ(E4m3ToFloat(q[5]), 14.0f);
}

TEST(Fp8QuantizeTest, BfloatAndFloatInputsAgree) {
  std::vector<float> f(2 * 128);
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = Bf16Value(std::sin(0.37f * i) * 5.0f);
    h[i] = Bf16Bits(f[i]);
  }
  std::vector<uint8_t> qf(f.size()), qh(f.size());
  std::vector<float> sf(2), sh(2);
  ASSERT_TRUE(
      Fp8Quantize(TensorRef::Contiguous(f.data(), DType::kF32, {2, 128}),
                  kFp8ActivationBlock, qf.data(), {sf.data(), 1, 2})
          .ok());
  ASSERT_TRUE(
      Fp8Quantize(TensorRef::Contiguous(h.data(), DType::kBF16, {2, 128}),
                  kFp8ActivationBlock, qh.data(), {sh.data(), 1, 2})
          .ok());
  EXPECT_EQ(qf, qh);
  EXPECT_EQ(sf, sh);
}

TEST(Fp8QuantizeTest, RejectsBadArguments) {
  std::vector<float> x(2 * 128);
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(2);
  const Fp8ScaleLayout layout = {s.data(), 1, 2};
  const auto message = [&](const TensorRef& t, Fp8Blocks b, uint8_t* qp,
                           Fp8ScaleLayout l) {
    const absl::Status status = Fp8Quantize(t, b, qp, l);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  const TensorRef ok = TensorRef::Contiguous(x.data(), DType::kF32, {2, 128});
  EXPECT_THAT(message(TensorRef::Contiguous(x.data(), DType::kF32, {2, 2, 64}),
                      kFp8ActivationBlock, q.data(), layout),
              HasSubstr("x: must be 2-D [rows, cols], got rank 3"));
  EXPECT_THAT(message(TensorRef::Contiguous(x.data(), DType::kI32, {2, 128}),
                      kFp8ActivationBlock, q.data(), layout),
              HasSubstr("x: dtype must be f32 or bf16, got i32"));
  TensorRef gpu = ok;
  gpu.device = {DeviceType::kCuda, 0};
  EXPECT_THAT(message(gpu, kFp8ActivationBlock, q.data(), layout),
              HasSubstr("x: must be on the CPU, got cuda:0"));
  TensorRef strided = ok;
  strided.dims[1] = 64;
  EXPECT_THAT(message(strided, kFp8ActivationBlock, q.data(), layout),
              HasSubstr("x: must be contiguous"));
  EXPECT_THAT(message(ok, {0, 128}, q.data(), layout),
              HasSubstr("blocks: rows and cols must be >= 1, got 0 x 128"));
  EXPECT_THAT(message(ok, kFp8ActivationBlock, nullptr, layout),
              HasSubstr("q, scales.data: must be non-null"));
  EXPECT_THAT(message(ok, kFp8ActivationBlock, q.data(), {s.data(), -1, 2}),
              HasSubstr("scales: strides must be >= 0, got -1, 2"));
  const TensorRef empty = TensorRef::Contiguous(nullptr, DType::kF32, {0, 128});
  EXPECT_TRUE(Fp8Quantize(empty, kFp8ActivationBlock, nullptr, {}).ok());
}

}  // namespace
}  // namespace tailor::internal
