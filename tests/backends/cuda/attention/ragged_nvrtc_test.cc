// The ragged-attention CUDA kernels, built from their typed specs by the
// backend's generator, compile under NVRTC (no GPU needed, so this runs in
// CI): the Hopper kernel's anchor and edge variants for sm_90a, the
// portable kernel's for sm_80 and sm_90a, with ptxas -v (registers printed;
// no spills), plus the merges; the generator names the key field it cannot
// build; and the selection rule (which kernel a device, page size and the
// ragged.kernel key get) with the plan configuration and warm-up keys that
// follow from it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/attention/ragged_kernels.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/nvrtc_report_test_util.h"
#include "core/spec_key.h"
#include "ops/attention/ragged_spec.h"
#include "templates/cuda/attention/prefill_params.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::RaggedKernelSpec;
using tailor::internal::RaggedMask;
using tailor::internal::RaggedMergeSpec;
using tailor::internal::RaggedPlanConfig;
using tailor::internal::RaggedShape;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
constexpr KeyTarget kAmpere = {.backend = BackendKind::kCuda, .arch = "sm_80"};

using RaggedNvrtcTest = testing::NvrtcReportTest<&GenerateCudaRagged>;
using testing::LogNumber;

TEST_F(RaggedNvrtcTest, AnchorAndEdgeVariantsCompileWithoutSpills) {
  const RaggedKernelSpec specs[] = {
      // Llama-3-8B (group 4) and Qwen3-30B-A3B (group 8), pages of 16.
      {DType::kBF16, 128, 4, 4, 16, RaggedMask::kCausal, kPrefillTileRows},
      {DType::kBF16, 128, 8, 8, 16, RaggedMask::kCausal, kPrefillTileRows},
      // Edges: f16, D 64 / 256, MHA, pack 16, large pages.
      {DType::kF16, 64, 1, 1, 128, RaggedMask::kNone, kPrefillTileRows},
      {DType::kF16, 256, 16, 16, 32, RaggedMask::kCausalWindow,
       kPrefillTileRows},
  };
  std::printf("%-55s %5s %8s %8s %7s\n", "variant", "regs", "spill_st",
              "spill_ld", "code_kb");
  for (const RaggedKernelSpec& spec : specs) {
    SCOPED_TRACE(spec.ToString());
    absl::StatusOr<NvrtcCompiler::Output> out = Compile(spec.Key(kHopper));
    TAILOR_ASSERT_OK(out.status());
    const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
    const int stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
    const int loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
    std::printf("%-55s %5d %8d %8d %7.1f\n", spec.ToString().c_str(), regs,
                stores, loads, testing::CubinCodeBytes(out->cubin) / 1024.0);
    EXPECT_GT(regs, 0) << out->log;
    EXPECT_EQ(stores, 0) << out->log;
    EXPECT_EQ(loads, 0) << out->log;
    EXPECT_THAT(out->ptx, HasSubstr("wgmma.mma_async"));
    EXPECT_THAT(out->ptx, HasSubstr("cp.async.bulk.tensor.5d"));
    EXPECT_THAT(out->ptx, HasSubstr("setmaxnreg"));
  }
  // The checked build ($TAILOR_CUDA_PIPELINE_CHECKS=1) compiles too.
  RaggedKernelSpec checked = specs[3];
  checked.pipeline_checks = true;
  absl::StatusOr<KernelSource> checked_source =
      GenerateCudaRagged(checked.Key(kHopper));
  TAILOR_ASSERT_OK(checked_source.status());
  EXPECT_THAT(checked_source->code,
              ::testing::StartsWith("#define TAILOR_PIPELINE_CHECKS 1\n"));
  TAILOR_EXPECT_OK(Compile(checked.Key(kHopper)).status());
  for (int64_t d : {64, 128, 256}) {
    const RaggedMergeSpec merge = {.dtype = DType::kBF16,
                                   .head_dim = static_cast<int32_t>(d),
                                   .head_pack = 4,
                                   .tile_rows = kPrefillTileRows};
    SCOPED_TRACE(merge.ToString());
    TAILOR_EXPECT_OK(Compile(merge.Key(kHopper)).status());
  }
}

TEST(RaggedKernelKeysTest, GeneratorRejectsKeysTheTemplatesCannotBuild) {
  RaggedKernelSpec spec = {DType::kBF16,    128, 4, 4, 24, RaggedMask::kCausal,
                           kPrefillTileRows};
  EXPECT_THAT(GenerateCudaRagged(spec.Key(kHopper)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.dims[3] (page): the sm_90a kernel needs a multiple "
                       "of 8 that divides the KV block or is a multiple of "
                       "it, got 24"));
  spec.page_size = 16;
  spec.tile_rows = 64;
  EXPECT_THAT(GenerateCudaRagged(spec.Key(kHopper)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.tile.m (tile rows): the sm_90a kernel tiles by "
                       "128, got 64"));
  EXPECT_TRUE(RaggedTmaPageSize(16, 128));
  EXPECT_TRUE(RaggedTmaPageSize(256, 64));
  EXPECT_FALSE(RaggedTmaPageSize(1, 128));
  EXPECT_FALSE(RaggedTmaPageSize(48, 128));

  RaggedKernelSpec portable = {
      DType::kBF16, 128, 4, 4, 3, RaggedMask::kCausal, kPrefillSm80TileRows};
  portable.portable = true;
  TAILOR_EXPECT_OK(GenerateCudaRagged(portable.Key(kAmpere)).status());
  portable.tile_rows = kPrefillTileRows;
  EXPECT_THAT(GenerateCudaRagged(portable.Key(kAmpere)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.tile.m (tile rows): the portable kernel tiles by "
                       "64, got 128"));
  portable.tile_rows = kPrefillSm80TileRows;
  portable.pipeline_checks = true;
  EXPECT_THAT(GenerateCudaRagged(portable.Key(kAmpere)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.variant: the portable kernel has no pipeline "
                       "checks (bit 0)"));
  const RaggedMergeSpec merge = {
      .dtype = DType::kBF16, .head_dim = 128, .head_pack = 4, .tile_rows = 32};
  EXPECT_THAT(GenerateCudaRagged(merge.Key(kAmpere)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.tile.m (tile rows): the merge reads slots of 128 "
                       "(sm_90a) or 64 (portable) rows, got 32"));
}

// The portable kernel (mma.sync + cp.async) compiles without spills for
// sm_80 and sm_90a: pages of 1, 3, 16, 24 and 256, every head_dim, packs 1
// to 16, both dtypes; and its merge of 64-row slots.
TEST_F(RaggedNvrtcTest, PortableVariantsCompileWithoutSpills) {
  const RaggedKernelSpec specs[] = {
      {DType::kBF16, 128, 4, 4, 16, RaggedMask::kCausal, kPrefillSm80TileRows},
      {DType::kBF16, 128, 8, 8, 1, RaggedMask::kCausal, kPrefillSm80TileRows},
      {DType::kF16, 64, 1, 1, 3, RaggedMask::kNone, kPrefillSm80TileRows},
      {DType::kF16, 256, 16, 16, 24, RaggedMask::kCausalWindow,
       kPrefillSm80TileRows},
      {DType::kBF16, 256, 2, 2, 256, RaggedMask::kCausal, kPrefillSm80TileRows},
  };
  std::printf("%-64s %6s %5s %8s %8s %7s\n", "portable variant", "arch",
              "regs", "spill_st", "spill_ld", "code_kb");
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const KeyTarget target = {.backend = BackendKind::kCuda, .arch = arch};
    for (RaggedKernelSpec spec : specs) {
      spec.portable = true;
      SCOPED_TRACE(absl::StrCat(spec.ToString(), " ", arch));
      absl::StatusOr<NvrtcCompiler::Output> out =
          Compile(spec.Key(target), arch);
      TAILOR_ASSERT_OK(out.status());
      const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
      const int stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
      const int loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
      std::printf("%-64s %6s %5d %8d %8d %7.1f\n", spec.ToString().c_str(),
                  arch, regs, stores, loads,
                  testing::CubinCodeBytes(out->cubin) / 1024.0);
      EXPECT_GT(regs, 0) << out->log;
      EXPECT_EQ(stores, 0) << out->log;
      EXPECT_EQ(loads, 0) << out->log;
      EXPECT_THAT(out->ptx, HasSubstr("mma.sync.aligned.m16n8k16"));
      EXPECT_THAT(out->ptx, HasSubstr("cp.async.cg.shared.global"));
      EXPECT_THAT(out->ptx, HasSubstr("ldmatrix.sync.aligned.m8n8.x4.trans"));
      EXPECT_THAT(out->ptx, ::testing::Not(HasSubstr("wgmma")));
    }
    for (int64_t d : {64, 128, 256}) {
      const RaggedMergeSpec merge = {.dtype = DType::kF16,
                                     .head_dim = static_cast<int32_t>(d),
                                     .head_pack = 2,
                                     .tile_rows = kPrefillSm80TileRows};
      SCOPED_TRACE(merge.ToString());
      TAILOR_EXPECT_OK(Compile(merge.Key(target), arch).status());
    }
  }
}

// The portable kernel's shared memory fits the 99 KB of a CTA on sm_86 /
// sm_89 at every head_dim.
TEST(RaggedKernelKeysTest, PortableSharedMemoryFitsEveryAmpereAndAda) {
  for (int d : {64, 128, 256}) {
    EXPECT_LE(PrefillSm80SharedBytes(d), 99u * 1024) << "D=" << d;
  }
}

RaggedShape LlamaShape(int64_t page_size) {
  return {.dtype = DType::kBF16,
          .head_dim = 128,
          .num_qo_heads = 32,
          .num_kv_heads = 8,
          .page_size = page_size};
}

// Which kernel serves a layer: the sm_90a kernel on sm_90a for its TMA
// page sizes, the portable one elsewhere on sm_80+ and whenever
// ragged.kernel=portable forces it.
TEST(RaggedKernelSelectionTest, HopperKernelOnlyWhereItServesTheShape) {
  EXPECT_FALSE(RaggedUsesPortable("sm_90a", LlamaShape(16), false));
  EXPECT_FALSE(RaggedUsesPortable("sm_90a", LlamaShape(256), false));
  EXPECT_TRUE(RaggedUsesPortable("sm_90a", LlamaShape(16), true));
  for (int64_t page : {1, 3, 24, 48}) {
    EXPECT_TRUE(RaggedUsesPortable("sm_90a", LlamaShape(page), false)) << page;
  }
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    EXPECT_TRUE(RaggedUsesPortable(arch, LlamaShape(16), false)) << arch;
  }
}

// The plan the portable kernel is cut for: 64-row tiles over its KV blocks,
// two CTAs an SM up to head_dim 128.
TEST(RaggedKernelSelectionTest, PortablePlanConfigFollowsItsTiles) {
  const RaggedPlanConfig hopper =
      CudaRaggedPlanConfig(LlamaShape(16), 132, true, /*portable=*/false);
  EXPECT_EQ(hopper.tile_rows, kPrefillTileRows);
  EXPECT_EQ(hopper.kv_block, 128);
  EXPECT_EQ(hopper.num_workers, 132);
  const RaggedPlanConfig portable =
      CudaRaggedPlanConfig(LlamaShape(3), 132, true, /*portable=*/true);
  EXPECT_EQ(portable.tile_rows, kPrefillSm80TileRows);
  EXPECT_EQ(portable.kv_block, 64);
  EXPECT_EQ(portable.head_pack, 4);
  EXPECT_EQ(portable.num_workers, 264);
  EXPECT_TRUE(portable.decode_rows);
  RaggedShape d256 = LlamaShape(3);
  d256.head_dim = 256;
  const RaggedPlanConfig wide = CudaRaggedPlanConfig(d256, 108, false, true);
  EXPECT_EQ(wide.kv_block, 32);
  EXPECT_EQ(wide.num_workers, 108);
  EXPECT_FALSE(wide.decode_rows);
}

// Warm-up lists the kernel serving launches: its key names the kernel
// (variant bit 1, tile rows), the merge its slots' rows.
TEST(RaggedKernelSelectionTest, LayerKernelsNameTheServingKernel) {
  struct Case {
    KeyTarget target;
    int64_t page;
    bool forced;
    bool portable;
  };
  const Case cases[] = {{kHopper, 16, false, false},
                        {kHopper, 16, true, true},
                        {kHopper, 3, false, true},
                        {kAmpere, 16, false, true},
                        {kAmpere, 1, false, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.target.arch, " page ", c.page,
                              c.forced ? " forced" : ""));
    absl::StatusOr<std::vector<tailor::internal::KernelJob>> jobs =
        RaggedLayerKernels(c.target, LlamaShape(c.page), c.forced);
    TAILOR_ASSERT_OK(jobs.status());
    ASSERT_EQ(jobs->size(), 2u);
    absl::StatusOr<RaggedKernelSpec> spec =
        RaggedKernelSpec::FromKey((*jobs)[0].key);
    TAILOR_ASSERT_OK(spec.status());
    EXPECT_EQ(spec->portable, c.portable);
    const int rows = c.portable ? kPrefillSm80TileRows : kPrefillTileRows;
    EXPECT_EQ(spec->tile_rows, rows);
    EXPECT_EQ((*jobs)[1].key.tile.m, rows);
    for (const tailor::internal::KernelJob& job : *jobs) {
      absl::StatusOr<KernelSource> source = job.generate(job.key);
      TAILOR_ASSERT_OK(source.status());
      EXPECT_THAT(
          source->code,
          HasSubstr(
              job.key.op == tailor::internal::OpKind::kAttentionRagged
                  ? (c.portable ? "PrefillSm80Kernel<" : "PrefillSm90Kernel<")
                  : "PrefillMergeKernel<"));
    }
  }
  const KeyTarget turing = {.backend = BackendKind::kCuda, .arch = "sm_75"};
  EXPECT_THAT(RaggedLayerKernels(turing, LlamaShape(16), false),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "attention.ragged: the CUDA kernels need sm_80 or "
                       "newer, target is sm_75"));
  EXPECT_THAT(RaggedLayerKernels(kAmpere, LlamaShape(512), false),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "page_size: the CUDA ragged kernels serve pages of 1 "
                       "to 256 tokens, got 512"));
}

}  // namespace
}  // namespace tailor::cuda
