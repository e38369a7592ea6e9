// The paged-decode family's launch rules on the CUDA backend
// (backends/cuda/attention/heuristics.h): pure host code, no GPU. A change
// to a rule changes a row here, on purpose.
#include "backends/cuda/attention/heuristics.h"

#include <gtest/gtest.h>

#include <vector>

#include "templates/cuda/attention/decode_params.h"

namespace tailor::cuda {
namespace {

// Opt-in shared memory per block: H100 / H200 (sm_90a) and A100 (sm_80).
constexpr int64_t kSharedSm90 = 232448;
constexpr int64_t kSharedSm80 = 166912;

// Qwen3-30B-A3B's decode: 32 query heads over 4 KV heads of 128, pages of 16.
tailor::internal::DecodeShape Qwen3DecodeShape() {
  return {.dtype = DType::kBF16,
          .head_dim = 128,
          .group = 8,
          .page_size = 16,
          .num_kv_heads = 4};
}

TEST(DecodeHeuristics, StagesFollowSharedMemory) {
  // H100: 4 stages for the anchor models; 2 for the largest shape.
  EXPECT_EQ(DecodeStagesFor(128, 4, kSharedSm90), 4);
  EXPECT_EQ(DecodeStagesFor(128, 8, kSharedSm90), 4);
  EXPECT_EQ(DecodeStagesFor(256, 16, kSharedSm90), 2);
  // A100: head_dim 256 with large groups does not fit two stages (a known
  // gap); PlanDecode says Unimplemented there. Group 2 (Gemma 2) fits.
  EXPECT_EQ(DecodeStagesFor(256, 16, kSharedSm80), 0);
  EXPECT_EQ(DecodeStagesFor(256, 2, kSharedSm80), 2);
  EXPECT_EQ(DecodeStagesFor(128, 16, kSharedSm80), 3);
  EXPECT_EQ(DecodeStagesFor(128, 8, 101376), 2);  // sm_86 / sm_89
  // Two CTAs an SM: 2 stages of the anchor models; D=256 group 16 does not
  // fit two.
  EXPECT_EQ(DecodeStagesFor(128, 4, kSharedSm90, 2), 2);
  EXPECT_EQ(DecodeStagesFor(128, 8, kSharedSm90, 2), 2);
  EXPECT_EQ(DecodeStagesFor(256, 16, kSharedSm90, 2), 0);
}

// A launch's depth (a key field) follows its workers: one CTA an SM's up to
// the SM count, two CTAs' past it where two fit; decode.stages caps both.
TEST(DecodeHeuristics, LaunchStagesFollowTheWorkers) {
  EXPECT_EQ(DecodeLaunchStages(128, 8, 132, 132, kSharedSm90, 0), 4);
  EXPECT_EQ(DecodeLaunchStages(128, 8, 133, 132, kSharedSm90, 0), 2);
  EXPECT_EQ(DecodeLaunchStages(128, 8, 264, 132, kSharedSm90, 0), 2);
  EXPECT_EQ(DecodeLaunchStages(128, 8, 132, 132, kSharedSm90, 3), 3);
  EXPECT_EQ(DecodeLaunchStages(128, 8, 264, 132, kSharedSm90, 3), 2);
  // Two do not fit: more workers than SMs run as extra waves, one deep.
  EXPECT_EQ(DecodeLaunchStages(256, 16, 264, 132, kSharedSm90, 0), 2);
  EXPECT_EQ(DecodeLaunchStages(256, 16, 1, 132, kSharedSm80, 0), 0);
}

// Two CTAs an SM from an SM's worth of (sequence, KV head) pairs, where two
// fit.
TEST(DecodeHeuristics, TwoCtasAnSmFromAnSmsWorthOfPairs) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  EXPECT_EQ(DecodeCtasPerSm(qwen3, 1, 132, kSharedSm90), 1);
  EXPECT_EQ(DecodeCtasPerSm(qwen3, 32, 132, kSharedSm90), 1);  // 128 pairs
  EXPECT_EQ(DecodeCtasPerSm(qwen3, 33, 132, kSharedSm90), 2);
  EXPECT_EQ(DecodeCtasPerSm(qwen3, 256, 132, kSharedSm90), 2);
  tailor::internal::DecodeShape llama = qwen3;
  llama.group = 4;
  llama.num_kv_heads = 8;
  llama.group = 4;
  EXPECT_EQ(DecodeCtasPerSm(llama, 16, 132, kSharedSm90), 1);  // 128 pairs
  EXPECT_EQ(DecodeCtasPerSm(llama, 17, 132, kSharedSm90), 2);
  tailor::internal::DecodeShape wide = qwen3;
  wide.head_dim = 256;
  wide.group = 16;
  EXPECT_EQ(DecodeCtasPerSm(wide, 256, 132, kSharedSm90), 1);  // two do not fit
}

// On a launch of two CTAs an SM, a plan with fewer pairs than SMs and short
// work fills one an SM; long streams or many pairs fill all.
TEST(DecodeHeuristics, SmallShortPlansNarrowTheirCut) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  const std::vector<int32_t> b1(1, 4096), b32(32, 1024), b8(8, 32768),
      b33(33, 16);
  EXPECT_EQ(DecodeCutWorkers(qwen3, b1, 264, 132), 132);
  EXPECT_EQ(DecodeCutWorkers(qwen3, b32, 264, 132), 132);
  EXPECT_EQ(DecodeCutWorkers(qwen3, b8, 264, 132), 264);   // long streams
  EXPECT_EQ(DecodeCutWorkers(qwen3, b33, 264, 132), 264);  // 132 pairs
  EXPECT_EQ(DecodeCutWorkers(qwen3, {}, 264, 132), 132);
  EXPECT_EQ(DecodeCutWorkers(qwen3, b1, 132, 132), 132);  // one an SM
}

// Evict-first streaming up to 4 L2s of KV: on an H100 (50 MiB of L2) a
// token of one bf16 KV head of 128 is 512 bytes of K and V, so 409600
// tokens: Qwen3's B=1 L=32768 (131072) and Llama's B=32 L=1024 (262144)
// stream evict-first, B=128 L=1024 (524288 for Qwen3) does not; f32 halves
// the tokens, a device without an L2 gets none.
TEST(DecodeHeuristics, EvictFirstUpToFourL2sOfKv) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  constexpr int64_t kH100L2 = 50 << 20;
  EXPECT_EQ(DecodeEvictFirstMaxTokens(qwen3, kH100L2), 409600);
  tailor::internal::DecodeShape f32 = qwen3;
  f32.dtype = DType::kF32;
  EXPECT_EQ(DecodeEvictFirstMaxTokens(f32, kH100L2), 204800);
  EXPECT_EQ(DecodeEvictFirstMaxTokens(qwen3, 0), 0);
  const std::vector<int32_t> b1(1, 32768), b128(128, 1024);
  EXPECT_EQ(DecodeKvTokens(qwen3, b1), 131072);    // evict-first
  EXPECT_EQ(DecodeKvTokens(qwen3, b128), 524288);  // not
}

// Head groups where the TMA kernel runs them (sm_90a, pages of 16, KV heads
// a multiple of 4, query rows in its shared memory) and the batch has 16
// tiles of 64 tokens a worker (4224 on 264 workers): Qwen3 B=8 L=32768
// (16384 tiles over its 4 heads) and B=128 L=1024 (8192) do, B=32 L=1024
// (2048) and B=1 do not. A reservation (no lengths) gets the largest.
TEST(DecodeHeuristics, HeadGroupsForLargeBatchesWhereTheKernelRunsThem) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  const std::vector<int32_t> b8(8, 32768), b128(128, 1024), b32(32, 1024),
      b1(1, 4096);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b8, 264, true, 0), 4);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b128, 264, true, 0), 4);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b32, 264, true, 0), 1);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b1, 132, true, 0), 1);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, {}, 264, true, 0), 4);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b8, 264, false, 0), 1);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, {}, 264, false, 4), 1);
  // Forced: either way where it fits; a reservation still gets the largest.
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b1, 132, true, 4), 4);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, b8, 264, true, 1), 1);
  EXPECT_EQ(DecodeHeadGroupFor(qwen3, {}, 264, true, 1), 4);
}

// Groups may split from 96 tiles of 64 tokens a worker (25344 on 264
// workers): Qwen3 B=128 L=4096 (32768 tiles over its 4 heads) and Llama's 8
// heads at B=8 L=32768 (32768) do, Qwen3 B=8 L=32768 (16384) does not; one
// sequence of 405504 tokens is exactly 25344 tiles of 4 heads.
TEST(DecodeHeuristics, HeadGroupsSplitOnlyOverLongStreams) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  tailor::internal::DecodeShape llama = qwen3;
  llama.num_kv_heads = 8;
  llama.group = 4;
  const std::vector<int32_t> b128(128, 4096), b8(8, 32768);
  EXPECT_TRUE(DecodeHeadGroupsSplit(qwen3, b128, 264));
  EXPECT_TRUE(DecodeHeadGroupsSplit(llama, b8, 264));
  EXPECT_FALSE(DecodeHeadGroupsSplit(qwen3, b8, 264));
  EXPECT_TRUE(DecodeHeadGroupsSplit(qwen3, {405504}, 264));
  EXPECT_FALSE(DecodeHeadGroupsSplit(qwen3, {405503}, 264));
  EXPECT_FALSE(DecodeHeadGroupsSplit(qwen3, {}, 264));
}

// The H100 runs 15 clusters of 8 and 7 of 16 at one CTA an SM: a bucket of
// one Qwen3 sequence (4 pairs) gets clusters of 16, of two (8 pairs) or one
// Llama sequence (8) clusters of 8, of four Qwen3 sequences (16) none.
TEST(DecodeHeuristics, ClustersForSmallBuckets) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  tailor::internal::DecodeShape llama = qwen3;
  llama.num_kv_heads = 8;
  llama.group = 4;
  const DecodeClusterCapacity h100 = {.of8 = 15, .of16 = 7};
  auto cluster = [&](const tailor::internal::DecodeShape& shape, int64_t bucket,
                     int forced = 0, bool tma = true,
                     int64_t shared = kSharedSm90) {
    return DecodeClusterWorkersFor(shape, bucket, tma, 4, shared, h100, forced);
  };
  EXPECT_EQ(cluster(qwen3, 1), 16);
  EXPECT_EQ(cluster(qwen3, 2), 8);
  EXPECT_EQ(cluster(qwen3, 4), 0);
  EXPECT_EQ(cluster(llama, 1), 8);
  EXPECT_EQ(cluster(llama, 2), 0);
  EXPECT_EQ(cluster(qwen3, 1, /*forced=*/1), 0);
  EXPECT_EQ(cluster(qwen3, 1, /*forced=*/8), 8);
  EXPECT_EQ(cluster(llama, 1, /*forced=*/16), 0);
  EXPECT_EQ(cluster(qwen3, 1, 0, /*tma=*/false), 0);
  // The receiver's slots must fit beside the pipeline.
  EXPECT_EQ(cluster(qwen3, 1, 0, true, DecodeSharedBytes(128, 8, 4)), 0);
  EXPECT_EQ(DecodeClusterWorkersFor(qwen3, 1, true, 4, kSharedSm90, {}, 0), 0);
}

}  // namespace
}  // namespace tailor::cuda
