// tests/conformance/ragged_attention_conformance_test.cc — ragged paged
// attention (PlanRagged / RunRagged) on every backend present against the
// fp64 reference: mixed steps of every row kind, awkward lengths, masks,
// soft cap, head dims, GQA groups, page sizes, both KV layouts. A backend
// without ragged kernels (Unimplemented) skips.
#include <string>
#include <vector>

#include "conformance/conformance.h"
#include "ops/attention/ragged_host_test_util.h"
#include "ops/attention/ragged_test_util.h"
#include "tailor/ops/attention.h"

namespace tailor::conformance {
namespace {

using attention::testing::BuildRaggedBatch;
using attention::testing::CompareRagged;
using attention::testing::Errors;
using attention::testing::KvLayout;
using attention::testing::LimitsOf;
using attention::testing::PlanArgsOf;
using attention::testing::RaggedBatch;
using attention::testing::RaggedCase;
using attention::testing::RaggedReference;

double OutBound(DType dtype) { return dtype == DType::kBF16 ? 8e-3 : 2e-3; }
constexpr double kLseBound = 1e-4;

class RaggedConformance : public BackendTest {
 protected:
  void CheckRagged(const RaggedCase& c) {
    SCOPED_TRACE(c.ToString());
    RaggedBatch p = BuildRaggedBatch(c);
    Runtime& rt = runtime();
    attention::RaggedWorkspace ws;
    const absl::Status reserved =
        attention::ReserveRaggedWorkspace(rt, LimitsOf(c), ws);
    if (absl::IsUnimplemented(reserved)) GTEST_SKIP() << reserved;
    TAILOR_ASSERT_OK(reserved);
    Buffer q(rt, p.q.size() * 2), k(rt, p.k.size() * 2), v(rt, p.v.size() * 2);
    Buffer table(rt, p.block_table.size() * 4 + 4);
    const size_t out_elems = c.rows() * c.num_qo_heads * c.head_dim;
    Buffer out(rt, out_elems * 2 + 2), lse(rt, c.rows() * c.num_qo_heads * 4);
    q.Upload(p.q);
    k.Upload(p.k);
    v.Upload(p.v);
    table.Upload(p.block_table);
    out.Upload(std::vector<uint16_t>(out_elems + 1, 0x7fc3));
    lse.Upload(std::vector<float>(c.rows() * c.num_qo_heads, 12345.0f));

    TAILOR_ASSERT_OK(attention::PlanRagged(rt, PlanArgsOf(p), ws));
    attention::RunRaggedArgs args;
    const Device device = rt.device();
    args.q = p.QRef(q.data(), device);
    args.k_cache = p.CacheRef(k.data(), device);
    args.v_cache = p.CacheRef(v.data(), device);
    args.block_table = p.TableRef(table.data(), device);
    args.out = p.QRef(out.data(), device);
    args.lse = p.LseRef(lse.data(), device);
    args.logits_soft_cap = c.soft_cap;
    TAILOR_ASSERT_OK(attention::RunRagged(rt, args, ws));
    TAILOR_ASSERT_OK(rt.Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(rt));

    const std::vector<float> lse_host =
        lse.Download<float>(c.rows() * c.num_qo_heads);
    const Errors err = CompareRagged(
        p, RaggedReference(p, 1.0 / std::sqrt(double(c.head_dim))),
        out.Download<uint16_t>(out_elems), &lse_host);
    EXPECT_LT(err.out_rel, OutBound(c.dtype)) << err.worst;
    EXPECT_LT(err.lse_abs, kLseBound);
  }
};

// A serving step: prefill chunks over cached prefixes, a new prompt, decode
// rows, speculative rows of 4, an empty sequence; lengths around the GPU's
// 128-row tiles (32 tokens of a group of 4) and 577.
RaggedCase MixedStep() {
  return {.q_lens = {200, 1, 1, 4, 4, 0, 31, 32, 33, 577, 17},
          .kv_lens = {700, 1000, 33, 260, 4, 9, 31, 100, 33, 577, 4000},
          .num_qo_heads = 8,
          .num_kv_heads = 2,
          .head_dim = 128,
          .shared_prefix_pages = 2};
}

TEST_P(RaggedConformance, Bf16MixedStepCausal) { CheckRagged(MixedStep()); }

TEST_P(RaggedConformance, F16MixedStepHndWindow) {
  RaggedCase c = MixedStep();
  c.dtype = DType::kF16;
  c.layout = KvLayout::kHnd;
  c.window_left = 100;
  CheckRagged(c);
}

TEST_P(RaggedConformance, Bf16NonCausalSoftCapHeadDim64Group8) {
  RaggedCase c = MixedStep();
  c.causal = false;
  c.soft_cap = 20.0f;
  c.head_dim = 64;
  c.num_qo_heads = 16;
  CheckRagged(c);
}

TEST_P(RaggedConformance, Bf16HeadDim256Group1) {
  RaggedCase c = MixedStep();
  c.head_dim = 256;
  c.num_qo_heads = 2;
  CheckRagged(c);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, RaggedConformance,
                         ::testing::ValuesIn(AllBackends()), BackendParamName);

}  // namespace
}  // namespace tailor::conformance
