// runtime/hip/mfma.h — CDNA matrix cores (MFMA) for bf16, and the LDS tile
// layout the MFMA kernels read them from, with the bank model it is built
// on.
//
// Contract: device-only code for hiprtc, gfx90a or gfx94x (MFMA with the
// bf16 "_1k" instructions). Header-only, no standard headers.
//
// ---- MFMA: v_mfma_f32_16x16x16bf16_1k (gfx940: v_mfma_f32_16x16x16_bf16) --
// D[16 x 16] (f32) += A[16 x 16] . B[16 x 16] (bf16), one wave (64 lanes).
// For lane l, with r = l % 16 and q = l / 16 (0..3):
//   A: 4 bf16 = A[r][4q .. 4q + 3]            (row r, four k)
//   B: 4 bf16 = B[4q .. 4q + 3][r]            (four k, column r)
//   D: 4 f32  = D[4q + i][r], i = 0..3        (four rows, column r)
// For C = A . W^T with A [M, K] and W [N, K] both K-contiguous, the A and B
// operands of a lane are both "row r of its 16-row block, 4 consecutive k":
// one 8-byte load each.
//
// K order: the reduction is a sum over k, so any permutation of k that the
// A and B operands share gives the same D. The kernels load 8 consecutive k
// (16 bytes) per lane for two MFMAs: over a 32-k block, lane group q holds
// k = 8q .. 8q + 7; the first MFMA takes k = 8q .. 8q + 3 (the low half of
// the A and B registers), the second 8q + 4 .. 8q + 7 (the high half).
// Every k of the block is used once, by the same lane group in A and B.
//
// ---- LDS bank model (used for every LDS layout of the HIP kernels) -------
// CDNA LDS (gfx90a, gfx94x): 32 banks of 4 bytes, 128 bytes per clock per
// CU. A ds_read / ds_write of W bytes per lane is served in phases of
// 128 / W consecutive lanes (b32: 32 lanes, b64: 16, b128: 8). A phase is
// conflict-free when its lanes hit distinct W-byte bank slots
// ((address / W) mod (128 / W) all different) or the same address
// (broadcast); otherwise it takes as many passes as the most lanes on one
// slot. (This is the model AMD's LDS documentation and its compilers'
// swizzle rules describe for these instructions; it has not been measured
// here, where no AMD GPU is available.)
//
// ---- The swizzled tile (rows of 128 bytes = 64 bf16) ----------------------
// 16-byte chunk c (k = 8c .. 8c + 7) of row r sits at
//   r * 128 + ((c ^ (r % 8)) * 16)
// Writes (ds_write_b128): 8 consecutive lanes write the 8 chunks of one row
// -> 8 distinct slots (XOR by a constant permutes them). Reads
// (ds_read_b128): the 8 lanes of a phase read the same logical chunk of 8
// consecutive rows (lanes 0-7: rows 0-7, 8-15: rows 8-15 of the 16-row
// block) -> chunk c ^ (r % 8) takes 8 distinct values. Both conflict-free.
// Without the swizzle every row starts in bank 0 and a read phase is an
// 8-way conflict.
#ifndef TAILOR_RUNTIME_HIP_MFMA_H_
#define TAILOR_RUNTIME_HIP_MFMA_H_

#include "runtime/hip/wave.h"

namespace tailor::hip {

// gfx908 (MI100) has MFMA but not the bf16 "_1k" instructions. A kernel that
// uses them must static_assert this: otherwise LLVM aborts the process in
// instruction selection ("Cannot select: intrinsic
// llvm.amdgcn.mfma.f32.16x16x16bf16.1k"), taking hiprtc's caller with it.
// The host glue sends gfx908 to the SIMT kernels (HasMfmaBf16).
#if defined(__gfx908__)
inline constexpr bool kHasMfmaBf16 = false;
#else
inline constexpr bool kHasMfmaBf16 = true;
#endif

}  // namespace tailor::hip

namespace tailor::hip {

typedef short Bf16x4 __attribute__((ext_vector_type(4)));
typedef float Floatx4 __attribute__((ext_vector_type(4)));

// Eight bf16 (one 16-byte LDS chunk) as the operands of two MFMAs.
struct Bf16x8 {
  Bf16x4 lo;  // k = 8q .. 8q + 3
  Bf16x4 hi;  // k = 8q + 4 .. 8q + 7
};

// d += a . b for one 16x16x16 bf16 tile (see the file comment).
TAILOR_HIP_DEVICE Floatx4 Mfma16x16x16Bf16(Floatx4 d, Bf16x4 a, Bf16x4 b) {
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, d, 0, 0, 0);
}

// d += a . b over a 32-k block held as 16-byte chunks (two MFMAs).
TAILOR_HIP_DEVICE Floatx4 Mfma16x16x32Bf16(Floatx4 d, const Bf16x8& a,
                                           const Bf16x8& b) {
  d = Mfma16x16x16Bf16(d, a.lo, b.lo);
  return Mfma16x16x16Bf16(d, a.hi, b.hi);
}

// Bytes of one swizzled tile row (64 bf16) and of one chunk.
inline constexpr int kTileRowBytes = 128;
inline constexpr int kChunkBytes = 16;

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a swizzled
// tile (see the file comment).
TAILOR_HIP_DEVICE constexpr int SwizzledChunk(int row, int chunk) {
  return row * kTileRowBytes + ((chunk ^ (row % 8)) * kChunkBytes);
}

// 16 bytes from LDS (one ds_read_b128: `lds` is 16-byte aligned) as two
// MFMA operands.
TAILOR_HIP_DEVICE Bf16x8 LoadChunk(const unsigned char* lds) {
  typedef short Vector8 __attribute__((ext_vector_type(8)));
  const Vector8 v = *reinterpret_cast<const Vector8*>(lds);
  return Bf16x8{__builtin_shufflevector(v, v, 0, 1, 2, 3),
                __builtin_shufflevector(v, v, 4, 5, 6, 7)};
}

}  // namespace tailor::hip

#endif  // TAILOR_RUNTIME_HIP_MFMA_H_
