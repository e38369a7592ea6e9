// The C ABI's deprecated names (end of tailor/c_api.h) against the names
// that replaced them, through libtailor_c.so: every old entry gives the new
// entry's code and message for the same arguments, and the old types are
// the new ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "tailor/c_api.h"

// This file calls the deprecated names on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

// What one call returned: its code and tailor_last_error().
struct Outcome {
  tailor_status code;
  std::string message;
  bool operator==(const Outcome& o) const {
    return code == o.code && message == o.message;
  }
};

Outcome Of(tailor_status code) { return {code, tailor_last_error()}; }

void PrintTo(const Outcome& o, std::ostream* os) {
  *os << tailor_status_name(o.code) << ": \"" << o.message << "\"";
}

static_assert(
    std::is_same_v<tailor_decode_workspace, tailor_attention_decode_workspace>);
static_assert(
    std::is_same_v<tailor_decode_limits, tailor_attention_decode_limits>);
static_assert(std::is_same_v<tailor_decode_workspace_info,
                             tailor_attention_decode_workspace_info>);
static_assert(
    std::is_same_v<tailor_plan_decode_args, tailor_attention_decode_plan_args>);
static_assert(
    std::is_same_v<tailor_run_decode_args, tailor_attention_decode_run_args>);

class CApiDeprecatedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << tailor_last_error();
  }
  void TearDown() override { tailor_runtime_destroy(runtime_); }

  tailor_runtime* runtime_ = nullptr;
};

TEST_F(CApiDeprecatedTest, MoeWorkspaceEntries) {
  tailor_moe_workspace* ws = nullptr;
  ASSERT_EQ(tailor_moe_workspace_create(&ws), TAILOR_STATUS_OK);
  tailor_moe_workspace_limits limits = {};
  limits.max_tokens = 16;
  limits.topk = 2;
  limits.num_experts = 4;
  EXPECT_EQ(Of(tailor_moe_reserve_workspace(runtime_, &limits, ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  EXPECT_EQ(Of(tailor_moe_workspace_reserve(runtime_, &limits, ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  limits.topk = 0;
  const Outcome bad_limits = {TAILOR_STATUS_INVALID_ARGUMENT,
                              "limits.topk: must be in [1, 64], got 0"};
  EXPECT_EQ(Of(tailor_moe_reserve_workspace(runtime_, &limits, ws)),
            bad_limits);
  EXPECT_EQ(Of(tailor_moe_workspace_reserve(runtime_, &limits, ws)),
            bad_limits);

  limits.topk = 2;
  char memory[256];
  const Outcome host_bind = {
      TAILOR_STATUS_UNIMPLEMENTED,
      "moe.bind: the cpu backend keeps workspaces in host memory; use "
      "moe::ReserveWorkspace"};
  EXPECT_EQ(Of(tailor_moe_bind_workspace(runtime_, &limits, memory, 256, ws,
                                         nullptr)),
            host_bind);
  EXPECT_EQ(Of(tailor_moe_workspace_bind(runtime_, &limits, memory, 256, ws,
                                         nullptr)),
            host_bind);

  EXPECT_EQ(Of(tailor_moe_take_routing_errors(runtime_, ws, nullptr)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  EXPECT_EQ(Of(tailor_moe_workspace_take_errors(runtime_, ws, nullptr)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  const Outcome null_ws = {TAILOR_STATUS_INVALID_ARGUMENT,
                           "ws: must not be null"};
  EXPECT_EQ(Of(tailor_moe_take_routing_errors(runtime_, nullptr, nullptr)),
            null_ws);
  EXPECT_EQ(Of(tailor_moe_workspace_take_errors(runtime_, nullptr, nullptr)),
            null_ws);
  tailor_moe_workspace_destroy(ws);
}

constexpr int64_t kBatch = 2, kHeads = 2, kDim = 64, kPage = 4, kPages = 4,
                  kMaxPages = 2;

// One decode step's buffers (bf16 as raw 16-bit words; the values do not
// matter, both names must give the same bits).
struct DecodeData {
  std::vector<uint16_t> q = std::vector<uint16_t>(kBatch * kHeads * kDim),
                        cache = std::vector<uint16_t>(kPages * kPage * kHeads *
                                                      kDim),
                        out = std::vector<uint16_t>(q.size());
  std::vector<int32_t> seq_lens = {5, 3};
  std::vector<int32_t> block_table = {2, 0, 3, 1};

  DecodeData() {
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0x3c00 + (i * 7) % 200;
    for (size_t i = 0; i < cache.size(); ++i) {
      cache[i] = 0x3c00 + (i * 13) % 300;
    }
  }

  tailor_plan_decode_args PlanArgs() {
    tailor_plan_decode_args args = {};
    const int64_t dims[1] = {kBatch};
    args.seq_lens =
        tailor_tensor_contiguous(seq_lens.data(), TAILOR_DTYPE_I32, 1, dims);
    args.page_size = kPage;
    args.num_qo_heads = kHeads;
    args.num_kv_heads = kHeads;
    args.head_dim = kDim;
    return args;
  }

  tailor_run_decode_args RunArgs() {
    tailor_run_decode_args args = {};
    const int64_t q_dims[3] = {kBatch, kHeads, kDim},
                  cache_dims[4] = {kPages, kPage, kHeads, kDim},
                  table_dims[2] = {kBatch, kMaxPages}, lens_dims[1] = {kBatch};
    args.q = tailor_tensor_contiguous(q.data(), TAILOR_DTYPE_BF16, 3, q_dims);
    args.k_cache = tailor_tensor_contiguous(cache.data(), TAILOR_DTYPE_BF16, 4,
                                            cache_dims);
    args.v_cache = args.k_cache;
    args.block_table = tailor_tensor_contiguous(
        block_table.data(), TAILOR_DTYPE_I32, 2, table_dims);
    args.seq_lens = tailor_tensor_contiguous(seq_lens.data(), TAILOR_DTYPE_I32,
                                             1, lens_dims);
    args.out =
        tailor_tensor_contiguous(out.data(), TAILOR_DTYPE_BF16, 3, q_dims);
    return args;
  }
};

TEST_F(CApiDeprecatedTest, DecodeWorkspaceEntries) {
  tailor_decode_workspace* ws = nullptr;  // the old names end to end
  ASSERT_EQ(tailor_decode_workspace_create(&ws), TAILOR_STATUS_OK);
  tailor_decode_limits limits = {};
  limits.max_batch = kBatch;
  limits.num_qo_heads = kHeads;
  limits.num_kv_heads = kHeads;
  limits.head_dim = kDim;
  limits.page_size = kPage;
  EXPECT_EQ(
      Of(tailor_attention_reserve_decode_workspace(runtime_, &limits, ws)),
      (Outcome{TAILOR_STATUS_OK, ""}));
  EXPECT_EQ(
      Of(tailor_attention_decode_workspace_reserve(runtime_, &limits, ws)),
      (Outcome{TAILOR_STATUS_OK, ""}));
  limits.head_dim = 96;
  const Outcome bad_limits = {
      TAILOR_STATUS_INVALID_ARGUMENT,
      "limits.head_dim: must be 64, 128 or 256, got 96"};
  EXPECT_EQ(
      Of(tailor_attention_reserve_decode_workspace(runtime_, &limits, ws)),
      bad_limits);
  EXPECT_EQ(
      Of(tailor_attention_decode_workspace_reserve(runtime_, &limits, ws)),
      bad_limits);

  limits.head_dim = kDim;
  char memory[256];
  const Outcome host_bind = {
      TAILOR_STATUS_UNIMPLEMENTED,
      "attention.bind_decode: the cpu backend keeps decode workspaces in "
      "host memory; use attention::ReserveDecodeWorkspace"};
  EXPECT_EQ(Of(tailor_attention_bind_decode_workspace(runtime_, &limits, memory,
                                                      256, ws, nullptr)),
            host_bind);
  EXPECT_EQ(Of(tailor_attention_decode_workspace_bind(runtime_, &limits, memory,
                                                      256, ws, nullptr)),
            host_bind);

  const Outcome null_ws = {TAILOR_STATUS_INVALID_ARGUMENT,
                           "ws: must not be null"};
  EXPECT_EQ(Of(tailor_attention_take_decode_errors(runtime_, nullptr, nullptr)),
            null_ws);
  EXPECT_EQ(Of(tailor_attention_decode_workspace_take_errors(runtime_, nullptr,
                                                             nullptr)),
            null_ws);
  EXPECT_EQ(Of(tailor_attention_take_decode_errors(runtime_, ws, nullptr)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  tailor_decode_workspace_destroy(ws);
}

TEST_F(CApiDeprecatedTest, DecodePlanAndRunGiveTheNewEntriesBits) {
  tailor_decode_workspace* old_ws = nullptr;
  tailor_attention_decode_workspace* new_ws = nullptr;
  ASSERT_EQ(tailor_decode_workspace_create(&old_ws), TAILOR_STATUS_OK);
  ASSERT_EQ(tailor_attention_decode_workspace_create(&new_ws),
            TAILOR_STATUS_OK);
  DecodeData old_data, new_data;
  tailor_plan_decode_args old_plan = old_data.PlanArgs();
  tailor_attention_decode_plan_args new_plan = new_data.PlanArgs();
  ASSERT_EQ(Of(tailor_attention_plan_decode(runtime_, &old_plan, old_ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  ASSERT_EQ(Of(tailor_attention_decode_plan(runtime_, &new_plan, new_ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  tailor_decode_workspace_info old_info = {};
  tailor_attention_decode_workspace_info new_info = {};
  ASSERT_EQ(tailor_decode_workspace_get_info(old_ws, &old_info),
            TAILOR_STATUS_OK);
  ASSERT_EQ(tailor_attention_decode_workspace_get_info(new_ws, &new_info),
            TAILOR_STATUS_OK);
  EXPECT_EQ(old_info.planned, 1);
  EXPECT_EQ(old_info.batch, kBatch);
  EXPECT_EQ(old_info.tokens, new_info.tokens);
  EXPECT_EQ(old_info.items, new_info.items);

  tailor_run_decode_args old_run = old_data.RunArgs();
  tailor_attention_decode_run_args new_run = new_data.RunArgs();
  ASSERT_EQ(Of(tailor_attention_run_decode(runtime_, &old_run, old_ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  ASSERT_EQ(Of(tailor_attention_decode_run(runtime_, &new_run, new_ws)),
            (Outcome{TAILOR_STATUS_OK, ""}));
  EXPECT_EQ(old_data.out, new_data.out);
  EXPECT_NE(old_data.out, std::vector<uint16_t>(old_data.out.size(), 0));

  const Outcome null_args = {TAILOR_STATUS_INVALID_ARGUMENT,
                             "args: must not be null"};
  EXPECT_EQ(Of(tailor_attention_plan_decode(runtime_, nullptr, old_ws)),
            null_args);
  EXPECT_EQ(Of(tailor_attention_decode_plan(runtime_, nullptr, new_ws)),
            null_args);
  const Outcome not_planned = {
      TAILOR_STATUS_FAILED_PRECONDITION,
      "ws: not planned; call attention::PlanDecode first"};
  EXPECT_EQ(Of(tailor_attention_run_decode(runtime_, &old_run, old_ws)),
            not_planned);
  EXPECT_EQ(Of(tailor_attention_decode_run(runtime_, &new_run, new_ws)),
            not_planned);
  const Outcome null_out = {TAILOR_STATUS_INVALID_ARGUMENT,
                            "out: must not be null"};
  EXPECT_EQ(Of(tailor_decode_workspace_get_info(old_ws, nullptr)), null_out);
  EXPECT_EQ(Of(tailor_attention_decode_workspace_get_info(new_ws, nullptr)),
            null_out);
  tailor_decode_workspace_destroy(old_ws);
  tailor_attention_decode_workspace_destroy(new_ws);
  tailor_decode_workspace_destroy(nullptr);  // a no-op, as the new name
}

}  // namespace
