// The pipeline's protocol checks (runtime/cuda/pipeline.cuh, compiled with
// TAILOR_PIPELINE_CHECKS=1 as the MoE tests build the Hopper GEMM) seen
// failing: a producer that arms a stage with the wrong byte count traps with
// a message naming the stage, and the same kernel arming the right count
// runs through. GPU only (label "gpu"); skipped without a device.
//
// A trap leaves the CUDA context unusable, so each launch runs in a child
// process (a gtest death test, re-executed: no CUDA state is forked), whose
// device printf output goes to the stderr the test matches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_test_util.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

using tailor::cuda::testing::CudaTestRuntime;
using tailor::cuda::testing::MakeLaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

// One producer thread and one consumer group over a 2-stage ring of
// 128-byte stages: the producer arms stage 0 with `bytes`.
constexpr char kMisuseSource[] = R"(
#define TAILOR_PIPELINE_CHECKS 1
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/pipeline.cuh"
struct ArmParams {
  unsigned bytes;
};
struct ArmOnce {
  using Params = ArmParams;
  static constexpr int kThreads = 128;
  static constexpr int kMinBlocksPerSm = 1;
  static __device__ void Run(const Params& p) {
    __shared__ tailor::cuda::PipelineRing<2> ring;
    if (threadIdx.x == 0) {
      ring.Init(/*groups=*/1, /*bytes=*/128);
      tailor::cuda::FenceMbarrierInit();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      tailor::cuda::PipelineCursor c;
      tailor::cuda::WaitEmpty(ring, c);
      tailor::cuda::ArmFull(ring, c, p.bytes);
    }
  }
};
TAILOR_CUDA_ENTRY(tailor_arm_once, (ArmOnce))
)";

struct ArmParams {
  uint32_t bytes;
};

constexpr int kLaunchCompleted = 0;
constexpr int kLaunchFailed = 3;
constexpr int kNoDevice = 4;

// In the child: compiles and runs the kernel, then exits with kLaunchCompleted
// or kLaunchFailed (kNoDevice, or 5 with the status on stderr, if it could not
// get that far). Device printf goes to stdout: it is pointed at stderr first.
[[noreturn]] void ArmAndExit(uint32_t bytes) {
  dup2(STDERR_FILENO, STDOUT_FILENO);
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
      CudaTestRuntime::Create();
  if (!env.ok()) std::_Exit(kNoDevice);
  absl::Status status = (*env)->backend().device_context().MakeCurrent();
  const SpecKey key = (*env)->engine().MakeKey(OpKind::kTestEmpty);
  const tailor::internal::KernelSource source = {.code = kMisuseSource,
                                                 .entry = "tailor_arm_once"};
  absl::StatusOr<std::string> cubin = (*env)->backend().Compile(key, source);
  if (status.ok()) status = cubin.status();
  absl::StatusOr<std::shared_ptr<tailor::internal::Kernel>> kernel;
  if (status.ok()) {
    kernel = (*env)->backend().Load(key, source, *cubin);
    status = kernel.status();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    std::_Exit(5);
  }
  ArmParams p = {.bytes = bytes};
  status = (*env)->backend().Launch(**kernel, MakeLaunchConfig({1}, {128}),
                                    &p, sizeof(p));
  const CUresult sync = (*env)->api().cuCtxSynchronize();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status.ok() && sync == CUDA_SUCCESS ? kLaunchCompleted
                                                 : kLaunchFailed);
}

class PipelineChecksGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create();
    if (!env.ok() && env.status().code() == absl::StatusCode::kUnavailable) {
      GTEST_SKIP() << "no CUDA device here: " << env.status().message();
    }
    ASSERT_TRUE(env.ok()) << env.status();
    if ((*env)->backend().compute_capability() < 90) {
      GTEST_SKIP() << "the pipeline's mbarrier expect-tx needs sm_90";
    }
  }
};

TEST_F(PipelineChecksGpuTest, ArmingTheStageBytesRunsThrough) {
  EXPECT_EXIT(ArmAndExit(128), ::testing::ExitedWithCode(kLaunchCompleted),
              "");
}

TEST_F(PipelineChecksGpuTest, ArmingOtherBytesTrapsNamingTheStage) {
  EXPECT_EXIT(ArmAndExit(100), ::testing::ExitedWithCode(kLaunchFailed),
              "tailor pipeline: stage 0 \\(round 0\\) armed with 100 bytes, "
              "the ring's stage has 128");
}

}  // namespace
}  // namespace tailor::cuda
