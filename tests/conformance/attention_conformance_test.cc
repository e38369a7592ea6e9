// tests/conformance/attention_conformance_test.cc — paged decode (plan and
// run) on every backend present against the fp64 reference: awkward
// lengths, page sizes, head dims, GQA groups, both KV layouts, soft cap.
#include <string>
#include <vector>

#include "conformance/conformance.h"
#include "ops/attention/decode_test_util.h"
#include "tailor/ops/attention.h"

namespace tailor::conformance {
namespace {

using attention::testing::BuildPagedBatch;
using attention::testing::Compare;
using attention::testing::Errors;
using attention::testing::KvLayout;
using attention::testing::PagedBatch;
using attention::testing::PagedCase;
using attention::testing::Reference;

// Bounds of a run against the reference: output rounding of the 16-bit
// dtype, f32 accumulation.
double OutBound(DType dtype) { return dtype == DType::kBF16 ? 8e-3 : 2e-3; }
constexpr double kLseBound = 1e-4;

class DecodeConformance : public BackendTest {
 protected:
  void CheckDecode(const PagedCase& c) {
    SCOPED_TRACE(c.ToString());
    PagedBatch p = BuildPagedBatch(c);
    Runtime& rt = runtime();
    attention::DecodeWorkspace ws;
    TAILOR_ASSERT_OK(attention::ReserveDecodeWorkspace(
        rt,
        {.max_batch = std::max<int64_t>(c.rows(), 1),
         .num_qo_heads = c.num_qo_heads,
         .num_kv_heads = c.num_kv_heads,
         .head_dim = c.head_dim,
         .page_size = c.page_size,
         .dtype = c.dtype},
        ws));
    Buffer q(rt, p.q.size() * 2), k(rt, p.k.size() * 2), v(rt, p.v.size() * 2);
    Buffer table(rt, p.block_table.size() * 4), lens(rt, p.seq_lens.size() * 4);
    const size_t out_elems = c.rows() * c.num_qo_heads * c.head_dim;
    Buffer out(rt, out_elems * 2), lse(rt, c.rows() * c.num_qo_heads * 4);
    q.Upload(p.q);
    k.Upload(p.k);
    v.Upload(p.v);
    table.Upload(p.block_table);
    lens.Upload(p.seq_lens);
    out.Upload(std::vector<uint16_t>(out_elems, 0x7fc3));
    lse.Upload(std::vector<float>(c.rows() * c.num_qo_heads, 12345.0f));

    TAILOR_ASSERT_OK(attention::PlanDecode(
        rt,
        {.seq_lens =
             TensorRef::Contiguous(p.seq_lens.data(), DType::kI32, {c.batch()}),
         .page_size = c.page_size,
         .num_qo_heads = c.num_qo_heads,
         .num_kv_heads = c.num_kv_heads,
         .head_dim = c.head_dim,
         .dtype = c.dtype},
        ws));
    attention::RunDecodeArgs args;
    const Device device = rt.device();
    args.q = p.QRef(q.data(), device);
    args.k_cache = p.CacheRef(k.data(), device);
    args.v_cache = p.CacheRef(v.data(), device);
    args.block_table = p.TableRef(table.data(), device);
    args.seq_lens = p.LensRef(lens.data(), device);
    args.out = p.OutRef(out.data(), device);
    args.lse = p.LseRef(lse.data(), device);
    args.logits_soft_cap = c.soft_cap;
    TAILOR_ASSERT_OK(attention::RunDecode(rt, args, ws));
    TAILOR_ASSERT_OK(rt.Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(rt));

    const std::vector<float> lse_host =
        lse.Download<float>(c.rows() * c.num_qo_heads);
    const Errors err =
        Compare(p, Reference(p, 1.0 / std::sqrt(double(c.head_dim))),
                out.Download<uint16_t>(out_elems), &lse_host);
    EXPECT_LT(err.out_rel, OutBound(c.dtype)) << err.worst;
    EXPECT_LT(err.lse_abs, kLseBound);
  }
};

// Lengths around a tile (64 tokens), a page, and a long one.
std::vector<int32_t> Awkward(int32_t page) {
  return {0, 1, page - 1, page, page + 1, 17, 63, 64, 65, 577, 1};
}

TEST_P(DecodeConformance, Bf16Page16Gqa4HeadDim128) {
  CheckDecode({.lens = Awkward(16),
               .page_size = 16,
               .num_qo_heads = 8,
               .num_kv_heads = 2,
               .head_dim = 128});
}

TEST_P(DecodeConformance, F16Page16Gqa8HeadDim64Hnd) {
  CheckDecode({.lens = Awkward(16),
               .page_size = 16,
               .num_qo_heads = 8,
               .num_kv_heads = 1,
               .head_dim = 64,
               .dtype = DType::kF16,
               .layout = KvLayout::kHnd});
}

TEST_P(DecodeConformance, Bf16Page64HeadDim256SharedPrefix) {
  CheckDecode({.lens = {577, 200, 64, 65, 1},
               .page_size = 64,
               .num_qo_heads = 4,
               .num_kv_heads = 4,
               .head_dim = 256,
               .shared_prefix_pages = 2});
}

TEST_P(DecodeConformance, Bf16Page1SoftCap) {
  CheckDecode({.lens = {1, 2, 17, 130},
               .page_size = 1,
               .num_qo_heads = 4,
               .num_kv_heads = 2,
               .head_dim = 64,
               .soft_cap = 30.0f});
}

TEST_P(DecodeConformance, Bf16OneLongAmongShort) {
  std::vector<int32_t> lens(31, 7);
  lens.push_back(8191);
  CheckDecode({.lens = lens,
               .page_size = 16,
               .num_qo_heads = 16,
               .num_kv_heads = 2,
               .head_dim = 128});
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, DecodeConformance,
                         ::testing::ValuesIn(AllBackends()), BackendParamName);

}  // namespace
}  // namespace tailor::conformance
