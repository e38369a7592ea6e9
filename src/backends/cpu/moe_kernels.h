// backends/cpu/moe_kernels.h — the MoE kernel family on the CPU backend.
//
// Generators and launch glue for templates/cpu/moe_{pack,grouped_gemm,
// combine}.h (params: templates/cpu/moe_params.h). Host plans only: the op
// front routes and plans on the host.
//
// Keys (static dims only; T, R and per-expert counts never appear):
//   moe.pack          dtypes {x}            dims {H}
//   moe.grouped_gemm  dtypes {x, x, f32}    dims {N, K}   tile.m = tile_rows,
//                     tail_class, variant = epilogue
//   moe.combine       dtypes {x, f32, x}    dims {H, topk}
// GroupedGemm launches the plan's core variant and one variant per tail
// class present, as batches of independent launches (their work items share
// one parallel loop).
#ifndef TAILOR_BACKENDS_CPU_MOE_KERNELS_H_
#define TAILOR_BACKENDS_CPU_MOE_KERNELS_H_

#include <cstdint>

#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/moe_kernels.h"

namespace tailor::internal::cpu {

class CpuMoeKernels final : public MoeKernels {
 public:
  // 16 rows: a tile's W stream is reused 16 times from cache; tails are at
  // most 15 rows.
  int32_t DefaultTileRows(int64_t, int64_t) const override { return 16; }
  // The template keeps a tile's accumulators on the stack: 128 KiB at 64.
  int32_t MaxTileRows() const override { return 64; }
  absl::Status Pack(Engine& engine, const PackLaunch& launch) override;
  absl::Status GroupedGemm(Engine& engine,
                           const GroupedGemmLaunch& launch) override;
  absl::Status Combine(Engine& engine, const CombineLaunch& launch) override;
};

// The key of one GroupedGemm variant (tail_class 0: core). For tests and
// tools that enumerate kernels.
SpecKey GroupedGemmKey(const Engine& engine, const GroupedGemmLaunch& launch,
                       int32_t tail_class);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_MOE_KERNELS_H_
