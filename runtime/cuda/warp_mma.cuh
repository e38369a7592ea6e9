// runtime/cuda/warp_mma.cuh — warp-level tensor-core MMA, ldmatrix and
// cp.async (sm_80 and newer), plus the small conversions around them.
//
// Contract: device-only code for NVRTC, sm_80 or newer. Header-only, no host
// code, no framework or standard headers.
//
// Fragments of mma.m16n8k16 (row.col), lane = threadIdx.x % 32, every
// register holds two 16-bit values (the lower column / row in the low half):
//   A (16 x 16, row major): a[0] (lane/4,     2*(lane%4) + {0,1})
//                           a[1] (lane/4 + 8, 2*(lane%4) + {0,1})
//                           a[2] (lane/4,     2*(lane%4) + 8 + {0,1})
//                           a[3] (lane/4 + 8, 2*(lane%4) + 8 + {0,1})
//   B (16 x 8, k x n):      b0 (k = 2*(lane%4) + {0,1},     n = lane/4)
//                           b1 (k = 2*(lane%4) + 8 + {0,1}, n = lane/4)
//   C / D (16 x 8, f32):    c[0..1] (lane/4, 2*(lane%4) + {0,1})
//                           c[2..3] (lane/4 + 8, 2*(lane%4) + {0,1})
// LdMatrixX4 loads four 8x8 16-bit matrices; lanes 8i .. 8i+7 give the
// shared addresses of the 8 rows (16 bytes each) of matrix i, and register
// i receives matrix i as (row lane/4, cols 2*(lane%4) + {0,1}); the .trans
// form gives (rows 2*(lane%4) + {0,1}, col lane/4).
//
// PTX used (PTX ISA 7.0+, sm_80): mma.sync.aligned.m16n8k16 (bf16, f16),
// ldmatrix.sync.aligned.m8n8.x4(.trans), cp.async.cg.shared.global,
// cp.async.commit_group, cp.async.wait_group, cvt.rn.{bf16x2,f16x2}.f32,
// ex2.approx.ftz.f32.
#ifndef TAILOR_RUNTIME_CUDA_WARP_MMA_CUH_
#define TAILOR_RUNTIME_CUDA_WARP_MMA_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cp_async.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "runtime/cuda/warp_mma.cuh needs sm_80 or newer (bf16 mma, cp.async)"
#endif

namespace tailor::cuda {

// The 16-bit element types of the MMA.
enum class Half16 { kBf16, kF16 };

// d += a . b for one m16n8k16 tile with f32 accumulation.
template <Half16 kType>
TAILOR_DEVICE void Mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                            unsigned b1) {
  if constexpr (kType == Half16::kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

TAILOR_DEVICE void LdMatrixX4(unsigned (&r)[4], unsigned smem_address) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_address)
      : "memory");
}

TAILOR_DEVICE void LdMatrixX4Trans(unsigned (&r)[4], unsigned smem_address) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_address)
      : "memory");
}

// Two f32 -> one register of two 16-bit values, rounded to nearest even;
// `lo` lands in the low half.
template <Half16 kType>
TAILOR_DEVICE unsigned Pack2(float lo, float hi) {
  unsigned out;
  if constexpr (kType == Half16::kBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  }
  return out;
}

// One register of two 16-bit values -> two f32 (`lo` from the low half):
// the inverse of Pack2, exact.
template <Half16 kType>
TAILOR_DEVICE void Unpack2(unsigned v, float& lo, float& hi) {
  if constexpr (kType == Half16::kBf16) {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  } else {
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n"
        " cvt.f32.f16 %1, h;}"
        : "=f"(lo), "=f"(hi)
        : "r"(v));
  }
}

// 2^x, ex2.approx (relative error < 2^-22; 2^-inf = +0).
TAILOR_DEVICE float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Copies 16 bytes global -> shared asynchronously (L2 only, .cg). Both
// addresses 16-byte aligned.
TAILOR_DEVICE void CpAsync16(unsigned smem_address, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address),
               "l"(GlobalAddress(global))
               : "memory");
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_WARP_MMA_CUH_
