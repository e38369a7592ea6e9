// attention::PlanDecode / RunDecode on the CUDA backend (label gpu; skips
// without a device): both kernels (TMA on sm_90a, cp.async everywhere)
// against the fp64 reference of tests/ops/decode_test_util.h on the same
// awkward batches as the CPU test; CUDA-graph capture of RunDecode once per
// batch bucket, replayed after PlanDecode with new lengths, block tables
// and queries; device-side errors (bad page ids, lengths that differ from
// the plan) dropped, recorded and reported by TakeErrors.
//
// Each case prints one line: path, case, worst relative error, plan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/decode_kernels.h"
#include "ops/decode_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

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
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create();
    if (!env.ok()) {
      ASSERT_EQ(env.status().code(), absl::StatusCode::kUnavailable)
          << env.status();
      GTEST_SKIP() << "no CUDA device: " << env.status();
    }
    env_ = *std::move(env);
    kernels_ = dynamic_cast<CudaDecodeKernels*>(
        env_->runtime().engine().backend().decode_kernels());
    ASSERT_NE(kernels_, nullptr);
    stream_ = std::make_unique<TestStream>(env_->api());
  }
  void TearDown() override {
    if (kernels_ != nullptr) kernels_->ForcePathForTesting(Path::kAuto);
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

PlanDecodeArgs PlanArgsOf(const PagedBatch& p, CUstream stream) {
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

DecodeLimits LimitsOf(const PagedCase& c, int64_t max_batch) {
  return DecodeLimits{.max_batch = max_batch,
                      .num_qo_heads = c.num_qo_heads,
                      .num_kv_heads = c.num_kv_heads,
                      .head_dim = c.head_dim,
                      .page_size = c.page_size,
                      .dtype = c.dtype};
}

// Downloads out / lse and compares them with the reference.
Errors Check(DeviceBatch& d, const PagedBatch& p, double sm_scale) {
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

double Bound(DType dtype) { return dtype == DType::kBF16 ? 1.2e-2 : 4e-3; }

std::vector<int32_t> Awkward(int32_t page, bool long_one) {
  std::vector<int32_t> lens = {0, 1, page - 1, page, page + 1, 577, 3, 0};
  if (long_one) lens.push_back(32768);
  lens.erase(
      std::remove_if(lens.begin(), lens.end(), [](int32_t n) { return n < 0; }),
      lens.end());
  return lens;
}

std::vector<PagedCase> Cases() {
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
  };
}

TEST_F(DecodeGpuTest, MatchesReferenceOnEveryPath) {
  for (const PagedCase& c : Cases()) {
    PagedBatch p = BuildPagedBatch(c);
    DeviceBatch d(api(), p);
    TAILOR_ASSERT_OK(d.Upload(p));
    DecodeWorkspace ws;
    Reserve(LimitsOf(c, c.batch()), ws);
    TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
    const bool tma_legal = env_->backend().arch() == "sm_90a" &&
                           cuda::DecodeTmaPageSize(c.page_size);
    for (Path path : {Path::kTma, Path::kCpAsync}) {
      if (path == Path::kTma && !tma_legal) continue;
      SCOPED_TRACE(absl::StrCat(path == Path::kTma ? "tma " : "cp.async ",
                                c.ToString()));
      kernels_->ForcePathForTesting(path);
      TAILOR_ASSERT_OK(d.out.Fill(0x7f));
      TAILOR_ASSERT_OK(RunDecode(runtime(), d.Args(p, device(), stream()), ws));
      TAILOR_ASSERT_OK(stream_->Synchronize());
      EXPECT_EQ(kernels_->last_path(), path);
      TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
      const Errors err = Check(d, p, 1.0 / std::sqrt(double(c.head_dim)));
      std::printf("%-9s rel %.2e lse %.2e | %s | %s\n",
                  path == Path::kTma ? "tma" : "cp.async", err.out_rel,
                  err.lse_abs, c.ToString().c_str(),
                  ws.plan().ToString().c_str());
      EXPECT_LE(err.out_rel, Bound(c.dtype)) << "worst " << err.worst;
      EXPECT_LE(err.lse_abs, 2e-3);
    }
  }
}

TEST_F(DecodeGpuTest, AutoPicksTmaOnHopperWhenLegal) {
  PagedCase c = {.lens = {100, 3},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed()};
  PagedBatch p = BuildPagedBatch(c);
  DeviceBatch d(api(), p);
  TAILOR_ASSERT_OK(d.Upload(p));
  DecodeWorkspace ws;
  Reserve(LimitsOf(c, 2), ws);
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
  TAILOR_ASSERT_OK(RunDecode(runtime(), d.Args(p, device(), stream()), ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());
  EXPECT_EQ(kernels_->last_path(),
            env_->backend().arch() == "sm_90a" ? Path::kTma : Path::kCpAsync);
}

// A graph captured once for a bucket of 8 rows replays plans of 1..8
// sequences with new lengths, block tables and queries.
TEST_F(DecodeGpuTest, GraphReplaysNewPlansInTheCapturedBuffers) {
  constexpr int64_t kRows = 8;
  std::mt19937 rng(TestSeed());
  // The largest step sizes the buffers: caches hold every step's pages.
  auto make_case = [&](int batch, uint64_t seed) {
    PagedCase c = {.page_size = 16,
                   .num_qo_heads = 32,
                   .num_kv_heads = 8,
                   .head_dim = 128,
                   .dtype = DType::kBF16,
                   .layout = KvLayout::kNhd,
                   .shared_prefix_pages = 1,
                   .padding_rows = kRows - batch,
                   .extra_pages = 0,
                   .seed = seed};
    c.lens.resize(batch);
    for (int32_t& n : c.lens) n = static_cast<int32_t>(rng() % 3000);
    return c;
  };
  // Every step uses a cache of exactly kMaxPages pages and max_pages slots,
  // so the captured views stay valid.
  constexpr int64_t kMaxPages = 8 * 3000 / 16 + 64;
  constexpr int64_t kMaxSlots = 3000 / 16 + 2;
  auto build = [&](PagedCase c) {
    c.extra_pages = 0;
    PagedBatch p = BuildPagedBatch(c);
    // Pad the cache and the table to the captured sizes.
    const int64_t page_elems = p.cache_strides[0];
    p.k.resize(kMaxPages * page_elems, 0);
    p.v.resize(kMaxPages * page_elems, 0);
    p.num_pages = kMaxPages;
    std::vector<int32_t> table(kRows * kMaxSlots, -3);
    for (int64_t b = 0; b < c.rows(); ++b) {
      for (int64_t j = 0; j < p.max_pages; ++j) {
        table[b * kMaxSlots + j] = p.block_table[b * p.max_pages + j];
      }
    }
    p.block_table = table;
    p.max_pages = kMaxSlots;
    return p;
  };
  PagedBatch first = build(make_case(kRows, TestSeed() + 10));
  DeviceBatch d(api(), first);
  TAILOR_ASSERT_OK(d.Upload(first));
  DecodeWorkspace ws;
  Reserve(LimitsOf(first.c, kRows), ws);
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(first, stream()), ws));
  const RunDecodeArgs args = d.Args(first, device(), stream());
  // Warm up (compile, shared-memory attribute) outside the capture.
  TAILOR_ASSERT_OK(RunDecode(runtime(), args, ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(
      api().cuStreamBeginCapture(stream(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      CUDA_SUCCESS);
  const absl::Status captured = RunDecode(runtime(), args, ws);
  ASSERT_EQ(api().cuStreamEndCapture(stream(), &graph), CUDA_SUCCESS);
  TAILOR_ASSERT_OK(captured);
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);

  for (int step = 0; step < 6; ++step) {
    const int batch = step == 0 ? 1 : 1 + static_cast<int>(rng() % kRows);
    PagedBatch p = build(make_case(batch, TestSeed() + 20 + step));
    if (step == 1) p.c.lens[0] = 3000;  // one long among short ones
    p = build(p.c);
    SCOPED_TRACE(absl::StrCat("step ", step, ": ", p.c.ToString()));
    TAILOR_ASSERT_OK(d.Upload(p));  // same buffers, new contents
    TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
    ASSERT_EQ(api().cuGraphLaunch(exec, stream()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
    const Errors err = Check(d, p, 1.0 / std::sqrt(128.0));
    std::printf("graph step %d rel %.2e | %s\n", step, err.out_rel,
                ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, Bound(DType::kBF16)) << err.worst;
  }
  api().cuGraphExecDestroy(exec);
  api().cuGraphDestroy(graph);
}

TEST_F(DecodeGpuTest, BadDeviceDataIsDroppedAndReported) {
  PagedCase c = {.lens = {40, 20, 33},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed()};
  PagedBatch p = BuildPagedBatch(c);
  DeviceBatch d(api(), p);
  DecodeWorkspace ws;
  Reserve(LimitsOf(c, 3), ws);
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
  for (Path path : {Path::kTma, Path::kCpAsync}) {
    if (path == Path::kTma && env_->backend().arch() != "sm_90a") continue;
    kernels_->ForcePathForTesting(path);
    // A bad page id in sequence 1 (page 1 of 2) and in sequence 2.
    PagedBatch bad = p;
    bad.block_table[1 * p.max_pages + 1] = 1 << 20;
    bad.block_table[2 * p.max_pages + 0] = -5;
    TAILOR_ASSERT_OK(d.Upload(bad));
    TAILOR_ASSERT_OK(RunDecode(runtime(), d.Args(p, device(), stream()), ws));
    EXPECT_THAT(ws.TakeErrors(runtime(), stream()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("block_table[1,1]: page id 1048576 is "
                                      "outside [0, ",
                                      p.num_pages, ")")));
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));  // taken: clean
    // Sequence 0 is untouched by the bad entries.
    PagedBatch first_only = p;
    first_only.c.lens.resize(1);
    EXPECT_LE(Check(d, first_only, 1.0 / std::sqrt(128.0)).out_rel,
              Bound(DType::kBF16));
    // A device length that differs from the plan.
    PagedBatch longer = p;
    longer.seq_lens[2] = 35;
    TAILOR_ASSERT_OK(d.Upload(longer));
    TAILOR_ASSERT_OK(RunDecode(runtime(), d.Args(p, device(), stream()), ws));
    EXPECT_THAT(ws.TakeErrors(runtime(), stream()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "seq_lens[2]: 35 differs from 33, the length "
                         "PlanDecode planned"));
  }
}

TEST_F(DecodeGpuTest, DeviceWorkspaceRules) {
  PagedCase c = {.lens = {10, 20, 30},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed()};
  PagedBatch p = BuildPagedBatch(c);
  DecodeWorkspace ws;
  EXPECT_THAT(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: no device memory")));
  Reserve(LimitsOf(c, 2), ws);
  EXPECT_THAT(
      PlanDecode(runtime(), PlanArgsOf(p, stream()), ws),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("work items")));
  absl::StatusOr<int64_t> bytes =
      DecodeWorkspaceBytes(runtime(), LimitsOf(c, 2));
  TAILOR_ASSERT_OK(bytes.status());
  DeviceBuffer memory(api(), *bytes + 256);
  EXPECT_THAT(BindDecodeWorkspace(runtime(), LimitsOf(c, 2),
                                  static_cast<char*>(memory.data()) + 16,
                                  *bytes, ws, stream()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "memory: must be non-null device memory aligned to "
                       "256 bytes"));
  EXPECT_THAT(BindDecodeWorkspace(runtime(), LimitsOf(c, 2), memory.data(),
                                  *bytes - 1, ws, stream()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bytes: must be >= DecodeWorkspaceBytes")));
}

}  // namespace
}  // namespace tailor::attention::testing
