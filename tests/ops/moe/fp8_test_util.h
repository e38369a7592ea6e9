// tests/ops/moe/fp8_test_util.h — FP8 pieces of the moe:: op tests: e4m3
// weights with their scales in every scale mode, activations quantized by
// the host reference quantizer (ops/moe/fp8_quant.h), and the dequantized
// f64 values the FP8 ops are checked against; one Experts layer's inputs.
#ifndef TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// The inputs of one FP8 Experts layer, for ReferenceFp8Experts.
struct Fp8ExpertsInputs {
  ScaleMode mode;
  const HostTensor& hidden;          // [T, H] bf16 | f32
  const HostTensor& ids;             // [T, k] i32 (local expert ids)
  const HostTensor& weights;         // [T, k] f32
  const Fp8Weights& w13;             // [E, 2I, H]
  const Fp8Weights& w2;              // [E, H, I]
  float a1_scale = 0, a2_scale = 0;  // per-tensor mode's static scales
};

// f64 on the dequantized inputs: x quantized as the Pack does, gate|up in
// f64, silu_and_mul rounded to f32 (per channel: to the activation dtype,
// vLLM's intermediate, which the per-token Pack reads) and quantized as the
// kernels do (the down projection's input is e4m3), then the down GEMM and
// the combine.
// Only the first `valid_tokens` tokens (-1: all) are routed; the others
// stay zero.
inline std::vector<double> ReferenceFp8Experts(const Fp8ExpertsInputs& in,
                                               int64_t valid_tokens = -1) {
  const int64_t tokens = in.hidden.ref().dims[0], h = in.hidden.ref().dims[1];
  const int64_t topk = in.ids.ref().dims[1], i_dim = in.w2.q.ref().dims[2];
  const int64_t routed = valid_tokens < 0 ? tokens : valid_tokens;
  const bool bf16_intermediate = in.mode == ScaleMode::kPerChannel &&
                                 in.hidden.ref().dtype == DType::kBF16;
  std::vector<float> x(static_cast<size_t>(tokens * h));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(in.hidden.at(static_cast<int64_t>(i)));
  }
  std::vector<uint8_t> q(x.size() + i_dim);
  std::vector<float> scales(Blocks128(h) * std::max<int64_t>(tokens, 1));
  const std::vector<double> xd = QuantizeRows(
      x, tokens, h, in.mode, in.a1_scale, q.data(), scales.data(), tokens);
  std::vector<double> out(x.size(), 0.0), gu(2 * i_dim);
  std::vector<float> act(i_dim), act_scales(Blocks128(i_dim));
  auto dot = [](const double* p, const double* r, int64_t n) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += p[j] * r[j];
    return sum;
  };
  for (int64_t t = 0; t < routed; ++t) {
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t e = in.ids.i32()[t * topk + j];
      if (e < 0) continue;
      for (int64_t n = 0; n < 2 * i_dim; ++n) {
        gu[n] =
            dot(&in.w13.dequantized[(e * 2 * i_dim + n) * h], &xd[t * h], h);
      }
      for (int64_t i = 0; i < i_dim; ++i) {
        act[i] = static_cast<float>(Silu(gu[i]) * gu[i_dim + i]);
        if (bf16_intermediate) act[i] = Bf16ToFloat(FloatToBf16(act[i]));
      }
      const std::vector<double> hd = QuantizeRows(
          act, 1, i_dim, in.mode, in.a2_scale, q.data(), act_scales.data(), 1);
      const double weight = in.weights.at(t * topk + j);
      for (int64_t n = 0; n < h; ++n) {
        out[t * h + n] += weight * dot(&in.w2.dequantized[(e * h + n) * i_dim],
                                       hd.data(), i_dim);
      }
    }
  }
  return out;
}

// ---- one FP8 MoE layer (moe::Experts), shared by the CPU and GPU tests ---

// Per tensor: the static activation scales (|hidden| <= 2 and the gate|up
// outputs stay inside e4m3's range).
inline constexpr float kFp8StaticA1 = 0.01f, kFp8StaticA2 = 0.05f;

// topk_ids [T, 1] giving expert e exactly counts[e] rows, tokens shuffled.
inline HostTensor IdsWithCounts(std::mt19937_64& rng,
                                const std::vector<int64_t>& counts) {
  std::vector<int32_t> ids;
  for (size_t e = 0; e < counts.size(); ++e) {
    ids.insert(ids.end(), counts[e], static_cast<int32_t>(e));
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  HostTensor t(DType::kI32, {static_cast<int64_t>(ids.size()), 1});
  if (!ids.empty()) std::memcpy(t.i32(), ids.data(), ids.size() * 4);
  return t;
}

struct Fp8LayerDims {
  int64_t experts, hidden, intermediate;
};

// A layer's host inputs: `dtype` activations, e4m3 weights with `mode`'s
// scales, out NaN-poisoned, the static per-tensor activation scales.
struct Fp8Layer {
  Fp8LayerDims dims;
  ScaleMode mode;
  DType dtype;
  HostTensor hidden, weights, ids, out;
  Fp8Weights w13, w2;
  HostTensor a1 = HostTensor(DType::kF32, {1});
  HostTensor a2 = HostTensor(DType::kF32, {1});

  int64_t tokens() const { return hidden.ref().dims[0]; }

  // ExpertsArgs over these host tensors (a CPU runtime).
  ExpertsArgs Args() const {
    ExpertsArgs args = {.hidden = hidden.ref(),
                        .w13 = w13.q.ref(),
                        .w2 = w2.q.ref(),
                        .quant = {.mode = mode,
                                  .w13_scale = w13.scales.ref(),
                                  .w2_scale = w2.scales.ref()},
                        .topk_weights = weights.ref(),
                        .topk_ids = ids.ref(),
                        .out = out.ref()};
    if (mode == ScaleMode::kPerTensor) {
      args.quant.a1_scale = a1.ref();
      args.quant.a2_scale = a2.ref();
    }
    return args;
  }

  // f64 out of the first `valid_tokens` tokens (-1: all).
  std::vector<double> Reference(int64_t valid_tokens = -1) const {
    return ReferenceFp8Experts({.mode = mode,
                                .hidden = hidden,
                                .ids = ids,
                                .weights = weights,
                                .w13 = w13,
                                .w2 = w2,
                                .a1_scale = kFp8StaticA1,
                                .a2_scale = kFp8StaticA2},
                               valid_tokens);
  }
};

inline Fp8Layer MakeFp8Layer(std::mt19937_64& rng, const Fp8LayerDims& dims,
                             HostTensor ids, ScaleMode mode,
                             DType dtype = DType::kBF16) {
  const int64_t tokens = ids.ref().dims[0], topk = ids.ref().dims[1];
  const int64_t h = dims.hidden, i = dims.intermediate;
  Fp8Layer layer = {.dims = dims,
                    .mode = mode,
                    .dtype = dtype,
                    .hidden = HostTensor(dtype, {tokens, h}),
                    .weights = HostTensor(DType::kF32, {tokens, topk}),
                    .ids = std::move(ids),
                    .out = HostTensor(dtype, {tokens, h}),
                    .w13 = MakeFp8Weights(rng, mode, dims.experts, 2 * i, h),
                    .w2 = MakeFp8Weights(rng, mode, dims.experts, h, i)};
  layer.hidden.FillRandom(rng, 2.0);
  layer.weights.FillRandom(rng, 1.0);
  layer.out.Poison();
  layer.a1.set(0, kFp8StaticA1);
  layer.a2.set(0, kFp8StaticA2);
  return layer;
}

}  // namespace tailor::moe::testing

#endif  // TAILOR_TESTS_OPS_MOE_FP8_TEST_UTIL_H_
