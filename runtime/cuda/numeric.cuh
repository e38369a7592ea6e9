// runtime/cuda/numeric.cuh — element types and conversions for CUDA kernel
// templates, without <cuda_bf16.h> (it pulls in CCCL and triples NVRTC
// compile time).
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
//
// bf16 is stored as its 16 high float bits (the layout of __nv_bfloat16 and
// of torch.bfloat16). Conversions round to nearest even; NaN stays NaN.
#ifndef TAILOR_RUNTIME_CUDA_NUMERIC_CUH_
#define TAILOR_RUNTIME_CUDA_NUMERIC_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

struct alignas(2) bf16 {
  unsigned short bits;
};

TAILOR_DEVICE float ToFloat(float x) { return x; }
TAILOR_DEVICE float ToFloat(bf16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}

template <typename T>
TAILOR_DEVICE T FromFloat(float x);
template <>
TAILOR_DEVICE float FromFloat<float>(float x) {
  return x;
}
template <>
TAILOR_DEVICE bf16 FromFloat<bf16>(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return bf16{static_cast<unsigned short>((u >> 16) | 0x40)};
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<unsigned short>(u >> 16)};
}

// Two floats as packed bf16 (lo in the low half), round to nearest even
// (one cvt.rn.bf16x2.f32 on sm_80 and newer).
TAILOR_DEVICE unsigned PackBf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  return static_cast<unsigned>(FromFloat<bf16>(lo).bits) |
         (static_cast<unsigned>(FromFloat<bf16>(hi).bits) << 16);
#endif
}

// x rounded to bf16 (nearest even), as its bits: one cvt on sm_80+. Use it,
// not FromFloat<bf16>, on wgmma accumulators: FromFloat's integer arithmetic
// lets the compiler carry them across the K loop as integers, i.e. copy them
// out while an asynchronous wgmma still writes them.
TAILOR_DEVICE unsigned short Bf16Bits(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
  return bits;
#else
  return FromFloat<bf16>(x).bits;
#endif
}

// silu(x) = x * sigmoid(x), in f32 like vLLM's silu_and_mul (fast exp and
// division: a few ulp, far inside bf16 and the f32 tests' 1e-5).
TAILOR_DEVICE float NegativeInfinity() { return __int_as_float(0xff800000u); }

// tanh on the SFU (about 2^-11 relative error), as the attention kernels'
// soft cap uses it.
TAILOR_DEVICE float TanhApprox(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

TAILOR_DEVICE float Silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

template <typename T>
TAILOR_DEVICE constexpr T Min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
TAILOR_DEVICE constexpr T Max(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
TAILOR_DEVICE constexpr T CeilDiv(T a, T b) {
  return (a + b - 1) / b;
}

// A trivially copyable chunk of kBytes bytes (1, 2, 4, 8 or 16) that loads
// and stores as one instruction.
template <int kBytes>
struct Chunk;
template <>
struct alignas(16) Chunk<16> {
  uint4 v;
};
template <>
struct alignas(8) Chunk<8> {
  uint2 v;
};
template <>
struct alignas(4) Chunk<4> {
  unsigned v;
};
template <>
struct alignas(2) Chunk<2> {
  unsigned short v;
};
template <>
struct Chunk<1> {
  unsigned char v;
};

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_NUMERIC_CUH_
