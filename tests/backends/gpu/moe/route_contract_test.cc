// The Route that CUDA and HIP compile (templates/cuda/moe/route.cuh) against
// the host's contract, without a GPU: the template's own count, plan and
// scatter code runs on the host (tests/backends/gpu/host_device_shim.h: one-
// thread blocks in sequence), fed by the backends' shared launch plumbing
// (backends/gpu/moe_launch.h), and must produce the host Route's counts,
// offsets, stable permutation and inverse and the host planner's work list
// (plan::BuildPiecewisePlan) in expert-major order. The planner and the
// scatter meet through the histogram (the planner leaves each segment's
// prefix there, the scatter adds offsets[e]): a side that changes its half
// of that contract alone fails here, on every vendor at once.
#include "tests/backends/gpu/host_device_shim.h"
// The shim first: it stands in for the runtime/cuda/ headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/gpu/error_words.h"
#include "backends/gpu/moe_launch.h"
#include "ops/moe/kernels.h"
#include "plan/bucket_policy.h"
#include "plan/piecewise_plan.h"
#include "templates/cuda/moe/route.cuh"

namespace tailor::cuda {
// The kernels' dynamic shared memory (extern __shared__ arrays).
int count_smem[1 << 16];
int scatter_smem[1 << 16];
}  // namespace tailor::cuda

namespace tailor::gpu {
namespace {

struct RouteCase {
  int64_t tokens, topk, experts, tile_rows;
  bool pow2_tails = false;    // else exact tail classes
  int64_t valid_tokens = -1;  // -1: all
  int bad_ids = 0;            // ids set out of range (dropped, recorded)
};

// What the device writes, in host memory.
struct RouteBuffers {
  std::vector<int32_t> counts, offsets, permutation, inverse;
  std::vector<plan::WorkItem> work;
  std::vector<int32_t> tail_classes;
  std::vector<unsigned char> scratch;  // header, then the histogram
  int32_t valid = 0;
};

plan::PlanParams PlanParamsOf(const RouteCase& c) {
  return {.tile_rows = c.tile_rows,
          .tail_policy = c.pow2_tails ? plan::BucketPolicy::NextPowerOfTwo()
                                      : plan::BucketPolicy::Exact()};
}

// Runs the template's kernels as PlanMoeRoute launches them, one block at a
// time; returns the launch the op front would hand the backend.
tailor::internal::DeviceRouteLaunch RunRoute(const RouteCase& c,
                                             const std::vector<int32_t>& ids,
                                             RouteBuffers& b) {
  const int64_t assignments = c.tokens * c.topk;
  const int64_t max_work =
      assignments / c.tile_rows + std::min(c.experts, assignments);
  b.counts.assign(c.experts, -7);
  b.offsets.assign(c.experts + 1, -7);
  b.permutation.assign(assignments, -7);
  b.inverse.assign(assignments, -7);
  b.work.assign(std::max<int64_t>(max_work, 1), {-7, -7, -7, -7});
  b.tail_classes.assign(c.tile_rows, 0);
  for (int64_t n = 1; n < c.tile_rows; ++n) {
    b.tail_classes[n] = *plan::TailClassOf(n, PlanParamsOf(c));
  }
  const int64_t segments = MoeRouteSegments(assignments);
  b.scratch.assign(kMoeRouteHeaderBytes + 4 * c.experts * segments, 0);
  std::fill_n(b.scratch.begin(), kRouteHeaderErrorBytes, 0xff);
  b.valid = static_cast<int32_t>(c.valid_tokens);
  const tailor::internal::DeviceRouteLaunch launch = {
      .topk_ids = ids.data(),
      .expert_map = nullptr,
      .map_size = 0,
      .valid_tokens = c.valid_tokens >= 0 ? &b.valid : nullptr,
      .tokens = c.tokens,
      .topk = c.topk,
      .experts = c.experts,
      .tile_rows = c.tile_rows,
      .tail_classes = b.tail_classes.data(),
      .counts = b.counts.data(),
      .offsets = b.offsets.data(),
      .permutation = b.permutation.data(),
      .inverse = b.inverse.data(),
      .work = b.work.data(),
      .max_work = max_work,
      .route_scratch = b.scratch.data()};
  const MoeRouteParams p = MoeRouteParamsOf(
      launch, reinterpret_cast<int*>(b.scratch.data() + kMoeRouteHeaderBytes));
  // One lane, one warp: never the fused block (it needs 256 threads).
  const MoeRouteKernels kernels =
      PlanMoeRoute(assignments, c.experts, cuda::kLanes, /*scatter_warps=*/1);
  EXPECT_EQ(kernels.count, 2);
  for (int i = 0; i < kernels.count; ++i) {
    cuda::gridDim.x = kernels.kernel[i].shape.grid_x;
    cuda::blockDim.x = 1;
    cuda::threadIdx.x = 0;
    for (unsigned block = 0; block < cuda::gridDim.x; ++block) {
      cuda::blockIdx.x = block;
      if (kernels.kernel[i].variant == kMoeRouteCountPlan) {
        cuda::MoeRouteCountPlan::Run(p);
      } else {
        cuda::MoeRouteScatter<1>::Run(p);
      }
    }
  }
  return launch;
}

// The host's Route and plan of the same ids.
struct Expected {
  std::vector<int32_t> counts, offsets, permutation, inverse;
  std::vector<plan::WorkItem> work;  // expert-major
  uint64_t bad_id = kNoErrorWord;
};

Expected HostRoute(const RouteCase& c, const std::vector<int32_t>& ids) {
  const int64_t assignments = c.tokens * c.topk;
  const int64_t valid =
      (c.valid_tokens >= 0 ? std::min(c.valid_tokens, c.tokens) : c.tokens) *
      c.topk;
  Expected e;
  e.counts.assign(c.experts, 0);
  std::vector<int32_t> local(assignments, -1);
  for (int64_t i = 0; i < valid; ++i) {
    if (ids[i] < 0 || ids[i] >= c.experts) {
      e.bad_id = std::min<uint64_t>(e.bad_id, ErrorWord(i, ids[i]));
      continue;
    }
    local[i] = ids[i];
    ++e.counts[ids[i]];
  }
  e.offsets.assign(c.experts + 1, 0);
  for (int64_t x = 0; x < c.experts; ++x) {
    e.offsets[x + 1] = e.offsets[x] + e.counts[x];
  }
  e.permutation.assign(assignments, -1);
  e.inverse.assign(assignments, -1);
  std::vector<int32_t> next(e.offsets.begin(), e.offsets.end() - 1);
  for (int64_t i = 0; i < assignments; ++i) {  // stable: by expert, then i
    if (local[i] < 0) continue;
    const int32_t row = next[local[i]]++;
    e.permutation[row] = static_cast<int32_t>(i);
    e.inverse[i] = row;
  }
  std::vector<int64_t> extents(e.counts.begin(), e.counts.end());
  plan::PiecewisePlan host_plan;
  EXPECT_TRUE(
      plan::BuildPiecewisePlan(extents, PlanParamsOf(c), &host_plan).ok());
  e.work.assign(host_plan.work().begin(), host_plan.work().end());
  std::stable_sort(e.work.begin(), e.work.end(),
                   [](const plan::WorkItem& a, const plan::WorkItem& b) {
                     return a.group != b.group ? a.group < b.group
                                               : a.row_begin < b.row_begin;
                   });
  return e;
}

void ExpectMatchesTheHost(const RouteCase& c, uint32_t seed) {
  SCOPED_TRACE(absl::StrCat("T=", c.tokens, " k=", c.topk, " E=", c.experts,
                            " tile=", c.tile_rows, " pow2=", c.pow2_tails,
                            " valid=", c.valid_tokens, " bad=", c.bad_ids,
                            " seed=", seed));
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(c.tokens * c.topk);
  // Skewed: expert 0 takes about a third, the rest uniform.
  for (int32_t& id : ids) {
    id = rng() % 3 == 0 ? 0 : static_cast<int32_t>(rng() % c.experts);
  }
  for (int i = 0; i < c.bad_ids && !ids.empty(); ++i) {
    ids[rng() % ids.size()] = rng() % 2
                                  ? -1 - static_cast<int32_t>(rng() % 5)
                                  : static_cast<int32_t>(c.experts + rng() % 5);
  }
  RouteBuffers b;
  RunRoute(c, ids, b);
  const Expected e = HostRoute(c, ids);
  EXPECT_EQ(b.counts, e.counts);
  EXPECT_EQ(b.offsets, e.offsets);
  EXPECT_EQ(b.permutation, e.permutation);
  EXPECT_EQ(b.inverse, e.inverse);
  const auto* header =
      reinterpret_cast<const MoeRouteHeader*>(b.scratch.data());
  ASSERT_EQ(header->num_work, static_cast<int>(e.work.size()));
  EXPECT_EQ(header->num_rows, e.offsets.back());
  EXPECT_EQ(header->blocks_done, 0);  // reset for the next route
  for (size_t i = 0; i < e.work.size(); ++i) {
    EXPECT_EQ(b.work[i], e.work[i]) << "item " << i;
  }
  const uint64_t words[2] = {header->bad_id, header->bad_map_entry};
  EXPECT_EQ(words[0], e.bad_id);
  const tailor::internal::RouteErrors errors = MoeRouteErrorsOf(words);
  EXPECT_EQ(errors.bad_id.has_value(), e.bad_id != kNoErrorWord);
  EXPECT_FALSE(errors.bad_map_entry.has_value());
}

// Awkward ragged sizes: single and many segments (1024 assignments each),
// empty experts, tails of every class, padding tokens, bad ids.
TEST(MoeRouteContractTest, TheSharedRouteIsTheHostRoute) {
  const uint32_t seed = std::random_device{}();
  for (const RouteCase& c : std::vector<RouteCase>{
           {.tokens = 0, .topk = 2, .experts = 8, .tile_rows = 16},
           {.tokens = 1, .topk = 1, .experts = 1, .tile_rows = 1},
           {.tokens = 1, .topk = 8, .experts = 128, .tile_rows = 8},
           {.tokens = 17, .topk = 2, .experts = 8, .tile_rows = 16},
           {.tokens = 63, .topk = 2, .experts = 8, .tile_rows = 64},
           {.tokens = 577, .topk = 2, .experts = 8, .tile_rows = 64},
           {.tokens = 513,
           .topk = 2,
           .experts = 64,
           .tile_rows = 17,
           .pow2_tails = true},
           {.tokens = 4096, .topk = 8, .experts = 256, .tile_rows = 128},
           {.tokens = 1000,
           .topk = 8,
           .experts = 300,
           .tile_rows = 100,
           .pow2_tails = true},
           {.tokens = 577,
           .topk = 8,
           .experts = 64,
           .tile_rows = 32,
           .valid_tokens = 300},
           {.tokens = 300,
           .topk = 4,
           .experts = 16,
           .tile_rows = 48,
           .bad_ids = 9}}) {
    ExpectMatchesTheHost(c, seed);
    if (HasFailure()) return;
  }
}

// Many segments, randomly shaped: the histogram handshake between the last
// count block and every scatter block.
TEST(MoeRouteContractTest, RandomShapesOverManySegments) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int round = 0; round < 40; ++round) {
    const RouteCase c = {.tokens = 1 + static_cast<int64_t>(rng() % 3000),
                         .topk = 1 + static_cast<int64_t>(rng() % 8),
                         .experts = 1 + static_cast<int64_t>(rng() % 300),
                         .tile_rows = 1 + static_cast<int64_t>(rng() % 128),
                         .pow2_tails = rng() % 2 == 0};
    ExpectMatchesTheHost(c, seed + round);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace tailor::gpu
