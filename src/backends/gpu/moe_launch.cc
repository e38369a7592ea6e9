#include "backends/gpu/moe_launch.h"

#include <algorithm>
#include <cstdint>

#include "tailor/tensor.h"

namespace tailor::gpu {
namespace {

uint32_t CeilDiv(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

// 16-byte (or narrower) vectors in a row of `hidden` elements of `dtype`.
int64_t RowVectors(int64_t hidden, DType dtype) {
  const int64_t row_bytes = hidden * static_cast<int64_t>(DTypeSize(dtype));
  return row_bytes / MoeRowVectorBytes(row_bytes);
}

}  // namespace

uint32_t MoeRouteSegments(int64_t assignments) {
  return std::max<uint32_t>(1, CeilDiv(assignments, kMoeRouteSegment));
}

MoeRouteKernels PlanMoeRoute(int64_t assignments, int64_t experts, int lanes,
                             int scatter_warps) {
  const uint32_t segments = MoeRouteSegments(assignments);
  const uint32_t expert_bytes = static_cast<uint32_t>(4 * experts);
  const uint32_t scatter_bytes = (1 + scatter_warps) * expert_bytes;
  MoeRouteKernels kernels;
  if (segments == 1 && scatter_warps * lanes == kMoeRouteCountThreads) {
    // One block counts, plans and scatters: one launch.
    kernels.kernel[kernels.count++] = {
        .variant = kMoeRouteFused,
        .shape = {.threads = kMoeRouteCountThreads,
                  .shared_bytes = scatter_bytes}};
    return kernels;
  }
  kernels.kernel[kernels.count++] = {.variant = kMoeRouteCountPlan,
                                     .shape = {.grid_x = segments,
                                               .threads = kMoeRouteCountThreads,
                                               .shared_bytes = expert_bytes}};
  kernels.kernel[kernels.count++] = {
      .variant = kMoeRouteScatter,
      .scatter_warps = scatter_warps,
      .shape = {.grid_x = segments,
                .threads = static_cast<uint32_t>(lanes * scatter_warps),
                .shared_bytes = scatter_bytes}};
  return kernels;
}

MoeRouteParams MoeRouteParamsOf(const tailor::internal::DeviceRouteLaunch& l,
                                int* histogram) {
  const int64_t assignments = l.tokens * l.topk;
  MoeRouteParams p = {};
  p.topk_ids = l.topk_ids;
  p.expert_map = l.expert_map;
  p.valid_tokens = l.valid_tokens;
  p.map_size = l.map_size;
  p.tokens = static_cast<int>(l.tokens);
  p.topk = static_cast<int>(l.topk);
  p.experts = static_cast<int>(l.experts);
  p.assignments = static_cast<int>(assignments);
  p.segments = static_cast<int>(MoeRouteSegments(assignments));
  p.tile_rows = static_cast<int>(l.tile_rows);
  p.max_work = static_cast<int>(l.max_work);
  p.counts = l.counts;
  p.offsets = l.offsets;
  p.permutation = l.permutation;
  p.inverse = l.inverse;
  p.work = reinterpret_cast<MoeWorkItem*>(l.work);
  p.header = static_cast<MoeRouteHeader*>(l.route_scratch);
  p.histogram = histogram;
  std::copy_n(l.tail_classes, l.tile_rows, p.tail_classes);
  return p;
}

MoePackParams MoePackParamsOf(const tailor::internal::PackLaunch& l) {
  return {.hidden = l.hidden,
          .permutation = l.permutation,
          .a = l.a,
          .rows = static_cast<int>(l.rows),
          .tokens = static_cast<int>(l.tokens),
          .topk = static_cast<int>(l.topk),
          .hidden_dim = static_cast<int>(l.hidden_dim)};
}

LaunchShape MoePackShape(const tailor::internal::PackLaunch& l) {
  return {.grid_x = static_cast<uint32_t>(l.rows),
          .grid_y = CeilDiv(RowVectors(l.hidden_dim, l.dtype),
                            kMoePackVectorsPerBlock),
          .threads = kMoePackThreads};
}

MoeCombineParams MoeCombineParamsOf(const tailor::internal::CombineLaunch& l) {
  return {.c = l.c,
          .weights = l.weights,
          .inverse = l.inverse,
          .out = l.out,
          .rows = static_cast<int>(l.rows),
          .tokens = static_cast<int>(l.tokens),
          .hidden_dim = static_cast<int>(l.hidden_dim),
          .topk = static_cast<int>(l.topk)};
}

LaunchShape MoeCombineShape(const tailor::internal::CombineLaunch& l) {
  return {
      .grid_x = static_cast<uint32_t>(l.tokens),
      .grid_y = CeilDiv(RowVectors(l.hidden_dim, l.dtype), kMoeCombineThreads),
      .threads = kMoeCombineThreads};
}

MoeGroupedGemmParams MoePortableGemmParamsOf(
    const tailor::internal::GroupedGemmLaunch& l) {
  return {.a = l.a,
          .w = l.w,
          .c = l.c,
          .work = reinterpret_cast<const MoeWorkItem*>(l.plan.device_work),
          .header = static_cast<const MoeRouteHeader*>(l.plan.route_scratch),
          .n = static_cast<int>(l.n),
          .k = static_cast<int>(l.k),
          .tile_rows = static_cast<int>(l.tile_rows)};
}

}  // namespace tailor::gpu
