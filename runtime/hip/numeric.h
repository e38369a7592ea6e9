// runtime/hip/numeric.h — 16-bit float conversions and activations for the
// HIP kernels, without <hip/hip_bf16.h> (hiprtc from ROCm 5.2 has no
// __hip_bfloat16 in its builtin headers).
//
// Contract: device-only code for hiprtc. Header-only, no standard headers.
// bf16 is stored as its 16 high float bits (the CUDA kernels' tailor::cuda::
// bf16 layout); f16 is clang's _Float16.
#ifndef TAILOR_RUNTIME_HIP_NUMERIC_H_
#define TAILOR_RUNTIME_HIP_NUMERIC_H_

#include "runtime/hip/wave.h"

namespace tailor::hip {

TAILOR_HIP_DEVICE float NegInf() { return -__builtin_huge_valf(); }

// One 16-bit element as a float: bf16 (kBf16) or f16.
template <bool kBf16>
TAILOR_HIP_DEVICE float HalfToFloat(unsigned short bits) {
  if constexpr (kBf16) {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  } else {
    return static_cast<float>(__builtin_bit_cast(_Float16, bits));
  }
}

// A float as bf16 (round to nearest even, NaN kept quiet) or f16.
template <bool kBf16>
TAILOR_HIP_DEVICE unsigned short FloatToHalf(float x) {
  if constexpr (kBf16) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      return static_cast<unsigned short>((u >> 16) | 0x40);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
  } else {
    return __builtin_bit_cast(unsigned short, static_cast<_Float16>(x));
  }
}

// silu(x) = x / (1 + e^-x) (vLLM's silu_and_mul gate).
TAILOR_HIP_DEVICE float SiluHip(float x) { return x / (1.0f + __expf(-x)); }

}  // namespace tailor::hip

#endif  // TAILOR_RUNTIME_HIP_NUMERIC_H_
