// attention::PlanDecode / RunDecode on the CUDA backend (label gpu; skips
// without a device): both kernels (TMA on sm_90a, cp.async everywhere)
// against the fp64 reference of tests/ops/attention/decode_test_util.h on the same
// awkward batches as the CPU test; CUDA-graph capture of RunDecode once per
// batch bucket, replayed after PlanDecode with new lengths, block tables
// and queries; device-side errors (bad page ids, lengths that differ from
// the plan) dropped, recorded and reported by TakeErrors.
//
// Each case prints one line: path, case, worst relative error, plan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/decode_gpu_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/stats.h"
#include "tailor/status.h"
#include "templates/cuda/attention/decode_params.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

TEST_F(DecodeGpuTest, MatchesReferenceOnEveryPath) {
  for (const PagedCase& c : Cases()) CheckEveryPath(c, "");
}

// Head groups (kDecodeLaunchHeadGroups): plans whose items run 4 KV heads
// together, forced on every case the TMA kernel runs them for (pages of 16,
// KV heads a multiple of 4), on both paths: the TMA kernel loads a page of
// 4 heads a copy; the cp.async kernel runs the same items one by one.
TEST_F(DecodeGpuTest, HeadGroupsMatchTheReference) {
  std::vector<PagedCase> cases;
  for (const PagedCase& c : Cases()) {
    if (c.page_size == 16 && c.num_kv_heads % 4 == 0) cases.push_back(c);
  }
  std::mt19937 rng(TestSeed());
  PagedCase wide = {.page_size = 16,  // D = 256; 64 sequences split units
                    .num_qo_heads = 16,
                    .num_kv_heads = 4,
                    .head_dim = 256,
                    .dtype = DType::kBF16,
                    .layout = KvLayout::kHnd,
                    .shared_prefix_pages = 1,
                    .seed = TestSeed() + 30};
  for (int i = 0; i < 64; ++i) wide.lens.push_back(rng() % 1500);
  wide.lens[5] = 9000;
  cases.push_back(wide);
  cases.push_back({.lens = {0, 1, 15, 16, 17, 577, 2049},
                   .page_size = 16,
                   .num_qo_heads = 8,  // MHA, D = 64
                   .num_kv_heads = 8,
                   .head_dim = 64,
                   .dtype = DType::kF16,
                   .layout = KvLayout::kNhd,
                   .padding_rows = 1,
                   .seed = TestSeed() + 31});
  const bool hopper = env_->backend().arch() == "sm_90a";
  kernels_->ForceHeadGroupForTesting(cuda::kDecodeHeadGroup);
  for (const PagedCase& c : cases) {
    CheckEveryPath(c, "heads ", hopper ? cuda::kDecodeHeadGroup : 1);
  }
}

// Cluster merges: workspaces of 1-3 sequences launch in clusters on Hopper
// (Qwen3's 4 KV heads at B = 1 in clusters of 16, Llama's 8 or Qwen3's B =
// 2 in clusters of 8), and a split pair's pieces merge in the shared memory
// of its first piece's CTA; short pairs are not split; the cp.async path
// runs the same plan without clusters.
TEST_F(DecodeGpuTest, ClusterMergesMatchTheReference) {
  std::vector<PagedCase> cases;
  uint64_t seed = TestSeed() + 40;
  for (const std::vector<int32_t>& lens :
       {std::vector<int32_t>{4096}, std::vector<int32_t>{32768},
        std::vector<int32_t>{577}, std::vector<int32_t>{0},
        std::vector<int32_t>{1}, std::vector<int32_t>{17, 20000},
        std::vector<int32_t>{0, 1, 5000}}) {
    for (int64_t kv_heads : {4, 8}) {
      cases.push_back(
          {.lens = lens,
           .page_size = 16,
           .num_qo_heads = 32,
           .num_kv_heads = kv_heads,
           .head_dim = 128,
           .dtype = kv_heads == 4 ? DType::kBF16 : DType::kF16,
           .layout = kv_heads == 4 ? KvLayout::kHnd : KvLayout::kNhd,
           .shared_prefix_pages = 1,
           .seed = seed++});
    }
  }
  for (const PagedCase& c : cases) {
    // 4 pairs fit the clusters of any Hopper (H100: 7 of 16, 15 of 8).
    CheckEveryPath(c, "cluster ", 0, c.batch() * c.num_kv_heads <= 4);
  }
}

// A graph captured on a workspace of one sequence (a cluster launch on
// Hopper) replays plans of new lengths: pieces of 16 or 8 a pair, none.
TEST_F(DecodeGpuTest, GraphReplaysClusterPlans) {
  constexpr int32_t kLongest = 20000;
  auto make = [&](int32_t len, uint64_t seed) {
    PagedCase c = {.lens = {len},
                   .page_size = 16,
                   .num_qo_heads = 32,
                   .num_kv_heads = 4,
                   .head_dim = 128,
                   .dtype = DType::kBF16,
                   .layout = KvLayout::kNhd,
                   .extra_pages = 0,
                   .seed = seed};
    PagedBatch p = BuildPagedBatch(c);
    // Every step's cache and table are as large as the longest step's.
    const int64_t pages = kLongest / 16 + 1;
    p.k.resize(pages * p.cache_strides[0], 0);
    p.v.resize(pages * p.cache_strides[0], 0);
    p.num_pages = pages;
    p.block_table.resize(pages, -3);
    p.max_pages = pages;
    return p;
  };
  PagedBatch first = make(kLongest, TestSeed() + 50);
  DeviceBatch d(api(), first);
  TAILOR_ASSERT_OK(d.Upload(first));
  DecodeWorkspace ws;
  Reserve(LimitsOf(first.c, 1), ws);
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(first, stream()), ws));
  const RunDecodeArgs args = d.Args(first, device(), stream());
  TAILOR_ASSERT_OK(RunDecode(runtime(), args, ws));  // compile outside
  TAILOR_ASSERT_OK(stream_->Synchronize());
  DecodeGraph graph(api());
  TAILOR_ASSERT_OK(graph.Capture(runtime(), args, ws));
  int step = 0;
  for (int32_t len : {4096, 0, 577, kLongest, 1, 1500}) {
    PagedBatch p = make(len, TestSeed() + 60 + step);
    SCOPED_TRACE(absl::StrCat("step ", step++, ": ", p.c.ToString()));
    TAILOR_ASSERT_OK(d.Upload(p));
    TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
    ASSERT_EQ(graph.Launch(stream()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
    const Errors err = Check(d, p, 1.0 / std::sqrt(128.0));
    std::printf("cluster graph rel %.2e | %s\n", err.out_rel,
                ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, Bound(DType::kBF16)) << err.worst;
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
// sequences with new lengths, block tables and queries, with and without
// head groups (captured without: the launch's params carry the head
// groups' maps anyway, and each plan's flags pick the kernel's path).
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
  kernels_->ForceHeadGroupForTesting(1);
  // Warm up (compile, shared-memory attribute) outside the capture.
  TAILOR_ASSERT_OK(RunDecode(runtime(), args, ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());

  DecodeGraph graph(api());
  TAILOR_ASSERT_OK(graph.Capture(runtime(), args, ws));

  for (int step = 0; step < 6; ++step) {
    const int batch = step == 0 ? 1 : 1 + static_cast<int>(rng() % kRows);
    PagedBatch p = build(make_case(batch, TestSeed() + 20 + step));
    if (step == 1) p.c.lens[0] = 3000;  // one long among short ones
    p = build(p.c);
    SCOPED_TRACE(absl::StrCat("step ", step, ": ", p.c.ToString()));
    kernels_->ForceHeadGroupForTesting(step % 2 == 1 ? cuda::kDecodeHeadGroup
                                                     : 1);
    TAILOR_ASSERT_OK(d.Upload(p));  // same buffers, new contents
    TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
    ASSERT_EQ(graph.Launch(stream()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
    const Errors err = Check(d, p, 1.0 / std::sqrt(128.0));
    std::printf("graph step %d rel %.2e | head group %d | %s\n", step,
                err.out_rel, ws.plan().head_group,
                ws.plan().ToString().c_str());
    EXPECT_LE(err.out_rel, Bound(DType::kBF16)) << err.worst;
  }
}

// Holds a stream at a host callback until Release() or a timeout, so that a
// test can tell whether a call waits for the work queued before it: such a
// call returns only after the timeout, and timed_out() says so.
class StreamGate {
 public:
  explicit StreamGate(std::chrono::seconds timeout) : timeout_(timeout) {}
  ~StreamGate() {  // the callback must not outlive the gate
    Release();
    if (stream_ != nullptr) api_->cuStreamSynchronize(stream_);
  }
  absl::Status Close(const cuda::DriverApi& api, CUstream stream) {
    api_ = &api;
    stream_ = stream;
    return cuda::CudaResultToStatus(api.cuLaunchHostFunc(stream, &Hold, this),
                                    "cuLaunchHostFunc");
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool timed_out() {
    std::lock_guard<std::mutex> lock(mu_);
    return timed_out_;
  }

 private:
  static void CUDA_CB Hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    std::unique_lock<std::mutex> lock(gate->mu_);
    if (!gate->cv_.wait_for(lock, gate->timeout_,
                            [gate] { return gate->released_; })) {
      gate->timed_out_ = true;
    }
  }

  const std::chrono::seconds timeout_;
  const cuda::DriverApi* api_ = nullptr;
  CUstream stream_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  bool timed_out_ = false;
};

// A server plans step n+1 while step n still runs. PlanDecode must neither
// wait for the stream's earlier work (a host-to-device copy from pageable
// memory may "stream sync") nor disturb a plan whose copy is still queued:
// here both plans and both runs are queued behind a held stream.
TEST_F(DecodeGpuTest, PlansWhileTheStreamIsBusyWithoutWaiting) {
  PagedCase a = Cases()[0];  // one long sequence among awkward short ones
  PagedCase b = a;           // a full bucket: the largest work list
  b.seed = a.seed + 100;
  b.padding_rows = 0;
  std::mt19937 rng(TestSeed());
  b.lens.resize(256);
  for (int32_t& n : b.lens) n = static_cast<int32_t>(rng() % 300);
  const PagedBatch pa = BuildPagedBatch(a), pb = BuildPagedBatch(b);
  DeviceBatch da(api(), pa), db(api(), pb);
  TAILOR_ASSERT_OK(da.Upload(pa));
  TAILOR_ASSERT_OK(db.Upload(pb));
  DecodeWorkspace ws;
  Reserve(LimitsOf(a, 256), ws);
  // Compile and set up the kernel outside the gate.
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(pa, stream()), ws));
  TAILOR_ASSERT_OK(RunDecode(runtime(), da.Args(pa, device(), stream()), ws));
  TAILOR_ASSERT_OK(stream_->Synchronize());
  TAILOR_ASSERT_OK(da.out.Fill(0x7f));

  StreamGate gate(std::chrono::seconds(20));
  TAILOR_ASSERT_OK(gate.Close(api(), stream()));
  const auto start = std::chrono::steady_clock::now();
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(pa, stream()), ws));
  TAILOR_ASSERT_OK(RunDecode(runtime(), da.Args(pa, device(), stream()), ws));
  TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(pb, stream()), ws));
  TAILOR_ASSERT_OK(RunDecode(runtime(), db.Args(pb, device(), stream()), ws));
  const double queued_us = std::chrono::duration<double, std::micro>(
                               std::chrono::steady_clock::now() - start)
                               .count();
  EXPECT_FALSE(gate.timed_out())
      << "a call waited for the stream's earlier work";
  gate.Release();
  TAILOR_ASSERT_OK(stream_->Synchronize());
  TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
  std::printf("2 plans + 2 runs queued behind a held stream in %.0f us\n",
              queued_us);
  const double sm_scale = 1.0 / std::sqrt(double(a.head_dim));
  EXPECT_LE(Check(da, pa, sm_scale).out_rel, Bound(a.dtype));
  EXPECT_LE(Check(db, pb, sm_scale).out_rel, Bound(b.dtype));
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

// A decode step is the ragged step of q_len = 1 rows on the decode kernel:
// every RunDecode, direct or captured, is one launch of it (split pairs
// merge in the same launch), never a query-tile, tile-merge or decode-merge
// launch, whether the plan splits or not.
TEST_F(DecodeGpuTest, EachRunIsOneDecodeLaunch) {
  PagedCase unsplit = {.lens = {0, 1, 17, 40, 3, 16},
                       .page_size = 16,
                       .num_qo_heads = 32,
                       .num_kv_heads = 8,
                       .head_dim = 128,
                       .seed = TestSeed()};
  PagedCase split = unsplit;
  split.lens = {9000};
  split.seed = TestSeed() + 1;
  for (const PagedCase& c : {unsplit, split}) {
    SCOPED_TRACE(c.ToString());
    const PagedBatch p = BuildPagedBatch(c);
    DeviceBatch d(api(), p);
    TAILOR_ASSERT_OK(d.Upload(p));
    DecodeWorkspace ws;
    Reserve(LimitsOf(c, c.batch()), ws);
    TAILOR_ASSERT_OK(PlanDecode(runtime(), PlanArgsOf(p, stream()), ws));
    std::printf("one launch: %s | %s\n", c.ToString().c_str(),
                ws.plan().ToString().c_str());
    if (c.batch() == 1) {
      EXPECT_GT(ws.plan().split_pairs, 0);
    }
    const RunDecodeArgs args = d.Args(p, device(), stream());
    const StatsSnapshot before = runtime().stats();
    TAILOR_ASSERT_OK(RunDecode(runtime(), args, ws));
    TAILOR_ASSERT_OK(RunDecode(runtime(), args, ws));
    DecodeGraph graph(api());
    TAILOR_ASSERT_OK(graph.Capture(runtime(), args, ws));
    const StatsSnapshot after = runtime().stats();
    EXPECT_EQ(after.launches - before.launches, 3u);
    for (const auto& [op, n] : after.launches_per_op) {
      const auto was = before.launches_per_op.find(op);
      const uint64_t delta =
          n - (was == before.launches_per_op.end() ? 0 : was->second);
      EXPECT_EQ(delta, op == "attention.decode" ? 3u : 0u) << op;
    }
    ASSERT_EQ(graph.Launch(stream()), CUDA_SUCCESS);
    TAILOR_ASSERT_OK(stream_->Synchronize());
    TAILOR_EXPECT_OK(ws.TakeErrors(runtime(), stream()));
    EXPECT_LE(Check(d, p, 1.0 / std::sqrt(double(c.head_dim))).out_rel,
              Bound(c.dtype));
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
