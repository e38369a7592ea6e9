// tailor-warmup must precompile every kernel any routing of the model needs:
// after it ran, a runtime with the JIT disabled serves random ragged steps.
#include <stdio.h>

#include <random>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor {
namespace {

using ::tailor::testing::TempDir;

constexpr int kTopk = 2, kHidden = 64, kIntermediate = 32, kExperts = 8;

int RunWarmup(const std::string& dir) {
  std::string command =
      std::string(TAILOR_WARMUP_PATH) + " --topk 2 --hidden 64" +
      " --intermediate 32 --dtype f32 --cache-dir " + dir + " > /dev/null";
  return system(command.c_str());
}

TEST(WarmupTest, StrictRuntimeServesEveryRoutingAfterWarmup) {
  TempDir dir;
  ASSERT_EQ(RunWarmup(dir.path()), 0);
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = dir.path();
  options.disable_jit = true;
  options.log_level = "error";
  auto runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();

  std::mt19937 rng(::tailor::testing::TestSeed());
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w13(kExperts * 2 * kIntermediate * kHidden),
      w2(kExperts * kHidden * kIntermediate);
  for (auto& w : w13) w = dist(rng);
  for (auto& w : w2) w = dist(rng);
  moe::Workspace ws;
  for (int step = 0; step < 40; ++step) {
    int tokens = static_cast<int>(rng() % 200);
    std::vector<float> hidden(tokens * kHidden), out(tokens * kHidden),
        weights(tokens * kTopk, 0.5f);
    std::vector<int32_t> ids(tokens * kTopk);
    for (auto& x : hidden) x = dist(rng);
    for (int t = 0; t < tokens; ++t) {
      ids[t * kTopk] = static_cast<int32_t>(rng() % kExperts);
      ids[t * kTopk + 1] =
          (ids[t * kTopk] + 1 + static_cast<int32_t>(rng() % (kExperts - 1))) %
          kExperts;
    }
    absl::Status s = moe::Experts(
        **runtime,
        {.hidden = TensorRef::Contiguous(hidden.data(), DType::kF32,
                                         {tokens, kHidden}),
         .w13 = TensorRef::Contiguous(w13.data(), DType::kF32,
                                      {kExperts, 2 * kIntermediate, kHidden}),
         .w2 = TensorRef::Contiguous(w2.data(), DType::kF32,
                                     {kExperts, kHidden, kIntermediate}),
         .topk_weights = TensorRef::Contiguous(weights.data(), DType::kF32,
                                               {tokens, kTopk}),
         .topk_ids =
             TensorRef::Contiguous(ids.data(), DType::kI32, {tokens, kTopk}),
         .out =
             TensorRef::Contiguous(out.data(), DType::kF32, {tokens, kHidden})},
        ws);
    ASSERT_TRUE(s.ok()) << "step " << step << " tokens " << tokens << ": " << s;
  }
  EXPECT_EQ((*runtime)->stats().compiles, 0u);
  EXPECT_GT((*runtime)->stats().disk_hits, 0u);
}

}  // namespace
}  // namespace tailor
