// Ragged attention through the C ABI (libtailor_c.so), on the CPU backend:
// both metadata forms (vLLM's block table, FlashInfer's kv_indices +
// page_indptr) against the fp64 reference with poisoned outputs, every mask,
// the plan summary, the workspace verbs, and the argument checks with exact
// codes and messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "ops/attention/ragged_test_util.h"
#include "tailor/c_api.h"

namespace tailor::attention::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint16_t kPoison = 0x7fc3;
constexpr float kPoisonLse = 12345.0f;

// The mixed step of the C++ op test: a prefill chunk over a cached prefix,
// a new prompt, decode rows, speculative rows of 4, an empty sequence.
RaggedCase MixedStep(uint64_t seed) {
  RaggedCase c;
  c.q_lens = {40, 1, 1, 4, 0, 33, 1};
  c.kv_lens = {300, 100, 33, 60, 9, 33, 77};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.shared_prefix_pages = 2;
  c.padding_rows = 2;
  c.seed = seed;
  return c;
}

tailor_tensor Vector(std::vector<int32_t>& v, int64_t n) {
  return tailor_tensor_contiguous(v.empty() ? nullptr : v.data(),
                                  TAILOR_DTYPE_I32, 1, &n);
}

int32_t CDType(DType dtype) {
  return dtype == DType::kF16 ? TAILOR_DTYPE_F16 : TAILOR_DTYPE_BF16;
}

class CApiRaggedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tailor_runtime_options options = {};
    options.backend = TAILOR_BACKEND_CPU;
    options.log_level = "error";
    options.cache_dir = TAILOR_CAPI_TEST_CACHE_DIR;
    ASSERT_EQ(tailor_runtime_create(&options, &runtime_), TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(tailor_attention_ragged_workspace_create(&ws_), TAILOR_STATUS_OK);
    Build(MixedStep(11));
  }
  void TearDown() override {
    tailor_attention_ragged_workspace_destroy(ws_);
    tailor_runtime_destroy(runtime_);
  }

  void Build(const RaggedCase& c) {
    p_ = BuildRaggedBatch(c);
    out_.assign(std::max<int64_t>(c.rows() * c.num_qo_heads * c.head_dim, 1),
                kPoison);
    lse_.assign(std::max<int64_t>(c.rows() * c.num_qo_heads, 1), kPoisonLse);
  }

  template <typename Args>
  void FillLayer(Args& args) {
    const RaggedCase& c = p_.c;
    args.page_size = c.page_size;
    args.num_qo_heads = c.num_qo_heads;
    args.num_kv_heads = c.num_kv_heads;
    args.head_dim = c.head_dim;
    args.dtype = CDType(c.dtype);
    args.mask = !c.causal            ? TAILOR_ATTENTION_MASK_NONE
                : c.window_left >= 0 ? TAILOR_ATTENTION_MASK_WINDOW
                                     : TAILOR_ATTENTION_MASK_CAUSAL;
    args.window_left = c.window_left >= 0 ? c.window_left : 0;
  }

  tailor_attention_ragged_plan_args PlanArgs() {
    tailor_attention_ragged_plan_args args = {};
    args.q_indptr = Vector(p_.q_indptr, p_.c.batch() + 1);
    args.kv_lens = Vector(p_.kv_lens, p_.c.batch());
    FillLayer(args);
    return args;
  }

  tailor_attention_ragged_plan_flashinfer_args FlashInferPlanArgs() {
    tailor_attention_ragged_plan_flashinfer_args args = {};
    args.qo_indptr = Vector(p_.q_indptr, p_.c.batch() + 1);
    args.kv_indptr = Vector(p_.page_indptr, p_.c.batch() + 1);
    args.kv_last_page_len = Vector(p_.last_page_len, p_.c.batch());
    FillLayer(args);
    return args;
  }

  tailor_tensor Cache(std::vector<uint16_t>& data) {
    const RaggedCase& c = p_.c;
    const int64_t dims[4] = {p_.num_pages, c.page_size, c.num_kv_heads,
                             c.head_dim};
    tailor_tensor t =
        tailor_tensor_contiguous(data.data(), CDType(c.dtype), 4, dims);
    for (int i = 0; i < 4; ++i) t.strides[i] = p_.cache_strides[i];
    return t;
  }

  // vLLM's form: block_table [B, max_pages], kv_lens on the "device".
  tailor_attention_ragged_run_args RunArgs() {
    const RaggedCase& c = p_.c;
    const int64_t q_dims[3] = {c.rows(), c.num_qo_heads, c.head_dim},
                  table_dims[2] = {c.batch(), p_.max_pages},
                  lse_dims[2] = {c.rows(), c.num_qo_heads};
    tailor_attention_ragged_run_args args = {};
    args.q = tailor_tensor_contiguous(p_.q.data(), CDType(c.dtype), 3, q_dims);
    args.k_cache = Cache(p_.k);
    args.v_cache = Cache(p_.v);
    args.block_table = tailor_tensor_contiguous(
        p_.block_table.data(), TAILOR_DTYPE_I32, 2, table_dims);
    kv_lens_view_ = Vector(p_.kv_lens, c.batch());
    args.kv_lens = &kv_lens_view_;
    args.out =
        tailor_tensor_contiguous(out_.data(), CDType(c.dtype), 3, q_dims);
    lse_view_ =
        tailor_tensor_contiguous(lse_.data(), TAILOR_DTYPE_F32, 2, lse_dims);
    args.lse = &lse_view_;
    args.logits_soft_cap = c.soft_cap;
    return args;
  }

  // FlashInfer's form: kv_indices [nnz] with page_indptr [B + 1].
  tailor_attention_ragged_run_args FlashInferRunArgs() {
    tailor_attention_ragged_run_args args = RunArgs();
    const int64_t nnz = static_cast<int64_t>(p_.kv_indices.size());
    args.block_table = tailor_tensor_contiguous(
        nnz == 0 ? p_.page_indptr.data() : p_.kv_indices.data(),
        TAILOR_DTYPE_I32, 1, &nnz);
    page_indptr_view_ = Vector(p_.page_indptr, p_.c.batch() + 1);
    args.page_indptr = &page_indptr_view_;
    args.kv_lens = nullptr;
    return args;
  }

  void ExpectMatchesReference() {
    // (not RaggedCase::ToString: it needs libtailor's DTypeName)
    SCOPED_TRACE(::testing::Message()
                 << "causal=" << p_.c.causal << " window=" << p_.c.window_left
                 << " cap=" << p_.c.soft_cap << " page=" << p_.c.page_size);
    const Expected e =
        RaggedReference(p_, 1.0 / std::sqrt(double(p_.c.head_dim)));
    const Errors err = CompareRagged(p_, e, out_, &lse_);
    EXPECT_LE(err.out_rel, 1e-2) << err.worst;
    EXPECT_LE(err.lse_abs, 1e-3);
    const RaggedCase& c = p_.c;
    const int64_t row = c.num_qo_heads * c.head_dim;
    for (int64_t i = c.total_q() * row; i < c.rows() * row; ++i) {
      ASSERT_EQ(out_[i], kPoison) << "padding element " << i << " written";
    }
    for (int64_t i = c.total_q() * c.num_qo_heads;
         i < c.rows() * c.num_qo_heads; ++i) {
      ASSERT_EQ(lse_[i], kPoisonLse) << "padding lse " << i << " written";
    }
  }

  tailor_attention_ragged_workspace_info Info() {
    tailor_attention_ragged_workspace_info info = {};
    EXPECT_EQ(tailor_attention_ragged_workspace_get_info(ws_, &info),
              TAILOR_STATUS_OK);
    return info;
  }

  tailor_runtime* runtime_ = nullptr;
  tailor_attention_ragged_workspace* ws_ = nullptr;
  RaggedBatch p_;
  std::vector<uint16_t> out_;
  std::vector<float> lse_;
  tailor_tensor kv_lens_view_ = {}, page_indptr_view_ = {}, lse_view_ = {};
};

TEST_F(CApiRaggedTest, VllmMetadataMatchesTheReference) {
  tailor_attention_ragged_limits limits = {};
  limits.max_batch = 8;
  limits.max_tokens = 128;
  limits.num_qo_heads = 8;
  limits.num_kv_heads = 2;
  limits.head_dim = 64;
  limits.page_size = 16;
  ASSERT_EQ(tailor_attention_ragged_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  const tailor_attention_ragged_plan_args plan = PlanArgs();
  ASSERT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  const tailor_attention_ragged_workspace_info info = Info();
  EXPECT_EQ(info.planned, 1);
  EXPECT_EQ(info.batch, 7);
  EXPECT_EQ(info.total_q, 80);
  EXPECT_EQ(info.head_pack, 4);  // the CPU backend packs the group of 4
  EXPECT_GT(info.tiles, 0);
  EXPECT_GT(info.capacity_bytes, 0);
  // The CPU backend runs the step's three q_len = 1 rows as query tiles:
  // none on a decode kernel (CUDA: python/tests/gpu/check_ragged_torch_cuda).
  tailor_attention_ragged_decode_info decode = {-1, -1};
  ASSERT_EQ(tailor_attention_ragged_workspace_get_decode_info(ws_, &decode),
            TAILOR_STATUS_OK);
  EXPECT_EQ(decode.seqs, 0);
  EXPECT_EQ(decode.items, 0);
  const tailor_attention_ragged_run_args run = RunArgs();
  ASSERT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_), TAILOR_STATUS_OK)
      << tailor_last_error();
  ExpectMatchesReference();
  EXPECT_EQ(
      tailor_attention_ragged_workspace_take_errors(runtime_, ws_, nullptr),
      TAILOR_STATUS_OK);
}

TEST_F(CApiRaggedTest, FlashInferMetadataEveryMask) {
  for (int variant = 0; variant < 3; ++variant) {
    RaggedCase c = MixedStep(20 + variant);
    c.layout = KvLayout::kHnd;
    c.page_size = 5;
    if (variant == 0) c.window_left = 7;
    if (variant == 1) {
      c.causal = false;
      c.dtype = DType::kF16;
    }
    if (variant == 2) c.soft_cap = 5.0f;
    Build(c);
    const tailor_attention_ragged_plan_flashinfer_args plan =
        FlashInferPlanArgs();
    ASSERT_EQ(tailor_attention_ragged_plan_flashinfer(runtime_, &plan, ws_),
              TAILOR_STATUS_OK)
        << tailor_last_error();
    const tailor_attention_ragged_run_args run = FlashInferRunArgs();
    ASSERT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
              TAILOR_STATUS_OK)
        << tailor_last_error();
    ExpectMatchesReference();
  }
}

TEST_F(CApiRaggedTest, WorkspaceVerbsOnTheHost) {
  tailor_attention_ragged_limits limits = {};
  limits.max_batch = 4;
  limits.max_tokens = 64;
  limits.num_qo_heads = 8;
  limits.num_kv_heads = 2;
  limits.head_dim = 128;
  limits.page_size = 16;
  int64_t bytes = -1;
  EXPECT_EQ(tailor_attention_ragged_workspace_bytes(runtime_, &limits, &bytes),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  EXPECT_EQ(bytes, 0);  // host backends keep their own buffers
  alignas(256) static char memory[256];
  EXPECT_EQ(tailor_attention_ragged_workspace_bind(runtime_, &limits, memory,
                                                   256, ws_, nullptr),
            TAILOR_STATUS_UNIMPLEMENTED);
  EXPECT_STREQ(tailor_last_error(),
               "attention.bind_ragged: the cpu backend keeps ragged workspaces "
               "in host memory; use attention::ReserveRaggedWorkspace");
  limits.mask = 9;
  EXPECT_EQ(tailor_attention_ragged_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "limits.mask: not a tailor_attention_mask value (0..2), got 9");
  limits.mask = TAILOR_ATTENTION_MASK_CAUSAL;
  limits.window_left = 5;
  EXPECT_EQ(tailor_attention_ragged_workspace_bytes(runtime_, &limits, &bytes),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "limits.window_left: must be 0 unless mask is "
               "TAILOR_ATTENTION_MASK_WINDOW, got 5");
  limits.mask = TAILOR_ATTENTION_MASK_WINDOW;
  limits.window_left = -1;
  EXPECT_EQ(tailor_attention_ragged_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "limits.window_left: must be >= 0 with "
               "TAILOR_ATTENTION_MASK_WINDOW, got -1");
  limits.window_left = 0;
  limits.max_tokens = -3;
  EXPECT_EQ(tailor_attention_ragged_workspace_reserve(runtime_, &limits, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "limits.max_tokens: must be in [0, 1073741824], got -3");
  EXPECT_EQ(tailor_attention_ragged_workspace_reserve(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "limits: must not be null");
  EXPECT_EQ(tailor_attention_ragged_workspace_create(nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "out: must not be null");
  tailor_attention_ragged_workspace_destroy(nullptr);  // a no-op
}

// As the C++ fronts: a plan the C layer rejects (before PlanRagged ran)
// leaves the workspace not planned, so a run fails instead of using the
// earlier plan.
TEST_F(CApiRaggedTest, FailedPlanLeavesTheWorkspaceNotPlanned) {
  const char* const expected[] = {
      "q_indptr: rank must be in [0, 6], got -1",
      "dtype: not a tailor_dtype value (1..7), got 42",
      "mask: not a tailor_attention_mask value (0..2), got -1",
      "args: must not be null"};
  for (int broken = 0; broken < 4; ++broken) {
    SCOPED_TRACE(expected[broken]);
    tailor_attention_ragged_plan_args plan = PlanArgs();
    ASSERT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
              TAILOR_STATUS_OK)
        << tailor_last_error();
    ASSERT_EQ(Info().planned, 1);
    if (broken == 0) plan.q_indptr.rank = -1;
    if (broken == 1) plan.dtype = 42;
    if (broken == 2) plan.mask = -1;
    EXPECT_EQ(tailor_attention_ragged_plan(runtime_,
                                           broken == 3 ? nullptr : &plan, ws_),
              TAILOR_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(tailor_last_error(), expected[broken]);
    EXPECT_EQ(Info().planned, 0);
  }
  tailor_attention_ragged_plan_flashinfer_args fi = FlashInferPlanArgs();
  ASSERT_EQ(tailor_attention_ragged_plan_flashinfer(runtime_, &fi, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  EXPECT_EQ(tailor_attention_ragged_plan_flashinfer(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Info().planned, 0);
  const tailor_attention_ragged_run_args run = RunArgs();
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
            TAILOR_STATUS_FAILED_PRECONDITION);
  EXPECT_STREQ(tailor_last_error(),
               "ws: not planned; call attention::PlanRagged first");
  for (uint16_t x : out_) ASSERT_EQ(x, kPoison);
}

TEST_F(CApiRaggedTest, Errors) {
  tailor_attention_ragged_plan_args plan = PlanArgs();
  p_.q_indptr[2] = 0;  // below q_indptr[1] = 40
  EXPECT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "q_indptr[2]: 0 is less than q_indptr[1] = 40");
  p_.q_indptr[2] = 41;
  plan.head_dim = 96;
  EXPECT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "head_dim: must be 64, 128 or 256, got 96");
  plan = PlanArgs();
  plan.mask = TAILOR_ATTENTION_MASK_NONE;
  plan.window_left = 3;
  EXPECT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "window_left: must be 0 unless mask is "
               "TAILOR_ATTENTION_MASK_WINDOW, got 3");
  plan = PlanArgs();
  EXPECT_EQ(tailor_attention_ragged_plan(nullptr, &plan, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(tailor_last_error(), HasSubstr("runtime"));
  EXPECT_EQ(tailor_attention_ragged_plan(runtime_, &plan, nullptr),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "ws: must not be null");

  ASSERT_EQ(tailor_attention_ragged_plan(runtime_, &plan, ws_),
            TAILOR_STATUS_OK)
      << tailor_last_error();
  tailor_attention_ragged_run_args run = RunArgs();
  p_.block_table[0 * p_.max_pages + 3] = 9999;  // a page sequence 0 reads
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tailor_last_error()),
            "block_table[0,3]: page id 9999 is outside [0, " +
                std::to_string(p_.num_pages) + ")");
  run = FlashInferRunArgs();
  p_.page_indptr[1] += 1;  // sequence 1 now starts one page late
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "page_indptr[1]: sequence 1 needs 7 pages from entry 20, has 6 "
               "of block_table's 42");
  p_.page_indptr[1] -= 1;
  run = RunArgs();
  run.lse = nullptr;
  run.sm_scale = -2.0f;
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "sm_scale: must be finite and > 0, got -2");
  run = RunArgs();
  run.out.dtype = 99;
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, &run, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(),
               "out.dtype: not a tailor_dtype value (1..8), got 99");
  EXPECT_EQ(tailor_attention_ragged_run(runtime_, nullptr, ws_),
            TAILOR_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(tailor_last_error(), "args: must not be null");
  for (uint16_t x : out_) ASSERT_EQ(x, kPoison);  // nothing ran
}

// Every entry names the null handle, argument struct or out-pointer it got.
TEST_F(CApiRaggedTest, NullArgumentsAreNamed) {
  tailor_attention_ragged_limits limits = {};
  limits.max_batch = 2;
  limits.max_tokens = 8;
  limits.num_qo_heads = 8;
  limits.num_kv_heads = 2;
  limits.head_dim = 64;
  limits.page_size = 16;
  int64_t bytes = 0;
  tailor_attention_ragged_workspace_info info = {};
  tailor_attention_ragged_decode_info decode = {};
  const tailor_attention_ragged_plan_args plan = PlanArgs();
  const tailor_attention_ragged_plan_flashinfer_args fi = FlashInferPlanArgs();
  const tailor_attention_ragged_run_args run = RunArgs();
  tailor_runtime* const rt = runtime_;
  tailor_attention_ragged_workspace* const ws = ws_;
  struct Case {
    const char* message;
    std::function<tailor_status()> call;
  };
  const Case cases[] = {
      {"runtime: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_reserve(nullptr, &limits, ws);
       }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_reserve(rt, &limits, nullptr);
       }},
      {"bytes: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_bytes(rt, &limits, nullptr);
       }},
      {"limits: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_bytes(rt, nullptr, &bytes);
       }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_bind(rt, &limits, nullptr, 0,
                                                       nullptr, nullptr);
       }},
      {"runtime: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_take_errors(nullptr, ws,
                                                              nullptr);
       }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_take_errors(rt, nullptr,
                                                              nullptr);
       }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_get_info(nullptr, &info);
       }},
      {"out: must not be null",
       [&] { return tailor_attention_ragged_workspace_get_info(ws, nullptr); }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_get_decode_info(nullptr,
                                                                  &decode);
       }},
      {"out: must not be null",
       [&] {
         return tailor_attention_ragged_workspace_get_decode_info(ws, nullptr);
       }},
      {"runtime: must not be null",
       [&] { return tailor_attention_ragged_plan(nullptr, &plan, ws); }},
      {"ws: must not be null",
       [&] {
         return tailor_attention_ragged_plan_flashinfer(rt, &fi, nullptr);
       }},
      {"args: must not be null",
       [&] {
         return tailor_attention_ragged_plan_flashinfer(rt, nullptr, ws);
       }},
      {"runtime: must not be null",
       [&] { return tailor_attention_ragged_run(nullptr, &run, ws); }},
      {"ws: must not be null",
       [&] { return tailor_attention_ragged_run(rt, &run, nullptr); }},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i);
    EXPECT_EQ(cases[i].call(), TAILOR_STATUS_INVALID_ARGUMENT);
    EXPECT_STREQ(tailor_last_error(), cases[i].message);
  }
}

}  // namespace
}  // namespace tailor::attention::testing
