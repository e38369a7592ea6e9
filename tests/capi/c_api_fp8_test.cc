// The C ABI's FP8 entries (tailor_moe_experts_quantized,
// tailor_moe_grouped_gemm_quantized): they convert to the C++ FP8 args
// exactly (the same bits as moe::Experts on the same runtime), an unset
// scale tensor stays unset, and bad values come back as the C++ message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi/c_api_internal.h"
#include "tailor/c_api.h"
#include "tailor/ops/moe.h"

namespace tailor::capi {
namespace {

constexpr int64_t kT = 9, kH = 256, kI = 128, kE = 4, kK = 2;

class CApiFp8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(tailor_moe_workspace_create(&ws_), TAILOR_STATUS_OK);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::uniform_int_distribution<int> code(0, 0x5f);  // finite e4m3 codes
    for (float& v : x_) v = dist(rng);
    for (float& v : tw_) v = dist(rng);
    for (auto* w : {&w13_, &w2_}) {
      for (uint8_t& b : *w)
        b = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    }
    for (float& s : w13_scale_) s = 0.01f + 0.001f * (rng() % 7);
    for (float& s : w2_scale_) s = 0.01f + 0.001f * (rng() % 7);
    for (int64_t t = 0; t < kT; ++t) {
      ids_[t * kK] = static_cast<int32_t>(t % kE);
      ids_[t * kK + 1] = static_cast<int32_t>((t + 1) % kE);
    }
    const int64_t hd[2] = {kT, kH}, w13d[3] = {kE, 2 * kI, kH},
                  w2d[3] = {kE, kH, kI}, kd[2] = {kT, kK},
                  s13[3] = {kE, 2 * kI / 128, kH / 128},
                  s2[3] = {kE, kH / 128, kI / 128};
    args_.hidden = tailor_tensor_contiguous(x_.data(), TAILOR_DTYPE_F32, 2, hd);
    args_.w13 =
        tailor_tensor_contiguous(w13_.data(), TAILOR_DTYPE_F8E4M3, 3, w13d);
    args_.w2 =
        tailor_tensor_contiguous(w2_.data(), TAILOR_DTYPE_F8E4M3, 3, w2d);
    args_.topk_weights =
        tailor_tensor_contiguous(tw_.data(), TAILOR_DTYPE_F32, 2, kd);
    args_.topk_ids =
        tailor_tensor_contiguous(ids_.data(), TAILOR_DTYPE_I32, 2, kd);
    args_.out = tailor_tensor_contiguous(y_.data(), TAILOR_DTYPE_F32, 2, hd);
    quant_.mode = TAILOR_MOE_SCALE_BLOCK;
    quant_.w13_scale =
        tailor_tensor_contiguous(w13_scale_.data(), TAILOR_DTYPE_F32, 3, s13);
    quant_.w2_scale =
        tailor_tensor_contiguous(w2_scale_.data(), TAILOR_DTYPE_F32, 3, s2);
  }
  void TearDown() override {
    tailor_moe_workspace_destroy(ws_);
    tailor_runtime_destroy(runtime_);
  }

  tailor_runtime* runtime_ = nullptr;
  tailor_moe_workspace* ws_ = nullptr;
  std::vector<float> x_ = std::vector<float>(kT * kH),
                     tw_ = std::vector<float>(kT * kK),
                     y_ = std::vector<float>(kT * kH, NAN),
                     w13_scale_ = std::vector<float>(kE * 2 * 2),
                     w2_scale_ = std::vector<float>(kE * 2 * 1);
  std::vector<uint8_t> w13_ = std::vector<uint8_t>(kE * 2 * kI * kH),
                       w2_ = std::vector<uint8_t>(kE * kH * kI);
  std::vector<int32_t> ids_ = std::vector<int32_t>(kT * kK);
  tailor_moe_experts_args args_ = {};
  tailor_moe_experts_quantization quant_ = {};
};

TEST_F(CApiFp8Test, ExpertsQuantizedEqualsTheCppCall) {
  ASSERT_EQ(tailor_moe_experts_quantized(runtime_, &args_, &quant_, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  absl::StatusOr<Runtime*> runtime = RuntimeOf("runtime", runtime_);
  ASSERT_TRUE(runtime.ok());
  std::vector<float> want(kT * kH, NAN);
  const auto ref = [](const void* p, DType d,
                      std::initializer_list<int64_t> s) {
    return TensorRef::Contiguous(p, d, s);
  };
  moe::Workspace ws;
  const absl::Status status = moe::Experts(
      **runtime,
      {.hidden = ref(x_.data(), DType::kF32, {kT, kH}),
       .w13 = ref(w13_.data(), DType::kF8E4M3, {kE, 2 * kI, kH}),
       .w2 = ref(w2_.data(), DType::kF8E4M3, {kE, kH, kI}),
       .quant = {.mode = moe::ScaleMode::kBlock,
                 .w13_scale = ref(w13_scale_.data(), DType::kF32, {kE, 2, 2}),
                 .w2_scale = ref(w2_scale_.data(), DType::kF32, {kE, 2, 1})},
       .topk_weights = ref(tw_.data(), DType::kF32, {kT, kK}),
       .topk_ids = ref(ids_.data(), DType::kI32, {kT, kK}),
       .out = ref(want.data(), DType::kF32, {kT, kH})},
      ws);
  ASSERT_TRUE(status.ok()) << status;
  for (int64_t i = 0; i < kT * kH; ++i) {
    ASSERT_FALSE(std::isnan(y_[i])) << i;
    ASSERT_EQ(y_[i], want[i]) << i;
  }
}

TEST_F(CApiFp8Test, BadValuesCarryTheCppMessage) {
  quant_.mode = 7;
  EXPECT_EQ(tailor_moe_experts_quantized(runtime_, &args_, &quant_, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tailor_last_error()),
            "quant.mode: not a tailor_moe_scale_mode value: 7");
  quant_.mode = TAILOR_MOE_SCALE_BLOCK;
  quant_.block_shape[0] = 64;
  quant_.block_shape[1] = 128;
  EXPECT_EQ(tailor_moe_experts_quantized(runtime_, &args_, &quant_, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tailor_last_error()),
            "quant.block_shape: only [128, 128] (the checkpoints' block) is "
            "supported, got [64, 128]");
  // Without quant, e4m3 weights are refused by the bf16 / f32 rules.
  EXPECT_EQ(tailor_moe_experts_quantized(runtime_, &args_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tailor_last_error()),
            "w13: dtype must be bf16 or f32, got f8e4m3");
}

}  // namespace
}  // namespace tailor::capi
