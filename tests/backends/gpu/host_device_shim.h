// tests/backends/gpu/host_device_shim.h — runs a GPU template written
// against the lane primitives (runtime/cuda/lanes.cuh) on the host, as
// one-thread blocks executed one after another: a reference execution of
// the very source CUDA and HIP compile, for tests without a GPU.
//
// Include it before the template. It claims the include guards of the
// runtime/cuda/ headers such a template may include (arch, numeric, entry,
// lanes) and supplies what the template takes from them for a "warp" of one
// lane: threadIdx / blockIdx / blockDim / gridDim (set them before each
// block), __syncthreads (a no-op: one thread), atomics (plain updates),
// MatchAny (the lane itself), shuffles (the lane's own value), loads of
// other blocks' writes (plain loads; blocks run in sequence), ArriveAcqRel
// (a plain ticket). __shared__ variables become locals, and an
// `extern __shared__ T name[]` refers to a tailor::cuda::name array the test
// defines. Only templates that size their loops by blockDim (not by a
// compile-time thread count) run correctly with one thread.
#ifndef TAILOR_TESTS_BACKENDS_GPU_HOST_DEVICE_SHIM_H_
#define TAILOR_TESTS_BACKENDS_GPU_HOST_DEVICE_SHIM_H_

#if defined(TAILOR_RUNTIME_CUDA_ARCH_CUH_) || \
    defined(TAILOR_RUNTIME_CUDA_LANES_CUH_)
#error "host_device_shim.h must come before any runtime/cuda/ header"
#endif
#define TAILOR_RUNTIME_CUDA_ARCH_CUH_ 1
#define TAILOR_RUNTIME_CUDA_NUMERIC_CUH_ 1
#define TAILOR_RUNTIME_CUDA_ENTRY_CUH_ 1
#define TAILOR_RUNTIME_CUDA_LANES_CUH_ 1
#define TAILOR_DEVICE inline
#define __shared__

namespace tailor::cuda {

struct HostDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline HostDim3 threadIdx, blockIdx, blockDim, gridDim;

inline void __syncthreads() {}

inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address += value;
  return old;
}
inline unsigned long long atomicMin(unsigned long long* address,
                                    unsigned long long value) {
  const unsigned long long old = *address;
  if (value < old) *address = value;
  return old;
}

template <typename T>
constexpr T Min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
constexpr T Max(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
constexpr T CeilDiv(T a, T b) {
  return (a + b - 1) / b;
}

inline constexpr int kLanes = 1;
inline constexpr int kMaxBlockWarps = 1;
using LaneMask = unsigned;
inline LaneMask LaneMaskLt() { return 0; }
inline LaneMask MatchAny(int) { return 1; }
inline int PopCount(LaneMask mask) { return __builtin_popcount(mask); }
inline int LowestLane(LaneMask mask) {
  return mask == 0 ? -1 : __builtin_ctz(mask);
}
inline int ShuffleInt(int value, int) { return value; }
inline int ShuffleUpInt(int value, int) { return value; }
inline int LoadFromOtherBlocks(const int* address) { return *address; }
inline int ArriveAcqRel(int* counter) { return (*counter)++; }

}  // namespace tailor::cuda

#endif  // TAILOR_TESTS_BACKENDS_GPU_HOST_DEVICE_SHIM_H_
