// The ragged-attention CUDA kernels, built from their typed specs by the
// backend's generator, compile under NVRTC for sm_90a (no GPU needed, so
// this runs in CI): the anchor models' variants and the edges of the
// coverage, with ptxas -v (registers printed; no spills), plus the merge;
// and the generator names the key field it cannot build.
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
#include "core/spec_key.h"
#include "ops/attention/ragged_spec.h"
#include "templates/cuda/attention/prefill_params.h"
#include "backends/cuda/nvrtc_report_test_util.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::RaggedKernelSpec;
using tailor::internal::RaggedMask;
using tailor::internal::RaggedMergeSpec;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};

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
  std::printf("%-55s %5s %8s %8s\n", "variant", "regs", "spill_st", "spill_ld");
  for (const RaggedKernelSpec& spec : specs) {
    SCOPED_TRACE(spec.ToString());
    absl::StatusOr<NvrtcCompiler::Output> out = Compile(spec.Key(kHopper));
    TAILOR_ASSERT_OK(out.status());
    const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
    const int stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
    const int loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
    std::printf("%-55s %5d %8d %8d\n", spec.ToString().c_str(), regs, stores,
                loads);
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
}

}  // namespace
}  // namespace tailor::cuda
