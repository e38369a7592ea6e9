// serve_demo/moe_layer.h — one MoE layer's bf16 weights and an fp64 reference.
#ifndef TAILOR_EXAMPLES_SERVE_DEMO_MOE_LAYER_H_
#define TAILOR_EXAMPLES_SERVE_DEMO_MOE_LAYER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace serve_demo {

struct ModelShape {
  std::string name;
  int experts;       // E
  int topk;          // k
  int hidden;        // H
  int intermediate;  // I (moe intermediate size)
};

uint16_t ToBf16(float x);
float FromBf16(uint16_t x);

// Random bf16 weights, scaled so activations stay O(1).
struct MoeLayer {
  MoeLayer(const ModelShape& shape, uint64_t seed);
  ModelShape shape;
  std::vector<uint16_t> w13;  // [E, 2I, H]
  std::vector<uint16_t> w2;   // [E, H, I]
};

// out[t] for one token t, in fp64, with vLLM fused_experts semantics.
std::vector<double> ReferenceToken(const MoeLayer& layer,
                                   const uint16_t* hidden_row,
                                   const int32_t* ids, const float* weights);

}  // namespace serve_demo

#endif  // TAILOR_EXAMPLES_SERVE_DEMO_MOE_LAYER_H_
