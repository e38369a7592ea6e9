// tests/ops/attention/decode_host_test_util.h — attention:: calls on host buffers for
// the CPU decode tests: the plan and run arguments of a PagedBatch, poisoned
// outputs, and the check against the fp64 reference (decode_test_util.h).
#ifndef TAILOR_TESTS_OPS_ATTENTION_DECODE_HOST_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_ATTENTION_DECODE_HOST_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/attention/decode_test_util.h"
#include "tailor/ops/attention.h"

namespace tailor::attention::testing {

// Output buffers of one run, poisoned so that untouched rows show.
struct Outputs {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

inline Outputs PoisonedOutputs(const PagedBatch& p) {
  const PagedCase& c = p.c;
  return Outputs{
      .out =
          std::vector<uint16_t>(c.rows() * c.num_qo_heads * c.head_dim, 0x7fc3),
      .lse = std::vector<float>(c.rows() * c.num_qo_heads, 12345.0f)};
}

inline PlanDecodeArgs PlanArgsOf(const PagedBatch& p) {
  const PagedCase& c = p.c;
  return PlanDecodeArgs{.seq_lens = TensorRef::Contiguous(
                            p.seq_lens.data(), DType::kI32, {c.batch()}),
                        .page_size = c.page_size,
                        .num_qo_heads = c.num_qo_heads,
                        .num_kv_heads = c.num_kv_heads,
                        .head_dim = c.head_dim,
                        .dtype = c.dtype};
}

inline RunDecodeArgs RunArgsOf(PagedBatch& p, Outputs& o) {
  RunDecodeArgs args;
  args.q = p.QRef(p.q.data());
  args.k_cache = p.CacheRef(p.k.data());
  args.v_cache = p.CacheRef(p.v.data());
  args.block_table = p.TableRef(p.block_table.data());
  args.seq_lens = p.LensRef(p.seq_lens.data());
  args.out = p.OutRef(o.out.data());
  args.lse = p.LseRef(o.lse.data());
  args.logits_soft_cap = p.c.soft_cap;
  return args;
}

// Bounds of a run against the reference: bf16 output rounding is 2^-9
// relative, f16 2^-12; accumulation is f32.
inline double OutBound(DType dtype) {
  return dtype == DType::kBF16 ? 8e-3 : 2e-3;
}
inline constexpr double kLseBound = 1e-4;

// The errors of `o` against the reference at the default scale 1/sqrt(D).
inline Errors ErrorsOf(const PagedBatch& p, const Outputs& o) {
  const Expected e = Reference(p, 1.0 / std::sqrt(double(p.c.head_dim)));
  return Compare(p, e, o.out, &o.lse);
}

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_OPS_ATTENTION_DECODE_HOST_TEST_UTIL_H_
