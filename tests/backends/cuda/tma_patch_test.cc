// GPU tests of ragged TMA copies (label "gpu"; skipped without a device):
//   - tma_patch_test: one template descriptor per tensor, patched per CTA on
//     the device with tensormap.replace (runtime/cuda/tensormap_patch.cuh);
//   - tma_copy_test: Triton-style "ragged" rank-4 descriptors, no patching.
// Both copy ragged segments of `in` to gapped places in `out` through shared
// memory. Checked, byte for byte:
//   - rows inside a segment arrive exactly;
//   - the tile as loaded (debug output) is zero past the segment's end
//     (the TMA load's bounds check zero-fills);
//   - output rows past the segment keep their poison (the store drops them);
//   - slots reused by back-to-back launches, and within one launch by CTAs
//     that take several items (slot rings), are re-read, not served stale.
// Every device buffer a launch touches is written before it (initcheck):
// `in` and the items are uploaded whole, `out` and `loaded` poisoned, and
// the descriptor slots zeroed, since initcheck counts each publish
// (tensormap.cp_fenceproxy) as a read of its 128 destination bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cuda/cuda_test_util.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"
#include "templates/cuda/tma_test_params.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::cuda::testing::DeviceBuffer;
using tailor::cuda::testing::EncodeTiled;
using tailor::cuda::testing::MakeLaunchConfig;
using tailor::cuda::testing::TestStream;
using tailor::cuda::testing::TiledMapSpec;
using tailor::internal::Kernel;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::TestSeed;

constexpr uint8_t kOutPoison = 0xA5;
constexpr uint8_t kLoadedPoison = 0x5A;

struct Shape {
  OpKind op;
  DType dtype;
  int cols;
  int tile_rows;
  uint32_t variant = 0;
  // tma_patch_test only: at most this many CTAs, each taking several items
  // and rotating through its slot rings; 0 = one CTA per item.
  int max_ctas = 0;
  std::string Name() const {
    return absl::StrCat(
        op == tailor::internal::kTmaPatchTestOp ? "patch" : "copy", "_",
        std::string(DTypeName(dtype)), "_c", cols, "_t", tile_rows, "_v",
        variant, max_ctas > 0 ? absl::StrCat("_ctas", max_ctas) : "");
  }
  // CTAs for `items` work items.
  uint32_t Grid(size_t items) const {
    if (max_ctas > 0 && items > static_cast<size_t>(max_ctas)) return max_ctas;
    return static_cast<uint32_t>(items);
  }
};

// The host side of one problem: segments, their places, the work items.
struct Problem {
  std::vector<int> rows;              // [segments]
  std::vector<int64_t> in_row;        // [segments]
  std::vector<int64_t> out_row;       // [segments]
  int64_t in_rows = 0, out_rows = 0;  // totals
  std::vector<TmaTestWorkItem> items;

  static Problem Make(const std::vector<int>& rows, int tile_rows,
                      std::mt19937_64& rng) {
    Problem p;
    p.rows = rows;
    for (int n : rows) {
      p.in_row.push_back(p.in_rows);
      p.out_row.push_back(p.out_rows);
      p.in_rows += n;
      // Gap after each segment: its last tile plus one whole tile of poison.
      const int64_t tiles = (n + tile_rows - 1) / tile_rows;
      p.out_rows += tiles * tile_rows + tile_rows;
    }
    for (size_t s = 0; s < rows.size(); ++s) {
      for (int t = 0; t * tile_rows < rows[s]; ++t) {
        p.items.push_back({.in_row = p.in_row[s],
                           .out_row = p.out_row[s],
                           .rows = rows[s],
                           .tile = t});
      }
    }
    std::shuffle(p.items.begin(), p.items.end(),
                 rng);  // CTA order must not matter
    return p;
  }
};

class TmaRaggedCopyTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::CudaTestRuntime>> env =
        testing::CudaTestRuntime::Create();
    if (!env.ok()) {
      if (env.status().code() == absl::StatusCode::kUnavailable) {
        GTEST_SKIP() << "no CUDA device here: " << env.status().message();
      }
      FAIL() << env.status();
    }
    env_ = *std::move(env);
    ASSERT_TRUE(env_->backend().device_context().MakeCurrent().ok());
    key_ = env_->engine().MakeKey(GetParam().op);
    key_.dtypes[0] = GetParam().dtype;
    key_.dims[0] = GetParam().cols;
    key_.tile.m = GetParam().tile_rows;
    key_.variant = GetParam().variant;
    if (absl::Status s = env_->backend().Supports(key_); !s.ok()) {
      GTEST_SKIP() << s.message();
    }
    absl::StatusOr<std::shared_ptr<Kernel>> kernel =
        env_->engine().GetKernel(key_, GenerateCudaTestKernel);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    kernel_ = *std::move(kernel);
  }

  // Slot memory for a launch of `items` work items.
  size_t SlotBytes(int64_t items) const {
    const int64_t ctas = std::max<int64_t>(GetParam().Grid(items), 1);
    return ctas * 2 * kTmaTestSlotRing * sizeof(TensorMap);
  }

  int64_t row_bytes() const {
    return int64_t{GetParam().cols} * DTypeSize(GetParam().dtype);
  }
  int64_t tile_bytes() const { return row_bytes() * GetParam().tile_rows; }

  // The maps of one launch: templates (patch) or ragged maps (copy).
  absl::Status EncodeMaps(const DeviceBuffer& in, const DeviceBuffer& out,
                          const Problem& p, TensorMap& in_map,
                          TensorMap& out_map) {
    const Shape& shape = GetParam();
    const uint64_t cols = shape.cols, rb = row_bytes();
    const uint32_t box_rows = shape.tile_rows;
    const auto encode = [&](const DeviceBuffer& buffer, int64_t rows,
                            TensorMap& map) {
      TiledMapSpec spec = {.dtype = shape.dtype, .address = buffer.data()};
      if (shape.op == tailor::internal::kTmaPatchTestOp) {
        // Deliberately not the segment's: the kernel must patch address and
        // rows; with kTmaPatchReplaceStride also a wrong stride to patch.
        const bool wrong_stride = (shape.variant & kTmaPatchReplaceStride) != 0;
        spec.rank = 2;
        spec.dims[0] = cols;
        spec.dims[1] = static_cast<uint64_t>(std::max<int64_t>(rows, 1));
        spec.strides[0] = wrong_stride ? 2 * rb : rb;
        spec.box[0] = static_cast<uint32_t>(cols);
        spec.box[1] = box_rows;
      } else {
        const uint64_t element_bytes = DTypeSize(shape.dtype);
        spec.rank = 4;
        spec.dims[0] = cols;
        spec.dims[1] = kRaggedBillion;
        spec.dims[2] = kRaggedMaxExtent;
        spec.dims[3] = kRaggedMaxExtent;
        spec.strides[0] = rb;
        spec.strides[1] = rb;
        spec.strides[2] = (uint64_t{1} << 34) * element_bytes - rb;
        spec.box[0] = static_cast<uint32_t>(cols);
        spec.box[1] = box_rows;
        spec.box[2] = 1;
        spec.box[3] = 1;
      }
      absl::StatusOr<TensorMap> encoded = EncodeTiled(env_->api(), spec);
      if (!encoded.ok()) return encoded.status();
      map = *encoded;
      return absl::OkStatus();
    };
    absl::Status s = encode(in, p.in_rows, in_map);
    if (!s.ok()) return s;
    return encode(out, p.out_rows, out_map);
  }

  // One launch's buffers.
  struct Run {
    Problem problem;
    std::vector<uint8_t> in_host;
    std::unique_ptr<DeviceBuffer> in, out, loaded, items;
  };

  // Makes a problem and uploads it (on the legacy default stream).
  void Prepare(const std::vector<int>& rows, std::mt19937_64& rng, Run& run) {
    const DriverApi& api = env_->api();
    run.problem = Problem::Make(rows, GetParam().tile_rows, rng);
    const Problem& p = run.problem;
    run.in_host.resize(p.in_rows * row_bytes());
    // Never 0, so the load's zero fill cannot be mistaken for data.
    std::uniform_int_distribution<int> byte(1, 255);
    for (uint8_t& b : run.in_host) b = static_cast<uint8_t>(byte(rng));
    run.in = std::make_unique<DeviceBuffer>(api, run.in_host.size());
    run.out = std::make_unique<DeviceBuffer>(api, p.out_rows * row_bytes());
    run.loaded =
        std::make_unique<DeviceBuffer>(api, p.items.size() * tile_bytes());
    run.items = std::make_unique<DeviceBuffer>(
        api, p.items.size() * sizeof(TmaTestWorkItem));
    ASSERT_TRUE(run.in->ok() && run.out->ok() && run.loaded->ok() &&
                run.items->ok());
    TAILOR_ASSERT_OK(run.in->Upload(run.in_host));
    TAILOR_ASSERT_OK(run.out->Fill(kOutPoison));
    TAILOR_ASSERT_OK(run.loaded->Fill(kLoadedPoison));
    TAILOR_ASSERT_OK(run.items->Upload(p.items));
  }

  // Enqueues the launch of a prepared run on `stream` (no sync).
  void Launch(const Run& run, const DeviceBuffer& slots, CUstream stream) {
    const Problem& p = run.problem;
    TensorMap in_map, out_map;
    TAILOR_ASSERT_OK(EncodeMaps(*run.in, *run.out, p, in_map, out_map));
    const auto* items = static_cast<const TmaTestWorkItem*>(run.items->data());
    const int num_items = static_cast<int>(p.items.size());
    const LaunchConfig config = MakeLaunchConfig(
        {GetParam().Grid(p.items.size())}, {kTmaTestBlockThreads},
        TmaTestSharedBytesFor(key_), stream);
    if (GetParam().op == tailor::internal::kTmaPatchTestOp) {
      TmaPatchTestParams params = {
          .in_template = in_map,
          .out_template = out_map,
          .slots = static_cast<TensorMap*>(slots.data()),
          .items = items,
          .in = run.in->data(),
          .out = run.out->data(),
          .loaded = run.loaded->data(),
          .num_items = num_items};
      TAILOR_ASSERT_OK(
          env_->engine().Launch(key_.op, *kernel_, config, params));
    } else {
      TmaCopyTestParams params = {.in_map = in_map,
                                  .out_map = out_map,
                                  .items = items,
                                  .loaded = run.loaded->data(),
                                  .num_items = num_items};
      TAILOR_ASSERT_OK(
          env_->engine().Launch(key_.op, *kernel_, config, params));
    }
  }

  // Checks a finished launch byte for byte.
  void Check(const Run& run) {
    const Problem& p = run.problem;
    const int64_t rb = row_bytes(), tile_rows = GetParam().tile_rows;
    absl::StatusOr<std::vector<uint8_t>> out = run.out->Download();
    absl::StatusOr<std::vector<uint8_t>> loaded = run.loaded->Download();
    TAILOR_ASSERT_OK(out.status());
    TAILOR_ASSERT_OK(loaded.status());
    const std::string segments = absl::StrJoin(p.rows, ",");
    // Tiles as loaded: the segment's rows, then zeros.
    for (size_t i = 0; i < p.items.size(); ++i) {
      const TmaTestWorkItem& item = p.items[i];
      for (int64_t r = 0; r < tile_rows; ++r) {
        const int64_t row = item.tile * tile_rows + r;  // within the segment
        const uint8_t* got = loaded->data() + (i * tile_rows + r) * rb;
        if (row < item.rows) {
          const uint8_t* want = run.in_host.data() + (item.in_row + row) * rb;
          ASSERT_EQ(0, std::memcmp(got, want, rb))
              << "loaded tile row " << row << " of a " << item.rows
              << "-row segment (tile " << item.tile
              << ") differs from the input; segments {" << segments << "}";
        } else {
          ASSERT_TRUE(
              std::all_of(got, got + rb, [](uint8_t b) { return b == 0; }))
              << "loaded tile row " << row << " past the end of a " << item.rows
              << "-row segment is not zero-filled; segments {" << segments
              << "}";
        }
      }
    }
    // Output: the segment's rows copied, the gap after it untouched.
    for (size_t s = 0; s < p.rows.size(); ++s) {
      const int64_t gap_end =
          s + 1 < p.rows.size() ? p.out_row[s + 1] : p.out_rows;
      for (int64_t row = 0; p.out_row[s] + row < gap_end; ++row) {
        const uint8_t* got = out->data() + (p.out_row[s] + row) * rb;
        if (row < p.rows[s]) {
          ASSERT_EQ(
              0, std::memcmp(got, run.in_host.data() + (p.in_row[s] + row) * rb,
                             rb))
              << "output row " << row << " of segment " << s << " ("
              << p.rows[s] << " rows) differs from the input; segments {"
              << segments << "}";
        } else {
          ASSERT_TRUE(std::all_of(got, got + rb,
                                  [](uint8_t b) { return b == kOutPoison; }))
              << "output row " << row << " past the end of segment " << s
              << " (" << p.rows[s]
              << " rows) was written: the store did not drop it; segments {"
              << segments << "}";
        }
      }
    }
  }

  void RunOnce(const std::vector<int>& rows) {
    SCOPED_TRACE(absl::StrCat("segments {", absl::StrJoin(rows, ","), "}"));
    std::mt19937_64 rng(TestSeed() ^ rows.size());
    TestStream stream(env_->api());
    ASSERT_TRUE(stream.ok());
    int64_t items = 0;
    for (int n : rows)
      items += (n + GetParam().tile_rows - 1) / GetParam().tile_rows;
    DeviceBuffer slots(env_->api(), SlotBytes(items));
    ASSERT_TRUE(slots.ok());
    TAILOR_ASSERT_OK(slots.Fill(0));  // initcheck: see PublishTensorMap
    Run run;
    ASSERT_NO_FATAL_FAILURE(Prepare(rows, rng, run));
    ASSERT_NO_FATAL_FAILURE(Launch(run, slots, stream.get()));
    TAILOR_ASSERT_OK(stream.Synchronize());
    ASSERT_NO_FATAL_FAILURE(Check(run));
  }

  std::unique_ptr<testing::CudaTestRuntime> env_;
  SpecKey key_;
  std::shared_ptr<Kernel> kernel_;
};

TEST_P(TmaRaggedCopyTest, AwkwardSizes) {
  const int t = GetParam().tile_rows;
  RunOnce({0, 1, t - 1, t, t + 1, 17, 577, 0});
}

TEST_P(TmaRaggedCopyTest, EverythingInOneSegment) { RunOnce({577 * 3 + 5}); }

TEST_P(TmaRaggedCopyTest, OnlyEmptySegments) { RunOnce({0, 0, 0}); }

TEST_P(TmaRaggedCopyTest, RandomSegments) {
  std::mt19937_64 rng(TestSeed() + 1);
  const int t = GetParam().tile_rows;
  for (int round = 0; round < 3; ++round) {
    std::vector<int> rows(1 + rng() % 48);
    for (int& n : rows)
      n = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % (3 * t + 2));
    RunOnce(rows);
  }
}

// Three launches back to back on one stream into the same slots: each must
// see its own descriptors (stream order + acquire fence), never stale ones.
TEST_P(TmaRaggedCopyTest, ReusesSlotsAcrossLaunches) {
  std::mt19937_64 rng(TestSeed() + 2);
  TestStream stream(env_->api());
  ASSERT_TRUE(stream.ok());
  const int t = GetParam().tile_rows;
  const std::vector<std::vector<int>> launches = {
      {t + 1, 3, 2 * t}, {1, 2 * t + 5, t}, {577, 17, 0, t - 1}};
  int64_t max_items = 0;
  for (const auto& rows : launches) {
    int64_t items = 0;
    for (int n : rows) items += (n + t - 1) / t;
    max_items = std::max(max_items, items);
  }
  DeviceBuffer slots(env_->api(), SlotBytes(max_items));
  ASSERT_TRUE(slots.ok());
  TAILOR_ASSERT_OK(slots.Fill(0));  // initcheck: see PublishTensorMap
  std::vector<Run> runs(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(Prepare(launches[i], rng, runs[i]));
  }
  // All uploads first, so that the launches run back to back on the GPU.
  for (const Run& run : runs) {
    ASSERT_NO_FATAL_FAILURE(Launch(run, slots, stream.get()));
  }
  TAILOR_ASSERT_OK(stream.Synchronize());
  for (const Run& run : runs) ASSERT_NO_FATAL_FAILURE(Check(run));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TmaRaggedCopyTest,
    ::testing::Values(
        Shape{tailor::internal::kTmaPatchTestOp, DType::kBF16, 128, 64},
        Shape{tailor::internal::kTmaPatchTestOp, DType::kF32, 64, 32},
        Shape{tailor::internal::kTmaPatchTestOp, DType::kF16, 8, 17},
        Shape{tailor::internal::kTmaPatchTestOp, DType::kBF16, 256, 16,
              kTmaPatchReplaceStride},
        Shape{tailor::internal::kTmaPatchTestOp, DType::kF32, 256,
              128},  // 128 KiB tile
        // Few CTAs, many items each: slots rotate in-kernel.
        Shape{tailor::internal::kTmaPatchTestOp, DType::kBF16, 128, 64, 0, 3},
        Shape{tailor::internal::kTmaPatchTestOp, DType::kF16, 8, 17,
              kTmaPatchReplaceStride, 1},
        Shape{tailor::internal::kTmaCopyTestOp, DType::kBF16, 128, 64},
        Shape{tailor::internal::kTmaCopyTestOp, DType::kF32, 64, 32},
        Shape{tailor::internal::kTmaCopyTestOp, DType::kF16, 8, 17}),
    [](const ::testing::TestParamInfo<Shape>& info) {
      return info.param.Name();
    });

}  // namespace
}  // namespace tailor::cuda
