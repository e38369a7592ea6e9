// tests/conformance/moe_conformance_test.cc — moe::Experts (route, pack, both
// grouped GEMMs, combine) on every backend present against the fp64
// reference, at awkward token counts and routings.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conformance/conformance.h"
#include "ops/moe/moe_test_util.h"
#include "tailor/ops/moe.h"

namespace tailor::conformance {
namespace {

using moe::testing::ExpertsInputs;
using moe::testing::HostTensor;
using moe::testing::kHidden;
using moe::testing::kIntermediate;
using moe::testing::RandomExpertMap;
using moe::testing::RandomTopkIds;
using moe::testing::ReferenceExperts;
using moe::testing::RelativeError;
using moe::testing::Spread;
using moe::testing::Tolerance;

// T: empty, one token, a few around tile sizes (16, 64, 128 rows), 577.
constexpr int64_t kTokenCounts[] = {0, 1, 17, 63, 64, 65, 127, 128, 129, 577};
constexpr int64_t kMaxTokens = 577;

struct Layer {
  int64_t experts, topk;
};

HostTensor RandomTensor(std::mt19937_64& rng, DType dtype,
                        std::vector<int64_t> dims, double scale) {
  HostTensor t(dtype, std::move(dims));
  std::uniform_real_distribution<double> uniform(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, uniform(rng));
  return t;
}

// Copies `host` to the runtime's memory and returns a view with its shape.
TensorRef Upload(Runtime& runtime, const HostTensor& host,
                 std::vector<std::unique_ptr<Buffer>>& keep) {
  const size_t bytes = host.numel() * DTypeSize(host.dtype());
  keep.push_back(std::make_unique<Buffer>(runtime, bytes));
  if (bytes > 0) {
    EXPECT_TRUE(
        runtime.CopyToDevice(keep.back()->data(), host.ref().data, bytes).ok());
  }
  TensorRef view = host.ref();
  view.data = keep.back()->data();
  view.device = runtime.device();
  return view;
}

class MoeConformance : public BackendTest {
 protected:
  // Runs Experts over every T of kTokenCounts on one reserved workspace and
  // checks each step against the fp64 reference.
  void CheckExperts(DType dtype, Layer layer, Spread spread,
                    int64_t global_experts) {
    std::mt19937_64 rng(::tailor::testing::TestSeed());
    const bool mapped = global_experts > layer.experts;
    moe::Workspace ws;
    TAILOR_ASSERT_OK(moe::ReserveWorkspace(runtime(),
                                           {.max_tokens = kMaxTokens,
                                            .topk = layer.topk,
                                            .num_experts = layer.experts,
                                            .hidden = kHidden,
                                            .intermediate = kIntermediate,
                                            .dtype = dtype},
                                           ws));
    const HostTensor w13 = RandomTensor(
        rng, dtype, {layer.experts, 2 * kIntermediate, kHidden}, 0.25);
    const HostTensor w2 =
        RandomTensor(rng, dtype, {layer.experts, kHidden, kIntermediate}, 0.25);
    std::vector<std::unique_ptr<Buffer>> keep;
    const TensorRef w13_view = Upload(runtime(), w13, keep);
    const TensorRef w2_view = Upload(runtime(), w2, keep);
    std::optional<HostTensor> map;
    std::optional<TensorRef> map_view;
    if (mapped) {
      map = RandomExpertMap(rng, global_experts, layer.experts);
      map_view = Upload(runtime(), *map, keep);
    }
    for (int64_t tokens : kTokenCounts) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " E=", layer.experts,
                                " k=", layer.topk, " T=", tokens,
                                mapped ? " mapped" : ""));
      const HostTensor hidden =
          RandomTensor(rng, dtype, {tokens, kHidden}, 1.0);
      const HostTensor ids =
          RandomTopkIds(rng, tokens, layer.topk,
                        mapped ? global_experts : layer.experts, spread);
      const HostTensor weights =
          RandomTensor(rng, DType::kF32, {tokens, layer.topk}, 1.0);
      HostTensor out(dtype, {tokens, kHidden});
      for (int64_t i = 0; i < out.numel(); ++i) out.set(i, NAN);
      const TensorRef out_view = Upload(runtime(), out, keep);
      TAILOR_ASSERT_OK(
          moe::Experts(runtime(),
                       {.hidden = Upload(runtime(), hidden, keep),
                        .w13 = w13_view,
                        .w2 = w2_view,
                        .topk_weights = Upload(runtime(), weights, keep),
                        .topk_ids = Upload(runtime(), ids, keep),
                        .expert_map = map_view,
                        .out = out_view},
                       ws));
      TAILOR_ASSERT_OK(runtime().Synchronize());
      if (tokens > 0) {
        TAILOR_ASSERT_OK(runtime().CopyToHost(const_cast<void*>(out.ref().data),
                                              out_view.data,
                                              out.numel() * DTypeSize(dtype)));
      }
      const std::vector<double> want =
          ReferenceExperts(ExpertsInputs{.hidden = hidden,
                                         .w13 = w13,
                                         .w2 = w2,
                                         .weights = weights,
                                         .ids = ids,
                                         .map = mapped ? &*map : nullptr},
                           tokens, layer.topk);
      EXPECT_LT(RelativeError(out, want), Tolerance(dtype));
      TAILOR_EXPECT_OK(ws.TakeErrors(runtime()));
      keep.resize(mapped ? 3 : 2);  // free the step's buffers
    }
  }
};

TEST_P(MoeConformance, ExpertsBf16UniformRouting) {
  CheckExperts(DType::kBF16, {.experts = 8, .topk = 2}, Spread::kUniform, 0);
}

TEST_P(MoeConformance, ExpertsBf16OneExpertTakesEveryToken) {
  CheckExperts(DType::kBF16, {.experts = 16, .topk = 4}, Spread::kOneExpert, 0);
}

TEST_P(MoeConformance, ExpertsBf16MostExpertsEmpty) {
  CheckExperts(DType::kBF16, {.experts = 32, .topk = 8}, Spread::kSubset, 0);
}

TEST_P(MoeConformance, ExpertsBf16WithExpertMap) {
  CheckExperts(DType::kBF16, {.experts = 8, .topk = 4}, Spread::kUniform, 24);
}

TEST_P(MoeConformance, ExpertsF32UniformRouting) {
  CheckExperts(DType::kF32, {.experts = 8, .topk = 2}, Spread::kUniform, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, MoeConformance,
                         ::testing::ValuesIn(AllBackends()), BackendParamName);

}  // namespace
}  // namespace tailor::conformance
