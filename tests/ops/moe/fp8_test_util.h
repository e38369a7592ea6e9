// tests/ops/moe/fp8_test_util.h — FP8 pieces of the moe:: op tests: e4m3
// weights with their scales in every scale mode, activations quantized by
// the host reference quantizer (ops/moe/fp8_quant.h), and the dequantized
// f64 values the FP8 ops are checked against.
#ifndef TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "ops/moe/fp8_quant.h"
#include "ops/moe/moe_test_util.h"

namespace tailor::moe::testing {

using internal::E4m3FromFloat;
using internal::E4m3ToFloat;
using internal::Fp8Blocks;
using internal::Fp8ScaleLayout;

constexpr int64_t Blocks128(int64_t x) { return (x + 127) / 128; }

// e4m3 W [E, N, K] and its scales in `mode`'s shape, and dequant(W) in f64.
struct Fp8Weights {
  HostTensor q;                     // [E, N, K] f8e4m3
  HostTensor scales;                // [E] | [E, N] | [E, N/128, K/128] f32
  std::vector<double> dequantized;  // [E, N, K]
};

inline Fp8Weights MakeFp8Weights(std::mt19937_64& rng, ScaleMode mode,
                                 int64_t experts, int64_t n, int64_t k) {
  std::vector<int64_t> scale_dims =
      mode == ScaleMode::kPerTensor ? std::vector<int64_t>{experts}
      : mode == ScaleMode::kPerChannel
          ? std::vector<int64_t>{experts, n}
          : std::vector<int64_t>{experts, Blocks128(n), Blocks128(k)};
  Fp8Weights w = {HostTensor(DType::kF8E4M3, {experts, n, k}),
                  HostTensor(DType::kF32, scale_dims),
                  {}};
  HostTensor values(DType::kF32, {n, k});
  auto* q = static_cast<uint8_t*>(w.q.ref().data);
  auto* s = static_cast<float*>(w.scales.ref().data);
  for (int64_t e = 0; e < experts; ++e) {
    // Rows of different magnitudes, so per-channel and block scales differ.
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    float* v = static_cast<float*>(values.ref().data);
    for (int64_t i = 0; i < n * k; ++i) {
      v[i] = static_cast<float>(dist(rng) * (1 + (i / k) % 7) / 8.0);
    }
    Fp8Blocks blocks = {128, 128};
    Fp8ScaleLayout layout = {s + e * Blocks128(n) * Blocks128(k), Blocks128(k),
                             1};
    if (mode == ScaleMode::kPerTensor) {
      blocks = {n, k};
      layout = {s + e, 0, 0};
    } else if (mode == ScaleMode::kPerChannel) {
      blocks = {1, k};
      layout = {s + e * n, 1, 0};
    }
    uint8_t* qe = q + e * n * k;
    EXPECT_TRUE(internal::Fp8Quantize(values.ref(), blocks, qe, layout).ok());
    std::vector<double> d = internal::Fp8Dequantize(qe, n, k, blocks, layout);
    w.dequantized.insert(w.dequantized.end(), d.begin(), d.end());
  }
  return w;
}

// Quantizes each row of x [rows, cols] (f32 values) as the FP8 activations
// of `mode` are: 1 x 128 groups (block), one scale a row (per channel), or
// the static `scale` (per tensor). Writes e4m3 codes into q and the scales
// at scales[g * scale_rows + row] (block) or scales[row] (per channel);
// returns the dequantized rows in f64.
inline std::vector<double> QuantizeRows(const std::vector<float>& x,
                                        int64_t rows, int64_t cols,
                                        ScaleMode mode, float scale, uint8_t* q,
                                        float* scales, int64_t scale_rows) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    uint8_t* q_row = q + r * cols;
    if (mode == ScaleMode::kPerTensor) {
      for (int64_t c = 0; c < cols; ++c) {
        q_row[c] = E4m3FromFloat(row[c] / scale);
        out[r * cols + c] = double{E4m3ToFloat(q_row[c])} * scale;
      }
      continue;
    }
    const bool block = mode == ScaleMode::kBlock;
    const Fp8Blocks blocks = {1, block ? 128 : cols};
    // Group g of this row: scales[r + g * scale_rows].
    const Fp8ScaleLayout layout = {scales + r, 0, block ? scale_rows : 0};
    EXPECT_TRUE(internal::Fp8Quantize(
                    TensorRef::Contiguous(row, DType::kF32, {1, cols}), blocks,
                    q_row, layout)
                    .ok());
    std::vector<double> d =
        internal::Fp8Dequantize(q_row, 1, cols, blocks, layout);
    std::copy(d.begin(), d.end(), out.begin() + r * cols);
  }
  return out;
}

}  // namespace tailor::moe::testing

#endif  // TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_
