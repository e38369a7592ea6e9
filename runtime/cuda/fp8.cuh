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
// Conversions: cvt.rn.satfinite.e4m3x2.f32 and cvt.rn.f16x2.e4m3x2 on sm_89
// and newer; on sm_80-sm_88 the same results from integer and f32 ops
// (E4m3FromFloat: ops/moe/fp8_quant.cc's rule; E4m3x4ToHalf2: every e4m3
// value is an f16 value, NaN stays NaN). max.NaN.f32 (sm_80+).
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

// One float as an e4m3 byte without the sm_89 conversion: round to nearest
// even in the value's binade (2^(e - 3) apart, 2^-9 among subnormals),
// saturated to +-448, NaN 0x7f with x's sign. The byte is (binade + 6) * 8 +
// steps for steps = |x| / spacing rounded, in [0, 16] (16: the next binade).
TAILOR_DEVICE unsigned E4m3FromFloat(float x) {
  const unsigned sign = (__float_as_uint(x) >> 24) & 0x80u;
  const float a = fabsf(x);
  if (a != a) return sign | 0x7fu;
  if (a >= kFp8E4m3Max) return sign | 0x7eu;  // saturated (infinities too)
  const int exponent = static_cast<int>(__float_as_uint(a) >> 23) - 127;
  const int binade = exponent < -6 ? -6 : exponent;  // a < 448: at most 8
  // a * 2^(3 - binade), exact: a power-of-two scale within f32's range.
  const float steps =
      rintf(a * __uint_as_float(static_cast<unsigned>(130 - binade) << 23));
  if (steps == 0.0f) return sign;
  return sign |
         static_cast<unsigned>((binade + 6) * 8 + static_cast<int>(steps));
}

// Two floats as two e4m3 bytes (lo in the low byte), round to nearest even,
// saturated to +-448; NaN stays NaN.
TAILOR_DEVICE unsigned short PackE4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
      : "=h"(packed)
      : "f"(hi), "f"(lo));
  return packed;
#else
  return static_cast<unsigned short>(E4m3FromFloat(lo) |
                                     (E4m3FromFloat(hi) << 8));
#endif
}

// Four e4m3 bytes (byte 0 lowest) as two f16x2 words, exactly: lo holds
// bytes 0 (low half) and 1, hi bytes 2 and 3. Without sm_89's cvt: each
// byte's sign and exponent|mantissa bits placed as an f16 (exponent bias 15
// against 7: the value x 2^-8, subnormals included), times 2^8; the one
// pattern that lands on 480 is e4m3's NaN (0x7f), made an f16 NaN.
TAILOR_DEVICE void E4m3x4ToHalf2(unsigned bytes, unsigned& lo, unsigned& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(bytes));
#else
  unsigned words[2] = {__byte_perm(bytes, 0u, 0x1404u),   // b1 0 b0 0
                       __byte_perm(bytes, 0u, 0x3424u)};  // b3 0 b2 0
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const unsigned placed =
        (words[i] & 0x80008000u) | ((words[i] >> 1) & 0x3f803f80u);
    unsigned scaled;
    asm("mul.rn.f16x2 %0, %1, %2;"
        : "=r"(scaled)
        : "r"(placed), "r"(0x5c005c00u));                               // x 256
    const unsigned nan = __vcmpeq2(scaled & 0x7fff7fffu, 0x5f805f80u);  // 480
    words[i] = scaled | (nan & 0x7e007e00u);
  }
  lo = words[0];
  hi = words[1];
#endif
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
