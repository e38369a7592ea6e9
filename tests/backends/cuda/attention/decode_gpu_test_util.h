// tests/backends/cuda/attention/decode_gpu_test_util.h — the paged-decode GPU tests'
// fixture (a CUDA runtime, a stream, workspaces; skips without a device),
// device copies of a PagedBatch, the comparison with the fp64 reference of
// tests/ops/attention/decode_test_util.h, and the awkward cases both decode GPU tests
// run.
#ifndef TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_DECODE_GPU_TEST_UTIL_H_
#define TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_DECODE_GPU_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/cuda_test_util.h"
#include "ops/attention/decode_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"
#include "test_util.h"

namespace tailor::attention::testing {

using cuda::CudaDecodeKernels;
using cuda::testing::CudaTestRuntime;
using cuda::testing::DeviceBuffer;
using cuda::testing::TestStream;
using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;
using ::testing::HasSubstr;
using Path = CudaDecodeKernels::Path;

class DecodeGpuTest : public ::testing::Test {
 protected:
  // The runtime's options (subclasses: background JIT, ...).
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
    kernels_ = dynamic_cast<CudaDecodeKernels*>(
        tailor::internal::EngineOf(env_->runtime()).backend().decode_kernels());
    ASSERT_NE(kernels_, nullptr);
    stream_ = std::make_unique<TestStream>(env_->api());
  }
  void TearDown() override {
    if (kernels_ != nullptr) {
      kernels_->ForcePathForTesting(Path::kAuto);
      kernels_->ForceHeadGroupForTesting(0);
    }
  }

  Runtime& runtime() { return env_->runtime(); }
  const cuda::DriverApi& api() { return env_->api(); }
  CUstream stream() { return stream_->get(); }
  Device device() { return runtime().device(); }

  // Reserves `ws` for `limits`: ReserveDecodeWorkspace, or, while the CUDA
  // backend lacks AllocateDevice, BindDecodeWorkspace on test memory.
  void Reserve(const DecodeLimits& limits, DecodeWorkspace& ws) {
    absl::Status reserved = ReserveDecodeWorkspace(runtime(), limits, ws);
    if (reserved.ok()) return;
    ASSERT_EQ(reserved.code(), absl::StatusCode::kUnimplemented) << reserved;
    absl::StatusOr<int64_t> bytes = DecodeWorkspaceBytes(runtime(), limits);
    TAILOR_ASSERT_OK(bytes.status());
    bound_.push_back(std::make_unique<DeviceBuffer>(api(), *bytes));
    TAILOR_ASSERT_OK(BindDecodeWorkspace(
        runtime(), limits, bound_.back()->data(), *bytes, ws, stream()));
  }

  // Plans `c` and runs it on every path the device has (TMA where legal,
  // cp.async), each against the fp64 reference, one line each prefixed by
  // `label`. `head_group` > 0: the plan's head group must be that.
  // `clusters`: the plan must launch in clusters on Hopper (none
  // elsewhere).
  void CheckEveryPath(const PagedCase& c, const char* label, int head_group = 0,
                      bool clusters = false);

  std::unique_ptr<CudaTestRuntime> env_;
  CudaDecodeKernels* kernels_ = nullptr;
  std::unique_ptr<TestStream> stream_;
  std::vector<std::unique_ptr<DeviceBuffer>> bound_;
};

// One batch on the device: inputs uploaded, outputs poisoned.
struct DeviceBatch {
  DeviceBatch(const cuda::DriverApi& api, const PagedBatch& p)
      : q(api, p.q.size() * 2),
        k(api, p.k.size() * 2),
        v(api, p.v.size() * 2),
        table(api, p.block_table.size() * 4),
        lens(api, p.seq_lens.size() * 4),
        out(api, p.c.rows() * p.c.num_qo_heads * p.c.head_dim * 2),
        lse(api, p.c.rows() * p.c.num_qo_heads * 4) {}
  absl::Status Upload(const PagedBatch& p) {
    TAILOR_RETURN_IF_ERROR(q.Upload(p.q));
    TAILOR_RETURN_IF_ERROR(k.Upload(p.k));
    TAILOR_RETURN_IF_ERROR(v.Upload(p.v));
    TAILOR_RETURN_IF_ERROR(table.Upload(p.block_table));
    TAILOR_RETURN_IF_ERROR(lens.Upload(p.seq_lens));
    TAILOR_RETURN_IF_ERROR(out.Fill(0x7f));  // NaN-ish poison
    return lse.Fill(0x7f);
  }
  RunDecodeArgs Args(const PagedBatch& p, Device device, CUstream stream) {
    RunDecodeArgs args;
    args.q = p.QRef(q.data(), device);
    args.k_cache = p.CacheRef(k.data(), device);
    args.v_cache = p.CacheRef(v.data(), device);
    args.block_table = p.TableRef(table.data(), device);
    args.seq_lens = p.LensRef(lens.data(), device);
    args.out = p.OutRef(out.data(), device);
    args.lse = p.LseRef(lse.data(), device);
    args.logits_soft_cap = p.c.soft_cap;
    args.stream = stream;
    return args;
  }
  DeviceBuffer q, k, v, table, lens, out, lse;
};

// One RunDecode captured in a CUDA graph on its args' stream, for the
// graph tests: Capture once, then Launch after each new plan; the graph and
// its executable go with the object.
class DecodeGraph {
 public:
  explicit DecodeGraph(const cuda::DriverApi& api) : api_(api) {}
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;
  ~DecodeGraph() {
    if (exec_ != nullptr) api_.cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) api_.cuGraphDestroy(graph_);
  }

  absl::Status Capture(Runtime& runtime, const RunDecodeArgs& args,
                       DecodeWorkspace& ws) {
    CUstream stream = static_cast<CUstream>(args.stream);
    TAILOR_RETURN_IF_ERROR(cuda::CudaResultToStatus(
        api_.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture"));
    const absl::Status captured = RunDecode(runtime, args, ws);
    TAILOR_RETURN_IF_ERROR(cuda::CudaResultToStatus(
        api_.cuStreamEndCapture(stream, &graph_), "cuStreamEndCapture"));
    TAILOR_RETURN_IF_ERROR(captured);
    return cuda::CudaResultToStatus(
        api_.cuGraphInstantiateWithFlags(&exec_, graph_, 0),
        "cuGraphInstantiateWithFlags");
  }

  CUresult Launch(CUstream stream) const {
    return api_.cuGraphLaunch(exec_, stream);
  }

 private:
  const cuda::DriverApi& api_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

inline PlanDecodeArgs PlanArgsOf(const PagedBatch& p, CUstream stream) {
  const PagedCase& c = p.c;
  return PlanDecodeArgs{.seq_lens = TensorRef::Contiguous(
                            p.seq_lens.data(), DType::kI32, {c.batch()}),
                        .page_size = c.page_size,
                        .num_qo_heads = c.num_qo_heads,
                        .num_kv_heads = c.num_kv_heads,
                        .head_dim = c.head_dim,
                        .dtype = c.dtype,
                        .stream = stream};
}

inline DecodeLimits LimitsOf(const PagedCase& c, int64_t max_batch) {
  return DecodeLimits{.max_batch = max_batch,
                      .num_qo_heads = c.num_qo_heads,
                      .num_kv_heads = c.num_kv_heads,
                      .head_dim = c.head_dim,
                      .page_size = c.page_size,
                      .dtype = c.dtype};
}

// Downloads out / lse and compares them with the reference.
inline Errors Check(DeviceBatch& d, const PagedBatch& p, double sm_scale) {
  absl::StatusOr<std::vector<uint8_t>> out_bytes = d.out.Download();
  absl::StatusOr<std::vector<uint8_t>> lse_bytes = d.lse.Download();
  EXPECT_TRUE(out_bytes.ok() && lse_bytes.ok());
  if (!out_bytes.ok() || !lse_bytes.ok()) return {.out_rel = INFINITY};
  std::vector<uint16_t> out(out_bytes->size() / 2);
  std::memcpy(out.data(), out_bytes->data(), out_bytes->size());
  std::vector<float> lse(lse_bytes->size() / 4);
  std::memcpy(lse.data(), lse_bytes->data(), lse_bytes->size());
  return Compare(p, Reference(p, sm_scale), out, &lse);
}

inline double Bound(DType dtype) {
  return dtype == DType::kBF16 ? 1.2e-2 : 4e-3;
}

inline std::vector<int32_t> Awkward(int32_t page, bool long_one) {
  std::vector<int32_t> lens = {0, 1, page - 1, page, page + 1, 577, 3, 0};
  if (long_one) lens.push_back(32768);
  lens.erase(
      std::remove_if(lens.begin(), lens.end(), [](int32_t n) { return n < 0; }),
      lens.end());
  return lens;
}

inline std::vector<PagedCase> Cases() {
  const uint64_t seed = TestSeed();
  return {
      {.lens = Awkward(16, true),
       .page_size = 16,
       .num_qo_heads = 32,
       .num_kv_heads = 8,
       .head_dim = 128,
       .dtype = DType::kBF16,
       .layout = KvLayout::kNhd,
       .shared_prefix_pages = 2,
       .padding_rows = 2,
       .q_padding = 64,
       .seed = seed},
      {.lens = Awkward(16, false),
       .page_size = 16,
       .num_qo_heads = 32,
       .num_kv_heads = 4,
       .head_dim = 128,
       .dtype = DType::kF16,
       .layout = KvLayout::kHnd,
       .shared_prefix_pages = 3,
       .seed = seed + 1},
      {.lens = Awkward(8, false),
       .page_size = 8,
       .num_qo_heads = 2,
       .num_kv_heads = 2,
       .head_dim = 64,
       .dtype = DType::kF16,
       .layout = KvLayout::kNhd,
       .shared_prefix_pages = 1,
       .seed = seed + 2},
      {.lens = {577, 255, 256, 257, 0, 1},
       .page_size = 256,
       .num_qo_heads = 16,
       .num_kv_heads = 1,
       .head_dim = 256,
       .dtype = DType::kBF16,
       .layout = KvLayout::kHnd,
       .shared_prefix_pages = 1,
       .seed = seed + 3},
      {.lens = Awkward(64, false),
       .page_size = 64,
       .num_qo_heads = 12,
       .num_kv_heads = 4,
       .head_dim = 256,
       .dtype = DType::kF16,
       .layout = KvLayout::kNhd,
       .soft_cap = 5.0f,
       .seed = seed + 4},
      {.lens = Awkward(1, false),
       .page_size = 1,
       .num_qo_heads = 8,
       .num_kv_heads = 1,
       .head_dim = 128,
       .dtype = DType::kBF16,
       .layout = KvLayout::kHnd,
       .shared_prefix_pages = 4,
       .seed = seed + 5},
      {.lens = Awkward(5, false),
       .page_size = 5,
       .num_qo_heads = 6,
       .num_kv_heads = 2,
       .head_dim = 64,
       .dtype = DType::kBF16,
       .layout = KvLayout::kNhd,
       .shared_prefix_pages = 2,
       .padding_rows = 1,
       .seed = seed + 6},
      {.lens = {4096},
       .page_size = 16,
       .num_qo_heads = 32,
       .num_kv_heads = 8,
       .head_dim = 128,
       .dtype = DType::kBF16,
       .seed = seed + 7},
      // Qwen3's heads at B = 1: 32 pieces a pair, more than the merge
      // folds in one pass of loads (DecodeMergePieces' kUnroll, 16).
      {.lens = {4096},
       .page_size = 16,
       .num_qo_heads = 32,
       .num_kv_heads = 4,
       .head_dim = 128,
       .dtype = DType::kF16,
       .layout = KvLayout::kHnd,
       .seed = seed + 8},
  };
}

inline void DecodeGpuTest::CheckEveryPath(const PagedCase& c, const char* label,
                                          int head_group, bool clusters) {
  PagedBatch p = BuildPagedBatch(c);
  DeviceBatch d(api(), p);
  TAILOR_ASSERT_OK(d.Upload(p));
  DecodeWorkspace ws;
  Reserve(LimitsOf(c, c.batch()), ws);
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
  if (head_group > 0) {
    EXPECT_EQ(ws.plan().head_group, head_group);
  }
  if (clusters) {
    const bool hopper = env_->backend().arch() == "sm_90a";
    EXPECT_EQ(ws.plan().cluster_workers > 0, hopper);
  }
  const bool tma_legal = env_->backend().arch() == "sm_90a" &&
                         cuda::DecodeTmaPageSize(c.page_size);
  for (Path path : {Path::kTma, Path::kCpAsync}) {
    if (path == Path::kTma && !tma_legal) continue;
    const char* name = path == Path::kTma ? "tma" : "cp.async";
    SCOPED_TRACE(absl::StrCat(label, name, " ", c.ToString()));
    kernels_->ForcePathForTesting(path);
    TAILOR_ASSERT_OK(d.out.Fill(0x7f));
    TAILOR_ASSERT_OK(RunDecode(runtime(), d.Args(p, device(), stream()), ws));
    TAILOR_ASSERT_OK(stream_->Synchronize());
    EXPECT_EQ(kernels_->last_path(), path);
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
    const Errors err = Check(d, p, 1.0 / std::sqrt(double(c.head_dim)));
    std::printf("%s%-9s rel %.2e lse %.2e | %s | %s\n", label, name,
                err.out_rel, err.lse_abs, c.ToString().c_str(),
                ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, Bound(c.dtype)) << "worst " << err.worst;
    EXPECT_LE(err.lse_abs, 2e-3);
  }
}

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_BACKENDS_CUDA_ATTENTION_DECODE_GPU_TEST_UTIL_H_
