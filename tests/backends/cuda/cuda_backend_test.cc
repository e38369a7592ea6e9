// CUDA backend tests. Those named *Gpu* need an NVIDIA GPU (ctest label
// "gpu") and skip cleanly without one; the others run everywhere.
#include "backends/cuda/cuda_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "api/internals.h"
#include "backends/cuda/cuda_test_util.h"
#include "core/backend_registry.h"
#include "core/embedded_files.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"
#include "tailor/status.h"
#include "templates/cuda/test_kernels_params.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::cuda::testing::CudaTestRuntime;
using tailor::cuda::testing::DeviceBuffer;
using tailor::cuda::testing::MakeLaunchConfig;
using tailor::cuda::testing::TestStream;
using tailor::internal::Kernel;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using tailor::testing::TestSeed;
using ::testing::HasSubstr;

// Fails the test with the status when `expr` (a CUresult) is not CUDA_SUCCESS.
#define TAILOR_ASSERT_CU(expr)                                \
  do {                                                        \
    absl::Status tailor_cu_status_ =                          \
        ::tailor::cuda::CudaResultToStatus((expr), #expr);    \
    ASSERT_TRUE(tailor_cu_status_.ok()) << tailor_cu_status_; \
  } while (false)

TEST(CudaBackendTest, CreateIsOkOrUnavailableWithAReason) {
  absl::StatusOr<std::unique_ptr<tailor::internal::Backend>> backend =
      tailor::internal::CreateCudaBackend({});
  if (backend.ok()) {
    EXPECT_EQ((*backend)->kind(), BackendKind::kCuda);
    EXPECT_THAT((*backend)->arch(), HasSubstr("sm_"));
    EXPECT_THAT((*backend)->compiler_identity(), HasSubstr("nvrtc "));
    EXPECT_THAT((*backend)->compiler_identity(), HasSubstr(" driver "));
    return;
  }
  EXPECT_THAT(backend, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("CUDA backend unavailable: ")));
}

TEST(CudaBackendTest, ArchForComputeCapability) {
  EXPECT_EQ(ArchForComputeCapability(9, 0), "sm_90a");
  EXPECT_EQ(ArchForComputeCapability(8, 0), "sm_80");
  EXPECT_EQ(ArchForComputeCapability(8, 9), "sm_89");
  EXPECT_EQ(ArchForComputeCapability(10, 0), "sm_100");
}

// ---- GPU --------------------------------------------------------------------

struct AxpyRun {
  std::vector<float> x, y, expected;
};

AxpyRun MakeAxpy(int64_t n, float a, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  AxpyRun run;
  for (int64_t i = 0; i < n; ++i) {
    run.x.push_back(value(rng));
    run.y.push_back(value(rng));
    run.expected.push_back(
        std::fma(a, run.x.back(), run.y.back()));  // one rounding, like FFMA
  }
  return run;
}

TEST(CudaBackendGpuTest, RuntimeRunsAxpyThroughTheEngine) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  std::mt19937_64 rng(TestSeed());
  TestStream stream(env->api());
  ASSERT_TRUE(stream.ok());
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{577},
                    int64_t{(1 << 20) + 3}}) {
    for (int unroll : {1, 4}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " unroll=", unroll));
      SpecKey key = env->engine().MakeKey(tailor::internal::kTestAxpyOp);
      key.dtypes = {DType::kF32, DType::kF32};
      key.dims[0] = unroll;
      TAILOR_ASSERT_OK(env->backend().Supports(key));
      absl::StatusOr<std::shared_ptr<Kernel>> kernel =
          env->engine().GetKernel(key, GenerateCudaTestKernel);
      TAILOR_ASSERT_OK(kernel.status());

      const float a = 1.5f;
      AxpyRun run = MakeAxpy(n, a, rng);
      DeviceBuffer x(env->api(), n * sizeof(float)),
          y(env->api(), n * sizeof(float));
      ASSERT_TRUE(x.ok() && y.ok());
      TAILOR_ASSERT_OK(x.Upload(run.x));
      TAILOR_ASSERT_OK(y.Upload(run.y));
      TestAxpyParams params = {.a = a,
                               .x = static_cast<const float*>(x.data()),
                               .y = static_cast<float*>(y.data()),
                               .n = n};
      const uint32_t block = 256;
      const int64_t per_block = int64_t{block} * unroll;
      LaunchConfig config = MakeLaunchConfig(
          {static_cast<uint32_t>((n + per_block - 1) / per_block)}, {block}, 0,
          stream.get());
      TAILOR_ASSERT_OK(env->engine().Launch(key.op, **kernel, config, params));
      TAILOR_ASSERT_OK(stream.Synchronize());
      absl::StatusOr<std::vector<uint8_t>> bytes = y.Download();
      TAILOR_ASSERT_OK(bytes.status());
      std::vector<float> got(n);
      if (n > 0) std::memcpy(got.data(), bytes->data(), n * sizeof(float));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], run.expected[i]) << "i=" << i;
      }
    }
  }
}

TEST(CudaBackendGpuTest, CompileLoadLaunchDirectly) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  CudaBackend& backend = env->backend();
  SpecKey key = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  absl::StatusOr<tailor::internal::KernelSource> source =
      GenerateCudaTestKernel(key);
  TAILOR_ASSERT_OK(source.status());
  absl::StatusOr<std::string> cubin = backend.Compile(key, *source);
  TAILOR_ASSERT_OK(cubin.status());
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      backend.Load(key, *source, *cubin);
  TAILOR_ASSERT_OK(kernel.status());
  TestEmptyParams params;
  TAILOR_ASSERT_OK(backend.Launch(**kernel, MakeLaunchConfig({1000}, {128}),
                                  &params, sizeof(params)));
  TAILOR_ASSERT_OK(
      CudaResultToStatus(env->api().cuCtxSynchronize(), "cuCtxSynchronize"));
}

TEST(CudaBackendGpuTest, LoadRejectsGarbageAndUnknownEntries) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  CudaBackend& backend = env->backend();
  SpecKey key = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  absl::StatusOr<tailor::internal::KernelSource> source =
      GenerateCudaTestKernel(key);
  TAILOR_ASSERT_OK(source.status());
  EXPECT_THAT(
      backend.Load(key, *source, ""),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("binary")));
  EXPECT_FALSE(backend.Load(key, *source, std::string(256, 'x')).ok());
  absl::StatusOr<std::string> cubin = backend.Compile(key, *source);
  TAILOR_ASSERT_OK(cubin.status());
  tailor::internal::KernelSource renamed = *source;
  renamed.entry = "no_such_kernel";
  EXPECT_THAT(
      backend.Load(key, renamed, *cubin),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_kernel")));
}

TEST(CudaBackendGpuTest, LaunchValidatesItsArguments) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  CudaBackend& backend = env->backend();
  SpecKey key = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      env->engine().GetKernel(key, GenerateCudaTestKernel);
  TAILOR_ASSERT_OK(kernel.status());
  TestEmptyParams params;
  EXPECT_THAT(
      backend.Launch(**kernel, MakeLaunchConfig({1}, {0}), &params,
                     sizeof(params)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config.block")));
  EXPECT_THAT(
      backend.Launch(**kernel, MakeLaunchConfig({1}, {2048}), &params,
                     sizeof(params)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x*y*z <= 1024")));
  EXPECT_THAT(backend.Launch(**kernel,
                             MakeLaunchConfig({1}, {32}, 0, nullptr, {0, 1, 1}),
                             &params, sizeof(params)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.cluster")));
  EXPECT_THAT(
      backend.Launch(**kernel, MakeLaunchConfig({1}, {32}), nullptr, 0),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("params")));
  Kernel foreign;
  EXPECT_THAT(backend.Launch(foreign, MakeLaunchConfig({1}, {32}), &params,
                             sizeof(params)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not loaded by the cuda")));
  // Empty ragged work launches nothing and succeeds.
  TAILOR_EXPECT_OK(backend.Launch(**kernel, MakeLaunchConfig({0}, {32}),
                                  &params, sizeof(params)));
  // The driver's own limits come back as a status, never a crash.
  EXPECT_FALSE(backend
                   .Launch(**kernel, MakeLaunchConfig({1}, {32}, 1u << 30),
                           &params, sizeof(params))
                   .ok());
}

TEST(CudaBackendGpuTest, LaunchesClustersAndLargeSharedMemory) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  if (env->backend().compute_capability() < 90) {
    GTEST_SKIP() << "clusters need sm_90";
  }
  SpecKey key = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      env->engine().GetKernel(key, GenerateCudaTestKernel);
  TAILOR_ASSERT_OK(kernel.status());
  TestEmptyParams params;
  TestStream stream(env->api());
  ASSERT_TRUE(stream.ok());
  TAILOR_ASSERT_OK(env->backend().Launch(
      **kernel, MakeLaunchConfig({8}, {64}, 0, stream.get(), {2, 1, 1}),
      &params, sizeof(params)));
  // 100 KiB of dynamic shared memory: above the 48 KiB default, so Launch
  // must raise the kernel's limit first (twice: the second is lock-free).
  for (int i = 0; i < 2; ++i) {
    TAILOR_ASSERT_OK(env->backend().Launch(
        **kernel, MakeLaunchConfig({4}, {64}, 100 * 1024, stream.get()),
        &params, sizeof(params)));
  }
  TAILOR_ASSERT_OK(stream.Synchronize());
}

TEST(CudaBackendGpuTest, SupportsFollowsTheDevice) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  CudaBackend& backend = env->backend();
  SpecKey empty = env->engine().MakeKey(tailor::internal::kTestEmptyOp);
  TAILOR_EXPECT_OK(backend.Supports(empty));
  SpecKey other_arch = empty;
  other_arch.SetArch("sm_1");
  EXPECT_THAT(
      backend.Supports(other_arch),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("\"sm_1\"")));
  SpecKey cpu_key = empty;
  cpu_key.backend = BackendKind::kCpu;
  EXPECT_THAT(backend.Supports(cpu_key),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("cpu")));
  SpecKey gemm = env->engine().MakeKey(OpKind::kMoeGroupedGemm);
  if (backend.compute_capability() >= 80) {
    TAILOR_EXPECT_OK(backend.Supports(gemm));  // the MoE family: sm_80+
  } else {
    EXPECT_THAT(backend.Supports(gemm),
                StatusIs(absl::StatusCode::kUnimplemented,
                         HasSubstr("moe.grouped_gemm needs compute capability "
                                   ">= 8.0")));
  }
  SpecKey none = env->engine().MakeKey(OpKind::kInvalid);
  EXPECT_THAT(backend.Supports(none),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("no CUDA kernel for invalid")));
  SpecKey patch = env->engine().MakeKey(tailor::internal::kTmaPatchTestOp);
  if (backend.arch() == "sm_90a") {
    TAILOR_EXPECT_OK(backend.Supports(patch));
  } else {
    EXPECT_THAT(backend.Supports(patch),
                StatusIs(absl::StatusCode::kUnimplemented,
                         HasSubstr("tma.patch_test")));
  }
}

TEST(CudaBackendGpuTest, ReportsIdentityAndHeaders) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  CudaBackend& backend = env->backend();
  EXPECT_EQ(backend.arch(),
            ArchForComputeCapability(backend.compute_capability() / 10,
                                     backend.compute_capability() % 10));
  EXPECT_THAT(backend.compiler_identity(),
              HasSubstr(backend.compiler().identity()));
  EXPECT_THAT(backend.compiler_identity(),
              HasSubstr(absl::StrCat(
                  "driver ", backend.device_context().api().driver_version)));
  EXPECT_EQ(backend.headers_hash(), tailor::internal::HashEmbeddedFiles(
                                        {"runtime/cuda/", "templates/cuda/", "templates/common/"}));
  EXPECT_NE(backend.headers_hash(),
            tailor::internal::HashEmbeddedFiles({"runtime/cpu/"}));
}

}  // namespace
}  // namespace tailor::cuda

namespace tailor::cuda {
namespace {

// The backend's descriptor pool encodes once per spec, and its counters
// reach Runtime::stats().
TEST(CudaBackendGpuTest, DescriptorPoolCountsReachRuntimeStats) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  const TensorMapSpec spec = {.data_type = TensorMapDataType::kBfloat16,
                              .rank = 2,
                              .global_address = 0,
                              .global_dims = {4096, 577},
                              .global_strides = {8192},
                              .box_dims = {64, 64},
                              .swizzle = TensorMapSwizzle::k128B};
  auto first = env->backend().descriptor_pool().GetOrEncode(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = env->backend().descriptor_pool().GetOrEncode(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(std::memcmp(first->bytes, second->bytes, sizeof(first->bytes)), 0);
  StatsSnapshot stats = env->runtime().stats();
  EXPECT_EQ(stats.backend_counters.at("cuda.descriptor_encodes"), 1u);
  EXPECT_EQ(stats.backend_counters.at("cuda.descriptor_reuses"), 1u);
  EXPECT_EQ(stats.backend_counters.at("cuda.descriptor_evictions"), 0u);
}

// ---- Programmatic dependent launch ------------------------------------------
// A writer spins, then fills `data` with `value`; a reader copies data to out.
// Both entries but the last come from TAILOR_CUDA_ENTRY, so they wait for
// their predecessors and let their dependents start early; the last reader
// does not wait (the control).
constexpr char kOverlapSource[] = R"(
#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
struct OverlapParams {
  unsigned* data;
  unsigned* out;
  unsigned value;
  int count;
  unsigned long long spin_ns;
};
TAILOR_DEVICE void CopyData(const OverlapParams& p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.count;
       i += gridDim.x * blockDim.x) {
    p.out[i] = p.data[i];
  }
}
struct SlowWriter {
  using Params = OverlapParams;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 1;
  static __device__ void Run(const Params& p) {
    if (threadIdx.x == 0) {
      const unsigned long long start = tailor::cuda::GlobalTimerNs();
      while (tailor::cuda::GlobalTimerNs() - start < p.spin_ns) {
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < p.count; i += blockDim.x) p.data[i] = p.value;
  }
};
struct Reader {
  using Params = OverlapParams;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 1;
  static __device__ void Run(const Params& p) { CopyData(p); }
};
TAILOR_CUDA_ENTRY(tailor_slow_writer, (SlowWriter))
TAILOR_CUDA_ENTRY(tailor_reader, (Reader))
extern "C" __global__ void tailor_unwaiting_reader(
    const __grid_constant__ OverlapParams p) {
  CopyData(p);
}
)";

struct OverlapParams {
  CUdeviceptr data;
  CUdeviceptr out;
  uint32_t value;
  int32_t count;
  uint64_t spin_ns;
};

class OverlapKernels {
 public:
  static constexpr int kCount = 4096;

  explicit OverlapKernels(CudaTestRuntime& env)
      : env_(env),
        data_(env.api(), kCount * 4),
        out_(env.api(), kCount * 4),
        stream_(env.api()) {}

  absl::Status Load() {
    const SpecKey key = env_.engine().MakeKey(tailor::internal::kTestEmptyOp);
    tailor::internal::KernelSource source = {.code = kOverlapSource,
                                             .entry = "tailor_slow_writer"};
    TAILOR_ASSIGN_OR_RETURN(const std::string cubin,
                            env_.backend().Compile(key, source));
    TAILOR_ASSIGN_OR_RETURN(writer_, env_.backend().Load(key, source, cubin));
    source.entry = "tailor_reader";
    TAILOR_ASSIGN_OR_RETURN(reader_, env_.backend().Load(key, source, cubin));
    source.entry = "tailor_unwaiting_reader";
    TAILOR_ASSIGN_OR_RETURN(unwaiting_,
                            env_.backend().Load(key, source, cubin));
    return absl::OkStatus();
  }

  // Zeroes data and out, launches the 200 us writer and then `reader` with
  // overlap_predecessor set, and returns how many of out's words hold
  // `value`.
  absl::StatusOr<int> WriteThenRead(bool waiting_reader, uint32_t value) {
    TAILOR_RETURN_IF_ERROR(data_.Fill(0));
    TAILOR_RETURN_IF_ERROR(out_.Fill(0));
    OverlapParams p = {.data = data_.ptr(),
                       .out = out_.ptr(),
                       .value = value,
                       .count = kCount,
                       .spin_ns = 200'000};
    TAILOR_RETURN_IF_ERROR(env_.backend().Launch(
        *writer_, MakeLaunchConfig({1}, {256}, 0, stream_.get()), &p,
        sizeof(p)));
    LaunchConfig read = MakeLaunchConfig({8}, {256}, 0, stream_.get());
    read.overlap_predecessor = true;
    TAILOR_RETURN_IF_ERROR(env_.backend().Launch(
        waiting_reader ? *reader_ : *unwaiting_, read, &p, sizeof(p)));
    TAILOR_RETURN_IF_ERROR(stream_.Synchronize());
    TAILOR_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, out_.Download());
    std::vector<uint32_t> out(kCount);
    std::memcpy(out.data(), bytes.data(), kCount * 4);
    return static_cast<int>(std::count(out.begin(), out.end(), value));
  }

 private:
  CudaTestRuntime& env_;
  DeviceBuffer data_, out_;
  TestStream stream_;
  std::shared_ptr<Kernel> writer_, reader_, unwaiting_;
};

TEST(CudaBackendGpuTest, OverlappedLaunchWaitsForItsPredecessor) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);
  if (env->backend().compute_capability() < 90) {
    GTEST_SKIP() << "programmatic dependent launch needs sm_90";
  }
  OverlapKernels kernels(*env);
  TAILOR_ASSERT_OK(kernels.Load());
  // The control: a reader that does not wait reads the data before the
  // writer's spin ends, so the launches below do overlap.
  absl::StatusOr<int> fresh = kernels.WriteThenRead(false, 7);
  TAILOR_ASSERT_OK(fresh.status());
  if (*fresh == OverlapKernels::kCount) {
    GTEST_SKIP() << "the launches did not overlap here (moe.pdl=off, "
                    "or a tool that serializes kernels)";
  }
  for (uint32_t value : {1u, 0xdeadbeefu, 42u}) {
    absl::StatusOr<int> read = kernels.WriteThenRead(true, value);
    TAILOR_ASSERT_OK(read.status());
    EXPECT_EQ(*read, OverlapKernels::kCount) << "value " << value;
  }
}

TEST(CudaBackendGpuTest, PdlOffKnobSerializesEveryLaunch) {
  Runtime::Options options = CudaTestRuntime::DefaultOptions();
  options.tuning = "moe.pdl=off";
  TAILOR_CUDA_RUNTIME_FROM_OR_SKIP(env, CudaTestRuntime::Create(options));
  OverlapKernels kernels(*env);
  TAILOR_ASSERT_OK(kernels.Load());
  // Even the reader that does not wait sees the writer's data.
  absl::StatusOr<int> read = kernels.WriteThenRead(false, 9);
  TAILOR_ASSERT_OK(read.status());
  EXPECT_EQ(*read, OverlapKernels::kCount);
}

// A cubin written by one runtime is loaded from disk by the next: no NVRTC.
TEST(CudaBackendGpuTest, CubinComesBackFromTheDiskCache) {
  TAILOR_CUDA_RUNTIME_OR_SKIP(env);  // skips without a device
  ::tailor::testing::TempDir dir;
  auto run = [&](uint64_t* compiles, uint64_t* disk_hits) {
    Runtime::Options options;
    options.backend = BackendKind::kCuda;
    options.cache_dir = dir.path();
    options.log_level = "error";
    auto runtime = Runtime::Create(options);
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    SpecKey key = tailor::internal::EngineOf(**runtime).MakeKey(
        tailor::internal::kTestEmptyOp);
    auto kernel = tailor::internal::EngineOf(**runtime).GetKernel(
        key, GenerateCudaTestKernel);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    *compiles = (*runtime)->stats().compiles;
    *disk_hits = (*runtime)->stats().disk_hits;
  };
  uint64_t compiles = 0, disk_hits = 0;
  run(&compiles, &disk_hits);
  EXPECT_EQ(compiles, 1u);
  EXPECT_EQ(disk_hits, 0u);
  run(&compiles, &disk_hits);
  EXPECT_EQ(compiles, 0u);
  EXPECT_EQ(disk_hits, 1u);
}

}  // namespace
}  // namespace tailor::cuda
