// runtime/hip/lanes.h — runtime/cuda/lanes.cuh's lane primitives for CDNA's
// 64-lane waves, so that a CUDA template written against them (the MoE
// Route) compiles for AMD through the vendor header.
//
// Contract: device-only code for hiprtc. Header-only, no standard headers.
// Included by runtime/hip/cuda_compat.h before any CUDA template: it claims
// runtime/cuda/lanes.cuh's include guard and declares the same names in
// namespace tailor::cuda (the reused templates' namespace) on top of
// runtime/hip/wave.h:
//   kLanes = 64, kMaxBlockWarps = 16 (1024 threads), LaneMask (64 bits),
//   LaneMaskLt, MatchAny (ballot rounds: CDNA has no match instruction),
//   PopCount, LowestLane, ShuffleInt, ShuffleUpInt, LoadFromOtherBlocks
//   (agent-scope loads: they skip the CU's non-coherent vector L1), and
//   ArriveAcqRel (runtime/cuda/arch.cuh's, which HIP does not compile).
#ifndef TAILOR_RUNTIME_HIP_LANES_H_
#define TAILOR_RUNTIME_HIP_LANES_H_

#if defined(TAILOR_RUNTIME_CUDA_LANES_CUH_)
#error "runtime/hip/lanes.h must come before runtime/cuda/lanes.cuh"
#endif
#define TAILOR_RUNTIME_CUDA_LANES_CUH_ 1

#include "runtime/hip/wave.h"

namespace tailor::cuda {

inline constexpr int kLanes = ::tailor::hip::kWaveSize;
inline constexpr int kMaxBlockWarps =
    1024 / kLanes < kLanes ? 1024 / kLanes : kLanes;
using LaneMask = ::tailor::hip::LaneMask;
using ::tailor::hip::LaneMaskLt;
using ::tailor::hip::LoadFromOtherBlocks;
using ::tailor::hip::LowestLane;
using ::tailor::hip::MatchAny;
using ::tailor::hip::PopCount;
using ::tailor::hip::ShuffleInt;
using ::tailor::hip::ShuffleUpInt;

// Adds 1 to an agent-scope arrival counter and returns the count before it:
// release for the writes ordered before it (the block's, through the
// work-group barrier that precedes the call), acquire for the reads after
// it; the "last one out" pattern of runtime/cuda/arch.cuh.
TAILOR_HIP_DEVICE int ArriveAcqRel(int* counter) {
  return __hip_atomic_fetch_add(counter, 1, __ATOMIC_ACQ_REL,
                                __HIP_MEMORY_SCOPE_AGENT);
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_HIP_LANES_H_
