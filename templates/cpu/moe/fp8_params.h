// templates/cpu/moe/fp8_params.h — params of the FP8 (e4m3) MoE CPU kernels:
// the quantizing Pack and the dequantizing grouped GEMM. The one definition
// the host glue fills and the templates (moe/fp8_pack.h,
// moe/fp8_grouped_gemm.h) read.
//
// Contract: plain C++ that compiles both as host code (g++) and as JIT code
// (Clang, no system headers).
//
// Scale modes (how A [R, K] and W [E, N, K], both e4m3, are scaled; all
// scales f32, in the layouts the checkpoints and vLLM use):
//   block        A 1 x 128: a_scales [ceil(K / 128), a_scale_rows], K-block
//                major (the layout the Hopper GEMM's TMA loads; a_scale_rows
//                >= R); W 128 x 128: w_scales [E, ceil(N / 128),
//                ceil(K / 128)] (DeepSeek-V3, Qwen3 FP8)
//   per tensor   a_scales [1]; w_scales [E], one per expert
//   per channel  a_scales [R], one per row (per token); w_scales [E, N], one
//                per output channel
// Dequantized: A[r, k] = a[r, k] * sa(r, k), W[e, n, k] = w[e, n, k] *
// sw(e, n, k); a ragged last block (K or N not a multiple of 128) is
// smaller, with a scale of its own.
#ifndef TAILOR_TEMPLATES_CPU_MOE_FP8_PARAMS_H_
#define TAILOR_TEMPLATES_CPU_MOE_FP8_PARAMS_H_

#include "runtime/cpu/types.h"
#include "templates/cpu/moe/params.h"

namespace tailor::kernels {

inline constexpr int kMoeFp8ScaleBlock = 0;
inline constexpr int kMoeFp8ScalePerTensor = 1;
inline constexpr int kMoeFp8ScalePerChannel = 2;
// Elements per scale block along K (and along N for weights).
inline constexpr int kMoeFp8Block = 128;

// Epilogue of the gate/up GEMM that quantizes its silu_and_mul output for
// the down projection (block mode): c e4m3 [R, N / 2] and c_scales
// [ceil(N / 2 / 128), c_scale_rows] in the A-scale layout above.
inline constexpr int kMoeEpilogueSiluAndMulQuant = 2;

// W rows per N tile of the FP8 grouped GEMM (work item i of a launch is (N
// tile i / num_work, plan item i % num_work)): as the bf16 kernel, except
// the quantizing epilogue, whose tile is one 128-output scale group (its
// gate and up rows).
inline constexpr int kMoeFp8GemmTileN = 32;
inline constexpr int kMoeFp8GemmQuantTileN = 2 * kMoeFp8Block;

struct MoeFp8GroupedGemmParams {
  const uint8_t* a;         // [R, K] e4m3, expert-sorted rows
  const float* a_scales;    // by scale mode (above)
  const uint8_t* w;         // [E, N, K] e4m3
  const float* w_scales;    // by scale mode (above)
  void* c;                  // [R, N] or [R, N / 2]: T, or e4m3 (quantized)
  float* c_scales;          // quantized epilogue: [ceil(N/2/128), c_scale_rows]
  const MoeWorkItem* work;  // [num_work] this variant's plan items
  int64_t num_work;
  int64_t a_scale_rows;  // block mode: a_scales' row count (>= R)
  int64_t c_scale_rows;  // quantized epilogue: c_scales' row count (>= R)
};

// Activation quantization of the quantizing Pack (a scale mode of A).
inline constexpr int kMoeFp8PackGroups = 0;    // 1 x 128: block mode's A
inline constexpr int kMoeFp8PackPerToken = 1;  // one scale a row
inline constexpr int kMoeFp8PackStatic = 2;    // a given per-tensor scale

// One work item per row r of a: a[r, :] = quantize(hidden[permutation[r] /
// topk, :]), its scales by mode: groups, a_scales[g * scale_rows + r];
// per token, a_scales[r]; static, q = e4m3(x / static_scale[0]) and no
// scale is written. Rows whose entry is outside [0, tokens * topk) are left
// untouched.
struct MoeFp8PackParams {
  const void* hidden;          // [T, H] T
  const int32_t* permutation;  // [R] flat assignment index per row
  uint8_t* a;                  // [R, H] e4m3
  float* a_scales;             // by mode (above)
  const float* static_scale;   // [1] (static mode)
  int64_t topk;
  int64_t tokens;
  int64_t scale_rows;  // groups mode: a_scales' row count (>= R)
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_FP8_PARAMS_H_
