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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/cuda/cuda_test_util.h"
#include "ops/attention/ragged_host_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

using cuda::testing::CudaTestRuntime;
using cuda::testing::DeviceBuffer;
using cuda::testing::TestStream;
using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;

// Runtime options with the suite's tuning ($TAILOR_TUNING, which an
// explicit Options::tuning would replace) and `keys` over it.
Runtime::Options OptionsWith(const std::string& keys) {
  std::map<std::string, std::string> merged;
  auto add = [&merged](absl::string_view text) {
    for (absl::string_view entry :
         absl::StrSplit(text, ',', absl::SkipWhitespace())) {
      const std::pair<std::string, std::string> kv =
          absl::StrSplit(entry, absl::MaxSplits('=', 1));
      merged[std::string(absl::StripAsciiWhitespace(kv.first))] =
          std::string(absl::StripAsciiWhitespace(kv.second));
    }
  };
  if (const char* suite = std::getenv("TAILOR_TUNING")) add(suite);
  add(keys);
  std::vector<std::string> entries;
  for (const auto& [key, value] : merged) {
    entries.push_back(absl::StrCat(key, "=", value));
  }
  Runtime::Options options = CudaTestRuntime::DefaultOptions();
  options.tuning = absl::StrJoin(entries, ",");
  return options;
}

// Device copies of a step in buffers sized for `cap` (the largest step of
// a test), so that a captured graph keeps its pointers and shapes:
//   q / out [cap.rows, Hq, D], caches [cap_pages, ...], block table
//   [cap.batch, cap_max_pages], or with `flashinfer` the step's kv_indices
//   [nnz] and page_indptr [B + 1] (FlashInfer's form).
struct DeviceStep {
  DeviceStep(const cuda::DriverApi& api, const RaggedCase& c, int64_t rows,
             int64_t batch, int64_t pages, int64_t max_pages,
             bool flashinfer = false)
      : flashinfer(flashinfer),
        rows(rows),
        batch(batch),
        pages(pages),
        max_pages(max_pages),
        q(api, rows * c.num_qo_heads * c.head_dim * 2),
        out(api, rows * c.num_qo_heads * c.head_dim * 2),
        lse(api, rows * c.num_qo_heads * 4),
        k(api, pages * c.page_size * c.num_kv_heads * c.head_dim * 2),
        v(api, pages * c.page_size * c.num_kv_heads * c.head_dim * 2),
        table(api, batch * max_pages * 4),
        indptr(api, (batch + 1) * 4) {}

  // Uploads `p` (which must fit) and poisons the outputs.
  absl::Status Upload(const RaggedBatch& p) {
    TAILOR_RETURN_IF_ERROR(q.Upload(p.q.data(), p.q.size() * 2));
    TAILOR_RETURN_IF_ERROR(k.Fill(0xff));  // NaN in unused pages
    TAILOR_RETURN_IF_ERROR(v.Fill(0xff));
    TAILOR_RETURN_IF_ERROR(k.Upload(p.k.data(), p.k.size() * 2));
    TAILOR_RETURN_IF_ERROR(v.Upload(p.v.data(), p.v.size() * 2));
    std::vector<int32_t> padded(batch * max_pages, -7);
    for (int64_t b = 0; b < p.c.batch(); ++b) {
      std::copy_n(&p.block_table[b * p.max_pages], p.max_pages,
                  &padded[b * max_pages]);
    }
    TAILOR_RETURN_IF_ERROR(table.Upload(padded));
    if (flashinfer) {
      TAILOR_RETURN_IF_ERROR(table.Upload(p.kv_indices));
      TAILOR_RETURN_IF_ERROR(indptr.Upload(p.page_indptr));
    }
    TAILOR_RETURN_IF_ERROR(out.Fill(0x7f));
    return lse.Fill(0x7f);
  }

  RunRaggedArgs Args(const RaggedBatch& p, Device device, CUstream stream) {
    const RaggedCase& c = p.c;
    RunRaggedArgs args;
    args.q = TensorRef::Contiguous(q.data(), c.dtype,
                                   {rows, c.num_qo_heads, c.head_dim}, device);
    args.out = TensorRef::Contiguous(
        out.data(), c.dtype, {rows, c.num_qo_heads, c.head_dim}, device);
    args.lse = TensorRef::Contiguous(lse.data(), DType::kF32,
                                     {rows, c.num_qo_heads}, device);
    RaggedBatch shape = p;  // the caches' strides at `pages` pages
    shape.num_pages = pages;
    args.k_cache = shape.CacheRef(k.data(), device);
    args.v_cache = shape.CacheRef(v.data(), device);
    args.block_table = TensorRef::Contiguous(table.data(), DType::kI32,
                                             {batch, max_pages}, device);
    if (flashinfer) {
      const int64_t nnz = static_cast<int64_t>(p.kv_indices.size());
      args.block_table = TensorRef::Contiguous(
          table.data(), DType::kI32, {std::max<int64_t>(nnz, 1)}, device);
      args.page_indptr = TensorRef::Contiguous(indptr.data(), DType::kI32,
                                               {c.batch() + 1}, device);
    }
    args.logits_soft_cap = c.soft_cap;
    args.stream = stream;
    return args;
  }

  // out / lse of the step's rows against the reference.
  Errors Check(const RaggedBatch& p) {
    absl::StatusOr<std::vector<uint8_t>> out_bytes = out.Download();
    absl::StatusOr<std::vector<uint8_t>> lse_bytes = lse.Download();
    if (!out_bytes.ok() || !lse_bytes.ok()) return {.out_rel = INFINITY};
    std::vector<uint16_t> o(out_bytes->size() / 2);
    std::memcpy(o.data(), out_bytes->data(), out_bytes->size());
    std::vector<float> l(lse_bytes->size() / 4);
    std::memcpy(l.data(), lse_bytes->data(), lse_bytes->size());
    return CompareRagged(
        p, RaggedReference(p, 1.0 / std::sqrt(double(p.c.head_dim))), o, &l);
  }

  bool flashinfer;
  int64_t rows, batch, pages, max_pages;
  DeviceBuffer q, out, lse, k, v, table, indptr;
};

class RaggedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create();
    if (!env.ok()) {
      ASSERT_EQ(env.status().code(), absl::StatusCode::kUnavailable)
          << env.status();
      GTEST_SKIP() << "no CUDA device: " << env.status();
    }
    env_ = *std::move(env);
    if (env_->backend().compute_capability() < 80) {
      GTEST_SKIP() << "the ragged kernels need sm_80 or newer, device is "
                   << env_->backend().arch();
    }
    stream_ = std::make_unique<TestStream>(env_->api());
  }
  Runtime& runtime() { return env_->runtime(); }

  RaggedLimits LimitsOf(const RaggedCase& c, int64_t batch, int64_t tokens) {
    return {.max_batch = batch,
            .max_tokens = tokens,
            .num_qo_heads = c.num_qo_heads,
            .num_kv_heads = c.num_kv_heads,
            .head_dim = c.head_dim,
            .page_size = c.page_size,
            .dtype = c.dtype,
            .causal = c.causal,
            .window_left = c.window_left};
  }

  // Plans and runs one case on `rt` (default: the test's runtime); returns
  // its errors and leaves its plan's summary in last_plan_.
  Errors RunCase(const RaggedCase& c, bool flashinfer = false) {
    return RunCase(c, runtime(), flashinfer);
  }
  Errors RunCase(const RaggedCase& c, Runtime& rt, bool flashinfer = false) {
    RaggedBatch p = BuildRaggedBatch(c);
    RaggedWorkspace ws;
    const int64_t rows = std::max<int64_t>(c.rows(), 1);
    EXPECT_TRUE(
        ReserveRaggedWorkspace(rt, LimitsOf(c, c.batch(), c.total_q()), ws)
            .ok());
    DeviceStep d(env_->api(), c, rows, std::max<int64_t>(c.batch(), 1),
                 std::max<int64_t>(p.num_pages, 1), p.max_pages, flashinfer);
    EXPECT_TRUE(d.Upload(p).ok());
    PlanRaggedArgs plan = PlanArgsOf(p);
    plan.stream = stream_->get();
    absl::Status s = PlanRagged(rt, plan, ws);
    if (s.ok()) s = RunRagged(rt, d.Args(p, rt.device(), stream_->get()), ws);
    if (s.ok()) s = stream_->Synchronize();
    if (s.ok()) s = ws.TakeErrors(rt, stream_->get());
    EXPECT_TRUE(s.ok()) << s;
    last_plan_ = ws.plan();
    if (!s.ok()) return {.out_rel = INFINITY};
    const Errors err = d.Check(p);
    std::printf("%-8s rel %.2e lse %.2e | %s | %s\n",
                std::string(DTypeName(c.dtype)).c_str(), err.out_rel,
                err.lse_abs, ws.plan().ToString().c_str(),
                c.ToString().substr(0, 90).c_str());
    return err;
  }

  std::unique_ptr<CudaTestRuntime> env_;
  std::unique_ptr<TestStream> stream_;
  RaggedPlanSummary last_plan_;
};

// Lengths around a 128-row tile of a group of 4 (32 tokens), 577, decode
// rows and speculative rows of 4 over prefixes, an empty sequence.
RaggedCase MixedStep() {
  return {.q_lens = {200, 1, 1, 4, 4, 0, 31, 32, 33, 577, 17, 129},
          .kv_lens = {700, 1000, 33, 260, 4, 9, 31, 100, 33, 577, 4000, 129},
          .num_qo_heads = 8,
          .num_kv_heads = 2,
          .head_dim = 128,
          .shared_prefix_pages = 2,
          .padding_rows = 5,
          .seed = TestSeed()};
}

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

// The decode kernel's bound on lse (decode_background_jit_gpu_test.cc).
constexpr double kDecodeLseBound = 2e-3;

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

// The steps a graph replays: the mixed step, decode and speculative rows
// only, and a long chunk beside short sequences.
std::vector<RaggedCase> ReplaySteps() {
  std::vector<RaggedCase> s(3, MixedStep());
  s[1].q_lens = {1, 1, 1, 1, 4, 4, 1};
  s[1].kv_lens = {5, 900, 33, 64, 64, 2000, 1};
  s[2].q_lens = {1024, 1, 7};
  s[2].kv_lens = {3000, 4500, 7};
  for (size_t i = 0; i < s.size(); ++i) s[i].seed = TestSeed() + i;
  return s;
}

// The replayed steps, each planned and run on its own (no graph): tells a
// plan's failure from the graph's.
TEST_F(RaggedGpuTest, ReplayStepsRunDirectly) {
  for (const RaggedCase& c : ReplaySteps()) {
    EXPECT_LE(RunCase(c).out_rel, 1e-2);
  }
}

// One graph per workspace bucket, captured once, replayed after each step's
// PlanRagged with new lengths, block tables and data in the same buffers.
TEST_F(RaggedGpuTest, GraphReplaysNewLengths) {
  const RaggedCase base = MixedStep();
  constexpr int64_t kBatch = 16, kTokens = 2048, kPages = 2048, kMaxPages = 300;
  RaggedWorkspace ws;
  TAILOR_ASSERT_OK(
      ReserveRaggedWorkspace(runtime(), LimitsOf(base, kBatch, kTokens), ws));
  DeviceStep d(env_->api(), base, kTokens, kBatch, kPages, kMaxPages);
  const std::vector<RaggedCase> steps = ReplaySteps();
  const cuda::DriverApi& api = env_->api();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  for (size_t i = 0; i < steps.size(); ++i) {
    RaggedBatch p = BuildRaggedBatch(steps[i]);
    ASSERT_LE(p.num_pages, kPages);
    ASSERT_LE(p.max_pages, kMaxPages);
    TAILOR_ASSERT_OK(d.Upload(p));
    PlanRaggedArgs plan = PlanArgsOf(p);
    plan.stream = stream_->get();
    TAILOR_ASSERT_OK(PlanRagged(runtime(), plan, ws));
    if (i == 0) {  // capture once, on the first step's plan
      RaggedBatch shape = p;
      const RunRaggedArgs args =
          d.Args(shape, runtime().device(), stream_->get());
      ASSERT_EQ(api.cuStreamBeginCapture(stream_->get(),
                                         CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                CUDA_SUCCESS);
      const absl::Status captured = RunRagged(runtime(), args, ws);
      ASSERT_EQ(api.cuStreamEndCapture(stream_->get(), &graph), CUDA_SUCCESS);
      TAILOR_ASSERT_OK(captured);
      ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    }
    std::printf("graph step %zu: launching\n", i);  // a hang names its step
    std::fflush(stdout);
    ASSERT_EQ(api.cuGraphLaunch(exec, stream_->get()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream_->get()));
    const Errors err = d.Check(p);
    std::printf("graph step %zu rel %.2e lse %.2e | %s\n", i, err.out_rel,
                err.lse_abs, ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, 1e-2) << "step " << i << " " << err.worst;
  }
  if (exec != nullptr) api.cuGraphExecDestroy(exec);
  if (graph != nullptr) api.cuGraphDestroy(graph);
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
  RaggedCase c = MixedStep();
  RaggedBatch p = BuildRaggedBatch(c);
  const int32_t nnz = static_cast<int32_t>(p.kv_indices.size());
  p.page_indptr[10] = nnz + 3;  // sequence 9 (577 tokens): [.., nnz + 3)
  RaggedWorkspace ws;
  TAILOR_ASSERT_OK(ReserveRaggedWorkspace(
      runtime(), LimitsOf(c, c.batch(), c.total_q()), ws));
  DeviceStep d(env_->api(), c, c.rows(), c.batch(), p.num_pages, p.max_pages,
               /*flashinfer=*/true);
  TAILOR_ASSERT_OK(d.Upload(p));
  PlanRaggedArgs plan = PlanArgsOf(p);
  plan.stream = stream_->get();
  TAILOR_ASSERT_OK(PlanRagged(runtime(), plan, ws));
  TAILOR_ASSERT_OK(
      RunRagged(runtime(), d.Args(p, runtime().device(), stream_->get()), ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());
  EXPECT_THAT(ws.TakeErrors(runtime(), stream_->get()),
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
  RaggedCase c = MixedStep();
  RaggedBatch p = BuildRaggedBatch(c);
  p.page_indptr[2] -= 1;  // sequence 1 (a decode row over 1000 tokens)
  RaggedWorkspace ws;
  TAILOR_ASSERT_OK(ReserveRaggedWorkspace(
      runtime(), LimitsOf(c, c.batch(), c.total_q()), ws));
  DeviceStep d(env_->api(), c, c.rows(), c.batch(), p.num_pages, p.max_pages,
               /*flashinfer=*/true);
  TAILOR_ASSERT_OK(d.Upload(p));
  PlanRaggedArgs plan = PlanArgsOf(p);
  plan.stream = stream_->get();
  TAILOR_ASSERT_OK(PlanRagged(runtime(), plan, ws));
  TAILOR_ASSERT_OK(
      RunRagged(runtime(), d.Args(p, runtime().device(), stream_->get()), ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());
  EXPECT_THAT(ws.TakeErrors(runtime(), stream_->get()),
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
    RaggedWorkspace ws;
    TAILOR_ASSERT_OK(ReserveRaggedWorkspace(
        *run.rt, LimitsOf(c, c.batch(), c.total_q()), ws));
    DeviceStep d(env_->api(), c, c.rows(), c.batch(), p.num_pages, p.max_pages);
    TAILOR_ASSERT_OK(d.Upload(p));
    PlanRaggedArgs plan = PlanArgsOf(p);
    plan.stream = stream_->get();
    TAILOR_ASSERT_OK(PlanRagged(*run.rt, plan, ws));
    TAILOR_ASSERT_OK(
        RunRagged(*run.rt, d.Args(p, run.rt->device(), stream_->get()), ws));
    TAILOR_ASSERT_OK(stream_->Synchronize());
    EXPECT_THAT(ws.TakeErrors(*run.rt, stream_->get()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("block_table[", run.seq,
                                      ",2]: page id 99999 is outside [0, ",
                                      p.num_pages, ")")));
    TAILOR_EXPECT_OK(ws.TakeErrors(*run.rt, stream_->get()));  // cleared
  }
}

// ---- the portable kernel ----------------------------------------------------

// One case on the portable kernel (ragged.kernel=portable, plus `tuning`).
struct PortableVariant {
  std::string name;
  RaggedCase c;
  std::string tuning;
};

void PrintTo(const PortableVariant& v, std::ostream* os) { *os << v.name; }

// MixedStep on `page`-token pages with head_dim `d`, `hq` / `hkv` heads.
RaggedCase MixedWith(int64_t page, int64_t d, int64_t hq, int64_t hkv) {
  RaggedCase c = MixedStep();
  c.page_size = page;
  c.head_dim = d;
  c.num_qo_heads = hq;
  c.num_kv_heads = hkv;
  return c;
}

// Around the portable kernel's 64-row tiles (16 tokens at pack 4, 64 at
// pack 1): q lengths tile - 1, tile, tile + 1, four tiles +- 1 and 577,
// over prefixes, with decode and speculative rows and an empty sequence.
RaggedCase PortableTileEdges(int64_t page, int64_t hq) {
  RaggedCase c = MixedWith(page, 128, hq, hq == 8 ? 2 : hq);
  c.q_lens = {15, 16, 17, 0, 1, 63, 64, 65, 4, 577};
  c.kv_lens = {15, 300, 17, 5, 90, 63, 1000, 200, 4, 577};
  c.padding_rows = 3;
  return c;
}

// Every dtype / head_dim / mask / soft cap / pack / split case of the
// sm_90a kernel's tests, on page sizes 1, 3, 8, 16, 24 and 128.
std::vector<PortableVariant> PortableVariants() {
  std::vector<PortableVariant> v;
  // Edits go through the returned reference before the next add.
  auto add = [&v](std::string name, RaggedCase c,
                  std::string tuning = "") -> RaggedCase& {
    v.push_back({std::move(name), std::move(c), std::move(tuning)});
    return v.back().c;
  };
  add("Page1", MixedWith(1, 128, 8, 2));
  {
    RaggedCase& c = add("Page3F16HndWindow", MixedWith(3, 128, 8, 2));
    c.dtype = DType::kF16;
    c.layout = KvLayout::kHnd;
    c.window_left = 100;
  }
  {
    RaggedCase& c = add("Page8NonCausalSoftCap", MixedWith(8, 128, 8, 2));
    c.causal = false;
    c.soft_cap = 20.0f;
  }
  {
    RaggedCase& c = add("Page16SoftCapF16", MixedWith(16, 128, 8, 2));
    c.dtype = DType::kF16;
    c.soft_cap = 30.0f;
  }
  add("Page24D256Pack4", MixedWith(24, 256, 16, 4));
  add("Page16D256Pack1", MixedWith(16, 256, 8, 8));
  add("Page16D64Pack8", MixedWith(16, 64, 32, 4));
  add("Page128Pack16", MixedWith(128, 128, 16, 1));
  {
    RaggedCase& c = add("Page24D64Group1F16Hnd", MixedWith(24, 64, 8, 8));
    c.dtype = DType::kF16;
    c.layout = KvLayout::kHnd;
  }
  add("TileEdgesPage3", PortableTileEdges(3, 8));
  add("TileEdgesPack1Page1", PortableTileEdges(1, 4));
  add("TileEdgesWindowPage24", PortableTileEdges(24, 8)).window_left = 40;
  add("DecodeRowsAsTilesPage3", MixedWith(3, 128, 8, 2),
      "ragged.decode_rows=prefill");
  {
    RaggedCase& c = add("SplitLongPage24", MixedWith(24, 128, 8, 2));
    c.q_lens = {1, 64, 300};
    c.kv_lens = {32768, 20000, 9000};
  }
  {
    RaggedCase& c = add("SplitLongD256Page16", MixedWith(16, 256, 8, 2));
    c.q_lens = {64, 5};
    c.kv_lens = {20000, 12000};
  }
  return v;
}

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
