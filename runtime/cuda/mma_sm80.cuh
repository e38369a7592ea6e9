// runtime/cuda/mma_sm80.cuh — warp-level tensor-core MMA, ldmatrix and
// cp.async for sm_80 and newer (the portable GEMM path).
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
//
// Fragment layouts of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane = 4 * g + t
// (g = lane / 4 in 0..7, t = lane % 4 in 0..3):
//   A 16x16 (row-major, 4 regs of bf16x2):
//     a[0] = A[g][2t..2t+1]      a[1] = A[g+8][2t..2t+1]
//     a[2] = A[g][2t+8..2t+9]    a[3] = A[g+8][2t+8..2t+9]
//   B 16x8 given as Bt 8x16 (n rows, k contiguous; 2 regs of bf16x2):
//     b[0] = Bt[g][2t..2t+1]     b[1] = Bt[g][2t+8..2t+9]
//   C/D 16x8 (f32, 4 regs):
//     c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
// ldmatrix.x4 gives exactly these: lanes 8i..8i+7 pass the row addresses of
// 8x8 matrix i, and register i of every lane receives matrix i's fragment
// (row lane / 4, columns 2 * (lane % 4) .. +1).
//
// PTX used (PTX ISA 7.0+, sm_80): cp.async.cg.shared.global (16 bytes, with
// src-size for zero fill), cp.async.commit_group, cp.async.wait_group,
// ldmatrix.sync.aligned.m8n8.{x2,x4}.shared.b16, mma.sync.aligned.m16n8k16 (bf16
// and f16).
#ifndef TAILOR_RUNTIME_CUDA_MMA_SM80_CUH_
#define TAILOR_RUNTIME_CUDA_MMA_SM80_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cp_async.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "runtime/cuda/mma_sm80.cuh needs sm_80 or newer (cp.async, bf16 mma)"
#endif

namespace tailor::cuda {

// Copies 16 bytes from global `src` to shared `dst` asynchronously; when
// `valid` is false nothing is read and the 16 bytes are zero-filled (src
// must still be a mapped address: pass any in-bounds one).
TAILOR_DEVICE void CpAsync16(void* dst, const void* src, bool valid) {
  const unsigned src_size = valid ? 16 : 0;
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(SharedAddress(dst)),
      "l"(GlobalAddress(src)), "r"(src_size)
      : "memory");
}

// Four 8x8 b16 matrices from shared memory (see the file comment).
TAILOR_DEVICE void LdMatrixX4(unsigned (&r)[4], const void* row_address) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SharedAddress(row_address)));
}

// Two 8x8 b16 matrices: lanes 0-7 and 8-15 pass the row addresses of
// matrices 0 and 1 (the other lanes' addresses are unused).
TAILOR_DEVICE void LdMatrixX2(unsigned (&r)[2], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SharedAddress(row_address)));
}

// d += a * b for one m16n8k16 bf16 tile with f32 accumulators.
TAILOR_DEVICE void MmaBf16(float (&d)[4], const unsigned (&a)[4],
                           const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b for one m16n8k16 f16 tile with f32 accumulators (the same
// fragment layouts with f16x2 registers).
TAILOR_DEVICE void MmaF16(float (&d)[4], const unsigned (&a)[4],
                          const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_MMA_SM80_CUH_
