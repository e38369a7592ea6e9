#include "moe_layer.h"

#include <bit>
#include <cmath>

namespace serve_demo {

uint16_t ToBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t x) { return std::bit_cast<float>(uint32_t{x} << 16); }

namespace {

// Fills `w` with uniform values of variance scale^2 (a xorshift generator:
// full-size layers have billions of weights, std::normal_distribution would
// take minutes).
void FillWeights(std::vector<uint16_t>& w, float scale, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  const float half_width = scale * std::sqrt(3.0f);
  for (uint16_t& v : w) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
    v = ToBf16((2.0f * u - 1.0f) * half_width);
  }
}

}  // namespace

MoeLayer::MoeLayer(const ModelShape& s, uint64_t seed) : shape(s) {
  w13.resize(static_cast<size_t>(s.experts) * 2 * s.intermediate * s.hidden);
  w2.resize(static_cast<size_t>(s.experts) * s.hidden * s.intermediate);
  FillWeights(w13, 1.0f / std::sqrt(static_cast<float>(s.hidden)), seed);
  FillWeights(w2, 1.0f / std::sqrt(static_cast<float>(s.intermediate)),
              seed + 1);
}

std::vector<double> ReferenceToken(const MoeLayer& layer, const uint16_t* x,
                                   const int32_t* ids, const float* weights) {
  const ModelShape& s = layer.shape;
  std::vector<double> out(s.hidden, 0.0), act(s.intermediate);
  for (int j = 0; j < s.topk; ++j) {
    const uint16_t* w13 = layer.w13.data() + static_cast<size_t>(ids[j]) * 2 *
                                                 s.intermediate * s.hidden;
    const uint16_t* w2 = layer.w2.data() + static_cast<size_t>(ids[j]) *
                                               s.hidden * s.intermediate;
    for (int i = 0; i < s.intermediate; ++i) {
      double gate = 0, up = 0;
      for (int h = 0; h < s.hidden; ++h) {
        gate += double{FromBf16(w13[static_cast<size_t>(i) * s.hidden + h])} *
                FromBf16(x[h]);
        up +=
            double{FromBf16(
                w13[static_cast<size_t>(i + s.intermediate) * s.hidden + h])} *
            FromBf16(x[h]);
      }
      act[i] = gate / (1 + std::exp(-gate)) * up;
    }
    for (int h = 0; h < s.hidden; ++h) {
      double acc = 0;
      for (int i = 0; i < s.intermediate; ++i) {
        acc +=
            double{FromBf16(w2[static_cast<size_t>(h) * s.intermediate + i])} *
            act[i];
      }
      out[h] += weights[j] * acc;
    }
  }
  return out;
}

}  // namespace serve_demo
