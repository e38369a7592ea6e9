// runtime/cuda/wgmma.cuh — Hopper warpgroup MMA (wgmma) from shared memory,
// register budgets (setmaxnreg), and the shared-memory matrix descriptor.
//
// Contract: device-only code for NVRTC, sm_90a. Header-only, no standard
// headers.
//
// Operands are K-major tiles of bf16 in shared memory, written by TMA with
// the 128-byte swizzle: rows of 64 elements (128 bytes), 8-row atoms of 1024
// bytes, the tile 1024-byte aligned. Their descriptor (PTX ISA, "Matrix
// Descriptor Format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading byte offset >> 4   (unused for swizzled K-major: 1)
//   bits 32-45  stride byte offset >> 4    (between 8-row atoms: 1024 B)
//   bits 62-63  swizzle mode               (1: 128-byte swizzle)
// Stepping K by 16 elements inside the 128-byte row adds 32 bytes to the
// start address; the hardware applies the swizzle to the final address.
//
// Accumulator layout of m64nNk16 (f32, N / 2 registers per thread): warp w of
// the warpgroup owns rows 16w..16w+15; for lane = 4g + t and n8 group j,
//   d[4j + 0..1] = D[16w + g][8j + 2t .. +1]
//   d[4j + 2..3] = D[16w + g + 8][8j + 2t .. +1]
//
// PTX used (PTX ISA 8.0+, sm_90a): wgmma.fence, wgmma.mma_async
// (m64nNk16, N in {8, 16, 32, 128, 256}, .f32.bf16.bf16), wgmma.commit_group,
// wgmma.wait_group, setmaxnreg.
#ifndef TAILOR_RUNTIME_CUDA_WGMMA_CUH_
#define TAILOR_RUNTIME_CUDA_WGMMA_CUH_

#include "runtime/cuda/arch.cuh"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90A)
#error "runtime/cuda/wgmma.cuh needs the arch-specific sm_90a target (wgmma, setmaxnreg)"
#endif

namespace tailor::cuda {

// Descriptor of a K-major, 128-byte-swizzled bf16 tile at `smem` (1024-byte
// aligned, or an address inside one advanced along K by 32-byte steps).
TAILOR_DEVICE unsigned long long SwizzledKMajorDescriptor(const void* smem) {
  const unsigned long long address = SharedAddress(smem);
  return ((address & 0x3ffff) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

// Orders earlier register writes (e.g. of accumulators) before the next
// wgmma of this warpgroup.
TAILOR_DEVICE void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// Closes the group of wgmma issued since the last commit.
TAILOR_DEVICE void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most kPending committed wgmma groups are in flight.
template <int kPending>
TAILOR_DEVICE void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// d (64 x N, f32) = a (64 x 16, smem) * b (N x 16, smem)^T + (accumulate ?
// d : 0), for the whole warpgroup, N = 8, 16, 32: the swap-AB kernel's few
// token columns (WgmmaM64NSmallK16 picks one by N).
TAILOR_DEVICE void WgmmaM64N8K16(float (&d)[4], unsigned long long a,
                                  unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %6, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

TAILOR_DEVICE void WgmmaM64N16K16(float (&d)[8], unsigned long long a,
                                  unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %10, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

TAILOR_DEVICE void WgmmaM64N32K16(float (&d)[16], unsigned long long a,
                                  unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %18, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

template <int kN>
TAILOR_DEVICE void WgmmaM64NSmallK16(float (&d)[kN / 2], unsigned long long a,
                                     unsigned long long b, bool accumulate) {
  static_assert(kN == 8 || kN == 16 || kN == 32, "N is 8, 16 or 32");
  if constexpr (kN == 8) {
    WgmmaM64N8K16(d, a, b, accumulate);
  } else if constexpr (kN == 16) {
    WgmmaM64N16K16(d, a, b, accumulate);
  } else {
    WgmmaM64N32K16(d, a, b, accumulate);
  }
}

// d (64 x 128, f32) = a (64 x 16, smem) * b (128 x 16, smem)^T + (accumulate
// ? d : 0), for the whole warpgroup.
TAILOR_DEVICE void WgmmaM64N128K16(float (&d)[64], unsigned long long a,
                                   unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %66, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// d (64 x 256, f32) = a (64 x 16, smem) * b (256 x 16, smem)^T + (accumulate
// ? d : 0), for the whole warpgroup.
TAILOR_DEVICE void WgmmaM64N256K16(float (&d)[128], unsigned long long a,
                                   unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %130, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// Raises (kIncrease) or lowers this warpgroup's register budget to kRegisters
// (a multiple of 8 in [24, 256]). Takes effect only when the kernel has a
// register cap at entry (__launch_bounds__ with a minimum of 1 block).
template <int kRegisters>
TAILOR_DEVICE void SetMaxRegistersIncrease() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
TAILOR_DEVICE void SetMaxRegistersDecrease() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_WGMMA_CUH_
