// The C ABI's GEMM records against the C++ PlanSummary they convert
// (internal: the test reads the workspace behind the C handle): every field
// of every record equal, the features text as the backend listed it, and a
// kernel name or features text longer than its C field cut, not overflowed.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "api/internals.h"
#include "capi/c_api_internal.h"
#include "ops/moe/workspace.h"

namespace tailor::capi {
namespace {

constexpr int64_t kT = 5, kH = 64, kI = 32, kE = 3, kK = 2;

class CApiMoePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(tailor_moe_workspace_create(&ws_), TAILOR_STATUS_OK);
  }
  void TearDown() override {
    tailor_moe_workspace_destroy(ws_);
    tailor_runtime_destroy(runtime_);
  }

  // One f32 Experts step through C: token t goes to experts t % E and
  // (t + 1) % E.
  void RunExperts() {
    for (int64_t t = 0; t < kT; ++t) {
      ids_[t * kK] = static_cast<int32_t>(t % kE);
      ids_[t * kK + 1] = static_cast<int32_t>((t + 1) % kE);
    }
    const int64_t hd[2] = {kT, kH}, w13d[3] = {kE, 2 * kI, kH},
                  w2d[3] = {kE, kH, kI}, kd[2] = {kT, kK};
    tailor_moe_experts_args args = {};
    args.hidden = tailor_tensor_contiguous(x_.data(), TAILOR_DTYPE_F32, 2, hd);
    args.w13 = tailor_tensor_contiguous(w13_.data(), TAILOR_DTYPE_F32, 3, w13d);
    args.w2 = tailor_tensor_contiguous(w2_.data(), TAILOR_DTYPE_F32, 3, w2d);
    args.topk_weights =
        tailor_tensor_contiguous(tw_.data(), TAILOR_DTYPE_F32, 2, kd);
    args.topk_ids =
        tailor_tensor_contiguous(ids_.data(), TAILOR_DTYPE_I32, 2, kd);
    args.out = tailor_tensor_contiguous(y_.data(), TAILOR_DTYPE_F32, 2, hd);
    ASSERT_EQ(tailor_moe_experts(runtime_, &args, ws_), TAILOR_STATUS_OK)
        << tailor_last_error();
  }

  tailor_runtime* runtime_ = nullptr;
  tailor_moe_workspace* ws_ = nullptr;
  std::vector<float> x_ = std::vector<float>(kT * kH, 0.5f),
                     w13_ = std::vector<float>(kE * 2 * kI * kH, 0.25f),
                     w2_ = std::vector<float>(kE * kH * kI, 0.25f),
                     tw_ = std::vector<float>(kT * kK, 0.5f),
                     y_ = std::vector<float>(kT * kH);
  std::vector<int32_t> ids_ = std::vector<int32_t>(kT * kK);
};

TEST_F(CApiMoePlanTest, RecordsEqualThePlanSummary) {
  RunExperts();
  const moe::PlanSummary plan = ws_->workspace.plan();
  ASSERT_EQ(plan.gemms.size(), 2u);
  int32_t count = -1;
  ASSERT_EQ(tailor_moe_workspace_gemm_count(ws_, &count), TAILOR_STATUS_OK);
  ASSERT_EQ(count, 2);
  for (int32_t i = 0; i < count; ++i) {
    SCOPED_TRACE(plan.gemms[i].ToString());
    const moe::GemmChoice& want = plan.gemms[i];
    tailor_moe_gemm_choice got;
    std::memset(&got, 0x7f, sizeof(got));  // every byte must be written
    ASSERT_EQ(tailor_moe_workspace_get_gemm(ws_, i, &got), TAILOR_STATUS_OK);
    EXPECT_EQ(std::string(got.kernel), want.kernel);
    EXPECT_EQ(got.n, want.n);
    EXPECT_EQ(got.k, want.k);
    EXPECT_EQ(got.cta_rows, want.cta_rows);
    EXPECT_EQ(got.cta_cols, want.cta_cols);
    EXPECT_EQ(got.k_tile, want.k_tile);
    EXPECT_EQ(got.stages, want.stages);
    EXPECT_EQ(got.ctas, want.ctas);
    EXPECT_EQ(std::string(got.features), want.features);
    EXPECT_EQ(got.features_cut, 0);
    EXPECT_EQ(want.features, "");  // the cpu kernel has no options
  }
}

// Every field lands in its own C field (a record with a distinct value in
// each, which no CPU launch makes: its pipeline fields are 0), the features
// print as the backend listed them, and a kernel name of 64 bytes or more
// (no backend has one) is cut to its first 63 bytes and a NUL.
TEST_F(CApiMoePlanTest, EveryFieldConvertsAndLongNamesAreCut) {
  RunExperts();
  static const std::string kLong(100, 'x');
  tailor::internal::WorkspaceImplOf(ws_->workspace)->RecordGemm(
      {.kernel = kLong.c_str(),
       .n = 7,
       .k = 9,
       .cta_rows = 11,
       .cta_cols = 13,
       .k_tile = 17,
       .stages = 19,
       .ctas = 23,
       .features = {{.key = "tma_store", .value = 1},
                    {.key = "cluster", .value = 2},
                    {.key = "expert_groups", .value = 2, .name = "back"}}});
  tailor_moe_gemm_choice got;
  std::memset(&got, 0x7f, sizeof(got));
  ASSERT_EQ(tailor_moe_workspace_get_gemm(ws_, 1, &got), TAILOR_STATUS_OK)
      << tailor_last_error();
  EXPECT_EQ(got.kernel[TAILOR_MOE_GEMM_KERNEL_SIZE - 1], '\0');
  EXPECT_EQ(std::string(got.kernel), kLong.substr(0, 63));
  EXPECT_EQ(got.n, 7);
  EXPECT_EQ(got.k, 9);
  EXPECT_EQ(got.cta_rows, 11);
  EXPECT_EQ(got.cta_cols, 13);
  EXPECT_EQ(got.k_tile, 17);
  EXPECT_EQ(got.stages, 19);
  EXPECT_EQ(got.ctas, 23);
  EXPECT_STREQ(got.features, "tma_store=1,cluster=2,expert_groups=back");
  EXPECT_EQ(got.features_cut, 0);
  const moe::GemmChoice cpp = ws_->workspace.plan().gemms[1];
  EXPECT_EQ(cpp.features, "tma_store=1,cluster=2,expert_groups=back");
  EXPECT_EQ(cpp.Feature("cluster"), "2");
  EXPECT_EQ(cpp.Feature("expert_groups"), "back");
  EXPECT_EQ(cpp.Feature("split_k"), std::nullopt);  // not listed
  EXPECT_EQ(cpp.Feature("cluste"), std::nullopt);   // whole keys only
}

// A features text longer than the C field keeps its first whole entries:
// six entries of 42 bytes need 257 bytes, five fit.
TEST_F(CApiMoePlanTest, LongFeaturesKeepTheirFirstWholeEntries) {
  RunExperts();
  static const std::vector<std::string> kKeys = {
      std::string(40, 'a'), std::string(40, 'b'), std::string(40, 'c'),
      std::string(40, 'd'), std::string(40, 'e'), std::string(40, 'f')};
  internal::GemmConfig config = {.kernel = "cuda.sm90_tma_wgmma"};
  for (size_t i = 0; i < kKeys.size(); ++i) {
    config.features[i] = {.key = kKeys[i].c_str(), .value = 1};
  }
  tailor::internal::WorkspaceImplOf(ws_->workspace)->RecordGemm(config);
  const std::string full = ws_->workspace.plan().gemms[1].features;
  ASSERT_EQ(full.size(), 6 * 42 + 5);
  tailor_moe_gemm_choice got;
  std::memset(&got, 0x7f, sizeof(got));
  ASSERT_EQ(tailor_moe_workspace_get_gemm(ws_, 1, &got), TAILOR_STATUS_OK);
  EXPECT_EQ(std::string(got.features), full.substr(0, 5 * 42 + 4));
  EXPECT_EQ(got.features[5 * 42 + 4], '\0');
  EXPECT_EQ(got.features_cut, 1);
}

}  // namespace
}  // namespace tailor::capi
