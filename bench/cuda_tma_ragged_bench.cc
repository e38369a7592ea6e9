// bench/cuda_tma_ragged_bench — two ways to let the TMA mask ragged tails,
// timed on the same copy (ragged segments of [rows, 128] bf16 -> gapped
// output, one CTA per 64-row tile, through shared memory):
//   patch   one template map per tensor, patched per CTA on the device
//           (tensormap.replace x2 + publish + acquire; tma_patch_test.cuh)
//   ragged  one Triton-style rank-4 map per tensor encoded once on the host,
//           bounds from the coordinates (tma_copy_test.cuh)
//   host    (estimate) encoding 2 maps per segment on the host per launch:
//           segments x 2 x measured cuTensorMapEncodeTiled time
// GPU time per launch from events over 100 back-to-back launches (debug
// output off). Needs an sm_90a GPU; prints "skipped" and exits 0 without.
//
// Usage: cuda_tma_ragged_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"
#include "templates/cuda/tma_test_params.h"

namespace tailor::cuda {
namespace {

using tailor::cuda::testing::CudaTestRuntime;
using tailor::cuda::testing::DeviceBuffer;
using tailor::cuda::testing::EncodeTiled;
using tailor::cuda::testing::MakeLaunchConfig;
using tailor::cuda::testing::TestStream;
using tailor::cuda::testing::TiledMapSpec;
using tailor::internal::Kernel;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

constexpr int kCols = 128;
constexpr int kTileRows = 64;
constexpr int64_t kRowBytes = kCols * 2;
constexpr int kLaunches = 100;

void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, std::string(status.message()).c_str());
  std::exit(1);
}

struct Scenario {
  const char* name;
  std::vector<int> rows;
};

struct Layout {
  std::vector<TmaTestWorkItem> items;
  int64_t in_rows = 0, out_rows = 0;
};

Layout MakeLayout(const std::vector<int>& rows) {
  Layout layout;
  for (int n : rows) {
    for (int t = 0; t * kTileRows < n; ++t) {
      layout.items.push_back({.in_row = layout.in_rows,
                              .out_row = layout.out_rows,
                              .rows = n,
                              .tile = t});
    }
    layout.in_rows += n;
    layout.out_rows += (n + kTileRows - 1) / kTileRows * kTileRows;
  }
  return layout;
}

TensorMap Encode(const DriverApi& api, const TiledMapSpec& spec) {
  absl::StatusOr<TensorMap> map = EncodeTiled(api, spec);
  if (!map.ok()) Die(map.status(), "cuTensorMapEncodeTiled");
  return *map;
}

TiledMapSpec PlainSpec(const DeviceBuffer& buffer, int64_t rows) {
  TiledMapSpec spec = {
      .dtype = DType::kBF16, .rank = 2, .address = buffer.data()};
  spec.dims[0] = kCols;
  spec.dims[1] = static_cast<uint64_t>(std::max<int64_t>(rows, 1));
  spec.strides[0] = kRowBytes;
  spec.box[0] = kCols;
  spec.box[1] = kTileRows;
  return spec;
}

TiledMapSpec RaggedSpec(const DeviceBuffer& buffer) {
  TiledMapSpec spec = {
      .dtype = DType::kBF16, .rank = 4, .address = buffer.data()};
  spec.dims[0] = kCols;
  spec.dims[1] = kRaggedBillion;
  spec.dims[2] = kRaggedMaxExtent;
  spec.dims[3] = kRaggedMaxExtent;
  spec.strides[0] = kRowBytes;
  spec.strides[1] = kRowBytes;
  spec.strides[2] = (uint64_t{1} << 34) * 2 - kRowBytes;
  spec.box[0] = kCols;
  spec.box[1] = kTileRows;
  spec.box[2] = 1;
  spec.box[3] = 1;
  return spec;
}

std::shared_ptr<Kernel> GetKernel(CudaTestRuntime& env, OpKind op,
                                  SpecKey& key) {
  key = env.engine().MakeKey(op);
  key.dtypes[0] = DType::kBF16;
  key.dims[0] = kCols;
  key.tile.m = kTileRows;
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      env.engine().GetKernel(key, GenerateCudaTestKernel);
  if (!kernel.ok()) Die(kernel.status(), "GetKernel");
  return *kernel;
}

template <typename Launch>
double GpuUsPerLaunch(const DriverApi& api, CUstream stream, Launch launch) {
  for (int i = 0; i < 3; ++i) launch();  // warm-up
  CUevent start, stop;
  api.cuEventCreate(&start, CU_EVENT_DEFAULT);
  api.cuEventCreate(&stop, CU_EVENT_DEFAULT);
  api.cuEventRecord(start, stream);
  for (int i = 0; i < kLaunches; ++i) launch();
  api.cuEventRecord(stop, stream);
  api.cuEventSynchronize(stop);
  float ms = 0;
  api.cuEventElapsedTime(&ms, start, stop);
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  return ms * 1e3 / kLaunches;
}

void RunScenario(CudaTestRuntime& env, CUstream stream,
                 const Scenario& scenario, double encode_us) {
  const DriverApi& api = env.api();
  const Layout layout = MakeLayout(scenario.rows);
  DeviceBuffer in(api, layout.in_rows * kRowBytes),
      out(api, layout.out_rows * kRowBytes);
  DeviceBuffer items(api, layout.items.size() * sizeof(TmaTestWorkItem));
  DeviceBuffer slots(api, std::max<size_t>(layout.items.size(), 1) * 2 *
                              kTmaTestSlotRing * sizeof(TensorMap));
  if (absl::Status s = items.Upload(layout.items); !s.ok()) Die(s, "upload");
  const int num_items = static_cast<int>(layout.items.size());

  SpecKey patch_key, copy_key;
  std::shared_ptr<Kernel> patch =
      GetKernel(env, tailor::internal::kTmaPatchTestOp, patch_key);
  std::shared_ptr<Kernel> copy =
      GetKernel(env, tailor::internal::kTmaCopyTestOp, copy_key);
  const auto config = MakeLaunchConfig(
      {static_cast<uint32_t>(num_items)}, {kTmaTestBlockThreads},
      TmaTestSharedBytesFor(patch_key), stream);

  TmaPatchTestParams patch_params = {
      .in_template = Encode(api, PlainSpec(in, layout.in_rows)),
      .out_template = Encode(api, PlainSpec(out, layout.out_rows)),
      .slots = static_cast<TensorMap*>(slots.data()),
      .items = static_cast<const TmaTestWorkItem*>(items.data()),
      .in = in.data(),
      .out = out.data(),
      .loaded = nullptr,
      .num_items = num_items};
  TmaCopyTestParams copy_params = {
      .in_map = Encode(api, RaggedSpec(in)),
      .out_map = Encode(api, RaggedSpec(out)),
      .items = static_cast<const TmaTestWorkItem*>(items.data()),
      .loaded = nullptr,
      .num_items = num_items};
  const double patch_us = GpuUsPerLaunch(api, stream, [&] {
    if (absl::Status s =
            env.engine().Launch(patch_key.op, *patch, config, patch_params);
        !s.ok()) {
      Die(s, "launch patch");
    }
  });
  const double copy_us = GpuUsPerLaunch(api, stream, [&] {
    if (absl::Status s =
            env.engine().Launch(copy_key.op, *copy, config, copy_params);
        !s.ok()) {
      Die(s, "launch ragged");
    }
  });
  int segments = 0;
  for (int n : scenario.rows) segments += n > 0;
  const double gb = 2.0 * layout.in_rows * kRowBytes / 1e9;  // read + write
  std::printf("%-24s %8lld %6d %6d %10.2f %8.0f %10.2f %8.0f %12.1f\n",
              scenario.name, static_cast<long long>(layout.in_rows), segments,
              num_items, patch_us, gb / (patch_us * 1e-6), copy_us,
              gb / (copy_us * 1e-6), 2 * segments * encode_us);
}

}  // namespace
}  // namespace tailor::cuda

int main() {
  using namespace tailor::cuda;
  absl::StatusOr<std::unique_ptr<testing::CudaTestRuntime>> env =
      testing::CudaTestRuntime::Create();
  if (!env.ok()) {
    std::printf("cuda_tma_ragged_bench: skipped: %s\n",
                std::string(env.status().message()).c_str());
    return env.status().code() == absl::StatusCode::kUnavailable ? 0 : 1;
  }
  if ((*env)->backend().arch() != "sm_90a") {
    std::printf("cuda_tma_ragged_bench: skipped: needs sm_90a, device is %s\n",
                (*env)->backend().arch().c_str());
    return 0;
  }
  const DriverApi& api = (*env)->api();
  testing::TestStream stream(api);
  // Host encode cost, for the per-segment-encode estimate.
  testing::DeviceBuffer probe(api, 1 << 20);
  testing::TiledMapSpec spec = PlainSpec(probe, 4096);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) Encode(api, spec);
  const double encode_us = std::chrono::duration<double, std::micro>(
                               std::chrono::steady_clock::now() - start)
                               .count() /
                           10000;

  std::mt19937_64 rng(12345);
  auto random_rows = [&](int segments, int max_rows) {
    std::vector<int> rows(segments);
    for (int& n : rows) n = static_cast<int>(rng() % (max_rows + 1));
    return rows;
  };
  const Scenario scenarios[] = {
      {"moe decode E=64 [0,16]", random_rows(64, 16)},
      {"moe decode E=256 [0,8]", random_rows(256, 8)},
      {"moe prefill E=64 [0,512]", random_rows(64, 512)},
      {"moe prefill E=128 [0,2k]", random_rows(128, 2048)},
      {"one segment 64k rows", {65536}},
  };
  std::printf(
      "ragged TMA copy, [rows, %d] bf16, %d-row tiles; GPU us per launch; "
      "host encode %.2f us/map\n",
      kCols, kTileRows, encode_us);
  std::printf("%-24s %8s %6s %6s %10s %8s %10s %8s %12s\n", "scenario", "rows",
              "segs", "CTAs", "patch us", "GB/s", "ragged us", "GB/s",
              "host-enc us");
  for (const Scenario& s : scenarios)
    RunScenario(**env, stream.get(), s, encode_us);
  return 0;
}
