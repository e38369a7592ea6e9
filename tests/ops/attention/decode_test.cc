// attention::PlanDecode / RunDecode on the CPU backend against the fp64
// reference: awkward lengths (0, 1, page - 1, page, page + 1, 577, 32768)
// mixed in one batch, random non-contiguous page tables with shared prefix
// pages, NHD and HND, bf16 and f16, head_dim 64/128/256, groups 1..16, page
// sizes 1..256 (a representative subset: every distinct (dtype, D, group,
// page) compiles two kernels), soft cap, strided q, padding rows; plus the
// workspace contract (plan reuse, allocation-free steps).
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/attention/decode_host_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/runtime.h"
#include "tailor/stats.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;
using ::testing::HasSubstr;

Runtime& SharedRuntime() {
  static Runtime* runtime = [] {
#ifdef TAILOR_DECODE_TEST_CACHE_DIR
    static std::string cache_dir = TAILOR_DECODE_TEST_CACHE_DIR;
#else
    static ::tailor::testing::TempDir temp_dir;
    static std::string cache_dir = temp_dir.path();
#endif
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.cache_dir = cache_dir;
    options.log_level = "error";
    absl::StatusOr<std::unique_ptr<Runtime>> created = Runtime::Create(options);
    if (!created.ok()) {
      ADD_FAILURE() << "Runtime::Create: " << created.status();
      return static_cast<Runtime*>(nullptr);
    }
    return created->release();
  }();
  return *runtime;
}

// Plans, runs and compares one case; returns the errors for the caller's
// own bounds too.
void ExpectMatchesReference(const PagedCase& c) {
  SCOPED_TRACE(c.ToString());
  PagedBatch p = BuildPagedBatch(c);
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(p), ws));
  Outputs o = PoisonedOutputs(p);
  TAILOR_ASSERT_OK(RunDecode(SharedRuntime(), RunArgsOf(p, o), ws));
  const Errors err = ErrorsOf(p, o);
  EXPECT_LE(err.out_rel, OutBound(c.dtype))
      << "worst row " << err.worst << "; plan " << ws.plan().ToString();
  EXPECT_LE(err.lse_abs, kLseBound);
  // Padding rows past B are untouched.
  const int64_t row = c.num_qo_heads * c.head_dim;
  for (int64_t i = c.batch() * row; i < c.rows() * row; ++i) {
    ASSERT_EQ(o.out[i], 0x7fc3) << "padding row element " << i;
  }
  for (int64_t i = c.batch() * c.num_qo_heads; i < c.rows() * c.num_qo_heads;
       ++i) {
    ASSERT_EQ(o.lse[i], 12345.0f);
  }
}

std::vector<int32_t> AwkwardLengths(int32_t page, bool long_one) {
  std::vector<int32_t> lens = {0, 1, page - 1, page, page + 1, 577, 0, 3};
  if (long_one) lens.push_back(32768);
  lens.erase(
      std::remove_if(lens.begin(), lens.end(), [](int32_t n) { return n < 0; }),
      lens.end());
  return lens;
}

// ---- numerics ---------------------------------------------------------------

TEST(AttentionDecodeTest, LlamaShapeAwkwardLengthsBothLayouts) {
  for (KvLayout layout : {KvLayout::kNhd, KvLayout::kHnd}) {
    ExpectMatchesReference({.lens = AwkwardLengths(16, /*long_one=*/true),
                            .page_size = 16,
                            .num_qo_heads = 8,
                            .num_kv_heads = 2,
                            .head_dim = 128,
                            .dtype = DType::kBF16,
                            .layout = layout,
                            .shared_prefix_pages = 2,
                            .padding_rows = 2,
                            .q_padding = 24,
                            .seed = TestSeed()});
  }
}

TEST(AttentionDecodeTest, PageSizeOneMhaF16) {
  ExpectMatchesReference({.lens = AwkwardLengths(1, false),
                          .page_size = 1,
                          .num_qo_heads = 3,
                          .num_kv_heads = 3,
                          .head_dim = 64,
                          .dtype = DType::kF16,
                          .layout = KvLayout::kHnd,
                          .shared_prefix_pages = 5,
                          .seed = TestSeed() + 1});
}

TEST(AttentionDecodeTest, OddPageOddGroupBf16) {
  ExpectMatchesReference({.lens = AwkwardLengths(5, false),
                          .page_size = 5,
                          .num_qo_heads = 6,
                          .num_kv_heads = 2,
                          .head_dim = 64,
                          .dtype = DType::kBF16,
                          .layout = KvLayout::kNhd,
                          .shared_prefix_pages = 3,
                          .padding_rows = 1,
                          .seed = TestSeed() + 2});
}

TEST(AttentionDecodeTest, Group16Page256HeadDim256F16) {
  ExpectMatchesReference({.lens = {577, 0, 255, 256, 257, 1},
                          .page_size = 256,
                          .num_qo_heads = 16,
                          .num_kv_heads = 1,
                          .head_dim = 256,
                          .dtype = DType::kF16,
                          .layout = KvLayout::kHnd,
                          .shared_prefix_pages = 1,
                          .seed = TestSeed() + 3});
}

TEST(AttentionDecodeTest, QwenShapeSoftCapF16) {
  ExpectMatchesReference({.lens = AwkwardLengths(16, false),
                          .page_size = 16,
                          .num_qo_heads = 16,
                          .num_kv_heads = 2,
                          .head_dim = 128,
                          .dtype = DType::kF16,
                          .layout = KvLayout::kNhd,
                          .soft_cap = 5.0f,
                          .seed = TestSeed() + 4});
}

TEST(AttentionDecodeTest, SingleLongSequenceIsSplitAndMerged) {
  // B = 1: every worker takes a piece of each KV head; the merge combines.
  PagedCase c = {.lens = {32768},
                 .page_size = 32,
                 .num_qo_heads = 4,
                 .num_kv_heads = 2,
                 .head_dim = 256,
                 .dtype = DType::kBF16,
                 .layout = KvLayout::kNhd,
                 .seed = TestSeed() + 5};
  ExpectMatchesReference(c);
  PagedBatch p = BuildPagedBatch(c);
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(p), ws));
  EXPECT_EQ(ws.plan().split_pairs, 2) << ws.plan().ToString();
  EXPECT_EQ(ws.plan().busy_workers, ws.plan().workers);
}

// A decode step is the ragged step of q_len = 1 rows, all run by the
// decode kernels: RunDecode launches no query tile and no tile merge.
TEST(AttentionDecodeTest, RunLaunchesOnlyTheDecodeKernels) {
  PagedCase c = {.lens = {9000, 1, 0, 17},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed() + 6};
  PagedBatch p = BuildPagedBatch(c);
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(p), ws));
  EXPECT_GT(ws.plan().split_pairs, 0) << ws.plan().ToString();
  Outputs o = PoisonedOutputs(p);
  const StatsSnapshot before = SharedRuntime().stats();
  TAILOR_ASSERT_OK(RunDecode(SharedRuntime(), RunArgsOf(p, o), ws));
  const StatsSnapshot after = SharedRuntime().stats();
  auto delta = [&](const std::string& op) {
    const auto was = before.launches_per_op.find(op);
    const auto now = after.launches_per_op.find(op);
    return (now == after.launches_per_op.end() ? 0 : now->second) -
           (was == before.launches_per_op.end() ? 0 : was->second);
  };
  EXPECT_GE(delta("attention.decode"), 1u);
  EXPECT_EQ(delta("attention.ragged"), 0u);
  EXPECT_EQ(delta("attention.ragged_merge"), 0u);
  const Errors err = ErrorsOf(p, o);
  EXPECT_LE(err.out_rel, OutBound(c.dtype)) << err.worst;
}

TEST(AttentionDecodeTest, AllEmptySequencesGiveZerosAndMinusInfinity) {
  PagedCase c = {.lens = {0, 0, 0},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed() + 6};
  PagedBatch p = BuildPagedBatch(c);
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(p), ws));
  Outputs o = PoisonedOutputs(p);
  TAILOR_ASSERT_OK(RunDecode(SharedRuntime(), RunArgsOf(p, o), ws));
  for (uint16_t x : o.out) EXPECT_EQ(x, 0);
  for (float x : o.lse) EXPECT_EQ(x, -INFINITY);
}

TEST(AttentionDecodeTest, OnePlanServesEveryLayerAndLseIsOptional) {
  PagedCase c = {.lens = {100, 7, 33},
                 .page_size = 16,
                 .num_qo_heads = 8,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .seed = TestSeed() + 7};
  PagedBatch layer0 = BuildPagedBatch(c);
  c.seed += 100;  // same lengths, other pages and values: another layer
  PagedBatch layer1 = BuildPagedBatch(c);
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(layer0), ws));
  for (PagedBatch* layer : {&layer0, &layer1}) {
    Outputs o = PoisonedOutputs(*layer);
    RunDecodeArgs args = RunArgsOf(*layer, o);
    args.lse.reset();
    args.sm_scale = 0.05f;
    TAILOR_ASSERT_OK(RunDecode(SharedRuntime(), args, ws));
    const Errors err = Compare(*layer, Reference(*layer, 0.05), o.out, nullptr);
    EXPECT_LE(err.out_rel, 8e-3) << err.worst;
    for (float x : o.lse) EXPECT_EQ(x, 12345.0f);
  }
}

TEST(AttentionDecodeTest, ReservedWorkspaceStepsDoNotGrow) {
  DecodeWorkspace ws;
  TAILOR_ASSERT_OK(ReserveDecodeWorkspace(SharedRuntime(),
                                          {.max_batch = 64,
                                           .num_qo_heads = 8,
                                           .num_kv_heads = 2,
                                           .head_dim = 128,
                                           .page_size = 16},
                                          ws));
  const size_t reserved = ws.CapacityBytes();
  std::mt19937 rng(TestSeed());
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> lens(1 + rng() % 64);
    for (int32_t& n : lens) n = static_cast<int32_t>(rng() % 2000);
    if (step == 0) lens.assign(1, 60000);  // one long sequence: many splits
    TAILOR_ASSERT_OK(
        PlanDecode(SharedRuntime(),
                   {.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32,
                                                      {int64_t(lens.size())}),
                    .page_size = 16,
                    .num_qo_heads = 8,
                    .num_kv_heads = 2,
                    .head_dim = 128},
                   ws));
    EXPECT_EQ(ws.CapacityBytes(), reserved) << "step " << step;
  }
}

// ---- errors -----------------------------------------------------------------

class AttentionDecodeErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = BuildPagedBatch({.lens = {20, 3},
                          .page_size = 16,
                          .num_qo_heads = 8,
                          .num_kv_heads = 2,
                          .head_dim = 128,
                          .padding_rows = 1,
                          .seed = 3});
    o_ = PoisonedOutputs(p_);
    TAILOR_ASSERT_OK(PlanDecode(SharedRuntime(), PlanArgsOf(p_), ws_));
  }
  absl::Status Run(const RunDecodeArgs& args) {
    return RunDecode(SharedRuntime(), args, ws_);
  }
  RunDecodeArgs Args() { return RunArgsOf(p_, o_); }
  absl::Status Plan(const PlanDecodeArgs& args) {
    DecodeWorkspace ws;
    return PlanDecode(SharedRuntime(), args, ws);
  }

  PagedBatch p_;
  Outputs o_;
  DecodeWorkspace ws_;
};

TEST_F(AttentionDecodeErrorsTest, PlanRejectsBadShapes) {
  auto with = [&](auto edit) {
    PlanDecodeArgs args = PlanArgsOf(p_);
    edit(args);
    return Plan(args);
  };
  using Args = PlanDecodeArgs;
  EXPECT_THAT(with([](Args& a) { a.num_kv_heads = 0; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "num_kv_heads: must be in [1, 1024], got 0"));
  EXPECT_THAT(with([](Args& a) { a.num_qo_heads = 7; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "num_qo_heads: must be in [1, 1024] and a multiple of "
                       "num_kv_heads (2), got 7"));
  EXPECT_THAT(with([](Args& a) { a.num_qo_heads = 34; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "num_qo_heads: num_qo_heads / num_kv_heads (the GQA "
                       "group) must be <= 16, got 17"));
  EXPECT_THAT(with([](Args& a) { a.head_dim = 96; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "head_dim: must be 64, 128 or 256, got 96"));
  EXPECT_THAT(with([](Args& a) { a.page_size = 257; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "page_size: must be in [1, 256], got 257"));
  EXPECT_THAT(with([](Args& a) { a.dtype = DType::kF32; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dtype: must be bf16 or f16, got f32"));
}

TEST_F(AttentionDecodeErrorsTest, PlanRejectsBadLengths) {
  std::vector<int32_t> lens = {4, -1};
  PlanDecodeArgs args = PlanArgsOf(p_);
  args.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {2});
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "seq_lens[1]: must be in [0, 1073741824], got -1"));
  args.seq_lens.dtype = DType::kI64;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "seq_lens: expected dtype i32, got i64"));
  args.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {1, 2});
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("seq_lens: expected rank 1")));
  args.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {2},
                                        {DeviceType::kCuda, 0});
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "seq_lens: must be in host memory (PlanDecode reads it "
                       "on the host), got cuda:0"));
  args.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {1});
  args.seq_lens.strides[0] = 2;
  args.seq_lens.dims[0] = 2;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "seq_lens: must be contiguous"));
}

TEST_F(AttentionDecodeErrorsTest, RunNeedsAPlan) {
  DecodeWorkspace fresh;
  EXPECT_THAT(RunDecode(SharedRuntime(), Args(), fresh),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "ws: not planned; call attention::PlanDecode first"));
  DecodeWorkspace moved = std::move(ws_);
  EXPECT_THAT(Run(Args()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("ws: this DecodeWorkspace was moved from")));
  // A failed plan leaves the workspace unplanned.
  PlanDecodeArgs bad = PlanArgsOf(p_);
  bad.head_dim = 1;
  EXPECT_FALSE(PlanDecode(SharedRuntime(), bad, moved).ok());
  EXPECT_FALSE(moved.planned());
}

TEST_F(AttentionDecodeErrorsTest, RunRejectsBadQueriesAndOutputs) {
  RunDecodeArgs a = Args();
  a.q.dtype = DType::kF16;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "q: expected dtype bf16, got f16"));
  a = Args();
  a.q.dims[1] = 4;
  EXPECT_THAT(Run(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q: dims[1] must equal num_qo_heads of the plan (8), "
                       "got 4"));
  a = Args();
  a.q.dims[0] = 1;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "q: dims[0] must be >= the plan's batch (2), "
                               "got 1"));
  a = Args();
  a.q.strides[2] = 2;
  EXPECT_THAT(Run(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q: the last dim must be contiguous (stride 1), got "
                       "stride 2"));
  a = Args();
  a.out.dims[2] = 64;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "out: dims[2] must equal head_dim of the plan "
                               "(128), got 64"));
  a = Args();
  a.out.dims[0] = 2;
  a.out.strides[0] = 8 * 128;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "out: dims[0] must equal q.dims[0] (3), got 2"));
  a = Args();
  a.out = a.q;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "out: must not overlap q in memory"));
  a = Args();
  a.lse->dtype = DType::kBF16;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "lse: expected dtype f32, got bf16"));
  a = Args();
  a.lse->dims[1] = 2;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "lse: dims[1] must equal num_qo_heads of the "
                               "plan (8), got 2"));
  a = Args();
  a.sm_scale = -1.0f;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "sm_scale: must be finite and > 0, got -1"));
  a = Args();
  a.logits_soft_cap = NAN;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "logits_soft_cap: must be finite and >= 0 (0: "
                               "no cap), got nan"));
}

// Regression (c_api_fuzz under UBSan): a view whose strides reach past
// int64 (each alone representable) made the overlap check's byte range
// overflow (undefined behavior) before anything rejected it.
TEST_F(AttentionDecodeErrorsTest, RunRejectsStridesThatReachPastInt64) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  RunDecodeArgs a = Args();
  a.q.strides[0] = kMax;  // 2 steps of it: past int64
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("q: its strides reach past 2^63 "
                                         "bytes ([3, 8, 128] bf16 cpu, "
                                         "strides 9223372036854775807, 128, "
                                         "1)")));
  a = Args();
  a.k_cache.strides[0] = int64_t{1} << 62;  // elements; x2 bytes: past
  a.k_cache.dims[0] = 2;
  a.v_cache.dims[0] = 2;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("k_cache: its strides reach past")));
  a = Args();
  a.lse->strides[0] = kMax / 2;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("lse: its strides reach past")));
}

TEST_F(AttentionDecodeErrorsTest, RunRejectsBadCaches) {
  RunDecodeArgs a = Args();
  a.k_cache.rank = 3;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("k_cache: expected rank 4, got 3")));
  a = Args();
  a.k_cache.dims[1] = 8;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "k_cache: dims[1] must equal page_size of the "
                               "plan (16), got 8"));
  a = Args();
  a.v_cache.dims[2] = 1;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "v_cache: dims[2] must equal num_kv_heads of "
                               "the plan (2), got 1"));
  a = Args();
  a.v_cache.dims[0] -= 1;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("v_cache: dims[0] must equal "
                                         "k_cache.dims[0] (num_pages)")));
  a = Args();
  a.k_cache.device = {DeviceType::kCuda, 0};
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "k_cache: must be on cpu (the runtime's "
                               "device), got cuda:0"));
  a = Args();
  a.out = a.v_cache;
  a.out.rank = 3;
  a.out.dims[0] = 3;
  a.out.dims[1] = 8;
  a.out.dims[2] = 128;
  a.out.strides[0] = 8 * 128;
  a.out.strides[1] = 128;
  a.out.strides[2] = 1;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "out: must not overlap v_cache in memory"));
}

TEST_F(AttentionDecodeErrorsTest, RunRejectsBadIndexTensors) {
  RunDecodeArgs a = Args();
  a.block_table.dims[1] = 1;
  EXPECT_THAT(Run(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "block_table: dims[1] (max_pages) must be >= 2 (the "
                       "plan's longest sequence, 20 tokens, in pages of 16), "
                       "got 1"));
  a = Args();
  a.block_table.dims[0] = 2;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "block_table: dims[0] must equal q.dims[0] (3), "
                               "got 2"));
  a = Args();
  a.block_table.dtype = DType::kI64;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "block_table: expected dtype i32, got i64"));
  a = Args();
  a.seq_lens.dims[0] = 2;
  EXPECT_THAT(Run(a), StatusIs(absl::StatusCode::kInvalidArgument,
                               "seq_lens: dims[0] must equal q.dims[0] (3), "
                               "got 2"));
}

TEST_F(AttentionDecodeErrorsTest, HostChecksTableEntriesAndLengths) {
  p_.block_table[1 * p_.max_pages + 1] = 99;  // sequence 1 has one page
  TAILOR_EXPECT_OK(Run(Args()));              // garbage past its pages is ok
  p_.block_table[0 * p_.max_pages + 1] = static_cast<int32_t>(p_.num_pages);
  EXPECT_THAT(Run(Args()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("block_table[0,1]: page id ", p_.num_pages,
                                    " is outside [0, ", p_.num_pages, ")")));
  p_.block_table[0 * p_.max_pages + 1] = 0;
  p_.seq_lens[1] = 4;
  o_ = PoisonedOutputs(p_);
  EXPECT_THAT(Run(Args()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "seq_lens[1]: 4 differs from 3, the length PlanDecode "
                       "planned"));
  // A rejected call wrote nothing.
  for (uint16_t x : o_.out) ASSERT_EQ(x, 0x7fc3);
}

TEST_F(AttentionDecodeErrorsTest, WorkspaceCallsOnTheCpu) {
  DecodeLimits limits = {.max_batch = 4,
                         .num_qo_heads = 8,
                         .num_kv_heads = 2,
                         .head_dim = 128,
                         .page_size = 16};
  EXPECT_THAT(DecodeWorkspaceBytes(SharedRuntime(), limits),
              ::testing::Eq(absl::StatusOr<int64_t>(0)));
  DecodeWorkspace ws;
  EXPECT_THAT(BindDecodeWorkspace(SharedRuntime(), limits, nullptr, 0, ws),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("the cpu backend keeps decode workspaces in "
                                 "host memory")));
  TAILOR_EXPECT_OK(ws.TakeErrors(SharedRuntime()));
  limits.max_batch = -1;
  EXPECT_THAT(ReserveDecodeWorkspace(SharedRuntime(), limits, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "limits.max_batch: must be in [0, 1048576], got -1"));
  limits.max_batch = 4;
  limits.head_dim = 80;
  EXPECT_THAT(ReserveDecodeWorkspace(SharedRuntime(), limits, ws),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "limits.head_dim: must be 64, 128 or 256, got 80"));
}

}  // namespace
}  // namespace tailor::attention::testing
