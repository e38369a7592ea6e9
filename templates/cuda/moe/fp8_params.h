// templates/cuda/moe/fp8_params.h — params and launch shapes of the FP8
// (e4m3) MoE kernels: the quantizing Pack, the block-scaled Hopper grouped
// GEMM and the portable (sm_80+) one. The one definition the host glue
// fills and the templates read.
//
// Contract: plain C++ that compiles both as host code (g++) and as device
// code (NVRTC, -default-device): no CUDA keywords, no standard headers.
//
// Data layouts (block scaling, DeepSeek-V3 / Qwen3 FP8 checkpoints):
//   W         e4m3 [E, N, K], nn.Linear layout (K contiguous)
//   W scales  f32  [E, N / 128, K / 128]: one per 128 x 128 block, as shipped
//   A         e4m3 [R, K], expert-sorted rows
//   A scales  f32  [K / 128, scale_rows]: one per row and 128-K block, K-block
//             major (the rows of one K block contiguous), scale_rows = R
//             rounded up to kMoeFp8ScaleRowAlign, so the GEMM loads a tile's
//             scales of one K block with one TMA box (MoeFp8ScaleBoxRows)
// Dequantized: A[r, k] = a[r, k] * sa[k / 128, r], W[e, n, k] = w[e, n, k] *
// sw[e, n / 128, k / 128]. Block mode needs K % 128 == 0 and N % 128 == 0
// (gated: N / 2 % 128 == 0), the shapes those checkpoints have.
//
// The other scale modes (moe::ScaleMode), scales constant along K, so they
// are applied once to the f32 accumulators before the epilogue:
//   per tensor   sa [1] (static), sw [E]:      A W^T x sa[0] x sw[e]
//   per channel  sa [R] (per row), sw [E, N]:  x sa[r] x sw[e, n]
// The kernels take the same K and N multiples in every mode.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_PARAMS_H_

#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

// K (and N) elements per scale block; the GEMM's K per stage is one block.
inline constexpr int kMoeFp8Block = 128;
// Rows of the A-scale matrix are padded to this many (16-byte TMA strides).
inline constexpr int kMoeFp8ScaleRowAlign = 4;
constexpr long long MoeFp8ScaleRows(long long rows) {
  return (rows + kMoeFp8ScaleRowAlign - 1) / kMoeFp8ScaleRowAlign *
         kMoeFp8ScaleRowAlign;
}
// A TMA box must start 16 bytes aligned in its innermost dimension (else the
// copy is an illegal instruction), and an expert's rows start anywhere: the
// A-scale box of a tile whose first row is r starts at
// MoeFp8ScaleBoxStart(r) and spans the tile's A rows plus the shift
// (r - start < kMoeFp8ScaleRowAlign).
constexpr int MoeFp8ScaleBoxStart(int row_begin) {
  return row_begin - row_begin % kMoeFp8ScaleRowAlign;
}
constexpr int MoeFp8ScaleBoxRows(int a_rows) {
  return a_rows + kMoeFp8ScaleRowAlign;
}

// Scale modes (moe::ScaleMode's values).
inline constexpr int kMoeFp8PerTensor = 1;
inline constexpr int kMoeFp8PerChannel = 2;
inline constexpr int kMoeFp8BlockScaled = 3;

// Epilogue of the gate/up GEMM that quantizes its silu_and_mul output for the
// down projection: c is e4m3 [R, N / 2] and, in block mode, c_scales f32
// [N / 256, c_scale_rows] in the A-scale layout above (the down GEMM's
// input); per tensor, c = e4m3(out / c_scale[0]) (a static scale).
inline constexpr int kMoeEpilogueSiluAndMulQuant = 2;

// Quantizing Pack: a[r, :] = e4m3(hidden[permutation[r] / topk, :] / scale)
// (rows_in_order: hidden[r, :], rows already expert-sorted, e.g. the down
// projection's bf16 input) with one scale per 128 columns, per row (per
// channel mode: per-token scales) or the static static_scale[0] (per
// tensor), by runtime/cuda/fp8.cuh's rule, for entries in [0, tokens *
// topk); other rows are left untouched.
struct MoeFp8PackParams {
  const void* hidden;         // [tokens, H] bf16 ([rows, H]: rows_in_order)
  const int* permutation;     // [rows]
  void* a;                    // [rows, H] e4m3
  float* a_scales;            // block: [H / 128, scale_rows]; per token: [rows]
  const float* static_scale;  // per tensor: [1]
  int rows;
  int tokens;
  int topk;
  int hidden_dim;     // H (generic)
  int scale_rows;     // MoeFp8ScaleRows(capacity of a)
  int rows_in_order;  // 1: row r reads hidden[r, :]
};
// Pack: warps of kMoeFp8PackGroupsPerWarp groups (8 lanes x 16 elements
// each), grid (rows, ceil(H / 128 / groups per block)); per token (grid
// (rows, 1)) the CTA's 128 lanes walk the row in 2048-column strides.
inline constexpr int kMoeFp8PackThreads = 128;
inline constexpr int kMoeFp8PackLanesPerGroup = 8;
inline constexpr int kMoeFp8PackGroupsPerWarp = 32 / kMoeFp8PackLanesPerGroup;
inline constexpr int kMoeFp8PackGroupsPerBlock =
    kMoeFp8PackThreads / 32 * kMoeFp8PackGroupsPerWarp;

// The block-scaled Hopper grouped GEMM (moe/fp8_grouped_gemm_sm90.cuh). TMA
// maps, encoded once per tensor (descriptor pool):
//   a_map        2D {K, rows of A} e4m3, box {128, MoeSm90ARows(tile rows)},
//                128-byte swizzle
//   w_map        2D {K, E * N} e4m3, box {128, 64}, 128-byte swizzle
//   a_scale_map  block mode: 2D {scale_rows, K / 128} f32, box
//                {MoeFp8ScaleBoxRows(MoeSm90ARows(tile rows)), 1}, no swizzle
// The tiles, work list, schedule and split-K are the bf16 kernel's
// (MoeGroupedGemmSm90Params): same CTA tiles, same W boxes, same units.
struct MoeFp8GemmSm90Params {
  TensorMap a_map;
  TensorMap w_map;
  TensorMap a_scale_map;
  const float* w_scales;  // [E, N / 128, K / 128] | [E] | [E, N]
  const float* a_scales;  // per tensor [1] | per channel [R]; block: unused
  void* c;                // bf16 [R, N] or [R, N / 2]; e4m3 when quantized
  float* c_scales;        // block: [N / 256, c_scale_rows] (quantized)
  const float* c_scale;   // per tensor, quantized: [1] static
  int c_scale_rows;
  const MoeWorkItem* work;  // [max_work]
  MoeRouteHeader* header;   // num_work; the dynamic scheduler's counters
  int n;                    // N (generic)
  int k;                    // K (generic)
  int dynamic_schedule;     // 1: CTAs take tiles in order from a counter
  int expert_groups;        // raster group bounds (kMoeGroups*)
  int split_k;              // as MoeGroupedGemmSm90Params
  float* partials;
  int* split_arrivals;
  int max_work;
};

// Stage of the ring: the A tile (a_rows x 128 bytes), 4 W boxes (64 rows x
// 128 bytes each), the A-scale box of the K block (MoeFp8ScaleBoxRows
// floats); each stage starts 1024-byte aligned (the swizzle atom).
inline constexpr int kMoeFp8WBoxBytes = kMoeSm90BoxRows * kMoeFp8Block;
constexpr int MoeFp8StageTxBytes(int a_rows) {
  return a_rows * kMoeFp8Block + 4 * kMoeFp8WBoxBytes +
         MoeFp8ScaleBoxRows(a_rows) * 4;
}
constexpr int MoeFp8StageBytes(int a_rows) {
  return (MoeFp8StageTxBytes(a_rows) + 1023) / 1024 * 1024;
}
// As many stages as fit in a Hopper CTA beside the barriers: 4 x 49 KiB (128
// rows), 5 x 41 KiB (64 rows), 6 x at most 37 KiB (swap-AB).
constexpr int MoeFp8Stages(int a_rows) {
  return a_rows <= kMoeSm90SwapMaxRows ? 6 : a_rows <= 64 ? 5 : 4;
}
// Stages, 1 KiB for the ring, 1 KiB for the epilogue's exchange between the
// consumers, 1 KiB of alignment slack.
constexpr int MoeFp8SharedBytes(int a_rows) {
  return MoeFp8Stages(a_rows) * MoeFp8StageBytes(a_rows) + 3072;
}
static_assert(MoeFp8SharedBytes(kMoeSm90SwapMaxRows) <= 227 * 1024 &&
                  MoeFp8SharedBytes(64) <= 227 * 1024 &&
                  MoeFp8SharedBytes(128) <= 227 * 1024,
              "a Hopper CTA has at most 227 KiB of dynamic shared memory");

// The portable (sm_80+) FP8 grouped GEMM (moe/fp8_grouped_gemm_sm80.cuh):
// the bf16 mma.sync kernel's A, W, C, work list and dims (`gemm`, with a and
// w e4m3) and the scales as in MoeFp8GemmSm90Params; A's block scales are
// read from `a_scales` [K / 128, a_scale_rows] directly (no TMA).
struct MoeFp8GemmParams {
  MoeGroupedGemmParams gemm;
  const float* a_scales;  // block [K / 128, a_scale_rows] | [1] | [R]
  const float* w_scales;  // [E, N / 128, K / 128] | [E] | [E, N]
  float* c_scales;        // block, quantized: [N / 256, c_scale_rows]
  const float* c_scale;   // per tensor, quantized: [1] static
  int a_scale_rows;
  int c_scale_rows;
};
// Its ring is the bf16 kernel's (128-byte rows: 128 e4m3 K per stage); the
// quantizing epilogue adds the f32 outputs of the first of the two N tiles
// of a 128-column scale group (the second's reuse the drained ring) and
// runs one stage fewer, so its CTA fits the 99 KiB of sm_86 / sm_89.
constexpr int MoeFp8MmaStages(bool quantized) {
  return quantized ? kMoeMmaStages - 1 : kMoeMmaStages;
}
constexpr int MoeFp8MmaSharedBytes(int tile_rows, bool quantized) {
  const int cta_rows = MoeGemmCtaRows(tile_rows);
  return MoeFp8MmaStages(quantized) * (cta_rows + kMoeMmaWRows) * kMoeFp8Block +
         (quantized ? cta_rows * kMoeFp8Block / 2 * 4 : 0);
}
static_assert(MoeFp8MmaSharedBytes(kMoePortableMaxRows, true) <= 99 * 1024 &&
                  MoeFp8MmaSharedBytes(kMoePortableMaxRows, false) <= 99 * 1024,
              "sm_86 and sm_89 CTAs have at most 99 KiB of shared memory");

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_PARAMS_H_
