// runtime/hip/wave.h — wave64 primitives for CDNA kernels (gfx90a, gfx94x):
// lane ids and masks, ballot, match-any, shuffles, and loads of data that
// other blocks of the same launch wrote.
//
// Contract: device-only code for hiprtc. Header-only, no standard headers.
//
// CDNA waves have 64 lanes, and masks are 64-bit; CUDA code written for
// 32-lane warps (__match_any_sync, 32-bit __ballot_sync, %lanemask_lt)
// does not port by renaming. Every helper here is called by all 64 lanes of
// the wave together (the CUDA "full mask" case); none takes a member mask.
//
// AMDGPU builtins used: __builtin_amdgcn_mbcnt_lo/hi (lane id), and the HIP
// runtime's __ballot, __shfl, __shfl_up, __shfl_xor (ds_bpermute /
// DPP), __popcll, __ffsll; __hip_atomic_load with agent scope (a global
// load with glc: it skips the CU's non-coherent vector L1).
#ifndef TAILOR_RUNTIME_HIP_WAVE_H_
#define TAILOR_RUNTIME_HIP_WAVE_H_

#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 64
#error "tailor's HIP kernels are written for wave64 (CDNA: gfx90a, gfx94x)"
#endif

#define TAILOR_HIP_DEVICE __device__ __forceinline__

namespace tailor::hip {

inline constexpr int kWaveSize = 64;
using LaneMask = unsigned long long;  // bit i: lane i
inline constexpr LaneMask kFullWave = ~0ull;

// This lane's index in its wave, 0..63.
TAILOR_HIP_DEVICE int LaneId() {
  return static_cast<int>(
      __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)));
}

// Bits of the lanes below this one.
TAILOR_HIP_DEVICE LaneMask LaneMaskLt() {
  return (LaneMask{1} << LaneId()) - 1;
}

// Bit i set when lane i passes `predicate` (all 64 lanes call it).
TAILOR_HIP_DEVICE LaneMask Ballot(bool predicate) {
  return static_cast<LaneMask>(__ballot(predicate));
}

TAILOR_HIP_DEVICE int PopCount(LaneMask mask) { return __popcll(mask); }
// Index of the lowest set bit; -1 for an empty mask.
TAILOR_HIP_DEVICE int LowestLane(LaneMask mask) { return __ffsll(mask) - 1; }

TAILOR_HIP_DEVICE int ShuffleInt(int value, int source_lane) {
  return __shfl(value, source_lane);
}
// `value` of lane (this lane - delta); lanes below delta get their own.
TAILOR_HIP_DEVICE int ShuffleUpInt(int value, int delta) {
  return __shfl_up(value, static_cast<unsigned>(delta));
}
TAILOR_HIP_DEVICE float ShuffleXor(float value, int lane_mask) {
  return __shfl_xor(value, lane_mask);
}

// The lanes whose `value` equals this lane's (CUDA's __match_any_sync over
// a full warp). CDNA has no match instruction: each round takes the lowest
// lane not yet matched, broadcasts its value and ballots the equal lanes;
// as many rounds as distinct values (at most 64), the same on every lane,
// so the loop never diverges.
TAILOR_HIP_DEVICE LaneMask MatchAny(int value) {
  LaneMask unmatched = kFullWave;
  LaneMask peers = 0;
  while (unmatched != 0) {
    const int leader_value = ShuffleInt(value, LowestLane(unmatched));
    const LaneMask equal = Ballot(value == leader_value);
    if (value == leader_value) peers = equal;
    unmatched &= ~equal;
  }
  return peers;
}

// Sum of `value` over the wave, on every lane.
TAILOR_HIP_DEVICE float WaveSum(float value) {
  for (int offset = kWaveSize / 2; offset > 0; offset /= 2) {
    value += ShuffleXor(value, offset);
  }
  return value;
}

// Max of `value` over the wave, on every lane.
TAILOR_HIP_DEVICE float WaveMax(float value) {
  for (int offset = kWaveSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, ShuffleXor(value, offset));
  }
  return value;
}

// Orders this wave's LDS writes before its lanes read each other's (no
// work-group barrier: the other waves may be elsewhere). Waves run their
// lanes in lock-step; the fences keep the compiler from reordering the LDS
// accesses across it.
TAILOR_HIP_DEVICE void WaveSync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

// An int from global memory that other blocks of this launch wrote (after
// their __threadfence): loaded at agent scope, so never from a stale line
// of this CU's vector L1 (CUDA: ld.global.cg).
TAILOR_HIP_DEVICE int LoadFromOtherBlocks(const int* address) {
  return __hip_atomic_load(address, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
TAILOR_HIP_DEVICE float LoadFromOtherBlocks(const float* address) {
  return __hip_atomic_load(address, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

}  // namespace tailor::hip

#endif  // TAILOR_RUNTIME_HIP_WAVE_H_
