// attention::PlanRagged / RunRagged on the CUDA backend against the fp64
// reference of tests/ops/attention/ragged_test_util.h: mixed steps (prefill
// chunks over cached prefixes, new prompts, decode and speculative rows of
// 4, empty sequences) with lengths around the 128-row tiles and 577, NaN in
// every unowned cache slot and poisoned outputs; masks, soft cap, head
// dims, groups, f16; split tiles; one CUDA graph captured once and replayed
// with new lengths and block tables; a bad page id dropped into the error
// word. Skips without an sm_80+ device.
//
// Which kernel runs follows the backend's rule (ragged_kernels.h): the
// sm_90a kernel on sm_90a for its page sizes, the portable kernel
// elsewhere. $TAILOR_TUNING=ragged.kernel=portable runs every test on the
// portable kernel (ctest registers the suite a second time that way, as
// portable.*); RaggedGpuPortableTest runs it on any device, with the page
// sizes only it serves (1, 3, 24) and its 64-row tile edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/ragged_gpu_test_util.h"

namespace tailor::attention::testing {
namespace {

TEST_F(RaggedGpuTest, MixedStepsMatchTheReference) {
  RaggedCase c = MixedStep();
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  c.layout = KvLayout::kHnd;
  c.dtype = DType::kF16;
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  c = MixedStep();
  c.window_left = 100;
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  c = MixedStep();
  c.causal = false;
  c.soft_cap = 20.0f;
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
}

// One head_dim / group / page variant per test, so that a variant that
// fails (or does not finish) names itself.
struct HeadVariant {
  int64_t d, hq, hkv, page;
};

class RaggedGpuHeadTest : public RaggedGpuTest,
                          public ::testing::WithParamInterface<HeadVariant> {};

TEST_P(RaggedGpuHeadTest, MixedStepMatchesTheReference) {
  const HeadVariant v = GetParam();
  RaggedCase c = MixedStep();
  c.head_dim = v.d;
  c.num_qo_heads = v.hq;
  c.num_kv_heads = v.hkv;
  c.page_size = v.page;
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimsGroupsAndPages, RaggedGpuHeadTest,
    ::testing::Values(HeadVariant{64, 32, 4, 16}, HeadVariant{256, 8, 8, 32},
                      HeadVariant{256, 8, 8, 16}, HeadVariant{256, 16, 4, 32},
                      HeadVariant{128, 8, 8, 32}, HeadVariant{128, 16, 1, 128},
                      HeadVariant{128, 32, 8, 8}),
    [](const ::testing::TestParamInfo<HeadVariant>& info) {
      const HeadVariant& v = info.param;
      return absl::StrCat("D", v.d, "_Hq", v.hq, "_Hkv", v.hkv, "_page",
                          v.page);
    });

TEST_F(RaggedGpuTest, OneLongSequenceSplitsAndMerges) {
  RaggedCase c = {.q_lens = {1, 64},
                  .kv_lens = {32768, 20000},
                  .num_qo_heads = 8,
                  .num_kv_heads = 2,
                  .head_dim = 128,
                  .seed = TestSeed()};
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
}

// ---- q_len = 1 rows on the paged-decode kernel ------------------------------

int32_t DecodeRowsOf(const RaggedCase& c) {
  return static_cast<int32_t>(std::count(c.q_lens.begin(), c.q_lens.end(), 1));
}

// The mixed step's two decode rows run on the decode kernel, the rest as
// tiles; with ragged.decode_rows=prefill all of them run as tiles. Both
// match the reference.
TEST_F(RaggedGpuTest, DecodeRowsRunOnTheDecodeKernel) {
  const RaggedCase c = MixedStep();
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  EXPECT_EQ(last_plan_.decode_seqs, 2) << last_plan_.ToString();
  EXPECT_GT(last_plan_.decode_items, 0);
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> tiles =
      CudaTestRuntime::Create(OptionsWith("ragged.decode_rows=prefill"));
  TAILOR_ASSERT_OK(tiles.status());
  EXPECT_LE(RunCase(c, (*tiles)->runtime()).out_rel, 1e-2);
  EXPECT_EQ(last_plan_.decode_seqs, 0) << last_plan_.ToString();
}

// Decode-only steps: no tile runs. Lengths around the decode kernel's
// 64-token tiles and pages, 577 and 32768; shapes that take the decode
// kernel's cluster launch (a small batch), its head groups (8 KV heads,
// page 16), group 1, head_dim 64 / 256, f16, HND, soft cap, and a
// non-causal row over no KV (out 0, lse -inf).
struct DecodeOnlyVariant {
  std::string name;
  RaggedCase c;
};

void PrintTo(const DecodeOnlyVariant& v, std::ostream* os) { *os << v.name; }

std::vector<DecodeOnlyVariant> DecodeOnlyVariants() {
  RaggedCase llama = {
      .q_lens = std::vector<int32_t>(20, 1),
      .kv_lens = {1,   2,   15,   16,   17,  63, 64, 65,   127,  128,
                  129, 577, 1000, 4096, 333, 48, 9,  2049, 8191, 32768},
      .num_qo_heads = 32,
      .num_kv_heads = 8,
      .head_dim = 128,
      .padding_rows = 3};
  RaggedCase qwen_small = {.q_lens = {1, 1, 1},
                           .kv_lens = {1, 577, 20000},
                           .num_qo_heads = 32,
                           .num_kv_heads = 4,
                           .head_dim = 128};
  RaggedCase group1 = {.q_lens = {1, 1, 1, 1},
                       .kv_lens = {31, 700, 64, 5},
                       .page_size = 32,
                       .num_qo_heads = 8,
                       .num_kv_heads = 8,
                       .head_dim = 64};
  RaggedCase d256 = group1;
  d256.head_dim = 256;
  d256.page_size = 16;
  d256.num_qo_heads = 16;
  d256.num_kv_heads = 4;
  RaggedCase f16_hnd = llama;
  f16_hnd.dtype = DType::kF16;
  f16_hnd.layout = KvLayout::kHnd;
  f16_hnd.soft_cap = 30.0f;
  RaggedCase no_kv = {.q_lens = {1, 1, 1},
                      .kv_lens = {0, 5, 300},
                      .num_qo_heads = 8,
                      .num_kv_heads = 2,
                      .head_dim = 128,
                      .causal = false};
  return {{"Llama", llama},       {"QwenSmallBatch", qwen_small},
          {"Group1", group1},     {"HeadDim256", d256},
          {"F16HndCap", f16_hnd}, {"NonCausalNoKv", no_kv}};
}

class RaggedGpuDecodeOnlyTest
    : public RaggedGpuTest,
      public ::testing::WithParamInterface<DecodeOnlyVariant> {};

TEST_P(RaggedGpuDecodeOnlyTest, MatchesTheReferenceWithoutTiles) {
  RaggedCase c = GetParam().c;
  c.seed = TestSeed();
  const Errors err = RunCase(c);
  EXPECT_LE(err.out_rel, 1e-2) << err.worst;
  EXPECT_LE(err.lse_abs, kDecodeLseBound);
  EXPECT_EQ(last_plan_.decode_seqs, DecodeRowsOf(c)) << last_plan_.ToString();
  EXPECT_EQ(last_plan_.tiles, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RaggedGpuDecodeOnlyTest, ::testing::ValuesIn(DecodeOnlyVariants()),
    [](const ::testing::TestParamInfo<DecodeOnlyVariant>& info) {
      return info.param.name;
    });

// Decode rows first, last and between other rows (q_len 0, speculative 4,
// chunks over prefixes): the decode kernel finds each row through q_indptr.
TEST_F(RaggedGpuTest, DecodeRowsAnywhereAmongOtherRows) {
  RaggedCase c = {.q_lens = {1, 0, 7, 1, 0, 300, 1, 4, 129, 1},
                  .kv_lens = {2048, 3, 7, 1, 0, 1500, 577, 40, 129, 17},
                  .num_qo_heads = 32,
                  .num_kv_heads = 8,
                  .head_dim = 128,
                  .padding_rows = 2,
                  .seed = TestSeed()};
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  EXPECT_EQ(last_plan_.decode_seqs, 4) << last_plan_.ToString();
  c.num_kv_heads = 4;  // Qwen3's heads
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  EXPECT_EQ(last_plan_.decode_seqs, 4) << last_plan_.ToString();
}

// A sliding window needs the window's left edge, which the decode kernel
// does not mask: the rows stay in tiles.
TEST_F(RaggedGpuTest, SlidingWindowKeepsDecodeRowsInTiles) {
  RaggedCase c = MixedStep();
  c.window_left = 100;
  EXPECT_LE(RunCase(c).out_rel, 1e-2);
  EXPECT_EQ(last_plan_.decode_seqs, 0) << last_plan_.ToString();
}

TEST_F(RaggedGpuTest, ReplayStepsRunDirectly) {
  for (const RaggedCase& c : ReplaySteps()) {
    EXPECT_LE(RunCase(c).out_rel, 1e-2);
  }
}

// One graph per workspace bucket, captured once, replayed after each step's
// PlanRagged with new lengths, block tables and data in the same buffers.
TEST_F(RaggedGpuTest, GraphReplaysNewLengths) {
  ExpectGraphReplays(runtime(), ReplaySteps());
}

// One graph captured on a step without decode rows (or with only decode
// rows) replays steps whose decode / tile split differs: the decode and tile
// launches are both in every captured graph, empty when a step has no rows
// for them. Planning never grows the reserved workspace.
TEST_F(RaggedGpuTest, GraphReplaysAnyDecodeTileSplit) {
  RaggedCase prefill_only = MixedStep();
  prefill_only.q_lens = {200, 0, 31, 4, 577};
  prefill_only.kv_lens = {700, 9, 31, 260, 577};
  RaggedCase decode_only = MixedStep();
  decode_only.q_lens = {1, 1, 1, 1, 1, 1, 1, 1};
  decode_only.kv_lens = {1, 17, 577, 4096, 64, 65, 9000, 2};
  RaggedCase nothing = MixedStep();
  nothing.q_lens = {0, 0};
  nothing.kv_lens = {3, 0};
  const std::vector<RaggedCase> steps = {prefill_only, decode_only,
                                         MixedStep(),  nothing,
                                         decode_only,  prefill_only};
  constexpr int64_t kBatch = 16, kTokens = 2048, kPages = 2048, kMaxPages = 600;
  const cuda::DriverApi& api = env_->api();
  for (size_t capture : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE(::testing::Message() << "captured on step " << capture);
    RaggedWorkspace ws;
    TAILOR_ASSERT_OK(ReserveRaggedWorkspace(
        runtime(), LimitsOf(steps[0], kBatch, kTokens), ws));
    const size_t reserved = ws.CapacityBytes();  // no plan grows it
    DeviceStep d(env_->api(), steps[0], kTokens, kBatch, kPages, kMaxPages);
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    for (size_t i = capture; i < steps.size(); ++i) {
      RaggedCase c = steps[i];
      c.seed = TestSeed() + i;
      RaggedBatch p = BuildRaggedBatch(c);
      ASSERT_LE(p.num_pages, kPages);
      ASSERT_LE(p.max_pages, kMaxPages);
      TAILOR_ASSERT_OK(d.Upload(p));
      PlanRaggedArgs plan = PlanArgsOf(p);
      plan.stream = stream_->get();
      TAILOR_ASSERT_OK(PlanRagged(runtime(), plan, ws));
      EXPECT_EQ(ws.CapacityBytes(), reserved);
      if (i == capture) {
        const RunRaggedArgs args =
            d.Args(p, runtime().device(), stream_->get());
        ASSERT_EQ(api.cuStreamBeginCapture(stream_->get(),
                                           CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                  CUDA_SUCCESS);
        const absl::Status captured = RunRagged(runtime(), args, ws);
        ASSERT_EQ(api.cuStreamEndCapture(stream_->get(), &graph), CUDA_SUCCESS);
        TAILOR_ASSERT_OK(captured);
        ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0),
                  CUDA_SUCCESS);
      }
      std::printf("split graph step %zu: launching\n", i);
      std::fflush(stdout);
      ASSERT_EQ(api.cuGraphLaunch(exec, stream_->get()), CUDA_SUCCESS);
      TAILOR_ASSERT_OK(stream_->Synchronize());
      TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream_->get()));
      const Errors err = d.Check(p);
      std::printf("split graph step %zu rel %.2e lse %.2e | %s\n", i,
                  err.out_rel, err.lse_abs, ws.plan().ToString().c_str());
      EXPECT_LE(err.out_rel, 1e-2) << "step " << i << " " << err.worst;
      EXPECT_EQ(ws.plan().decode_seqs, DecodeRowsOf(c));
    }
    if (exec != nullptr) api.cuGraphExecDestroy(exec);
    if (graph != nullptr) api.cuGraphDestroy(graph);
  }
}

// With ragged.cuda=off a CUDA runtime refuses ragged attention at Reserve,
// before touching memory.
TEST_F(RaggedGpuTest, RefusedWhenTheTuningKeyTurnsItOff) {
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> plain =
      CudaTestRuntime::Create(OptionsWith("ragged.cuda=off"));
  TAILOR_ASSERT_OK(plain.status());
  const RaggedCase c = MixedStep();
  RaggedWorkspace ws;
  EXPECT_THAT(ReserveRaggedWorkspace((*plain)->runtime(),
                                     LimitsOf(c, c.batch(), c.total_q()), ws),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "attention.ragged: the CUDA kernel is off (tuning key "
                       "ragged.cuda=off)"));
}

// FlashInfer's pages (kv_indices + page_indptr) on both kernels: the
// step's tiles and its decode rows.
TEST_F(RaggedGpuTest, FlashInferPagesMatchTheReference) {
  RaggedCase c = MixedStep();
  EXPECT_LE(RunCase(c, /*flashinfer=*/true).out_rel, 1e-2);
  EXPECT_GT(last_plan_.decode_seqs, 0);
  c.num_qo_heads = 32;
  c.num_kv_heads = 4;
  c.page_size = 64;
  EXPECT_LE(RunCase(c, /*flashinfer=*/true).out_rel, 1e-2);
}

// A page_indptr range past kv_indices holds no pages: its tokens are
// dropped and reported, the other sequences are still right.
TEST_F(RaggedGpuTest, BadPageRangesAreDroppedAndReported) {
  RaggedBatch p = BuildRaggedBatch(MixedStep());
  const int32_t nnz = static_cast<int32_t>(p.kv_indices.size());
  p.page_indptr[10] = nnz + 3;  // sequence 9 (577 tokens): [.., nnz + 3)
  EXPECT_THAT(RunAndTakeErrors(runtime(), p, /*flashinfer=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("kv_indices: page 0 of sequence 9 is -1, "
                                    "outside [0, ",
                                    p.num_pages,
                                    ") (or page_indptr gives it no such "
                                    "page)")));
}

// A decode row whose page_indptr range is a page short is reported by the
// decode kernel, naming page_indptr.
TEST_F(RaggedGpuTest, ShortDecodeRowPageRangesAreReported) {
  RaggedBatch p = BuildRaggedBatch(MixedStep());
  p.page_indptr[2] -= 1;  // sequence 1 (a decode row over 1000 tokens)
  EXPECT_THAT(RunAndTakeErrors(runtime(), p, /*flashinfer=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "page_indptr: sequence 1 needs 63 pages; page_indptr "
                       "gives it fewer (or a range outside kv_indices)"));
}

// A bad page id of a prefill row (sequence 0's third page) and of a decode
// row (sequence 1's): each dropped and reported, by the tile kernel and the
// decode kernel; on the default runtime and on the portable kernel at a
// page size only it serves.
TEST_F(RaggedGpuTest, BadPageIdsAreDroppedAndReported) {
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> portable =
      CudaTestRuntime::Create(OptionsWith("ragged.kernel=portable"));
  TAILOR_ASSERT_OK(portable.status());
  struct Run {
    Runtime* rt;
    int64_t page_size;
    int64_t seq;
  };
  for (const Run& run : {Run{&runtime(), 16, 1}, Run{&runtime(), 16, 0},
                         Run{&(*portable)->runtime(), 3, 0},
                         Run{&(*portable)->runtime(), 16, 0}}) {
    SCOPED_TRACE(::testing::Message()
                 << "page " << run.page_size << " seq " << run.seq);
    RaggedCase c = MixedStep();
    c.page_size = run.page_size;
    RaggedBatch p = BuildRaggedBatch(c);
    p.block_table[run.seq * p.max_pages + 2] = 99999;
    EXPECT_THAT(RunAndTakeErrors(*run.rt, p),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("block_table[", run.seq,
                                      ",2]: page id 99999 is outside [0, ",
                                      p.num_pages, ")")));
  }
}

// Device KV lengths (RunRaggedArgs::kv_lens) that differ from the plan:
// each kernel compares its own sequences' (a prefill sequence's tiles on
// the Hopper and on the portable kernel, a decode row on the decode kernel)
// and TakeErrors reports the lowest with the host check's text. The tiles
// attend the planned length: the step still matches the reference. Equal
// lengths report nothing.
TEST_F(RaggedGpuTest, DeviceKvLengthsThatDifferAreReported) {
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> portable =
      CudaTestRuntime::Create(OptionsWith("ragged.kernel=portable"));
  TAILOR_ASSERT_OK(portable.status());
  struct Run {
    Runtime* rt;
    int64_t seq;    // MixedStep: 0 and 9 run as tiles, 1 as a decode row
    int32_t delta;  // added to its device length; 0: none differs
  };
  for (const Run& run :
       {Run{&runtime(), 0, 0}, Run{&runtime(), 0, 1}, Run{&runtime(), 9, -1},
        Run{&runtime(), 1, -3}, Run{&(*portable)->runtime(), 0, 5}}) {
    SCOPED_TRACE(::testing::Message()
                 << "seq " << run.seq << " delta " << run.delta);
    const RaggedCase c = MixedStep();
    const RaggedBatch p = BuildRaggedBatch(c);
    RaggedWorkspace ws;
    TAILOR_ASSERT_OK(ReserveRaggedWorkspace(
        *run.rt, LimitsOf(c, c.batch(), c.total_q()), ws));
    DeviceStep d(env_->api(), c, c.rows(), c.batch(), p.num_pages, p.max_pages);
    TAILOR_ASSERT_OK(d.Upload(p));
    std::vector<int32_t> device_lens = c.kv_lens;
    device_lens[run.seq] += run.delta;
    DeviceBuffer lens(env_->api(), device_lens.size() * 4);
    TAILOR_ASSERT_OK(lens.Upload(device_lens));
    PlanRaggedArgs plan = PlanArgsOf(p);
    plan.stream = stream_->get();
    TAILOR_ASSERT_OK(PlanRagged(*run.rt, plan, ws));
    RunRaggedArgs args = d.Args(p, run.rt->device(), stream_->get());
    args.kv_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {c.batch()},
                                         run.rt->device());
    TAILOR_ASSERT_OK(RunRagged(*run.rt, args, ws));
    TAILOR_ASSERT_OK(stream_->Synchronize());
    if (run.delta == 0) {
      TAILOR_EXPECT_OK(ws.TakeErrors(*run.rt, stream_->get()));
    } else {
      EXPECT_THAT(ws.TakeErrors(*run.rt, stream_->get()),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           absl::StrCat("kv_lens[", run.seq,
                                        "]: ", device_lens[run.seq],
                                        " differs from ", c.kv_lens[run.seq],
                                        ", the length PlanRagged planned")));
      TAILOR_EXPECT_OK(ws.TakeErrors(*run.rt, stream_->get()));  // cleared
    }
    if (c.q_lens[run.seq] > 1 || run.delta == 0) {
      const Errors err = d.Check(p);
      EXPECT_LE(err.out_rel, 1e-2) << err.worst;
    }
  }
}

// ---- the portable kernel ----------------------------------------------------

class RaggedGpuPortableTest
    : public RaggedGpuTest,
      public ::testing::WithParamInterface<PortableVariant> {};

TEST_P(RaggedGpuPortableTest, MatchesTheReference) {
  const PortableVariant& v = GetParam();
  const std::string keys = v.tuning.empty()
                               ? "ragged.kernel=portable"
                               : "ragged.kernel=portable," + v.tuning;
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> portable =
      CudaTestRuntime::Create(OptionsWith(keys));
  TAILOR_ASSERT_OK(portable.status());
  RaggedCase c = v.c;
  c.seed = TestSeed();
  const Errors err = RunCase(c, (*portable)->runtime());
  EXPECT_LE(err.out_rel, 1e-2) << err.worst;
  // tanh.approx (relative error < 2^-10.9) moves a capped score by up to
  // cap x 5e-4: lse within 2e-2 at the tests' caps of 20 and 30.
  EXPECT_LE(err.lse_abs, c.soft_cap > 0 ? 2e-2 : kDecodeLseBound);
  EXPECT_GT(last_plan_.tiles, 0) << last_plan_.ToString();
  EXPECT_EQ(last_plan_.tile_rows, 64) << "not the portable kernel's plan";
  if (absl::StartsWith(v.name, "Split")) {
    EXPECT_GT(last_plan_.split_tiles, 0) << last_plan_.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RaggedGpuPortableTest, ::testing::ValuesIn(PortableVariants()),
    [](const ::testing::TestParamInfo<PortableVariant>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace tailor::attention::testing
