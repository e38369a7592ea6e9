// templates/hip/moe/route.h — Route on HIP: the CUDA kernels
// (templates/cuda/moe/route.cuh), unchanged. They are written against the
// lane primitives (runtime/cuda/lanes.cuh), which the vendor header
// (runtime/hip/cuda_compat.h) supplies for 64-lane waves (runtime/hip/
// lanes.h): the scatter's stable rank uses ballot rounds where CUDA has
// __match_any_sync, block scans run over at most 16 waves, and blocks read
// each other's histogram columns with agent-scope loads.
//
// Instantiate tailor::cuda::MoeRouteCountPlan, MoeRouteFused or
// MoeRouteScatter<waves> with TAILOR_HIP_ENTRY; launch shapes:
// templates/hip/moe/params.h (HipRouteScatterWaves) and
// src/backends/gpu/moe_launch.h (PlanMoeRoute).
#ifndef TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_
#define TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_

#include "runtime/hip/cuda_compat.h"
#include "runtime/hip/entry.h"

TAILOR_HIP_REUSE_CUDA_BEGIN
#include "templates/cuda/moe/route.cuh"
TAILOR_HIP_REUSE_CUDA_END

#endif  // TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_
