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

MoeLayer::MoeLayer(const ModelShape& s, uint64_t seed) : shape(s) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  w13.resize(static_cast<size_t>(s.experts) * 2 * s.intermediate * s.hidden);
  w2.resize(static_cast<size_t>(s.experts) * s.hidden * s.intermediate);
  float scale13 = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  float scale2 = 1.0f / std::sqrt(static_cast<float>(s.intermediate));
  for (auto& w : w13) w = ToBf16(dist(rng) * scale13);
  for (auto& w : w2) w = ToBf16(dist(rng) * scale2);
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
