// The FP8 (e4m3, block-scaled) MoE kernels on CUDA, built from their typed
// specs by the backend's generator, compile under NVRTC for sm_90a (no GPU
// needed, so this runs in CI): the anchor models' GEMM variants (DeepSeek-V3
// whole and at tensor-parallel 8, Qwen3-30B-A3B; the quantizing gate|up
// epilogue, the bf16 down projection, swap-AB decode tiles) with ptxas -v
// (registers printed; no spills), the per-tensor and per-channel variants
// (scales applied to the accumulators), the quantizing Pack (block, per
// tensor, per token); and the generator names the field of a key it cannot build.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/moe/fp8_generator.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/nvrtc_report_test_util.h"
#include "core/spec_key.h"
#include "ops/moe/spec.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::MoePackSpec;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};

using Fp8NvrtcTest = testing::NvrtcReportTest<&GenerateMoeKernel>;
using testing::LogNumber;

// A GEMM spec: gate|up (quantizing, e4m3 C; per channel bf16 C) or down
// (bf16 C).
MoeGemmSpec Gemm(int64_t n, int64_t k, bool gate_up, int32_t tile_rows,
                 bool swap_ab = false,
                 moe::ScaleMode mode = moe::ScaleMode::kBlock) {
  const bool quantized = gate_up && mode != moe::ScaleMode::kPerChannel;
  return {
      .dtype = quantized ? DType::kF8E4M3 : DType::kBF16,
      .n = n,
      .k = k,
      .tile_rows = tile_rows,
      .epilogue = gate_up ? moe::Epilogue::kSiluAndMul : moe::Epilogue::kNone,
      .kernel = MoeGemmKernel::kHopper,
      .swap_ab = swap_ab,
      .scale_mode = mode};
}

TEST_F(Fp8NvrtcTest, AnchorGemmVariantsCompileWithoutSpills) {
  constexpr moe::ScaleMode kTensor = moe::ScaleMode::kPerTensor;
  constexpr moe::ScaleMode kChannel = moe::ScaleMode::kPerChannel;
  const MoeGemmSpec specs[] = {
      Gemm(4096, 7168, true, 128),        // DeepSeek-V3 gate|up
      Gemm(7168, 2048, false, 128),       // DeepSeek-V3 down
      Gemm(512, 7168, true, 64),          // DeepSeek-V3 TP8 gate|up
      Gemm(7168, 256, false, 64),         // DeepSeek-V3 TP8 down
      Gemm(1536, 2048, true, 128),        // Qwen3-30B-A3B gate|up
      Gemm(7168, 2048, false, 16, true),  // decode: swap-AB
      Gemm(4096, 7168, true, 32, true),
      // Per tensor (Mixtral-8x7B FP8: static scales, the gate|up epilogue
      // divides by the static output scale) and per channel (bf16 outputs).
      Gemm(28672, 4096, true, 128, false, kTensor),
      Gemm(4096, 14336, false, 64, false, kTensor),
      Gemm(28672, 4096, true, 8, true, kTensor),
      Gemm(1536, 2048, true, 128, false, kChannel),
      Gemm(2048, 768, false, 64, false, kChannel),
      Gemm(2048, 768, false, 32, true, kChannel),
      Gemm(1536, 2048, true, 16, true, kChannel),
  };
  std::printf("%-72s %5s %8s %8s\n", "variant", "regs", "spill_st", "spill_ld");
  for (const MoeGemmSpec& spec : specs) {
    const SpecKey key = spec.ToKey(kHopper);
    SCOPED_TRACE(key.ToString());
    absl::StatusOr<NvrtcCompiler::Output> out = Compile(key);
    TAILOR_ASSERT_OK(out.status());
    const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
    const int stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
    const int loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
    std::printf("%-72s %5d %8d %8d\n", key.ToString().c_str(), regs, stores,
                loads);
    EXPECT_GT(regs, 0) << out->log;
    EXPECT_EQ(stores, 0) << out->log;
    EXPECT_EQ(loads, 0) << out->log;
    EXPECT_THAT(out->ptx, HasSubstr(".f32.e4m3.e4m3"));
    EXPECT_THAT(out->ptx, HasSubstr("setmaxnreg"));
    if (spec.dtype == DType::kF8E4M3) {
      EXPECT_THAT(out->ptx, HasSubstr("cvt.rn.satfinite.e4m3x2.f32"));
    }
  }
}

// The spill and register report of one compiled variant; `name` prints.
void ExpectNoSpills(const std::string& name,
                    const absl::StatusOr<NvrtcCompiler::Output>& out) {
  TAILOR_ASSERT_OK(out.status());
  const int regs = LogNumber(out->log, R"(Used (\d+) registers)");
  const int stores = LogNumber(out->log, R"((\d+) bytes spill stores)");
  const int loads = LogNumber(out->log, R"((\d+) bytes spill loads)");
  std::printf("%-72s %5d %8d %8d\n", name.c_str(), regs, stores, loads);
  EXPECT_GT(regs, 0) << out->log;
  EXPECT_EQ(stores, 0) << out->log;
  EXPECT_EQ(loads, 0) << out->log;
}

// The portable FP8 GEMM (mma.sync, e4m3 converted in registers): every
// scale mode and epilogue, the plan tiles of its tail parts, on sm_80
// (integer conversions) and sm_90a (cvt), with no spills.
TEST_F(Fp8NvrtcTest, PortableGemmVariantsCompileWithoutSpills) {
  constexpr moe::ScaleMode kTensor = moe::ScaleMode::kPerTensor;
  constexpr moe::ScaleMode kChannel = moe::ScaleMode::kPerChannel;
  std::vector<MoeGemmSpec> specs = {
      Gemm(4096, 7168, true, 64),    // DeepSeek-V3 gate|up (quantizing)
      Gemm(7168, 2048, false, 128),  // DeepSeek-V3 down
      Gemm(512, 7168, true, 16),     // DeepSeek-V3 TP8 gate|up
      Gemm(7168, 256, false, 1),     // DeepSeek-V3 TP8 down
      Gemm(28672, 4096, true, 64, false, kTensor),
      Gemm(4096, 14336, false, 32, false, kTensor),
      Gemm(1536, 2048, true, 64, false, kChannel),
      Gemm(2048, 768, false, 48, false, kChannel),
  };
  MoeGemmSpec bf16_out = Gemm(1536, 2048, true, 64);  // silu_and_mul, bf16
  bf16_out.dtype = DType::kBF16;
  specs.push_back(bf16_out);
  std::printf("%-72s %5s %8s %8s\n", "variant", "regs", "spill_st", "spill_ld");
  for (MoeGemmSpec spec : specs) {
    spec.kernel = MoeGemmKernel::kMatrixCore;
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const SpecKey key =
          spec.ToKey({.backend = BackendKind::kCuda, .arch = arch});
      SCOPED_TRACE(key.ToString());
      absl::StatusOr<NvrtcCompiler::Output> out = Compile(key, arch);
      ExpectNoSpills(key.ToString(), out);
      if (!out.ok()) continue;
      EXPECT_THAT(out->ptx, HasSubstr("mma.sync.aligned.m16n8k16.row.col.f32."
                                      "f16.f16.f32"));
      const bool sm90 = std::string(arch) == "sm_90a";
      EXPECT_EQ(out->ptx.find("cvt.rn.f16x2.e4m3x2") != std::string::npos,
                sm90);
      if (spec.dtype == DType::kF8E4M3) {
        EXPECT_EQ(
            out->ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos,
            sm90);
      }
    }
  }
}

// The generic kernel of background JIT (runtime N, K, tile rows) compiles
// in every epilogue, as the mma.sync bf16 one does.
TEST_F(Fp8NvrtcTest, PortableGenericGemmCompilesWithoutSpills) {
  for (int epilogue : {0, 1, 2}) {
    const std::string kernel =
        absl::StrCat("MoeFp8GroupedGemmMma<0, 0, 0, ", epilogue, ">");
    const tailor::internal::KernelSource source = {
        .code = absl::StrCat(
            "#include \"templates/cuda/moe/fp8_grouped_gemm_sm80.cuh\"\n"
            "TAILOR_CUDA_ENTRY(tailor_entry, (tailor::cuda::",
            kernel, "))\n"),
        .entry = "tailor_entry"};
    ExpectNoSpills(kernel,
                   compiler_->Compile(source, "sm_80", /*want_ptx=*/true));
  }
}

TEST_F(Fp8NvrtcTest, QuantizingPackCompiles) {
  for (const auto& [hidden, mode] :
       {std::pair{int64_t{7168}, moe::ScaleMode::kBlock},
        std::pair{int64_t{2048}, moe::ScaleMode::kBlock},
        std::pair{int64_t{4096}, moe::ScaleMode::kPerTensor},
        // Per token: the Pack of the hidden states and of the down
        // projection's bf16 input (Mixtral's and Qwen3-30B-A3B's I).
        std::pair{int64_t{14336}, moe::ScaleMode::kPerChannel},
        std::pair{int64_t{768}, moe::ScaleMode::kPerChannel}}) {
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const SpecKey key =
          MoePackSpec{
              .dtype = DType::kBF16, .hidden = hidden, .scale_mode = mode}
              .ToKey({.backend = BackendKind::kCuda, .arch = arch});
      SCOPED_TRACE(key.ToString());
      absl::StatusOr<NvrtcCompiler::Output> out = Compile(key, arch);
      TAILOR_ASSERT_OK(out.status());
      EXPECT_EQ(LogNumber(out->log, R"((\d+) bytes spill stores)"), 0)
          << out->log;
      // sm_80 has no e4m3 conversion: the integer rule instead.
      EXPECT_EQ(
          out->ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos,
          std::string(arch) == "sm_90a");
    }
  }
}

TEST(Fp8GeneratorTest, KeysTheTemplatesCannotBuildNameTheirField) {
  const auto code = absl::StatusCode::kInvalidArgument;
  MoeGemmSpec per_channel = Gemm(512, 256, true, 128);
  per_channel.scale_mode = moe::ScaleMode::kPerChannel;
  EXPECT_THAT(GenerateMoeKernel(per_channel.ToKey(kHopper)).status(),
              StatusIs(code,
                       "dtypes[3] (C): f8e4m3 only with silu_and_mul, in "
                       "block mode (cuda: or per tensor), got 8"));
  EXPECT_THAT(
      GenerateMoeKernel(Gemm(256, 200, false, 128).ToKey(kHopper)).status(),
      StatusIs(code, "k: must be a multiple of 128 (block scales), got 200"));
  EXPECT_THAT(
      GenerateMoeKernel(Gemm(384, 256, true, 128).ToKey(kHopper)).status(),
      StatusIs(code,
               "n: must be a multiple of 256 (gate | up of whole 128 "
               "blocks), got 384"));
  EXPECT_THAT(GenerateMoeKernel(Gemm(256, 256, false, 64, true).ToKey(kHopper))
                  .status(),
              StatusIs(code,
                       "tile_rows: swap-AB tiles have at most 32 rows, got "
                       "64"));
  MoeGemmSpec f32 = Gemm(256, 256, false, 128);
  f32.dtype = DType::kF32;
  EXPECT_THAT(GenerateMoeKernel(f32.ToKey(kHopper)).status(),
              StatusIs(code, "dtype (C): must be bf16 or f8e4m3, got 1"));
  MoeGemmSpec stored = Gemm(256, 256, false, 128);
  stored.tma_store = true;
  EXPECT_THAT(GenerateMoeKernel(stored.ToKey(kHopper)).status(),
              StatusIs(code,
                       "variant: the FP8 kernel has no TMA store, cluster or "
                       "pipeline checks"));
  EXPECT_THAT(
      GenerateMoeKernel(MoePackSpec{.dtype = DType::kF32,
                                    .hidden = 256,
                                    .scale_mode = moe::ScaleMode::kBlock}
                            .ToKey(kHopper))
          .status(),
      StatusIs(code,
               "dtype: cuda's quantizing Pack reads bf16 (2), "
               "got 1"));
  // (A key without a scale mode is the bf16 Pack's: the generator's own
  // rule, called directly.)
  EXPECT_THAT(
      GenerateFp8Pack(MoePackSpec{.dtype = DType::kBF16,
                                  .hidden = 256,
                                  .scale_mode = static_cast<moe::ScaleMode>(5)})
          .status(),
      StatusIs(code,
               "scale_mode: cuda's quantizing Pack is block (3), per channel "
               "(2, per-token scales) or per tensor (1), got 5"));
}

}  // namespace
}  // namespace tailor::cuda
