// Paged decode through the C ABI (libtailor_c.so), on the CPU backend:
// plan + run against a double-precision reference, the plan summary, and
// the argument checks with exact codes and messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tailor/c_api.h"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kBatch = 3, kQoHeads = 4, kKvHeads = 2, kDim = 64, kPage = 4,
                  kPages = 8, kMaxPages = 3;

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

class CApiDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(tailor_attention_decode_workspace_create(&ws_), TAILOR_STATUS_OK);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto* v : {&q_, &k_, &v_}) {
      for (uint16_t& x : *v) x = ToBf16(dist(rng));
    }
  }
  void TearDown() override {
    tailor_attention_decode_workspace_destroy(ws_);
    tailor_runtime_destroy(runtime_);
  }

  tailor_attention_decode_plan_args PlanArgs() {
    tailor_attention_decode_plan_args args = {};
    const int64_t dims[1] = {kBatch};
    args.seq_lens =
        tailor_tensor_contiguous(seq_lens_.data(), TAILOR_DTYPE_I32, 1, dims);
    args.page_size = kPage;
    args.num_qo_heads = kQoHeads;
    args.num_kv_heads = kKvHeads;
    args.head_dim = kDim;
    args.dtype = TAILOR_DTYPE_BF16;
    return args;
  }

  tailor_attention_decode_run_args RunArgs() {
    tailor_attention_decode_run_args args = {};
    const int64_t q_dims[3] = {kBatch, kQoHeads, kDim},
                  cache_dims[4] = {kPages, kPage, kKvHeads, kDim},
                  table_dims[2] = {kBatch, kMaxPages}, lens_dims[1] = {kBatch};
    args.q = tailor_tensor_contiguous(q_.data(), TAILOR_DTYPE_BF16, 3, q_dims);
    args.k_cache =
        tailor_tensor_contiguous(k_.data(), TAILOR_DTYPE_BF16, 4, cache_dims);
    args.v_cache =
        tailor_tensor_contiguous(v_.data(), TAILOR_DTYPE_BF16, 4, cache_dims);
    args.block_table = tailor_tensor_contiguous(
        block_table_.data(), TAILOR_DTYPE_I32, 2, table_dims);
    args.seq_lens = tailor_tensor_contiguous(seq_lens_.data(), TAILOR_DTYPE_I32,
                                             1, lens_dims);
    args.out =
        tailor_tensor_contiguous(out_.data(), TAILOR_DTYPE_BF16, 3, q_dims);
    return args;
  }

  // out[b, h, :] in double: softmax over the sequence's tokens.
  double Reference(int64_t b, int64_t h, int64_t d) const {
    const int64_t kv = h / (kQoHeads / kKvHeads);
    const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
    std::vector<double> scores;
    for (int64_t t = 0; t < seq_lens_[b]; ++t) {
      const int64_t page = block_table_[b * kMaxPages + t / kPage];
      const int64_t base = ((page * kPage + t % kPage) * kKvHeads + kv) * kDim;
      double s = 0;
      for (int64_t i = 0; i < kDim; ++i) {
        s += FromBf16(q_[(b * kQoHeads + h) * kDim + i]) *
             FromBf16(k_[base + i]);
      }
      scores.push_back(s * scale);
    }
    double max = -INFINITY, sum = 0, acc = 0;
    for (double s : scores) max = std::max(max, s);
    for (int64_t t = 0; t < seq_lens_[b]; ++t) {
      const int64_t page = block_table_[b * kMaxPages + t / kPage];
      const int64_t base = ((page * kPage + t % kPage) * kKvHeads + kv) * kDim;
      const double p = std::exp(scores[t] - max);
      sum += p;
      acc += p * FromBf16(v_[base + d]);
    }
    return sum == 0 ? 0 : acc / sum;
  }

  tailor_runtime* runtime_ = nullptr;
  tailor_attention_decode_workspace* ws_ = nullptr;
  std::vector<uint16_t> q_ = std::vector<uint16_t>(kBatch * kQoHeads * kDim),
                        k_ = std::vector<uint16_t>(kPages * kPage * kKvHeads *
                                                   kDim),
                        v_ = std::vector<uint16_t>(k_.size()),
                        out_ = std::vector<uint16_t>(q_.size());
  std::vector<int32_t> seq_lens_ = {5, 0, 9};
  std::vector<int32_t> block_table_ = {6, 1, 0, 0, 0, 0, 2, 7, 3};
};

TEST_F(CApiDecodeTest, PlanAndRunMatchTheReference) {
  tailor_attention_decode_limits limits = {};
  limits.max_batch = 4;
  limits.num_qo_heads = kQoHeads;
  limits.num_kv_heads = kKvHeads;
  limits.head_dim = kDim;
  limits.page_size = kPage;
  ASSERT_EQ(tailor_attention_decode_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  tailor_attention_decode_plan_args plan = PlanArgs();
  ASSERT_EQ(tailor_attention_decode_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  tailor_attention_decode_workspace_info info;
  ASSERT_EQ(tailor_attention_decode_workspace_get_info(ws_, &info),
            TAILOR_STATUS_OK);
  EXPECT_EQ(info.planned, 1);
  EXPECT_EQ(info.batch, kBatch);
  EXPECT_EQ(info.tokens, (5 + 0 + 9) * kKvHeads);

  std::vector<float> lse(kBatch * kQoHeads);
  const int64_t lse_dims[2] = {kBatch, kQoHeads};
  tailor_tensor lse_view =
      tailor_tensor_contiguous(lse.data(), TAILOR_DTYPE_F32, 2, lse_dims);
  tailor_attention_decode_run_args run = RunArgs();
  run.lse = &lse_view;
  ASSERT_EQ(tailor_attention_decode_run(runtime_, &run, ws_), TAILOR_STATUS_OK)
      << tailor_last_error();
  double worst = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kQoHeads; ++h) {
      for (int64_t d = 0; d < kDim; ++d) {
        worst = std::max(
            worst, std::abs(FromBf16(out_[(b * kQoHeads + h) * kDim + d]) -
                            Reference(b, h, d)));
      }
    }
  }
  EXPECT_LT(worst, 2e-2);
  EXPECT_EQ(lse[1 * kQoHeads], -INFINITY);  // a sequence of length 0
  EXPECT_EQ(
      tailor_attention_decode_workspace_take_errors(runtime_, ws_, nullptr),
      TAILOR_STATUS_OK);
  int64_t bytes = -1;
  EXPECT_EQ(tailor_attention_decode_workspace_bytes(runtime_, &limits, &bytes),
            TAILOR_STATUS_OK);
  EXPECT_EQ(bytes, 0);  // host backends keep their own buffers
}

// Regression (c_api_fuzz): a tailor_attention_decode_plan that the C layer
// rejected (seq_lens rank, dtype out of the enum, null args) left the
// previous plan in place, so RunDecode went on with stale lengths.
// attention::PlanDecode leaves a failed workspace not planned; the C entry
// now does too.
TEST_F(CApiDecodeTest, FailedPlanLeavesTheWorkspaceNotPlanned) {
  auto planned = [&] {
    tailor_attention_decode_workspace_info info = {};
    EXPECT_EQ(tailor_attention_decode_workspace_get_info(ws_, &info),
              TAILOR_STATUS_OK);
    return info.planned;
  };
  const char* const expected[] = {
      "seq_lens: rank must be in [0, 6], got -1",
      "dtype: not a tailor_dtype value (1..7), got 42",
      "args: must not be null"};
  for (int broken = 0; broken < 3; ++broken) {
    SCOPED_TRACE(expected[broken]);
    tailor_attention_decode_plan_args plan = PlanArgs();
    ASSERT_EQ(tailor_attention_decode_plan(runtime_, &plan, ws_),
              TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(planned(), 1);
    if (broken == 0) plan.seq_lens.rank = -1;
    if (broken == 1) plan.dtype = 42;
    EXPECT_EQ(tailor_attention_decode_plan(runtime_,
                                           broken == 2 ? nullptr : &plan, ws_),
              TAILOR_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(tailor_last_error(), expected[broken]);
    EXPECT_EQ(planned(), 0);
  }
  tailor_attention_decode_run_args run = RunArgs();
  EXPECT_EQ(tailor_attention_decode_run(runtime_, &run, ws_),
            TAILOR_STATUS_FAILED_PRECONDITION);
  EXPECT_STREQ(tailor_last_error(),
               "ws: not planned; call attention::PlanDecode first");
}

// Regression: misaligned host seq_lens were read as int32_t by PlanDecode
// (UBSan: load of misaligned address); now InvalidArgument.
TEST_F(CApiDecodeTest, MisalignedSeqLensAreRejected) {
  alignas(8) unsigned char bytes[4 * kBatch + 8] = {};
  tailor_attention_decode_plan_args plan = PlanArgs();
  const int64_t dims[1] = {kBatch};
  plan.seq_lens =
      tailor_tensor_contiguous(bytes + 2, TAILOR_DTYPE_I32, 1, dims);
  EXPECT_EQ(tailor_attention_decode_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(tailor_last_error(),
              StartsWith("seq_lens: data must be aligned to its element size"));
}

TEST_F(CApiDecodeTest, Errors) {
  tailor_attention_decode_run_args run = RunArgs();
  EXPECT_EQ(tailor_attention_decode_run(runtime_, &run, ws_),
            TAILOR_STATUS_FAILED_PRECONDITION);
  EXPECT_STREQ(tailor_last_error(),
               "ws: not planned; call attention::PlanDecode first");
  tailor_attention_decode_plan_args plan = PlanArgs();
  plan.dtype = 42;
  EXPECT_EQ(tailor_attention_decode_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "dtype: not a tailor_dtype value (1..7), got 42");
  plan = PlanArgs();
  plan.seq_lens.rank = -1;
  EXPECT_EQ(tailor_attention_decode_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "seq_lens: rank must be in [0, 6], got -1");
  EXPECT_EQ(tailor_attention_decode_plan(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "args: must not be null");
  EXPECT_EQ(tailor_attention_decode_plan(runtime_, &plan, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "ws: must not be null");
  tailor_attention_decode_limits limits = {};
  EXPECT_EQ(tailor_attention_decode_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(tailor_last_error(), HasSubstr("limits."));
  char memory[256];
  EXPECT_EQ(tailor_attention_decode_workspace_bind(runtime_, &limits, memory,
                                                   256, ws_, nullptr),
            TAILOR_STATUS_UNIMPLEMENTED);  // host backends
}

}  // namespace
