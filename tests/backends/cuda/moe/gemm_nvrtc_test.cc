// The bf16 Hopper grouped GEMM's consumer schedules, built from their typed
// specs by the backend's generator, compile under NVRTC for sm_90a (no GPU
// needed, so this runs in CI): the ping-pong variants of the anchor models'
// compute-bound launches (Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3; gate|up
// with silu_and_mul and down; TMA and register stores; the pipeline checks;
// a ragged N and K) with ptxas -v: registers printed beside the cooperative
// kernel's (also in clusters of 2 and 4), no spills, and the turns
// (bar.arrive) in the code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/nvrtc_report_test_util.h"
#include "core/spec_key.h"
#include "ops/moe/spec.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KeyTarget;
using tailor::internal::MoeGemmConsumers;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::SpecKey;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};

using HopperGemmNvrtcTest = testing::NvrtcReportTest<&GenerateMoeKernel>;
using testing::LogNumber;

// A 128-row bf16 Hopper spec of N x K, gate|up (silu_and_mul) or down.
MoeGemmSpec Gemm(int64_t n, int64_t k, bool gate_up, MoeGemmConsumers consumers,
                 bool tma_store = true) {
  MoeGemmSpec spec = {
      .dtype = DType::kBF16,
      .n = n,
      .k = k,
      .tile_rows = 128,
      .epilogue = gate_up ? moe::Epilogue::kSiluAndMul : moe::Epilogue::kNone,
      .kernel = MoeGemmKernel::kHopper,
      .tma_store = tma_store};
  spec.consumers = consumers;
  return spec;
}

struct Report {
  int registers, spill_stores, spill_loads, stack;
  double seconds;
};

TEST_F(HopperGemmNvrtcTest, PingPongVariantsCompileWithoutSpills) {
  constexpr auto kPingPong = MoeGemmConsumers::kPingPong;
  constexpr auto kCooperative = MoeGemmConsumers::kCooperative;
  std::vector<MoeGemmSpec> specs = {
      Gemm(28672, 4096, true, kPingPong),   // Mixtral-8x7B gate|up
      Gemm(4096, 14336, false, kPingPong),  // Mixtral-8x7B down
      Gemm(1536, 2048, true, kPingPong),    // Qwen3-30B-A3B gate|up
      Gemm(2048, 768, false, kPingPong),    // Qwen3-30B-A3B down
      Gemm(4096, 7168, true, kPingPong),    // DeepSeek-V3 gate|up
      Gemm(7168, 2048, false, kPingPong),   // DeepSeek-V3 down
      Gemm(7168, 2048, false, kPingPong, /*tma_store=*/false),
      Gemm(520, 136, false, kPingPong, /*tma_store=*/false),  // ragged N, K
      Gemm(4096, 7168, true, kCooperative),  // the cooperative kernel
      Gemm(7168, 2048, false, kCooperative),
  };
  for (int cluster : {2, 4}) {  // the cooperative kernel in clusters
    MoeGemmSpec clustered = Gemm(28672, 4096, true, kCooperative);
    clustered.cluster = cluster;
    specs.push_back(clustered);
  }
  MoeGemmSpec checked = Gemm(1280, 4160, true, kPingPong);
  checked.pipeline_checks = true;
  specs.push_back(checked);
  std::printf("%-72s %5s %8s %8s %5s %8s\n", "variant", "regs", "spill_st",
              "spill_ld", "stack", "compile");
  for (const MoeGemmSpec& spec : specs) {
    const SpecKey key = spec.ToKey(kHopper);
    SCOPED_TRACE(key.ToString());
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<NvrtcCompiler::Output> out = Compile(key);
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    TAILOR_ASSERT_OK(out.status());
    const Report r = {LogNumber(out->log, R"(Used (\d+) registers)"),
                      LogNumber(out->log, R"((\d+) bytes spill stores)"),
                      LogNumber(out->log, R"((\d+) bytes spill loads)"),
                      LogNumber(out->log, R"((\d+) bytes stack frame)"),
                      took.count()};
    std::printf("%-72s %5d %8d %8d %5d %7.1fs\n", key.ToString().c_str(),
                r.registers, r.spill_stores, r.spill_loads, r.stack,
                r.seconds);
    EXPECT_GT(r.registers, 0) << out->log;
    // ptxas serializes every wgmma of a kernel it cannot prove safe to
    // pipeline ("Potential Performance Loss"); the checks' printf is a call,
    // which does that (C7510), in test builds only.
    if (!spec.pipeline_checks) {
      EXPECT_THAT(out->log, Not(HasSubstr("Performance Loss"))) << out->log;
    }
    EXPECT_EQ(r.spill_stores, 0) << out->log;
    EXPECT_EQ(r.spill_loads, 0) << out->log;
    EXPECT_THAT(out->ptx,
                HasSubstr("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16"));
    EXPECT_THAT(out->ptx,
                HasSubstr(spec.cluster > 1
                              ? "setmaxnreg.inc.sync.aligned.u32 224"
                              : "setmaxnreg.inc.sync.aligned.u32 232"));
    if (spec.consumers == kPingPong) {
      EXPECT_THAT(out->ptx, HasSubstr("bar.arrive"));
    } else {
      EXPECT_THAT(out->ptx, Not(HasSubstr("bar.arrive")));
    }
    if (spec.pipeline_checks) {
      EXPECT_THAT(out->ptx, HasSubstr("trap;"));
    }
  }
}

// The generator refuses a ping-pong key the kernel cannot build, naming the
// rule (the spec's decode, before any source is written).
TEST(HopperGemmGeneratorTest, PingPongNeedsTheLargeTile) {
  MoeGemmSpec spec = Gemm(256, 256, false, MoeGemmConsumers::kPingPong);
  spec.tile_rows = 64;
  EXPECT_THAT(GenerateMoeKernel(spec.ToKey(kHopper)).status(),
              tailor::testing::StatusIs(
                  absl::StatusCode::kInvalidArgument,
                  "variant: ping-pong consumers (bit 13) need tile_rows > "
                  "64, no swap-AB, no cluster and no scale mode, got 8704"));
}

}  // namespace
}  // namespace tailor::cuda
