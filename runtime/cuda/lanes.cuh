// runtime/cuda/lanes.cuh — the lane primitives that kernels shared by CUDA
// and HIP are written against, for CUDA's 32-lane warps.
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
// runtime/hip/lanes.h gives the same names for CDNA's 64-lane waves (and
// claims this header's include guard, so a shared template's include of it
// is a no-op there). Every helper is called by all lanes of the warp
// together (the full-mask case); none takes a member mask.
//
//   kLanes                 lanes of a warp (32)
//   kMaxBlockWarps         warps a block-wide scan handles: at most kLanes,
//                          and 1024 threads
//   LaneMask               a bit per lane
//   LaneMaskLt()           the bits of the lanes below this one
//   MatchAny(v)            the lanes whose v equals this lane's
//   PopCount, LowestLane   of a LaneMask (LowestLane(0) == -1)
//   ShuffleInt(v, l)       lane l's v
//   ShuffleUpInt(v, d)     lane (this - d)'s v; lanes below d keep their own
//   LoadFromOtherBlocks(p) an int other blocks of this launch wrote: read
//                          through L2, never a stale L1 line
// ArriveAcqRel (runtime/cuda/arch.cuh) completes the set: a gpu-scope
// acq_rel ticket on a counter.
#ifndef TAILOR_RUNTIME_CUDA_LANES_CUH_
#define TAILOR_RUNTIME_CUDA_LANES_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

inline constexpr int kLanes = 32;
inline constexpr int kMaxBlockWarps =
    1024 / kLanes < kLanes ? 1024 / kLanes : kLanes;
using LaneMask = unsigned;
inline constexpr LaneMask kFullLaneMask = 0xffffffffu;

TAILOR_DEVICE LaneMask LaneMaskLt() {
  LaneMask mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

TAILOR_DEVICE LaneMask MatchAny(int value) {
  return __match_any_sync(kFullLaneMask, value);
}

TAILOR_DEVICE int PopCount(LaneMask mask) { return __popc(mask); }
TAILOR_DEVICE int LowestLane(LaneMask mask) { return __ffs(mask) - 1; }

TAILOR_DEVICE int ShuffleInt(int value, int source_lane) {
  return __shfl_sync(kFullLaneMask, value, source_lane);
}
TAILOR_DEVICE int ShuffleUpInt(int value, int delta) {
  return __shfl_up_sync(kFullLaneMask, value, delta);
}

TAILOR_DEVICE int LoadFromOtherBlocks(const int* address) {
  int value;
  asm volatile("ld.global.cg.s32 %0, [%1];"
               : "=r"(value)
               : "l"(GlobalAddress(address)));
  return value;
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_LANES_CUH_
