// The paged-decode CUDA kernels compile under NVRTC (no GPU needed, so this
// runs in CI): every variant a model of the anchor grid needs plus the
// edges of the coverage (head_dim 64/256, groups 1 and 16, pages 1..256),
// the TMA kernel for sm_90a and the cp.async kernel for sm_80 and sm_90a,
// with ptxas -v: no variant spills, and the registers of each are printed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/nvrtc_report_test_util.h"
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
  const int64_t shared =
      std::string(v.arch) == "sm_80" ? kSharedSm80 : kSharedSm90;
  return CudaDecodeKey(
      tailor::internal::KeyTarget{.backend = BackendKind::kCuda,
                                  .arch = v.arch},
      {.dtype = v.dtype,
       .head_dim = v.head_dim,
       .group = v.group,
       .page_size = v.page},
      v.variant, DecodeStagesFor(v.head_dim, v.group, shared));
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

using DecodeNvrtcTest = testing::NvrtcReportTest<&GenerateCudaDecode>;
using testing::LogNumber;

TEST_F(DecodeNvrtcTest, EveryVariantCompilesWithoutSpills) {
  std::printf("%-50s %6s %5s %7s %7s %7s\n", "variant", "stages", "regs",
              "spill_st", "spill_ld", "code_kb");
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(Describe(v));
    const SpecKey key = KeyOf(v);
    ASSERT_GE(key.tile.stages, 2);
    absl::StatusOr<NvrtcCompiler::Output> out = Compile(key, v.arch);
    TAILOR_ASSERT_OK(out.status());
    const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
    const int spill_stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
    const int spill_loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
    std::printf("%-50s %6d %5d %7d %7d %7.1f\n", Describe(v).c_str(),
                key.tile.stages, regs, spill_stores, spill_loads,
                testing::CubinCodeBytes(out->cubin) / 1024.0);
    EXPECT_GT(testing::CubinCodeBytes(out->cubin), 0);
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

// Qwen3-30B-A3B's decode: 32 query heads over 4 KV heads of 128, pages of 16.
tailor::internal::DecodeShape Qwen3DecodeShape() {
  return {.dtype = DType::kBF16,
          .head_dim = 128,
          .group = 8,
          .page_size = 16,
          .num_kv_heads = 4};
}

TEST(DecodeKernelKeysTest, TmaPageSizesAndHeadGroupLegality) {
  EXPECT_TRUE(DecodeTmaPageSize(16));
  EXPECT_TRUE(DecodeTmaPageSize(192));
  EXPECT_FALSE(DecodeTmaPageSize(24));
  EXPECT_FALSE(DecodeTmaPageSize(1));
  // Head groups where the TMA kernel runs them: sm_90a, pages of 16, KV
  // heads a multiple of 4, query rows in its shared memory.
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
                       "kernel (variant): must be in [0, 1], got 7"));
  EXPECT_THAT(with([](SpecKey& k) { k.tile.m = 32; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tile.m (tile_tokens): must be 64, got 32"));
  EXPECT_THAT(with([](SpecKey& k) { k.tile.warps = 8; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tile.warps: must be 4, got 8"));
  EXPECT_THAT(with([](SpecKey& k) { k.tile.cluster = 2; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tile.cluster: not used by this kernel, must be 0, "
                       "got 2"));
  EXPECT_THAT(with([](SpecKey& k) { k.op = OpKind::kMoePack; }),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("no generator for moe.pack")));
}

}  // namespace
}  // namespace tailor::cuda
