// runtime/cuda/fp8.cuh — the e4m3 format (OCP FP8 E4M3, torch.float8_e4m3fn)
// and the group quantization rule, on the device.
//
// Contract: device-only code for NVRTC, sm_89 or newer for the conversions.
// Header-only, no standard headers.
//
// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; largest finite value
// 448 (0x7e), NaN 0x7f / 0xff, no infinities, subnormals down to 2^-9.
//
// Group quantization (one group: 128 consecutive elements of a row, the
// 1 x 128 activation blocks of DeepSeek-V3 style checkpoints), the rule of
// vLLM's per_token_group_quant_fp8 for finite inputs:
//   amax  = max(|x|) over the group, at least kFp8Epsilon
//   scale = amax / 448                      (f32, IEEE division)
//   q     = e4m3(x / scale)                 (IEEE division, round to nearest
//                                            even, saturated to +-448)
//   x ~ q * scale
// Non-finite inputs propagate: a NaN or an infinity in the group makes amax
// and the scale NaN or infinite, and x / scale then NaN or 0; every dequantized
// value of that group is NaN (q * scale: 0 * inf or NaN), so a GEMM over it
// yields NaN in the rows it touches, as the f32 reference does. (vLLM's fmaxf
// drops a NaN from the amax instead and clamps it to -448.)
//
// PTX used: cvt.rn.satfinite.e4m3x2.f32 (sm_89+), max.NaN.f32 (sm_80+).
#ifndef TAILOR_RUNTIME_CUDA_FP8_CUH_
#define TAILOR_RUNTIME_CUDA_FP8_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

inline constexpr float kFp8E4m3Max = 448.0f;
// Smallest amax a group's scale is computed from (vLLM's eps): an all-zero
// group gets scale kFp8Epsilon / 448 and quantizes to zeros.
inline constexpr float kFp8Epsilon = 1e-10f;
// K (and, for weights, N) elements per scale block.
inline constexpr int kFp8ScaleBlock = 128;

struct alignas(1) e4m3 {
  unsigned char bits;
};

// max(a, b) that returns NaN when either is NaN (fmaxf drops it).
TAILOR_DEVICE float MaxPropagateNan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
#else
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
#endif
}

// Two floats as two e4m3 bytes (lo in the low byte), round to nearest even,
// saturated to +-448; NaN stays NaN.
TAILOR_DEVICE unsigned short PackE4m3x2(float lo, float hi) {
  unsigned short packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
      : "=h"(packed)
      : "f"(hi), "f"(lo));
  return packed;
}

// Four floats as four e4m3 bytes, v0 in the lowest.
TAILOR_DEVICE unsigned PackE4m3x4(float v0, float v1, float v2, float v3) {
  return static_cast<unsigned>(PackE4m3x2(v0, v1)) |
         (static_cast<unsigned>(PackE4m3x2(v2, v3)) << 16);
}

// The scale of a group whose largest magnitude is `amax` (see the rule).
TAILOR_DEVICE float Fp8GroupScale(float amax) {
  return __fdiv_rn(MaxPropagateNan(amax, kFp8Epsilon), kFp8E4m3Max);
}

// x / scale, the value that is rounded to e4m3 (IEEE division even under
// --use_fast_math, so the bytes match the reference quantizer).
TAILOR_DEVICE float Fp8Scaled(float x, float scale) {
  return __fdiv_rn(x, scale);
}

// The largest magnitude of a group spread over `kLanes` consecutive lanes of
// a warp (a power of two up to 32, aligned to kLanes), each holding `local`.
// Only the group's lanes take part: other groups of the warp may have left.
template <int kLanes>
TAILOR_DEVICE float GroupAbsMax(float local) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "a group spans a power of two of lanes");
  const unsigned lane = threadIdx.x % 32;
  const unsigned mask = kLanes == 32
                            ? 0xffffffffu
                            : ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1u));
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    local = MaxPropagateNan(local, __shfl_xor_sync(mask, local, offset));
  }
  return local;
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_FP8_CUH_
