// runtime/cuda/wgmma_fp8.cuh — Hopper warpgroup MMA on e4m3 operands
// (wgmma ...k32.f32.e4m3.e4m3) and the register fences that keep a wgmma's
// accumulators apart from the code that reads them.
//
// Contract: device-only code for NVRTC, sm_90a. Header-only, no standard
// headers.
//
// Operands: K-major e4m3 tiles in shared memory written by TMA with the
// 128-byte swizzle, rows of 128 elements (128 bytes), 8-row atoms of 1024
// bytes, the tile 1024-byte aligned: byte for byte the layout of
// runtime/cuda/wgmma.cuh's bf16 tiles, so SwizzledKMajorDescriptor describes
// them and one k32 step (32 bytes along the row) adds 2 to its address field.
// 8-bit operands must be K-major (wgmma has no transpose for them).
//
// Accumulators: f32, the layout of wgmma.cuh (m64nN: N / 2 registers per
// thread; warp w owns rows 16w..16w+15; lane 4g + t holds d[4j + 2h + x] =
// D[16w + g + 8h][8j + 2t + x]).
//
// Precision: the tensor cores add e4m3 products into the f32 accumulator
// with fewer mantissa bits than f32 (about 14 on Hopper), so block-scaled
// GEMMs start a fresh accumulator every 128-K block (accumulate = false on its
// first k32 step) and add it, scaled, into an f32 register sum ("promotion").
//
// Reading an accumulator after WgmmaWait: call FenceAccumulators on it first.
// The fence ties the registers to the wait (asm volatile statements keep their
// order), so the compiler cannot move a read of them above the wait; fence
// them again before the next wgmma that writes them.
//
// PTX used (PTX ISA 8.0+, sm_90a): wgmma.mma_async (m64nNk32, N in {8, 16,
// 32, 128}, .f32.e4m3.e4m3).
#ifndef TAILOR_RUNTIME_CUDA_WGMMA_FP8_CUH_
#define TAILOR_RUNTIME_CUDA_WGMMA_FP8_CUH_

#include "runtime/cuda/wgmma.cuh"

namespace tailor::cuda {

// Orders every register of `d` against the wgmma fences and waits around it.
template <int kN>
TAILOR_DEVICE void FenceAccumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x N, f32) = a (64 x 32, smem) * b (N x 32, smem)^T + (accumulate ?
// d : 0), e4m3 operands, for the whole warpgroup.
TAILOR_DEVICE void WgmmaM64N8K32E4m3(float (&d)[4], unsigned long long a,
                                     unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %6, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

TAILOR_DEVICE void WgmmaM64N16K32E4m3(float (&d)[8], unsigned long long a,
                                      unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %10, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

TAILOR_DEVICE void WgmmaM64N32K32E4m3(float (&d)[16], unsigned long long a,
                                      unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %18, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

TAILOR_DEVICE void WgmmaM64N128K32E4m3(float (&d)[64], unsigned long long a,
                                       unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %66, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),
        "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
        "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// The swap-AB kernels' few token columns: N = 8, 16 or 32.
template <int kN>
TAILOR_DEVICE void WgmmaM64NSmallK32E4m3(float (&d)[kN / 2],
                                         unsigned long long a,
                                         unsigned long long b,
                                         bool accumulate) {
  static_assert(kN == 8 || kN == 16 || kN == 32, "N is 8, 16 or 32");
  if constexpr (kN == 8) {
    WgmmaM64N8K32E4m3(d, a, b, accumulate);
  } else if constexpr (kN == 16) {
    WgmmaM64N16K32E4m3(d, a, b, accumulate);
  } else {
    WgmmaM64N32K32E4m3(d, a, b, accumulate);
  }
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_WGMMA_FP8_CUH_
