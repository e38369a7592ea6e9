// tests/ops/attention/ragged_host_test_util.h — attention::PlanRagged /
// RunRagged calls on host buffers of a RaggedBatch (ragged_test_util.h):
// arguments, poisoned outputs, and the check against the fp64 reference.
#ifndef TAILOR_TESTS_OPS_ATTENTION_RAGGED_HOST_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_ATTENTION_RAGGED_HOST_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/attention/decode_host_test_util.h"
#include "ops/attention/ragged_test_util.h"
#include "tailor/ops/attention.h"

namespace tailor::attention::testing {

inline constexpr uint16_t kPoison16 = 0x7fc3;
inline constexpr float kPoisonLse = 12345.0f;

inline Outputs PoisonedOutputs(const RaggedBatch& p) {
  const RaggedCase& c = p.c;
  return Outputs{
      .out = std::vector<uint16_t>(
          std::max<int64_t>(c.rows() * c.num_qo_heads * c.head_dim, 1),
          kPoison16),
      .lse = std::vector<float>(std::max<int64_t>(c.rows() * c.num_qo_heads, 1),
                                kPoisonLse)};
}

// The workspace limits of case c's layer, for plans of up to `batch`
// sequences and `tokens` queries (default: c's own).
inline RaggedLimits LimitsOf(const RaggedCase& c, int64_t batch = -1,
                             int64_t tokens = -1) {
  return {.max_batch = batch < 0 ? c.batch() : batch,
          .max_tokens = tokens < 0 ? c.total_q() : tokens,
          .num_qo_heads = c.num_qo_heads,
          .num_kv_heads = c.num_kv_heads,
          .head_dim = c.head_dim,
          .page_size = c.page_size,
          .dtype = c.dtype,
          .causal = c.causal,
          .window_left = c.window_left};
}

inline PlanRaggedArgs PlanArgsOf(const RaggedBatch& p) {
  const RaggedCase& c = p.c;
  return PlanRaggedArgs{
      .q_indptr = TensorRef::Contiguous(const_cast<int32_t*>(p.q_indptr.data()),
                                        DType::kI32, {c.batch() + 1}),
      .kv_lens = TensorRef::Contiguous(const_cast<int32_t*>(p.kv_lens.data()),
                                       DType::kI32, {c.batch()}),
      .page_size = c.page_size,
      .num_qo_heads = c.num_qo_heads,
      .num_kv_heads = c.num_kv_heads,
      .head_dim = c.head_dim,
      .dtype = c.dtype,
      .causal = c.causal,
      .window_left = c.window_left};
}

inline PlanRaggedFlashInferArgs FlashInferPlanArgsOf(const RaggedBatch& p) {
  const RaggedCase& c = p.c;
  auto vec = [](const std::vector<int32_t>& v, int64_t n) {
    return TensorRef::Contiguous(const_cast<int32_t*>(v.data()), DType::kI32,
                                 {n});
  };
  return PlanRaggedFlashInferArgs{
      .qo_indptr = vec(p.q_indptr, c.batch() + 1),
      .kv_indptr = vec(p.page_indptr, c.batch() + 1),
      .kv_last_page_len = vec(p.last_page_len, c.batch()),
      .page_size = c.page_size,
      .num_qo_heads = c.num_qo_heads,
      .num_kv_heads = c.num_kv_heads,
      .head_dim = c.head_dim,
      .dtype = c.dtype,
      .causal = c.causal,
      .window_left = c.window_left};
}

inline RunRaggedArgs RunArgsOf(RaggedBatch& p, Outputs& o) {
  RunRaggedArgs args;
  args.q = p.QRef(p.q.data());
  args.k_cache = p.CacheRef(p.k.data());
  args.v_cache = p.CacheRef(p.v.data());
  args.block_table = p.TableRef(p.block_table.data());
  args.kv_lens =
      TensorRef::Contiguous(p.kv_lens.data(), DType::kI32, {p.c.batch()});
  args.out = p.QRef(o.out.data());
  args.lse = p.LseRef(o.lse.data());
  args.logits_soft_cap = p.c.soft_cap;
  return args;
}

// The same run with FlashInfer's pages: kv_indices + page_indptr.
inline RunRaggedArgs FlashInferRunArgsOf(RaggedBatch& p, Outputs& o) {
  RunRaggedArgs args = RunArgsOf(p, o);
  args.block_table = TensorRef::Contiguous(
      p.kv_indices.empty() ? p.page_indptr.data() : p.kv_indices.data(),
      DType::kI32, {static_cast<int64_t>(p.kv_indices.size())});
  args.page_indptr = TensorRef::Contiguous(p.page_indptr.data(), DType::kI32,
                                           {p.c.batch() + 1});
  args.kv_lens.reset();
  return args;
}

// The errors of `o` against the reference at the default scale 1/sqrt(D).
inline Errors RaggedErrorsOf(const RaggedBatch& p, const Outputs& o) {
  const Expected e = RaggedReference(p, 1.0 / std::sqrt(double(p.c.head_dim)));
  return CompareRagged(p, e, o.out, &o.lse);
}

// Rows past Σq must be untouched (kPoison16 / kPoisonLse); returns the
// first touched element, or -1.
inline int64_t FirstTouchedPaddingElement(const RaggedBatch& p,
                                          const Outputs& o) {
  const RaggedCase& c = p.c;
  const int64_t row = c.num_qo_heads * c.head_dim;
  for (int64_t i = c.total_q() * row; i < c.rows() * row; ++i) {
    if (o.out[i] != kPoison16) return i;
  }
  for (int64_t i = c.total_q() * c.num_qo_heads; i < c.rows() * c.num_qo_heads;
       ++i) {
    if (o.lse[i] != kPoisonLse) return i;
  }
  return -1;
}

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_OPS_ATTENTION_RAGGED_HOST_TEST_UTIL_H_
