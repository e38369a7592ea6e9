// The pipeline's protocol checks (runtime/cuda/pipeline.cuh, compiled with
// TAILOR_PIPELINE_CHECKS=1 as the MoE tests build the Hopper GEMM) seen
// failing: each misuse traps with a message naming the stage, and the same
// kernel without one runs through. GPU only (label "gpu"); skipped without a
// device.
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
#include "kernels/test_op_kinds.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

using tailor::cuda::testing::CudaTestRuntime;
using tailor::cuda::testing::MakeLaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

// One producer thread (thread 0) and one consumer group (thread 32 acting
// for it) over a 2-stage ring of 128-byte stages, in one of two misuses:
//   kArm      the producer arms stage 0 with `bytes` (128: no misuse);
//   kRefill   the consumer frees stage 0 by a raw arrival, not Release, and
//             the producer refills it: a refill no release accounts for.
// (The third check, a consumer waiting for a fill never armed, fires after
// 2^26 polls of the barrier: over 100 s on the H100, a bound set so that no
// slow run under compute-sanitizer trips it; not run here.)
constexpr char kMisuseSource[] = R"(
#define TAILOR_PIPELINE_CHECKS 1
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/pipeline.cuh"
struct MisuseParams {
  int mode;
  unsigned bytes;
};
struct Misuse {
  using Params = MisuseParams;
  static constexpr int kThreads = 64;
  static constexpr int kMinBlocksPerSm = 1;
  static __device__ void Run(const Params& p) {
    using namespace tailor::cuda;
    __shared__ PipelineRing<2> ring;
    __shared__ volatile int filled;  // fills the producer has armed
    if (threadIdx.x == 0) {
      ring.Init(/*groups=*/1, /*bytes=*/128);
      filled = 0;
      FenceMbarrierInit();
    }
    __syncthreads();
    PipelineCursor c;
    if (threadIdx.x == 0) {
      const int fills = p.mode == 0 ? 1 : 3;
      for (int i = 0; i < fills; ++i, c.Advance(2)) {
        WaitEmpty(ring, c);
        ArmFull(ring, c, p.bytes);
        filled = i + 1;
      }
    } else if (threadIdx.x == 32 && p.mode == 1) {
      // Frees stage 0 once it holds its first fill (earlier, the arrival
      // would complete the phase the producer's first wait expects open).
      while (filled < 1) {
      }
      ring.empty[0].Arrive();
    }
  }
};
TAILOR_CUDA_ENTRY(tailor_pipeline_misuse, (Misuse))
)";

enum class Misuse : int32_t { kArm = 0, kRefill = 1 };

struct MisuseParams {
  Misuse mode;
  uint32_t bytes;
};

constexpr int kLaunchCompleted = 0;
constexpr int kLaunchFailed = 3;
constexpr int kNoLaunch = 5;  // the status is on stderr

// Compiles and runs the kernel once; true when the launch completed.
absl::StatusOr<bool> LaunchCompletes(Misuse mode, uint32_t bytes) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<CudaTestRuntime> env,
                          CudaTestRuntime::Create());
  TAILOR_RETURN_IF_ERROR(env->backend().device_context().MakeCurrent());
  const SpecKey key = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  const tailor::internal::KernelSource source = {
      .code = kMisuseSource, .entry = "tailor_pipeline_misuse"};
  TAILOR_ASSIGN_OR_RETURN(const std::string cubin,
                          env->backend().Compile(key, source));
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<tailor::internal::Kernel> kernel,
                          env->backend().Load(key, source, cubin));
  MisuseParams p = {.mode = mode, .bytes = bytes};
  const absl::Status launched = env->backend().Launch(
      *kernel, MakeLaunchConfig({1}, {64}), &p, sizeof(p));
  const CUresult sync = env->api().cuCtxSynchronize();
  return launched.ok() && sync == CUDA_SUCCESS;
}

// In the child: exits with kLaunchCompleted, kLaunchFailed or kNoLaunch. Device
// printf goes to stdout: it is pointed at stderr first.
[[noreturn]] void RunAndExit(Misuse mode, uint32_t bytes = 128) {
  dup2(STDERR_FILENO, STDOUT_FILENO);
  const absl::StatusOr<bool> completed = LaunchCompletes(mode, bytes);
  if (!completed.ok()) {
    std::fprintf(stderr, "%s\n", completed.status().ToString().c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(!completed.ok() ? kNoLaunch
             : *completed    ? kLaunchCompleted
                             : kLaunchFailed);
}

class PipelineChecksGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    TAILOR_CUDA_RUNTIME_OR_SKIP(env);
    if (env->backend().compute_capability() < 90) {
      GTEST_SKIP() << "the pipeline's mbarrier expect-tx needs sm_90";
    }
  }
};

TEST_F(PipelineChecksGpuTest, ArmingTheStageBytesRunsThrough) {
  EXPECT_EXIT(RunAndExit(Misuse::kArm, 128),
              ::testing::ExitedWithCode(kLaunchCompleted), "");
}

TEST_F(PipelineChecksGpuTest, ArmingOtherBytesTrapsNamingTheStage) {
  EXPECT_EXIT(RunAndExit(Misuse::kArm, 100),
              ::testing::ExitedWithCode(kLaunchFailed),
              "tailor pipeline: stage 0 \\(round 0\\) armed with 100 bytes, "
              "the ring's stage has 128");
}

TEST_F(PipelineChecksGpuTest, RefillingAnUnreleasedStageTraps) {
  EXPECT_EXIT(RunAndExit(Misuse::kRefill),
              ::testing::ExitedWithCode(kLaunchFailed),
              "tailor pipeline: stage 0 refilled \\(round 1\\) after 0 of 1 "
              "consumer releases");
}

}  // namespace
}  // namespace tailor::cuda
