// backends/gpu/moe_launch.h — what the CUDA and HIP backends share of the
// MoE family's launches: the params of the kernels whose source is one for
// both (Route, Pack, Combine; templates/common/moe/params.h) and of the
// portable grouped GEMM, the grids and shared memory of Route, Pack and
// Combine, and the route header's initial fill. Pure host code: the
// backends turn a LaunchShape into their LaunchConfig and build the keys.
//
// Example (a backend's Pack):
//   const gpu::MoePackParams p = gpu::MoePackParamsOf(launch);
//   const gpu::LaunchShape shape = gpu::MoePackShape(launch);
//   ... Config(shape.grid_x, shape.grid_y, shape.threads, shape.shared_bytes)
#ifndef TAILOR_BACKENDS_GPU_MOE_LAUNCH_H_
#define TAILOR_BACKENDS_GPU_MOE_LAUNCH_H_

#include <cstdint>

#include "ops/moe/kernels.h"
#include "templates/common/moe/params.h"

namespace tailor::gpu {

// Grid, block and dynamic shared memory of one launch.
struct LaunchShape {
  uint32_t grid_x = 1;
  uint32_t grid_y = 1;
  uint32_t threads = 0;
  uint32_t shared_bytes = 0;
};

// ---- Route ------------------------------------------------------------------

// Segments of kMoeRouteSegment assignments a route launch covers: at least
// one (an empty step still plans).
uint32_t MoeRouteSegments(int64_t assignments);

// One kernel of a step's Route: `variant` (kMoeRoute*), `scatter_warps`
// (the scatter's key: its warps a block; 0 for the others) and its shape.
struct MoeRouteKernel {
  unsigned variant = 0;
  int scatter_warps = 0;
  LaunchShape shape;
};
// The Route of a step: one fused block when the step is one segment and
// the scatter's block is the count kernel's (kMoeRouteCountThreads
// threads); else count+plan, then the scatter. Fixed-size: planning a
// launch allocates nothing.
struct MoeRouteKernels {
  int count = 0;
  MoeRouteKernel kernel[2];
};
// On a device of `lanes`-lane warps whose scatter runs `scatter_warps`
// warps a block (the backend's choice for `experts` local experts: its
// shared memory holds (1 + warps) ints per expert).
MoeRouteKernels PlanMoeRoute(int64_t assignments, int64_t experts, int lanes,
                             int scatter_warps);

// The Route's params for `launch`; its histogram at `histogram` (the route
// scratch past the header and any area of the backend's own).
MoeRouteParams MoeRouteParamsOf(const tailor::internal::DeviceRouteLaunch& l,
                                int* histogram);

// The route header's initial state (InitRouteScratch): bytes
// [0, kRouteHeaderErrorBytes) all ones (no error recorded), the rest of the
// header, through kRouteHeaderBytesUsed, zero.
inline constexpr int64_t kRouteHeaderErrorBytes =
    2 * sizeof(unsigned long long);
inline constexpr int64_t kRouteHeaderBytesUsed = sizeof(MoeRouteHeader);

// ---- Pack, Combine, the portable grouped GEMM -------------------------------

MoePackParams MoePackParamsOf(const tailor::internal::PackLaunch& l);
// Grid (rows, ceil(row vectors / kMoePackVectorsPerBlock)), kMoePackThreads.
LaunchShape MoePackShape(const tailor::internal::PackLaunch& l);

MoeCombineParams MoeCombineParamsOf(const tailor::internal::CombineLaunch& l);
// Grid (tokens, ceil(row vectors / kMoeCombineThreads)), kMoeCombineThreads.
LaunchShape MoeCombineShape(const tailor::internal::CombineLaunch& l);

MoeGroupedGemmParams MoePortableGemmParamsOf(
    const tailor::internal::GroupedGemmLaunch& l);

}  // namespace tailor::gpu

#endif  // TAILOR_BACKENDS_GPU_MOE_LAUNCH_H_
