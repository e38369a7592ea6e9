// tests/backends/cuda/attention/ragged_gpu_test_util.h — the CUDA ragged
// attention GPU tests' fixture and cases (ragged_gpu_test.cc,
// ragged_background_jit_gpu_test.cc): a step's device buffers, planning and
// running a case against the fp64 reference of
// tests/ops/attention/ragged_test_util.h, one graph replayed over steps,
// and the shared cases (the mixed step, the replayed steps, the portable
// kernel's variants). Skips without an sm_80+ device.
#ifndef TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_RAGGED_GPU_TEST_UTIL_H_
#define TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_RAGGED_GPU_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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

using cuda::testing::CudaTestRuntime;
using cuda::testing::DeviceBuffer;
using cuda::testing::TestStream;
using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;

// Runtime options with the suite's tuning ($TAILOR_TUNING, which an
// explicit Options::tuning would replace) and `keys` over it.
inline Runtime::Options OptionsWith(const std::string& keys) {
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
  // The runtime's options (subclasses: background JIT).
  virtual Runtime::Options RuntimeOptions() const {
    return CudaTestRuntime::DefaultOptions();
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create(RuntimeOptions());
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

  // Plans and runs one case on `rt` (default: the test's runtime); returns
  // its errors and leaves its plan's summary in last_plan_, the time
  // RunRagged took to return in last_run_ms_.
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
    const auto start = std::chrono::steady_clock::now();
    if (s.ok()) s = RunRagged(rt, d.Args(p, rt.device(), stream_->get()), ws);
    last_run_ms_ = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count();
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

  // Runs the (possibly corrupted) batch `p` on `rt` and returns what the
  // workspace's TakeErrors reports about the device data it met.
  absl::Status RunAndTakeErrors(Runtime& rt, const RaggedBatch& p,
                                bool flashinfer = false) {
    const RaggedCase& c = p.c;
    RaggedWorkspace ws;
    TAILOR_RETURN_IF_ERROR(
        ReserveRaggedWorkspace(rt, LimitsOf(c, c.batch(), c.total_q()), ws));
    DeviceStep d(env_->api(), c, c.rows(), c.batch(), p.num_pages, p.max_pages,
                 flashinfer);
    TAILOR_RETURN_IF_ERROR(d.Upload(p));
    PlanRaggedArgs plan = PlanArgsOf(p);
    plan.stream = stream_->get();
    TAILOR_RETURN_IF_ERROR(PlanRagged(rt, plan, ws));
    TAILOR_RETURN_IF_ERROR(
        RunRagged(rt, d.Args(p, rt.device(), stream_->get()), ws));
    TAILOR_RETURN_IF_ERROR(stream_->Synchronize());
    const absl::Status errors = ws.TakeErrors(rt, stream_->get());
    // Taken once: a second take finds the words cleared.
    EXPECT_TRUE(ws.TakeErrors(rt, stream_->get()).ok());
    return errors;
  }

  // One graph per workspace bucket, captured once on `rt` (on the first
  // step's plan), replayed after each step's PlanRagged with new lengths,
  // block tables and data in the same buffers; each step against the
  // reference.
  void ExpectGraphReplays(Runtime& rt, const std::vector<RaggedCase>& steps) {
    const RaggedCase& base = steps.front();
    constexpr int64_t kBatch = 16, kTokens = 2048, kPages = 2048,
                      kMaxPages = 300;
    RaggedWorkspace ws;
    TAILOR_ASSERT_OK(
        ReserveRaggedWorkspace(rt, LimitsOf(base, kBatch, kTokens), ws));
    DeviceStep d(env_->api(), base, kTokens, kBatch, kPages, kMaxPages);
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
      TAILOR_ASSERT_OK(PlanRagged(rt, plan, ws));
      if (i == 0) {  // capture once, on the first step's plan
        RaggedBatch shape = p;
        const RunRaggedArgs args = d.Args(shape, rt.device(), stream_->get());
        ASSERT_EQ(api.cuStreamBeginCapture(stream_->get(),
                                           CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                  CUDA_SUCCESS);
        const absl::Status captured = RunRagged(rt, args, ws);
        ASSERT_EQ(api.cuStreamEndCapture(stream_->get(), &graph), CUDA_SUCCESS);
        TAILOR_ASSERT_OK(captured);
        ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0),
                  CUDA_SUCCESS);
      }
      std::printf("graph step %zu: launching\n", i);  // a hang names its step
      std::fflush(stdout);
      ASSERT_EQ(api.cuGraphLaunch(exec, stream_->get()), CUDA_SUCCESS);
      TAILOR_ASSERT_OK(stream_->Synchronize());
      TAILOR_EXPECT_OK(ws.TakeErrors(rt, stream_->get()));
      const Errors err = d.Check(p);
      std::printf("graph step %zu rel %.2e lse %.2e | %s\n", i, err.out_rel,
                  err.lse_abs, ws.plan().ToString().c_str());
      EXPECT_LE(err.out_rel, 1e-2) << "step " << i << " " << err.worst;
    }
    if (exec != nullptr) api.cuGraphExecDestroy(exec);
    if (graph != nullptr) api.cuGraphDestroy(graph);
  }

  std::unique_ptr<CudaTestRuntime> env_;
  std::unique_ptr<TestStream> stream_;
  RaggedPlanSummary last_plan_;
  double last_run_ms_ = 0;
};

// Lengths around a 128-row tile of a group of 4 (32 tokens), 577, decode
// rows and speculative rows of 4 over prefixes, an empty sequence.
inline RaggedCase MixedStep() {
  return {.q_lens = {200, 1, 1, 4, 4, 0, 31, 32, 33, 577, 17, 129},
          .kv_lens = {700, 1000, 33, 260, 4, 9, 31, 100, 33, 577, 4000, 129},
          .num_qo_heads = 8,
          .num_kv_heads = 2,
          .head_dim = 128,
          .shared_prefix_pages = 2,
          .padding_rows = 5,
          .seed = TestSeed()};
}

// The decode kernel's bound on lse (decode_background_jit_gpu_test.cc).
inline constexpr double kDecodeLseBound = 2e-3;

// The steps a graph replays: the mixed step, decode and speculative rows
// only, and a long chunk beside short sequences.
inline std::vector<RaggedCase> ReplaySteps() {
  std::vector<RaggedCase> s(3, MixedStep());
  s[1].q_lens = {1, 1, 1, 1, 4, 4, 1};
  s[1].kv_lens = {5, 900, 33, 64, 64, 2000, 1};
  s[2].q_lens = {1024, 1, 7};
  s[2].kv_lens = {3000, 4500, 7};
  for (size_t i = 0; i < s.size(); ++i) s[i].seed = TestSeed() + i;
  return s;
}

// The replayed steps, each planned and run on its own (no graph): tells a

// One case on the portable kernel (ragged.kernel=portable, plus `tuning`).
struct PortableVariant {
  std::string name;
  RaggedCase c;
  std::string tuning;
};

inline void PrintTo(const PortableVariant& v, std::ostream* os) {
  *os << v.name;
}

// MixedStep on `page`-token pages with head_dim `d`, `hq` / `hkv` heads.
inline RaggedCase MixedWith(int64_t page, int64_t d, int64_t hq, int64_t hkv) {
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
inline RaggedCase PortableTileEdges(int64_t page, int64_t hq) {
  RaggedCase c = MixedWith(page, 128, hq, hq == 8 ? 2 : hq);
  c.q_lens = {15, 16, 17, 0, 1, 63, 64, 65, 4, 577};
  c.kv_lens = {15, 300, 17, 5, 90, 63, 1000, 200, 4, 577};
  c.padding_rows = 3;
  return c;
}

// Every dtype / head_dim / mask / soft cap / pack / split case of the
// sm_90a kernel's tests, on page sizes 1, 3, 8, 16, 24 and 128.
inline std::vector<PortableVariant> PortableVariants() {
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

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_RAGGED_GPU_TEST_UTIL_H_
