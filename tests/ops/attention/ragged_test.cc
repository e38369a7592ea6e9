// attention::PlanRagged / RunRagged on the CPU backend against the fp64
// reference: awkward lengths (0, 1, tile - 1, tile, tile + 1, 17, 577) and
// mixed steps (prefill chunks over cached prefixes, decode rows and
// speculative rows of 4 in one batch) with random non-contiguous pages,
// shared prefix pages and NaN in every unowned cache slot; causal,
// non-causal, sliding window, soft cap, lse; GQA groups 1/4/8, head_dim
// 64/128/256, page sizes 1/5/16, bf16 and f16, NHD and HND; FlashInfer's
// metadata; split tiles; then every argument check with its exact message.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ops/attention/ragged_host_test_util.h"
#include "tailor/ops/attention.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor::attention::testing {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;

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

// Packed rows per CPU tile (templates/cpu/attention/ragged_params.h).
constexpr int32_t kTileRows = 32;

void ExpectMatchesReference(const RaggedCase& c, bool flashinfer = false) {
  SCOPED_TRACE(c.ToString());
  RaggedBatch p = BuildRaggedBatch(c);
  RaggedWorkspace ws;
  Outputs o = PoisonedOutputs(p);
  if (flashinfer) {
    TAILOR_ASSERT_OK(
        PlanRaggedFlashInfer(SharedRuntime(), FlashInferPlanArgsOf(p), ws));
    TAILOR_ASSERT_OK(RunRagged(SharedRuntime(), FlashInferRunArgsOf(p, o), ws));
  } else {
    TAILOR_ASSERT_OK(PlanRagged(SharedRuntime(), PlanArgsOf(p), ws));
    TAILOR_ASSERT_OK(RunRagged(SharedRuntime(), RunArgsOf(p, o), ws));
  }
  const Errors err = RaggedErrorsOf(p, o);
  EXPECT_LE(err.out_rel, OutBound(c.dtype))
      << "worst " << err.worst << "; plan " << ws.plan().ToString();
  EXPECT_LE(err.lse_abs, kLseBound) << ws.plan().ToString();
  EXPECT_EQ(FirstTouchedPaddingElement(p, o), -1);
}

// One sequence per awkward query length (in tokens of a tile of `pack`
// heads), each over a cached prefix of `prefix` tokens.
RaggedCase AwkwardCase(int64_t group, int32_t prefix) {
  RaggedCase c;
  c.num_kv_heads = 2;
  c.num_qo_heads = 2 * group;
  const int32_t tile_tokens = kTileRows / static_cast<int32_t>(group);
  for (int32_t q :
       {0, 1, tile_tokens - 1, tile_tokens, tile_tokens + 1, 17, 577}) {
    c.q_lens.push_back(q);
    c.kv_lens.push_back(q + prefix);
  }
  c.padding_rows = 3;
  c.seed = TestSeed() + static_cast<uint64_t>(group * 1000 + prefix);
  return c;
}

// A serving step: a prefill chunk over a cached prefix, a new prompt,
// decode rows, speculative rows of 4, an empty sequence.
RaggedCase MixedStep() {
  RaggedCase c;
  c.q_lens = {200, 1, 1, 4, 4, 0, 129, 1};
  c.kv_lens = {700, 1000, 33, 260, 4, 9, 129, 577};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.shared_prefix_pages = 2;
  c.padding_rows = 2;
  c.seed = TestSeed();
  return c;
}

TEST(RaggedTest, AwkwardLengthsCausalOverPrefixes) {
  for (int32_t prefix : {0, 40}) ExpectMatchesReference(AwkwardCase(4, prefix));
}

TEST(RaggedTest, AwkwardLengthsNonCausal) {
  RaggedCase c = AwkwardCase(4, 16);
  c.causal = false;
  c.q_lens.push_back(20);  // more queries than KV: only without causal
  c.kv_lens.push_back(3);
  ExpectMatchesReference(c);
}

TEST(RaggedTest, MixedStepEveryRowKind) {
  RaggedCase c = MixedStep();
  ExpectMatchesReference(c);
  c.layout = KvLayout::kHnd;
  c.seed = TestSeed() + 7;
  ExpectMatchesReference(c);
}

TEST(RaggedTest, SlidingWindowAndSoftCap) {
  RaggedCase c = MixedStep();
  c.window_left = 37;
  ExpectMatchesReference(c);
  c.window_left = 0;  // each token sees itself only
  ExpectMatchesReference(c);
  c.window_left = -1;
  c.soft_cap = 5.0f;
  ExpectMatchesReference(c);
}

TEST(RaggedTest, GroupsHeadDimsDtypesAndPages) {
  struct Variant {
    DType dtype;
    int64_t head_dim, group, page;
  };
  for (const Variant& v :
       {Variant{DType::kBF16, 64, 4, 16}, Variant{DType::kBF16, 256, 4, 16},
        Variant{DType::kBF16, 128, 1, 16}, Variant{DType::kBF16, 128, 8, 16},
        Variant{DType::kF16, 128, 4, 16}, Variant{DType::kF16, 64, 1, 1},
        Variant{DType::kBF16, 128, 4, 5}}) {
    RaggedCase c = AwkwardCase(v.group, 23);
    c.dtype = v.dtype;
    c.head_dim = v.head_dim;
    c.page_size = v.page;
    c.seed = TestSeed() + static_cast<uint64_t>(v.head_dim * 31 +
                                                v.group * 7 + v.page);
    ExpectMatchesReference(c);
  }
}

TEST(RaggedTest, FlashInferMetadata) {
  RaggedCase c = MixedStep();
  c.page_size = 5;
  ExpectMatchesReference(c, /*flashinfer=*/true);
}

TEST(RaggedTest, LongKvSplitsAndMerges) {
  RaggedCase c;
  c.q_lens = {1, 3};
  c.kv_lens = {9000, 2000};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  RaggedBatch p = BuildRaggedBatch(c);
  RaggedWorkspace ws;
  TAILOR_ASSERT_OK(PlanRagged(SharedRuntime(), PlanArgsOf(p), ws));
  EXPECT_GT(ws.plan().split_tiles, 0) << ws.plan().ToString();
  ExpectMatchesReference(c);
}

TEST(RaggedTest, EmptyStepsWriteNothing) {
  RaggedCase c;
  c.q_lens = {0, 0};
  c.kv_lens = {5, 0};
  c.padding_rows = 2;
  ExpectMatchesReference(c);
  c.q_lens.clear();
  c.kv_lens.clear();
  ExpectMatchesReference(c);
}

TEST(RaggedTest, ReservedWorkspaceDoesNotGrow) {
  RaggedWorkspace ws;
  TAILOR_ASSERT_OK(ReserveRaggedWorkspace(SharedRuntime(),
                                          {.max_batch = 8,
                                           .max_tokens = 1024,
                                           .num_qo_heads = 8,
                                           .num_kv_heads = 2,
                                           .head_dim = 128,
                                           .page_size = 16},
                                          ws));
  const size_t reserved = ws.CapacityBytes();
  for (uint64_t seed : {1, 2, 3}) {
    RaggedCase c = MixedStep();
    c.seed = TestSeed() + seed;
    RaggedBatch p = BuildRaggedBatch(c);
    Outputs o = PoisonedOutputs(p);
    TAILOR_ASSERT_OK(PlanRagged(SharedRuntime(), PlanArgsOf(p), ws));
    TAILOR_ASSERT_OK(RunRagged(SharedRuntime(), RunArgsOf(p, o), ws));
    EXPECT_LE(RaggedErrorsOf(p, o).out_rel, OutBound(c.dtype));
    EXPECT_EQ(ws.CapacityBytes(), reserved);
  }
}

// ---- argument checks
// ---------------------------------------------------------

class RaggedChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RaggedCase c = MixedStep();
    c.q_lens = {3, 1};
    c.kv_lens = {10, 40};
    p_ = BuildRaggedBatch(c);
    o_ = PoisonedOutputs(p_);
  }
  absl::Status Plan(const PlanRaggedArgs& args) {
    return PlanRagged(SharedRuntime(), args, ws_);
  }
  absl::Status Run(const RunRaggedArgs& args) {
    absl::Status planned = PlanRagged(SharedRuntime(), PlanArgsOf(p_), ws_);
    if (!planned.ok()) return planned;
    return RunRagged(SharedRuntime(), args, ws_);
  }
  RaggedBatch p_;
  Outputs o_;
  RaggedWorkspace ws_;
};

TEST_F(RaggedChecksTest, PlanMetadata) {
  PlanRaggedArgs args = PlanArgsOf(p_);
  p_.q_indptr[0] = 1;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "q_indptr[0]: must be 0, got 1"));
  p_.q_indptr = {0, 3, 2};
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q_indptr[2]: 2 is less than q_indptr[1] = 3"));
  EXPECT_FALSE(ws_.planned());
  p_.q_indptr = {0, 3, 4};
  p_.kv_lens[1] = 0;
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q_lens[1]: 1 exceeds kv_lens[1] = 0; causal queries "
                       "are the last q_len of their KV"));
  args.kv_lens.dims[0] = 3;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "kv_lens: dims[0] must equal the batch "
                                   "(q_indptr.dims[0] - 1) (2), got 3"));
  args = PlanArgsOf(p_);
  args.q_indptr.device = Device{DeviceType::kCuda, 0};
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q_indptr: must be in host memory (PlanRagged reads it "
                       "on the host), got cuda:0"));
}

TEST_F(RaggedChecksTest, PlanLayer) {
  PlanRaggedArgs args = PlanArgsOf(p_);
  args.head_dim = 96;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "head_dim: must be 64, 128 or 256, got 96"));
  args = PlanArgsOf(p_);
  args.causal = false;
  args.window_left = 4;
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "window_left: a sliding window needs causal = true"));
  args.window_left = -2;
  EXPECT_THAT(Plan(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "window_left: must be -1 (none) or in [0, 1073741824), "
                       "got -2"));
  args = PlanArgsOf(p_);
  args.dtype = DType::kF32;
  EXPECT_THAT(Plan(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "dtype: must be bf16 or f16, got f32"));
}

TEST_F(RaggedChecksTest, FlashInferMetadata) {
  PlanRaggedFlashInferArgs args = FlashInferPlanArgsOf(p_);
  p_.last_page_len[0] = 0;
  EXPECT_THAT(
      PlanRaggedFlashInfer(SharedRuntime(), args, ws_),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "kv_last_page_len[0]: must be in [1, page_size = 16] for a "
               "sequence with pages, got 0"));
  p_.last_page_len[0] = 10;
  p_.page_indptr[2] = 0;
  EXPECT_THAT(PlanRaggedFlashInfer(SharedRuntime(), args, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kv_indptr[2]: 0 is less than kv_indptr[1] = 1"));
}

TEST_F(RaggedChecksTest, RunNeedsAPlan) {
  EXPECT_THAT(RunRagged(SharedRuntime(), RunArgsOf(p_, o_), ws_),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "ws: not planned; call attention::PlanRagged first"));
}

TEST_F(RaggedChecksTest, RunShapes) {
  RunRaggedArgs args = RunArgsOf(p_, o_);
  args.q.dims[1] = 4;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q: dims[1] must equal num_qo_heads of the plan (8), "
                       "got 4"));
  args = RunArgsOf(p_, o_);
  args.q.dims[0] = 3;
  args.out.dims[0] = 3;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "q: dims[0] must be >= the plan's query tokens (4), "
                       "got 3"));
  args = RunArgsOf(p_, o_);
  args.block_table.dims[1] = 2;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "block_table: dims[1] (max_pages) must be >= 3 (the "
                       "plan's longest sequence, 40 tokens, in pages of 16), "
                       "got 2"));
  args = RunArgsOf(p_, o_);
  args.v_cache.dims[0] -= 1;
  EXPECT_THAT(Run(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                  absl::StrCat("v_cache: dims[0] must equal "
                                               "k_cache.dims[0] (num_pages) (",
                                               p_.num_pages, "), got ",
                                               p_.num_pages - 1)));
  args = RunArgsOf(p_, o_);
  args.lse->dims[1] = 7;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "lse: dims[1] must equal num_qo_heads of the plan (8), "
                       "got 7"));
  args = RunArgsOf(p_, o_);
  args.out = args.q;
  EXPECT_THAT(Run(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                  "out: must not overlap q in memory"));
  args = RunArgsOf(p_, o_);
  args.sm_scale = -1.0f;
  EXPECT_THAT(Run(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                  "sm_scale: must be finite and > 0, got -1"));
}

TEST_F(RaggedChecksTest, RunContents) {
  RunRaggedArgs args = RunArgsOf(p_, o_);
  TAILOR_ASSERT_OK(PlanRagged(SharedRuntime(), PlanArgsOf(p_), ws_));
  p_.kv_lens[1] = 39;  // the run's lengths, after the plan copied them
  EXPECT_THAT(RunRagged(SharedRuntime(), args, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kv_lens[1]: 39 differs from 40, the length PlanRagged "
                       "planned"));
  p_.kv_lens[1] = 40;
  // Re-plan with the right lengths, then break a page the plan reads.
  p_.block_table[1 * p_.max_pages + 2] = 9999;
  EXPECT_THAT(Run(args),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("block_table[1,2]: page id 9999 is outside "
                                    "[0, ",
                                    p_.num_pages, ")")));
  // Nothing was written.
  for (uint16_t x : o_.out) ASSERT_EQ(x, kPoison16);
}

TEST_F(RaggedChecksTest, WorkspaceCallsOnTheCpu) {
  RaggedLimits limits = {.max_batch = 4,
                         .max_tokens = 64,
                         .num_qo_heads = 8,
                         .num_kv_heads = 2,
                         .head_dim = 128,
                         .page_size = 16};
  EXPECT_THAT(RaggedWorkspaceBytes(SharedRuntime(), limits),
              ::testing::Eq(absl::StatusOr<int64_t>(0)));
  alignas(256) static char memory[256];
  EXPECT_THAT(BindRaggedWorkspace(SharedRuntime(), limits, memory, 256, ws_),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "attention.bind_ragged: the cpu backend keeps ragged "
                       "workspaces in host memory; use "
                       "attention::ReserveRaggedWorkspace"));
  TAILOR_EXPECT_OK(ws_.TakeErrors(SharedRuntime()));
  limits.max_tokens = -1;
  EXPECT_THAT(RaggedWorkspaceBytes(SharedRuntime(), limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "limits.max_tokens: must be in [0, 1073741824], got "
                       "-1"));
  limits.max_tokens = 64;
  limits.head_dim = 80;
  EXPECT_THAT(RaggedWorkspaceBytes(SharedRuntime(), limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "limits.head_dim: must be 64, 128 or 256, got 80"));
  limits.head_dim = 128;
  limits.causal = false;
  limits.window_left = 8;
  EXPECT_THAT(ReserveRaggedWorkspace(SharedRuntime(), limits, ws_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "limits.window_left: a sliding window needs causal = "
                       "true"));
  RaggedWorkspace moved;
  RaggedWorkspace target = std::move(moved);
  EXPECT_THAT(ReserveRaggedWorkspace(SharedRuntime(), limits, moved),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "ws: this RaggedWorkspace was moved from; assign a new "
                       "one before use"));
}

}  // namespace
}  // namespace tailor::attention::testing
