// backends/hip/moe/kernels.h — the MoE kernel family on the HIP backend.
//
// Generators and launch glue for templates/hip/moe_{route,pack,
// grouped_gemm,combine}.h (params: templates/cuda/moe/params.h, shared with
// CUDA; AMD launch shapes: templates/hip/moe/params.h). Device plans only,
// as on CUDA: Route runs on the device and every later kernel reads the
// plan's real length from the route header; a step is a fixed sequence of
// launches sized from T and the worst case, with no host sync.
//
// Keys: the typed specs of ops/moe/spec.h; the scatter's warps are waves,
// the grouped GEMM's kernel kMatrixCore (MFMA: bf16, K % 8 == 0) or kSimt.
// One grouped-GEMM kernel serves the core and every tail class (its CTA
// rows are the tile rows rounded up to 16, one MFMA row block).
#ifndef TAILOR_BACKENDS_HIP_MOE_KERNELS_H_
#define TAILOR_BACKENDS_HIP_MOE_KERNELS_H_

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/engine.h"
#include "ops/moe/kernels.h"
#include "ops/moe/spec.h"

namespace tailor::hip {

// The source of a MoE key (moe.route, moe.pack, moe.grouped_gemm,
// moe.combine); Unimplemented for other ops, InvalidArgument for an
// unknown route variant. For tests and tools that compile offline.
absl::StatusOr<tailor::internal::KernelSource> GenerateHipMoeKernel(
    const tailor::internal::SpecKey& key);

// One launch the glue makes: which key, over which grid. Pure host logic,
// unit-tested without a device.
struct HipLaunchPlan {
  tailor::internal::SpecKey key;
  tailor::internal::LaunchConfig config;
};

// The grouped-GEMM launch of `launch` on a device of `compute_units` CUs
// (grid = min(work tiles, resident CTAs)) and its spec; grid.x 0 when there
// is nothing to run. `has_mfma_bf16`: the target has the bf16 _1k MFMAs
// (HasMfmaBf16); else every GEMM runs the SIMT kernel.
struct HipGemmPlan {
  tailor::internal::MoeGemmSpec spec;
  tailor::internal::SpecKey key;
  tailor::internal::LaunchConfig config;
};
HipGemmPlan PlanHipGroupedGemm(const tailor::internal::GroupedGemmLaunch& l,
                               const tailor::internal::KeyTarget& target,
                               int compute_units, bool has_mfma_bf16);

// The Route launches of a step of `assignments` (T * k) over `experts`
// local experts: one fused launch when one block holds the step and the
// scatter gets 4 waves, else count+plan then scatter over segments of
// kMoeRouteSegment assignments (waves chosen so the scatter's LDS fits).
std::vector<HipLaunchPlan> PlanHipRoute(
    int64_t assignments, int64_t experts,
    const tailor::internal::KeyTarget& target, void* stream);

class HipMoeKernels final : public tailor::internal::MoeKernels {
 public:
  static constexpr int32_t kMaxTileRows = 128;

  // `backend` fills and copies device memory; `compute_units` sizes the
  // persistent GEMM grids (0 offline: one CTA per work tile);
  // `has_mfma_bf16` enables the MFMA GEMM (HasMfmaBf16 of the target).
  HipMoeKernels(tailor::internal::Backend& backend, int compute_units,
                bool has_mfma_bf16)
      : backend_(backend),
        compute_units_(compute_units),
        has_mfma_bf16_(has_mfma_bf16) {}

  // 64-row tiles: one MFMA CTA holds at most 64 A rows (four 16-row
  // blocks, one per wave) next to its 128 W rows in 64 KiB of LDS.
  int32_t DefaultTileRows(int64_t, int64_t, int64_t) const override {
    return 64;
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
  tailor::internal::Backend& backend_;
  int compute_units_;
  bool has_mfma_bf16_;
};

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_MOE_KERNELS_H_
