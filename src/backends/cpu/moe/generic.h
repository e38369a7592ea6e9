// backends/cpu/moe/generic.h — the generic CPU MoE kernels: built into the
// library by the host compiler, runtime shapes, always available.
//
// Background JIT (Runtime::Options::jit_mode) serves a call whose
// specialized kernel is still compiling with these: the same params as the
// templates (templates/cpu/moe/params.h) plus the dims the templates take as
// template arguments, the same work-item grids, the same results up to f32
// rounding (plain loops, no tail specialization, no vectors).
//
// Example (the launch glue, src/backends/cpu/moe/kernels.cc):
//   GenericPackParams p = {.base = params, .dtype = dtype, .hidden = h};
//   engine.Launch(OpKind::kMoePack, GenericPackKernel(), config, p);
#ifndef TAILOR_BACKENDS_CPU_MOE_GENERIC_H_
#define TAILOR_BACKENDS_CPU_MOE_GENERIC_H_

#include <cstdint>

#include "core/backend.h"
#include "tailor/tensor.h"
#include "templates/cpu/moe/params.h"

namespace tailor::internal::cpu {

// Work item r: one row of a (as MoePackKernel).
struct GenericPackParams {
  kernels::MoePackParams base;
  DType dtype;     // bf16 or f32
  int64_t hidden;  // H
};

// Work item i: (N tile i / num_work, plan item i % num_work), N tiles of
// kMoeGroupedGemmTileN W rows (as MoeGroupedGemmKernel); each item computes
// its piece's useful rows.
struct GenericGemmParams {
  kernels::MoeGroupedGemmParams base;
  DType dtype;  // of a, w and c
  int64_t n;    // W rows per expert
  int64_t k;    // reduction dim
  bool gated;   // silu_and_mul epilogue: c has n / 2 columns
};

// Work item t: one token (as MoeCombineKernel).
struct GenericCombineParams {
  kernels::MoeCombineParams base;
  DType dtype;
  int64_t hidden;  // H
  int64_t topk;    // k
};

// The kernels (process-lifetime singletons, launched like JIT kernels).
const Kernel& GenericPackKernel();
const Kernel& GenericGemmKernel();
const Kernel& GenericCombineKernel();

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_MOE_GENERIC_H_
