// bench/cuda_dispatch_bench — what a warm launch through tailor costs on the
// host, against raw driver launches of the same empty kernel, and what a TMA
// descriptor costs three ways: host encode, descriptor-pool hit, device patch.
// Needs an NVIDIA GPU; prints "skipped" and exits 0 without one.
//
// Launch rows: ns of host time per launch call, `--launches` calls in
// batches of 512 with a stream sync after each batch (the sync is not
// counted); best of 5 trials.
//   tailor engine        Engine::GetKernel (memory hit) + Engine::Launch
//   tailor backend       Backend::Launch only (kernel already in hand)
//   raw cuLaunchKernelEx the driver call Backend::Launch makes
//   raw cuLaunchKernel   the classic driver launch
// Descriptor rows:
//   host encode          cuTensorMapEncodeTiled (2D bf16 [4096, 577], box
//   64x64) pool hit             DescriptorPool::GetOrEncode of an encoded spec
//   + copy device patch, 1 warp tensormap.replace x3 + publish, serial, per
//   patch
//                        (GPU time, kernel with 1025 vs 1 patches per CTA)
//   device patch, grid   same, 1056 CTAs x 64 patches each, per patch
//
// Usage: cuda_dispatch_bench [--launches=N]   (default 20000)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "api/internals.h"
#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/tma/descriptor_pool.h"
#include "backends/cuda/tma/tensor_map_driver_encoder.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"
#include "templates/cuda/test_kernels_params.h"
#include "templates/cuda/tma_test_params.h"

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

constexpr int kBatch = 512;
constexpr int kTrials = 5;

double NowNs() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, std::string(status.message()).c_str());
  std::exit(1);
}

// Best-of-trials host ns per call of `launch`; syncs `stream` between batches
// (not timed). Stops at the first error.
double TimeLaunches(int launches, CUstream stream, const DriverApi& api,
                    const std::function<absl::Status()>& launch) {
  double best = 1e30;
  for (int trial = 0; trial < kTrials; ++trial) {
    double timed = 0;
    for (int done = 0; done < launches;) {
      const int batch = std::min(kBatch, launches - done);
      const double start = NowNs();
      for (int i = 0; i < batch; ++i) {
        if (absl::Status s = launch(); !s.ok()) Die(s, "launch");
      }
      timed += NowNs() - start;
      done += batch;
      if (absl::Status s =
              CudaResultToStatus(api.cuStreamSynchronize(stream), "sync");
          !s.ok()) {
        Die(s, "cuStreamSynchronize");
      }
    }
    best = std::min(best, timed / launches);
  }
  return best;
}

double TimeHost(int calls, const std::function<void()>& call) {
  double best = 1e30;
  for (int trial = 0; trial < kTrials; ++trial) {
    const double start = NowNs();
    for (int i = 0; i < calls; ++i) call();
    best = std::min(best, (NowNs() - start) / calls);
  }
  return best;
}

// GPU ms of `launches` back-to-back launches of `launch`, with events.
double GpuMs(const DriverApi& api, CUstream stream, int launches,
             const std::function<absl::Status()>& launch) {
  CUevent start, stop;
  api.cuEventCreate(&start, CU_EVENT_DEFAULT);
  api.cuEventCreate(&stop, CU_EVENT_DEFAULT);
  api.cuEventRecord(start, stream);
  for (int i = 0; i < launches; ++i) {
    if (absl::Status s = launch(); !s.ok()) Die(s, "launch");
  }
  api.cuEventRecord(stop, stream);
  api.cuEventSynchronize(stop);
  float ms = 0;
  api.cuEventElapsedTime(&ms, start, stop);
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  return ms;
}

void LaunchRows(CudaTestRuntime& env, int launches, CUstream stream) {
  tailor::internal::Engine& engine = env.engine();
  const DriverApi& api = env.api();
  const SpecKey key = engine.MakeKey(tailor::internal::kTestEmptyOp);
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      engine.GetKernel(key, GenerateCudaTestKernel);
  if (!kernel.ok()) Die(kernel.status(), "GetKernel(test.empty)");
  const CUfunction function =
      static_cast<const CudaKernel&>(**kernel).function();
  TestEmptyParams params;
  const LaunchConfig config = MakeLaunchConfig({1}, {32}, 0, stream);
  void* args[] = {&params};
  CUlaunchConfig raw = {};
  raw.gridDimX = raw.gridDimY = raw.gridDimZ = 1;
  raw.blockDimX = 32;
  raw.blockDimY = raw.blockDimZ = 1;
  raw.hStream = stream;

  const double engine_ns = TimeLaunches(launches, stream, api, [&] {
    absl::StatusOr<std::shared_ptr<Kernel>> k =
        engine.GetKernel(key, GenerateCudaTestKernel);
    if (!k.ok()) return k.status();
    return engine.Launch(key.op, **k, config, params);
  });
  const double backend_ns = TimeLaunches(launches, stream, api, [&] {
    return env.backend().Launch(**kernel, config, &params, sizeof(params));
  });
  const double ex_ns = TimeLaunches(launches, stream, api, [&] {
    return CudaResultToStatus(
        api.cuLaunchKernelEx(&raw, function, args, nullptr), "launch");
  });
  const double classic_ns = TimeLaunches(launches, stream, api, [&] {
    return CudaResultToStatus(api.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0,
                                                 stream, args, nullptr),
                              "launch");
  });
  std::printf("%-28s %12.0f ns/launch  (+%.0f vs cuLaunchKernelEx)\n",
              "tailor engine", engine_ns, engine_ns - ex_ns);
  std::printf("%-28s %12.0f ns/launch  (+%.0f vs cuLaunchKernelEx)\n",
              "tailor backend", backend_ns, backend_ns - ex_ns);
  std::printf("%-28s %12.0f ns/launch\n", "raw cuLaunchKernelEx", ex_ns);
  std::printf("%-28s %12.0f ns/launch\n", "raw cuLaunchKernel", classic_ns);
}

void DescriptorRows(CudaTestRuntime& env, CUstream stream) {
  const DriverApi& api = env.api();
  DeviceBuffer tensor(api, 4096 * 577 * 2);
  if (!tensor.ok()) Die(absl::ResourceExhaustedError("cuMemAlloc"), "tensor");
  TensorMapSpec spec;
  spec.data_type = TensorMapDataType::kBfloat16;
  spec.rank = 2;
  spec.global_address = tensor.ptr();
  spec.global_dims = {4096, 577};
  spec.global_strides = {4096 * 2};
  spec.box_dims = {64, 64};
  TensorMapBytes bytes;
  const double encode_ns =
      TimeHost(10000, [&] { EncodeTensorMapTiled(api, spec, &bytes); });

  DescriptorPool pool(env.backend().compute_capability(),
                      DriverTensorMapEncoder(&api));
  if (absl::StatusOr<TensorMapBytes> first = pool.GetOrEncode(spec);
      !first.ok()) {
    Die(first.status(), "DescriptorPool::GetOrEncode");
  }
  TensorMap param_slot;
  const double pool_ns = TimeHost(100000, [&] {
    absl::StatusOr<TensorMapBytes> hit = pool.GetOrEncode(spec);
    std::memcpy(&param_slot, hit->bytes, sizeof(param_slot));
  });
  std::printf("%-28s %12.0f ns/descriptor\n", "host encode", encode_ns);
  std::printf("%-28s %12.0f ns/descriptor\n", "pool hit (+128 B copy)",
              pool_ns);

  if (env.backend().arch() != "sm_90a") {
    std::printf("%-28s %12s (needs sm_90a)\n", "device patch", "skipped");
    return;
  }
  SpecKey key = env.engine().MakeKey(tailor::internal::kTmaPatchTestOp);
  key.dtypes[0] = DType::kBF16;
  key.dims[0] = 64;
  key.tile.m = 64;
  key.variant = kTmaPatchOnly;
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      env.engine().GetKernel(key, GenerateCudaTestKernel);
  if (!kernel.ok()) {
    Die(kernel.status(), "GetKernel(tma.patch_test patch-only)");
  }
  constexpr int kGrid = 1056;  // 132 SMs x 8
  DeviceBuffer slots(api, kGrid * 2 * kTmaTestSlotRing * sizeof(TensorMap));
  DeviceBuffer items(api, kGrid * sizeof(TmaTestWorkItem));
  std::vector<TmaTestWorkItem> host_items(
      kGrid, {.in_row = 0, .out_row = 0, .rows = 577, .tile = 0});
  if (absl::Status s = items.Upload(host_items); !s.ok()) Die(s, "upload");
  TmaPatchTestParams params = {};
  std::memcpy(&params.in_template, bytes.bytes, sizeof(TensorMap));
  std::memcpy(&params.out_template, bytes.bytes, sizeof(TensorMap));
  params.slots = static_cast<TensorMap*>(slots.data());
  params.items = static_cast<const TmaTestWorkItem*>(items.data());
  params.in = tensor.data();
  params.out = tensor.data();
  auto launch = [&](uint32_t grid, int repeat) {
    params.repeat = repeat;
    params.num_items = static_cast<int>(grid);
    return env.engine().Launch(
        key.op, **kernel,
        MakeLaunchConfig({grid}, {kTmaTestBlockThreads},
                         TmaTestSharedBytesFor(key), stream),
        params);
  };
  constexpr int kLaunches = 50;
  GpuMs(api, stream, 5, [&] { return launch(1, 1); });  // warm-up
  const double one =
      GpuMs(api, stream, kLaunches, [&] { return launch(1, 1); });
  const double many =
      GpuMs(api, stream, kLaunches, [&] { return launch(1, 1025); });
  const double serial_ns = (many - one) * 1e6 / (kLaunches * 1024.0);
  const double grid_ms =
      GpuMs(api, stream, kLaunches, [&] { return launch(kGrid, 64); });
  const double grid_ns = grid_ms * 1e6 / (kLaunches * double{kGrid} * 64);
  std::printf("%-28s %12.1f ns/descriptor (GPU, serial in one warp)\n",
              "device patch, 1 warp", serial_ns);
  std::printf("%-28s %12.2f ns/descriptor (GPU, throughput)\n",
              "device patch, grid", grid_ns);
}

// Cold NVRTC compile vs cubin load from the disk cache vs memory hit, for
// the representative TMA + mbarrier kernel (tma.patch_test), through fresh
// Runtimes on one cache directory.
void CubinCacheRows() {
  std::string dir = absl::StrCat("/tmp/tailor-cubin-bench-", getpid());
  auto lookup_ms = [&](bool twice) {
    Runtime::Options options;
    options.backend = BackendKind::kCuda;
    options.cache_dir = dir;
    options.log_level = "error";
    auto runtime = Runtime::Create(options);
    if (!runtime.ok()) Die(runtime.status(), "Runtime::Create");
    SpecKey key = tailor::internal::EngineOf(**runtime).MakeKey(
        tailor::internal::kTmaPatchTestOp);
    key.dtypes = {DType::kBF16};
    key.dims[0] = 128;
    key.tile.m = 64;
    auto start = std::chrono::steady_clock::now();
    auto kernel = tailor::internal::EngineOf(**runtime).GetKernel(
        key, GenerateCudaTestKernel);
    if (twice) {
      start = std::chrono::steady_clock::now();
      kernel = tailor::internal::EngineOf(**runtime).GetKernel(
          key, GenerateCudaTestKernel);
    }
    if (!kernel.ok()) Die(kernel.status(), "GetKernel(tma.patch_test)");
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
        .count();
  };
  double compile_ms = lookup_ms(false);
  std::vector<double> disk_ms, memory_ms;
  for (int i = 0; i < 9; ++i) disk_ms.push_back(lookup_ms(false));
  for (int i = 0; i < 9; ++i) memory_ms.push_back(lookup_ms(true));
  std::sort(disk_ms.begin(), disk_ms.end());
  std::sort(memory_ms.begin(), memory_ms.end());
  std::printf("%-28s %12.2f ms\n", "cubin: NVRTC compile", compile_ms);
  std::printf("%-28s %12.3f ms (median of 9 fresh runtimes)\n",
              "cubin: disk-cache load", disk_ms[4]);
  std::printf("%-28s %12.4f ms\n", "cubin: memory hit", memory_ms[4]);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tailor::cuda

int main(int argc, char** argv) {
  int launches = 20000;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--launches=")) {
      launches = std::atoi(argv[i] + 11);
    }
  }
  absl::StatusOr<std::unique_ptr<tailor::cuda::testing::CudaTestRuntime>> env =
      tailor::cuda::testing::CudaTestRuntime::Create();
  if (!env.ok()) {
    std::printf("cuda_dispatch_bench: skipped: %s\n",
                std::string(env.status().message()).c_str());
    return env.status().code() == absl::StatusCode::kUnavailable ? 0 : 1;
  }
  tailor::cuda::testing::TestStream stream((*env)->api());
  std::printf("cuda_dispatch_bench on %s (%s)\n",
              (*env)->backend().arch().c_str(),
              (*env)->backend().compiler_identity().c_str());
  tailor::cuda::LaunchRows(**env, std::max(launches, 1), stream.get());
  tailor::cuda::DescriptorRows(**env, stream.get());
  tailor::cuda::CubinCacheRows();
  return 0;
}
