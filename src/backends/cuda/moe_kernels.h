// backends/cuda/moe_kernels.h — the MoE kernel family on the CUDA backend.
//
// Generators and launch glue for templates/cuda/moe_{route,pack,
// grouped_gemm,combine}.cuh (params and launch shapes:
// templates/cuda/moe_params.h). Device plans only: Route runs on the device
// and every later kernel reads the plan's real length from the route
// header, so a step is a fixed sequence of launches (route: 1 for steps of
// at most 1024 assignments, else 2; pack, 2 GEMMs, combine) sized from T and
// the worst case, with no host sync.
//
// Keys (static dims only; T, R and per-expert counts never appear):
//   moe.route         variant = kernel (count+plan, fused, scatter);
//                     scatter: dims {warps}
//   moe.pack          dtypes {x}            dims {H}
//   moe.grouped_gemm  dtypes {x, x, f32}    dims {N, K}   tile.m = tile_rows,
//                     variant = epilogue (| pipeline checks | TMA store),
//                     tile.n = the kernel: 2 Hopper (sm_90a, bf16,
//                     K % 8 == 0: TMA + wgmma, moe_grouped_gemm_sm90.cuh),
//                     1 tensor-core mma.sync (bf16, K % 8 == 0), 0 SIMT
// The Hopper kernel stores full tiles by TMA when the plan tile is its CTA
// tile (64 or 128 rows), N % 8 == 0 and C is 16-byte aligned.
// $TAILOR_MOE_GEMM=portable picks the mma.sync kernel on Hopper too,
// $TAILOR_MOE_GEMM_STORE=registers the Hopper kernel's register stores for
// every tile (both for comparisons); $TAILOR_CUDA_PIPELINE_CHECKS=1 compiles
// the Hopper kernel with the pipeline's protocol checks
// (runtime/cuda/pipeline.cuh; tests).
//   moe.combine       dtypes {x, f32, x}    dims {H, topk}
// One grouped-GEMM kernel serves the core and every tail class.
#ifndef TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_
#define TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_

#include <cstdint>
#include <vector>

#include "backends/cuda/tma/descriptor_pool.h"
#include "core/backend.h"
#include "core/engine.h"
#include "ops/moe_kernels.h"

namespace tailor::cuda {

// The source of a MoE key (moe.route, moe.pack, moe.grouped_gemm,
// moe.combine); Unimplemented for other ops. For tests and tools that
// compile kernels offline.
absl::StatusOr<tailor::internal::KernelSource> GenerateMoeKernel(
    const tailor::internal::SpecKey& key);

// Every kernel a MoE step of `layer` can launch on a device of `target.arch`
// (sm_XY, sm_90a), under any routing and batch, with the launches' own key
// builders: the route kernels for E (the fused one when E fits its block),
// pack, the gate|up and down GEMMs for each tile size the policy resolves
// to (tile_rows 0: 64, and 128 on sm_90a: the cost model's two choices)
// with the kernel the device picks (Hopper unless $TAILOR_MOE_GEMM=portable;
// mma.sync for bf16 with K % 8 == 0; SIMT otherwise), combine. No device is
// needed (warm-up for another machine). InvalidArgument naming
// policy.tile_rows when it is out of range. Without the CUDA headers
// (cuda_backend_unavailable.cc): Unavailable.
absl::StatusOr<std::vector<tailor::internal::KernelJob>> MoeLayerKernels(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::MoeLayerShape& layer);

class CudaMoeKernels final : public tailor::internal::MoeKernels {
 public:
  static constexpr int32_t kMaxTileRows = 128;

  // `backend` fills and copies device memory; `multiprocessors` sizes the
  // persistent GEMM grids; `hopper` (an sm_90a device) enables the TMA +
  // wgmma GEMM, whose tensor maps come from `descriptors`.
  CudaMoeKernels(tailor::internal::Backend& backend, int multiprocessors,
                 bool hopper, DescriptorPool& descriptors);

  // The cost model (per step, deterministic): on Hopper, 128-row tiles
  // (two consumer warpgroups share each W tile, halving W reads per row)
  // once the average expert has at least kRowsFor128 rows (T * k / E);
  // 64-row tiles below that, where every item is a small tail (decode).
  // Measured on the H100 (bench/results/moe_cuda_h100.txt): 128 wins from
  // about 32 rows per expert up (DeepSeek-V3 T=4096, 128 rows/expert: 8.9
  // vs 10.2 ms), 64 wins below 16 (Mixtral T=1: 0.164 vs 0.186 ms), even in
  // between. Elsewhere 64, the portable kernel's CTA.
  static constexpr int64_t kRowsFor128 = 32;
  int32_t DefaultTileRows(int64_t assignments, int64_t experts) const override {
    return hopper_ && assignments >= kRowsFor128 * experts ? 128 : 64;
  }
  int32_t MaxTileRows() const override { return kMaxTileRows; }
  int64_t RouteScratchBytes(int64_t max_assignments,
                            int64_t num_experts) const override;
  int64_t MaxDeviceRouteExperts() const override;
  absl::Status InitRouteScratch(tailor::internal::Engine& engine,
                                void* route_scratch, void* stream) override;
  absl::Status Route(
      tailor::internal::Engine& engine,
      const tailor::internal::DeviceRouteLaunch& launch) override;
  absl::StatusOr<tailor::internal::RouteErrors> TakeRouteErrors(
      tailor::internal::Engine& engine, void* route_scratch,
      void* stream) override;

  absl::Status Pack(tailor::internal::Engine& engine,
                    const tailor::internal::PackLaunch& launch) override;
  absl::Status GroupedGemm(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch) override;
  absl::Status Combine(tailor::internal::Engine& engine,
                       const tailor::internal::CombineLaunch& launch) override;

 private:
  int64_t SplitScratchBytes() const;
  absl::Status HopperGroupedGemm(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch);

  tailor::internal::Backend& backend_;
  int multiprocessors_;
  bool hopper_;
  bool pipeline_checks_;
  bool tma_store_;  // full Hopper tiles may leave by TMA stores
  bool dynamic_schedule_;  // Hopper tiles from a counter, not blockIdx strides
  bool split_k_;           // Hopper launches of few tiles split K
  DescriptorPool& descriptors_;
};

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_
