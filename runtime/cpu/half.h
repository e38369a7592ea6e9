// runtime/cpu/half.h — IEEE binary16 (f16) for CPU kernel templates.
//
// Like bf16 (tailor_cpu.h), f16 is a storage type: kernels widen it to f32,
// compute in f32 and narrow the result. Conversions are exact bit
// manipulation (no F16C needed): f16 -> f32 is exact, f32 -> f16 rounds to
// nearest even, overflows to infinity, keeps subnormals, and turns NaN into
// the quiet NaN 0x7e00 (sign kept). Load8 / Store8 overloads let the vector
// code of vector.h serve f16 too. No system headers.
//
// Example:
//   float8 acc = 0;
//   for (int d = 0; d < kD; d += kLanes) acc += Load8(a + d) * Load8(b + d);
#ifndef TAILOR_RUNTIME_CPU_HALF_H_
#define TAILOR_RUNTIME_CPU_HALF_H_

#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"

namespace tailor::kernels {

struct f16 {
  uint16_t bits;
};

inline float ToFloat(f16 x) {
  // Shift exponent and mantissa into place, then rebias (Fabian Giesen's
  // half_to_float): infinities and NaNs get the f32 all-ones exponent,
  // zeros and subnormals are renormalized by one float subtraction.
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  uint32_t bits = (uint32_t{x.bits} & 0x7fffu) << 13;
  const uint32_t exp = bits & kShiftedExp;
  bits += (127u - 15u) << 23;
  if (exp == kShiftedExp) {
    bits += (128u - 16u) << 23;
  } else if (exp == 0) {
    bits += 1u << 23;
    bits =
        __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, bits) -
                                         __builtin_bit_cast(float, 113u << 23));
  }
  bits |= (uint32_t{x.bits} & 0x8000u) << 16;
  return __builtin_bit_cast(float, bits);
}

template <>
inline f16 FromFloat<f16>(float x) {
  uint32_t bits = __builtin_bit_cast(uint32_t, x);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint32_t out;
  if (bits >= (127u + 16u) << 23) {  // |x| >= 65536 (or inf / NaN)
    out = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (bits < (113u << 23)) {  // |x| < 2^-14: subnormal or zero
    // Adding 0.5 aligns the mantissa so the f32 add rounds to nearest even.
    const float magic = __builtin_bit_cast(float, 126u << 23);
    out =
        __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, bits) + magic) -
        (126u << 23);
  } else {
    const uint32_t odd = (bits >> 13) & 1u;
    bits += ((15u - 127u) << 23) + 0xfffu + odd;  // rebias, round half even
    out = bits >> 13;
  }
  return f16{static_cast<uint16_t>(out | (sign >> 16))};
}

inline float8 Load8(const f16* p) {
  float8 v;
  for (int i = 0; i < kLanes; ++i) v[i] = ToFloat(p[i]);
  return v;
}

inline void Store8(f16* p, float8 v) {
  for (int i = 0; i < kLanes; ++i) p[i] = FromFloat<f16>(v[i]);
}

}  // namespace tailor::kernels

#endif  // TAILOR_RUNTIME_CPU_HALF_H_
