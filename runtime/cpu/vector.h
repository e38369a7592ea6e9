// runtime/cpu/vector.h — 8-lane float vectors for CPU kernel templates.
//
// Clang compiles CPU kernels without fast-math, so it never reorders a
// float reduction and a plain `sum += a[i] * b[i]` loop stays scalar.
// Kernels that reduce therefore accumulate in explicit 8-lane vectors
// (Clang's ext_vector_type, one AVX register) and reduce the lanes once at
// the end. This header supplies that vector type plus unaligned loads and
// stores that convert bf16 <-> f32 on the way, so one kernel body serves
// both element types. No system headers, like tailor_cpu.h.
//
// Example:
//   float8 acc = 0;
//   for (int k = 0; k < kLen; k += kLanes) acc += Load8(a + k) * Load8(b + k);
//   float dot = SumLanes(acc);
#ifndef TAILOR_RUNTIME_CPU_VECTOR_H_
#define TAILOR_RUNTIME_CPU_VECTOR_H_

#include "runtime/cpu/tailor_cpu.h"

namespace tailor::kernels {

inline constexpr int kLanes = 8;

typedef float float8 __attribute__((ext_vector_type(8)));
typedef float float4 __attribute__((ext_vector_type(4)));
typedef float float2 __attribute__((ext_vector_type(2)));
typedef uint16_t ushort8 __attribute__((ext_vector_type(8)));
typedef uint32_t uint8v __attribute__((ext_vector_type(8)));
typedef int32_t int8v __attribute__((ext_vector_type(8)));

// ---- loads: 8 consecutive elements, any alignment, widened to f32 -----------

inline float8 Load8(const float* p) {
  float8 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

inline float8 Load8(const bf16* p) {
  ushort8 halves;
  __builtin_memcpy(&halves, p, sizeof(halves));
  // A bf16 is the high half of an f32: widen and shift into place.
  uint8v bits = __builtin_convertvector(halves, uint8v) << 16;
  return __builtin_bit_cast(float8, bits);
}

// ---- stores: 8 consecutive elements, any alignment, narrowed from f32 -------

inline void Store8(float* p, float8 v) { __builtin_memcpy(p, &v, sizeof(v)); }

inline void Store8(bf16* p, float8 v) {
  // Round to nearest even, NaN stays NaN with the quiet bit forced: the
  // lane-wise twin of FromFloat<bf16> in tailor_cpu.h.
  uint8v bits = __builtin_bit_cast(uint8v, v);
  uint8v rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint8v quiet_nan = (bits >> 16) | 0x40u;
  uint8v is_nan =
      __builtin_bit_cast(uint8v, (bits & 0x7fffffffu) > 0x7f800000u);
  uint8v out = (quiet_nan & is_nan) | (rounded & ~is_nan);
  ushort8 halves = __builtin_convertvector(out, ushort8);
  __builtin_memcpy(p, &halves, sizeof(halves));
}

// ---- reductions -------------------------------------------------------------

// The sum of the 8 lanes, in a fixed pairwise order (deterministic).
inline float SumLanes(float8 v) {
  float4 quad = v.lo + v.hi;
  float2 pair = quad.lo + quad.hi;
  return pair.x + pair.y;
}

}  // namespace tailor::kernels

#endif  // TAILOR_RUNTIME_CPU_VECTOR_H_
