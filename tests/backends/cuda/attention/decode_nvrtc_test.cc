// The paged-decode CUDA kernels compile under NVRTC (no GPU needed, so this
// runs in CI): every variant a model of the anchor grid needs plus the
// edges of the coverage (head_dim 64/256, groups 1 and 16, pages 1..256),
// the TMA kernel for sm_90a and the cp.async kernel for sm_80 and sm_90a,
// with ptxas -v: no variant spills, and the registers of each are printed
// (the table in the issue notes comes from this test's output).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/tma/tensor_map_check.h"
#include "core/spec_key.h"
#include "templates/cuda/attention/decode_params.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;

// Opt-in shared memory per block: H100 / H200 (sm_90a) and A100 (sm_80).
constexpr int64_t kSharedSm90 = 232448;
constexpr int64_t kSharedSm80 = 166912;

struct Variant {
  DType dtype;
  int64_t head_dim, group, page;
  uint32_t variant;
  const char* arch;
};

SpecKey KeyOf(const Variant& v) {
  SpecKey key;
  key.op = OpKind::kAttentionDecode;
  key.backend = BackendKind::kCuda;
  key.SetArch(v.arch);
  key.dtypes[0] = v.dtype;
  key.dims = {v.head_dim, v.group, v.page};
  const int64_t shared =
      std::string(v.arch) == "sm_80" ? kSharedSm80 : kSharedSm90;
  key.tile = {.m = kDecodeTileTokens,
              .stages = DecodeStagesFor(v.head_dim, v.group, shared),
              .warps = kDecodeConsumerWarps};
  key.variant = v.variant;
  return key;
}

std::vector<Variant> Variants() {
  const uint32_t kTma = kDecodeVariantTma, kCp = kDecodeVariantCpAsync;
  return {
      // The anchor grid: Llama-3-8B (group 4) and Qwen3-30B-A3B (group 8).
      {DType::kBF16, 128, 4, 16, kTma, "sm_90a"},
      {DType::kBF16, 128, 8, 16, kTma, "sm_90a"},
      {DType::kBF16, 128, 4, 16, kCp, "sm_90a"},
      {DType::kBF16, 128, 8, 16, kCp, "sm_80"},
      // Coverage edges.
      {DType::kF16, 64, 1, 8, kTma, "sm_90a"},
      {DType::kF16, 256, 16, 256, kTma, "sm_90a"},
      {DType::kBF16, 256, 2, 64, kTma, "sm_90a"},
      {DType::kF16, 128, 16, 128, kTma, "sm_90a"},
      {DType::kF16, 64, 1, 1, kCp, "sm_80"},
      {DType::kBF16, 256, 16, 5, kCp, "sm_90a"},
      {DType::kF16, 128, 16, 256, kCp, "sm_80"},
      {DType::kBF16, 64, 3, 24, kCp, "sm_80"},
  };
}

std::string Describe(const Variant& v) {
  return absl::StrCat(v.variant == kDecodeVariantTma ? "tma     " : "cp.async",
                      " ", v.arch, " ", DTypeName(v.dtype), " D=", v.head_dim,
                      " group=", v.group, " page=", v.page);
}

class DecodeNvrtcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<NvrtcCompiler> compiler =
        NvrtcCompiler::Create({.extra_flags = {"--ptxas-options=-v"}});
    if (!compiler.ok()) {
      ASSERT_EQ(compiler.status().code(), absl::StatusCode::kUnavailable)
          << compiler.status();
      GTEST_SKIP() << "NVRTC not installed: " << compiler.status();
    }
    compiler_.emplace(*std::move(compiler));
  }
  std::optional<NvrtcCompiler> compiler_;
};

// "Used 140 registers" and "0 bytes spill stores" from ptxas -v's log.
int LogNumber(const std::string& log, const std::string& pattern) {
  std::smatch match;
  if (!std::regex_search(log, match, std::regex(pattern))) return -1;
  return std::stoi(match[1].str());
}

TEST_F(DecodeNvrtcTest, EveryVariantCompilesWithoutSpills) {
  std::printf("%-50s %6s %5s %7s %7s\n", "variant", "stages", "regs",
              "spill_st", "spill_ld");
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(Describe(v));
    const SpecKey key = KeyOf(v);
    ASSERT_GE(key.tile.stages, 2);
    absl::StatusOr<KernelSource> source = GenerateCudaDecode(key);
    TAILOR_ASSERT_OK(source.status());
    // NVRTC may serve a source it compiled before (another run on this
    // machine) from its cache, without the ptxas -v report: a unique
    // trailing declaration makes every compile a real one.
    source->code += absl::StrCat(
        "constexpr long long tailor_test_nonce = ",
        std::chrono::system_clock::now().time_since_epoch().count(), ";\n");
    absl::StatusOr<NvrtcCompiler::Output> out =
        compiler_->Compile(*source, v.arch, /*want_ptx=*/true);
    TAILOR_ASSERT_OK(out.status());
    const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
    const int spill_stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
    const int spill_loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
    std::printf("%-50s %6d %5d %7d %7d\n", Describe(v).c_str(), key.tile.stages,
                regs, spill_stores, spill_loads);
    EXPECT_GT(regs, 0) << out->log;
    EXPECT_EQ(spill_stores, 0) << out->log;
    EXPECT_EQ(spill_loads, 0) << out->log;
    EXPECT_THAT(out->ptx, HasSubstr("mma.sync.aligned.m16n8k16"));
    EXPECT_THAT(out->ptx, HasSubstr("ldmatrix.sync.aligned.m8n8.x4.trans"));
    if (v.variant == kDecodeVariantTma) {
      EXPECT_THAT(out->ptx, HasSubstr("cp.async.bulk.tensor.5d"));
      EXPECT_THAT(out->ptx, HasSubstr("mbarrier.try_wait.parity"));
    } else {
      EXPECT_THAT(out->ptx, HasSubstr("cp.async.cg.shared.global"));
    }
  }
}

TEST_F(DecodeNvrtcTest, TmaVariantNeedsHopper) {
  SpecKey key = KeyOf({DType::kBF16, 128, 4, 16, kDecodeVariantTma, "sm_80"});
  absl::StatusOr<KernelSource> source = GenerateCudaDecode(key);
  TAILOR_ASSERT_OK(source.status());
  EXPECT_THAT(
      compiler_->Compile(*source, "sm_80"),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("needs sm_90 or newer")));
}

TEST(DecodeKernelKeysTest, StagesFollowSharedMemory) {
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
  EXPECT_TRUE(DecodeTmaPageSize(16));
  EXPECT_TRUE(DecodeTmaPageSize(192));
  EXPECT_FALSE(DecodeTmaPageSize(24));
  EXPECT_FALSE(DecodeTmaPageSize(1));
}

// Qwen3-30B-A3B's decode: 32 query heads over 4 KV heads of 128, pages of 16.
tailor::internal::DecodeShape Qwen3DecodeShape() {
  return {.dtype = DType::kBF16,
          .head_dim = 128,
          .group = 8,
          .page_size = 16,
          .num_kv_heads = 4};
}

// Two CTAs an SM from an SM's worth of (sequence, KV head) pairs, where two
// fit.
TEST(DecodeKernelKeysTest, TwoCtasAnSmFromAnSmsWorthOfPairs) {
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
TEST(DecodeKernelKeysTest, SmallShortPlansNarrowTheirCut) {
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
TEST(DecodeKernelKeysTest, EvictFirstUpToFourL2sOfKv) {
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
TEST(DecodeKernelKeysTest, HeadGroupsForLargeBatchesWhereTheKernelRunsThem) {
  const tailor::internal::DecodeShape qwen3 = Qwen3DecodeShape();
  EXPECT_TRUE(DecodeHeadGroupsFit(qwen3, 2, "sm_90a"));
  EXPECT_TRUE(DecodeHeadGroupsFit(qwen3, 4, "sm_90a"));
  EXPECT_FALSE(DecodeHeadGroupsFit(qwen3, 2, "sm_90"));
  tailor::internal::DecodeShape other = qwen3;
  other.page_size = 32;
  EXPECT_FALSE(DecodeHeadGroupsFit(other, 2, "sm_90a"));
  other = qwen3;
  other.num_kv_heads = 2;
  EXPECT_FALSE(DecodeHeadGroupsFit(other, 2, "sm_90a"));
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
TEST(DecodeKernelKeysTest, HeadGroupsSplitOnlyOverLongStreams) {
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
TEST(DecodeKernelKeysTest, ClustersForSmallBuckets) {
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

// The checker (and so the descriptor pool) accepts the cache maps of every
// layout and TMA page size on sm_90; nothing else would take the TMA path.
TEST(DecodeKernelKeysTest, CacheMapsAreLegalOnHopper) {
  for (int64_t d : {64, 128, 256}) {
    for (int64_t page : {8, 16, 32, 64, 128, 256}) {
      for (int64_t heads : {1, 4, 8}) {
        for (bool hnd : {false, true}) {
          SCOPED_TRACE(absl::StrCat("D=", d, " page=", page, " Hkv=", heads,
                                    hnd ? " HND" : " NHD"));
          const tailor::internal::DecodeShape shape = {.dtype = DType::kBF16,
                                                       .head_dim = d,
                                                       .group = 4,
                                                       .page_size = page,
                                                       .num_kv_heads = heads};
          const int64_t nhd[3] = {page * heads * d, heads * d, d};
          const int64_t hnd_strides[3] = {heads * page * d, d, page * d};
          const TensorMapSpec spec = DecodeCacheMapSpec(
              shape, 100000, reinterpret_cast<const void*>(0x7f0000000000),
              hnd ? hnd_strides : nhd);
          TAILOR_EXPECT_OK(CheckTensorMap(spec, 90));
          EXPECT_EQ(spec.box_dims[1], std::min<int64_t>(page, 64));
          EXPECT_EQ(spec.box_dims[3], 1u);
          if (page == 16 && heads % 4 == 0) {  // the head groups' maps
            const TensorMapSpec grouped = DecodeCacheMapSpec(
                shape, 100000, reinterpret_cast<const void*>(0x7f0000000000),
                hnd ? hnd_strides : nhd, 4);
            TAILOR_EXPECT_OK(CheckTensorMap(grouped, 90));
            EXPECT_EQ(grouped.box_dims[3], 4u);
          }
        }
      }
    }
  }
}

TEST(DecodeKernelKeysTest, GeneratorRejectsKeysTheTemplatesCannotBuild) {
  auto with = [](auto edit) {
    SpecKey key =
        KeyOf({DType::kBF16, 128, 4, 16, kDecodeVariantTma, "sm_90a"});
    edit(key);
    return GenerateCudaDecode(key).status();
  };
  EXPECT_THAT(with([](SpecKey& k) { k.dtypes[0] = DType::kF32; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dtypes[0]: must be bf16 or f16, got 1"));
  EXPECT_THAT(with([](SpecKey& k) { k.dims[0] = 96; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dims[0] (D): must be 64, 128 or 256, got 96"));
  EXPECT_THAT(with([](SpecKey& k) { k.dims[1] = 17; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dims[1] (group): must be in [1, 16], got 17"));
  EXPECT_THAT(with([](SpecKey& k) { k.dims[2] = 24; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dims[2] (page): must be a multiple of 8 that divides "
                       "64 or is a multiple of 64 for the TMA variant, got "
                       "24"));
  EXPECT_THAT(with([](SpecKey& k) { k.tile.stages = 5; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tile.stages: must be in [2, 4], got 5"));
  EXPECT_THAT(with([](SpecKey& k) { k.variant = 7; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("variant: must be kDecodeVariantCpAsync")));
  EXPECT_THAT(with([](SpecKey& k) { k.op = OpKind::kMoePack; }),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("no generator for moe.pack")));
}

}  // namespace
}  // namespace tailor::cuda
