// runtime/cpu/tailor_cpu.h — what every CPU kernel template includes.
//
// CPU kernels are compiled in process by Clang with no system headers, so
// this header supplies the fixed-width types, bf16 conversion and the entry
// ABI. A generated kernel source is exactly:
//
//   #include "templates/cpu/<family>.h"
//   TAILOR_CPU_ENTRY((tailor::kernels::<Family><template args>))
//
// and the backend calls  tailor_entry(&params, begin, end)  for ranges of
// work items on its thread pool. Kernel::Run(const Params&, int64_t item)
// runs one work item; items of one launch may run concurrently, in any order.
#ifndef TAILOR_RUNTIME_CPU_TAILOR_CPU_H_
#define TAILOR_RUNTIME_CPU_TAILOR_CPU_H_

#include "runtime/cpu/types.h"

namespace tailor::kernels {

// bf16 stored as its 16 high float bits.
struct bf16 {
  uint16_t bits;
};

inline float ToFloat(float x) { return x; }
inline float ToFloat(bf16 x) {
  return __builtin_bit_cast(float, uint32_t{x.bits} << 16);
}

template <typename T>
inline T FromFloat(float x);
template <>
inline float FromFloat<float>(float x) {
  return x;
}
template <>
inline bf16 FromFloat<bf16>(float x) {
  // Round to nearest even; NaN stays NaN (quiet bit forced).
  uint32_t u = __builtin_bit_cast(uint32_t, x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline float Exp(float x) { return __builtin_expf(x); }

template <typename T>
inline T Min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
inline T Max(T a, T b) {
  return a < b ? b : a;
}

}  // namespace tailor::kernels

// ---- loop unrolling --------------------------------------------------------
// Clang fully unrolls every loop with a compile-time trip count it deems
// small, and the JIT pays for that code in every later pass: the
// compile time of a kernel grows with its code after unrolling. Templates
// leave unrolling to the compiler where it pays (register-blocked inner
// loops whose accumulators must stay in registers, the staging copies of
// the GEMM) and mark the loops where it does not: loops run once per work
// item or block, loops whose body is already hundreds of instructions.
// A marked loop must cost no run time (bench/decode_bench,
// bench/moe_bench); some unrolled ones need their unrolling.
//   TAILOR_NO_UNROLL     keep the next loop a loop
//   TAILOR_UNROLL_BY(n)  unroll the next loop n times, not fully
#define TAILOR_PRAGMA(x) _Pragma(#x)
#define TAILOR_NO_UNROLL TAILOR_PRAGMA(clang loop unroll(disable))
#define TAILOR_UNROLL_BY(n) TAILOR_PRAGMA(clang loop unroll_count(n))

namespace tailor::kernels {

// Unwraps a parenthesized type: ParenType<void(T)>::type is T. Lets macros
// take template types whose arguments contain commas.
template <typename T>
struct ParenType;
template <typename T>
struct ParenType<void(T)> {
  using type = T;
};

}  // namespace tailor::kernels

// Defines the module's entry for kernel class KERNEL (parenthesized, so its
// template arguments may contain commas).
#define TAILOR_CPU_ENTRY(KERNEL)                                             \
  extern "C" void tailor_entry(const void* params,                           \
                               ::tailor::kernels::int64_t begin,             \
                               ::tailor::kernels::int64_t end) {             \
    using Kernel = typename ::tailor::kernels::ParenType<void KERNEL>::type; \
    const auto& p = *static_cast<const typename Kernel::Params*>(params);    \
    for (::tailor::kernels::int64_t item = begin; item < end; ++item)        \
      Kernel::Run(p, item);                                                  \
  }

#endif  // TAILOR_RUNTIME_CPU_TAILOR_CPU_H_
