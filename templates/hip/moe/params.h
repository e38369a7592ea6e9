// templates/hip/moe/params.h — launch shapes of the MoE HIP kernels, the one
// definition that the host glue (src/backends/hip/moe/kernels.cc) and the
// templates (templates/hip/moe/*.h) agree on.
//
// Contract: plain C++ that compiles as host code (g++) and as device code
// (hiprtc): no HIP keywords, no standard headers.
//
// The params structs, the device work list and the route header are the
// ones every GPU shares (templates/common/moe/params.h): Route, Pack and
// Combine are one source for CUDA and HIP. What differs on AMD is below:
// 64-lane waves, 64 KiB of LDS per work-group, MFMA tiles.
#ifndef TAILOR_TEMPLATES_HIP_MOE_PARAMS_H_
#define TAILOR_TEMPLATES_HIP_MOE_PARAMS_H_

#include "templates/common/moe/params.h"

namespace tailor::hip {

using ::tailor::gpu::kMoeEpilogueSiluAndMul;
using ::tailor::gpu::kMoeMaxTileRows;
using ::tailor::gpu::kMoeRouteSegment;
using ::tailor::gpu::MoeCombineParams;
using ::tailor::gpu::MoeGroupedGemmParams;
using ::tailor::gpu::MoePackParams;
using ::tailor::gpu::MoeRouteHeader;
using ::tailor::gpu::MoeRouteParams;
using ::tailor::gpu::MoeWorkItem;

// LDS per work-group on CDNA (gfx90a, gfx94x); what one launch may use.
inline constexpr long long kHipLdsBytes = 64 * 1024;

// ---- Route ------------------------------------------------------------------
// The shared Route (templates/cuda/moe/route.cuh) on 64-lane waves: its
// count(+plan) and fused blocks are kMoeRouteCountThreads (4 waves); the
// scatter runs `waves` waves a block, its LDS (1 + waves) ints per local
// expert, within the LDS left beside the kernels' static arrays.
inline constexpr int kHipWaveLanes = 64;
inline constexpr long long kHipRouteLdsBudget = kHipLdsBytes - 1024;
constexpr int HipRouteScatterWaves(long long experts) {
  return (1 + 4) * 4 * experts <= kHipRouteLdsBudget   ? 4
         : (1 + 2) * 4 * experts <= kHipRouteLdsBudget ? 2
                                                       : 1;
}
// The most local experts the scatter's LDS holds (with 1 wave).
inline constexpr long long kHipMaxDeviceExperts = kHipRouteLdsBudget / 8;

// ---- Grouped GEMM -----------------------------------------------------------
// MFMA kernel (bf16, K % 8 == 0): 4 waves; CTA tile = the tile rows rounded
// up to 16 (at most 64; a 128-row plan tile runs as two parts) x 128 W rows
// x 64 K, two LDS buffers (register-staged double buffering).
inline constexpr int kHipMfmaThreads = 256;
inline constexpr int kHipMfmaWRows = 128;
inline constexpr int kHipMfmaKTile = 64;  // 128-byte LDS rows
inline constexpr int kHipMfmaBuffers = 2;
inline constexpr int kHipGemmMaxRows = 64;
// SIMT kernel (f32, unaligned bf16): 16 x 16 threads, 64 W rows.
inline constexpr int kHipSimtThreads = 256;
inline constexpr int kHipSimtWRows = 64;

constexpr bool HipGemmUsesMfma(bool bf16, long long k) {
  return bf16 && k % 8 == 0;
}
// Rows one CTA computes: the tile rows rounded up to 16, at most 64.
constexpr int HipGemmCtaRows(int tile_rows) {
  return tile_rows >= kHipGemmMaxRows ? kHipGemmMaxRows
                                      : (tile_rows + 15) / 16 * 16;
}
// Output columns one CTA writes (gated: half its W rows).
constexpr int HipGemmOutPerCta(bool mfma, bool gated) {
  return (mfma ? kHipMfmaWRows : kHipSimtWRows) / (gated ? 2 : 1);
}
constexpr int HipGemmNTiles(bool mfma, bool gated, long long n) {
  const long long out = gated ? n / 2 : n;
  const int per_cta = HipGemmOutPerCta(mfma, gated);
  return static_cast<int>((out + per_cta - 1) / per_cta);
}
// Dynamic LDS of the MFMA kernel: two buffers of (A rows + W rows) x 128 B.
constexpr int HipMfmaLdsBytes(int tile_rows) {
  return kHipMfmaBuffers * (HipGemmCtaRows(tile_rows) + kHipMfmaWRows) *
         kHipMfmaKTile * 2;
}

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_MOE_PARAMS_H_
