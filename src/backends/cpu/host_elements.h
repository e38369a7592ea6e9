// backends/cpu/host_elements.h — element loads and stores with a runtime
// dtype, for the generic CPU kernels (moe_generic.cc, decode_generic.cc).
//
// The generic kernels are built by the host compiler, so they cannot use
// runtime/cpu/ (Clang vector extensions). These are the scalar twins of its
// conversions, bit for bit:
//   bf16  the high 16 bits of an f32; narrowing rounds to nearest even, NaN
//         stays NaN with the quiet bit forced (tailor_cpu.h FromFloat<bf16>)
//   f16   IEEE binary16; widening is exact, narrowing rounds to nearest
//         even, overflows to infinity, keeps subnormals and turns NaN into
//         0x7e00 with its sign (half.h)
//   f32   as is
//
// Example:
//   float x = LoadAsFloat(p.q, i, DType::kF16);
//   StoreFromFloat(p.out, i, DType::kF16, x * 2);
#ifndef TAILOR_BACKENDS_CPU_HOST_ELEMENTS_H_
#define TAILOR_BACKENDS_CPU_HOST_ELEMENTS_H_

#include <bit>
#include <cstdint>

#include "tailor/tensor.h"

namespace tailor::internal::cpu {

inline float Bf16BitsToFloat(uint16_t h) {
  return std::bit_cast<float>(uint32_t{h} << 16);
}

inline uint16_t FloatToBf16Bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F16BitsToFloat(uint16_t h) {
  // Exponent and mantissa shifted into place, then rebiased; infinities and
  // NaNs get the f32 all-ones exponent, zeros and subnormals are
  // renormalized by one float subtraction.
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  uint32_t bits = (uint32_t{h} & 0x7fffu) << 13;
  const uint32_t exp = bits & kShiftedExp;
  bits += (127u - 15u) << 23;
  if (exp == kShiftedExp) {
    bits += (128u - 16u) << 23;
  } else if (exp == 0) {
    bits += 1u << 23;
    bits = std::bit_cast<uint32_t>(std::bit_cast<float>(bits) -
                                   std::bit_cast<float>(113u << 23));
  }
  bits |= (uint32_t{h} & 0x8000u) << 16;
  return std::bit_cast<float>(bits);
}

inline uint16_t FloatToF16Bits(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint32_t out;
  if (bits >= (127u + 16u) << 23) {  // |x| >= 65536 (or inf / NaN)
    out = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (bits < (113u << 23)) {  // |x| < 2^-14: subnormal or zero
    // Adding 0.5 aligns the mantissa so the f32 add rounds to nearest even.
    const float magic = std::bit_cast<float>(126u << 23);
    out = std::bit_cast<uint32_t>(std::bit_cast<float>(bits) + magic) -
          (126u << 23);
  } else {
    const uint32_t odd = (bits >> 13) & 1u;
    bits += ((15u - 127u) << 23) + 0xfffu + odd;  // rebias, round half even
    out = bits >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

// Element i of `base` (f32, bf16 or f16) as f32.
inline float LoadAsFloat(const void* base, int64_t i, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return F16BitsToFloat(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Stores `value` as element i of `base` (f32, bf16 or f16).
inline void StoreFromFloat(void* base, int64_t i, DType dtype, float value) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = FloatToBf16Bits(value);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = FloatToF16Bits(value);
      return;
    default:
      static_cast<float*>(base)[i] = value;
  }
}

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_HOST_ELEMENTS_H_
