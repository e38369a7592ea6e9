// templates/cpu/moe/params.h — params of the MoE CPU kernels, the one
// definition that the host glue (src/backends/cpu/moe/kernels.cc) fills and
// the templates (moe_pack.h, moe_grouped_gemm.h, moe_combine.h) read.
//
// Contract: plain C++ that compiles both as host code (g++) and as JIT code
// (Clang, no system headers). Element pointers are void: the templates cast
// them to their element type T (float or bf16).
#ifndef TAILOR_TEMPLATES_CPU_MOE_PARAMS_H_
#define TAILOR_TEMPLATES_CPU_MOE_PARAMS_H_

#include "runtime/cpu/types.h"

namespace tailor::kernels {

// One unit of the host plan: a core tile or a tail piece of one expert. The
// layout of plan::WorkItem (src/plan/piecewise_plan.h), checked there.
struct MoeWorkItem {
  int32_t row_begin;   // first global row of the piece
  int32_t rows;        // rows in the piece: tile rows (core) or 1..class (tail)
  int32_t group;       // expert
  int32_t tail_class;  // 0 (core) or the tail class
};

// Epilogues of the grouped GEMM (SpecKey::variant).
inline constexpr int kMoeEpilogueNone = 0;
inline constexpr int kMoeEpilogueSiluAndMul = 1;

// W rows per N tile of the grouped GEMM: work item i of a launch is (N tile
// i / num_work, plan item i % num_work).
inline constexpr int kMoeGroupedGemmTileN = 32;

// One work item per row r of a: a[r, :] = hidden[permutation[r] / topk, :].
struct MoePackParams {
  const void* hidden;          // [T, H]
  const int32_t* permutation;  // [R] flat assignment index per row
  void* a;                     // [R, H]
  int64_t topk;                // k
};

// One launch runs one plan variant (core or one tail class).
struct MoeGroupedGemmParams {
  const void* a;            // [R, K] expert-sorted rows
  const void* w;            // [E, N, K]
  void* c;                  // [R, N] or [R, N / 2] (silu_and_mul)
  const MoeWorkItem* work;  // [num_work] this variant's plan items
  int64_t num_work;
};

// One work item per token.
struct MoeCombineParams {
  const void* c;           // [R, H] expert-sorted rows
  const float* weights;    // [T, topk]
  const int32_t* inverse;  // [T, topk] row of c per slot, -1: not local
  void* out;               // [T, H]
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_PARAMS_H_
