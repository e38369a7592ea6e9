// ops/moe_kernels.h — build keys for, fetch and launch the MoE CPU kernels.
//
// The layer between the public op fronts (which validate) and the kernel
// templates in templates/cpu/moe_*.h. Nothing here checks arguments: callers
// pass validated shapes and pointers. Each Launch* builds the SpecKey of
// every variant it needs, gets the kernel (memory -> disk -> compile) and
// launches it; zero-sized work launches nothing and looks nothing up.
//
// Keys (static dims only; T, R and per-expert counts never appear):
//   moe.pack          dtypes {x}            dims {H}
//   moe.grouped_gemm  dtypes {x, x, f32}    dims {N, K}   tile.m = tile_rows,
//                     tail_class, variant = epilogue
//   moe.combine       dtypes {x, f32, x}    dims {H, topk}
#ifndef TAILOR_OPS_MOE_KERNELS_H_
#define TAILOR_OPS_MOE_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// W rows per N tile of the grouped GEMM: MoeGroupedGemmKernel::kTileN.
inline constexpr int kGroupedGemmTileN = 32;

struct PackLaunch {
  DType dtype;
  int64_t hidden_dim;          // H
  int64_t rows;                // R
  int64_t topk;                // k
  const void* hidden;          // [T, H]
  const int32_t* permutation;  // [R]
  void* a;                     // [R, H]
};
absl::Status LaunchPack(Engine& engine, const PackLaunch& launch);

struct GroupedGemmLaunch {
  DType dtype;
  int64_t n;  // W rows per expert
  int64_t k;  // reduction dim
  moe::Epilogue epilogue;
  const plan::PiecewisePlan* plan;
  const void* a;  // [R, K]
  const void* w;  // [E, N, K]
  void* c;        // [R, N] or [R, N / 2]
};
absl::Status LaunchGroupedGemm(Engine& engine, const GroupedGemmLaunch& launch);

// The key of one GroupedGemm variant (tail_class 0: core). For tests.
SpecKey GroupedGemmKey(const Engine& engine, const GroupedGemmLaunch& launch,
                       int32_t tail_class);

struct CombineLaunch {
  DType dtype;
  int64_t hidden_dim;      // H
  int64_t tokens;          // T
  int64_t topk;            // k
  const void* c;           // [R, H]
  const float* weights;    // [T, k]
  const int32_t* inverse;  // [T, k]
  void* out;               // [T, H]
};
absl::Status LaunchCombine(Engine& engine, const CombineLaunch& launch);

// ---- keys and sources without a launch
// --------------------------------------- For tools that list or precompile
// kernels (warmup/kernel_catalog.cc). The Launch* functions build their keys
// with these, so the two cannot drift.

SpecKey PackKey(const KeyTarget& target, DType dtype, int64_t hidden_dim);

// The static part of a GroupedGemm launch: what its keys are made of.
struct GroupedGemmShape {
  DType dtype;
  int64_t n;  // W rows per expert
  int64_t k;  // reduction dim
  int32_t tile_rows;
  moe::Epilogue epilogue;
};
SpecKey GroupedGemmKey(const KeyTarget& target, const GroupedGemmShape& shape,
                       int32_t tail_class);

SpecKey CombineKey(const KeyTarget& target, DType dtype, int64_t hidden_dim,
                   int64_t topk);

// The CPU kernel source of any moe.* key (moe.pack, moe.grouped_gemm,
// moe.combine); InvalidArgument naming the op for any other key.
absl::StatusOr<KernelSource> GenerateMoeKernel(const SpecKey& key);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_KERNELS_H_
