// runtime/cpu/fp8.h — the e4m3 format (OCP FP8 E4M3, torch.float8_e4m3fn)
// and the FP8 quantization rule for CPU kernel templates.
//
// Contract: no system headers (CPU kernels are compiled without them).
// Bit for bit the rule of the host reference (src/ops/moe/fp8_quant.h) and
// of runtime/cuda/fp8.cuh:
//   decode   sign, 4 exponent bits (bias 7), 3 mantissa bits; 0x7f / 0xff NaN
//   encode   round to nearest even; above 448 (infinities too) +-448; NaN
//            stays NaN (0x7f with its sign)
//   block    scale = max(amax, 1e-10) / 448 (NaN amax propagates),
//            q = encode(x / scale)
//
// Example:
//   float scale = Fp8Scale(amax);
//   q[i] = E4m3FromFloat(x[i] / scale);
//   float back = E4m3ToFloat(q[i]) * scale;
#ifndef TAILOR_RUNTIME_CPU_FP8_H_
#define TAILOR_RUNTIME_CPU_FP8_H_

#include "runtime/cpu/tailor_cpu.h"

namespace tailor::kernels {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8ScaleEpsilon = 1e-10f;

constexpr float E4m3ToFloat(uint8_t bits) {
  const uint32_t sign = uint32_t{bits & 0x80u} << 24;
  const uint32_t exponent = (bits >> 3) & 0xfu;
  const uint32_t mantissa = bits & 0x7u;
  if ((bits & 0x7fu) == 0x7fu) {
    return __builtin_bit_cast(float, sign | 0x7fc00000u);
  }
  if (exponent == 0) {  // subnormal: mantissa x 2^-9, exact in f32
    const float value = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return sign ? -value : value;
  }
  // Normal: rebias the exponent (7 -> 127), widen the mantissa (3 -> 23).
  return __builtin_bit_cast(float,
                            sign | (exponent + 120u) << 23 | mantissa << 20);
}

inline uint8_t E4m3FromFloat(float x) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7f;   // NaN
  if (magnitude >= 0x43e00000u) return sign | 0x7e;  // >= 448: saturate
  if (magnitude < 0x3c800000u) {                     // < 2^-6: subnormal
    // Multiples of 2^-9: adding 2^-9 x 2^23 (= 2^14 as a float, whose ulp is
    // 2^-9) rounds to the nearest multiple, ties to even, in the float add.
    const float shifted = __builtin_bit_cast(float, magnitude) + 16384.0f;
    return sign | static_cast<uint8_t>(__builtin_bit_cast(uint32_t, shifted) -
                                       0x46800000u);
  }
  // Normal: drop 20 mantissa bits, rounding half to even, then rebias the
  // exponent (127 -> 7). A carry into the exponent is the right result.
  const uint32_t odd = (magnitude >> 20) & 1u;
  const uint32_t rounded = (magnitude + 0x7ffffu + odd) >> 20;
  const uint32_t code = rounded - (120u << 3);
  return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
}

// max(a, b) that keeps a NaN from either side.
inline float MaxPropagateNan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

inline float Fp8Scale(float amax) {
  if (amax != amax) return amax;
  return Max(amax, kFp8ScaleEpsilon) / kFp8E4m3Max;
}

}  // namespace tailor::kernels

#endif  // TAILOR_RUNTIME_CPU_FP8_H_
