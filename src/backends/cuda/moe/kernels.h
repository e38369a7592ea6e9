// backends/cuda/moe/kernels.h — the MoE kernel family on the CUDA backend.
//
// Generators and launch glue for templates/cuda/moe_{route,pack,
// grouped_gemm,combine}.cuh (params and launch shapes:
// templates/cuda/moe/params.h). Device plans only: Route runs on the device
// and every later kernel reads the plan's real length from the route
// header, so a step is a fixed sequence of launches (route: 1 for steps of
// at most 1024 assignments, else 2; pack, 2 GEMMs, combine) sized from T and
// the worst case, with no host sync.
//
// Keys: the typed specs of ops/moe/spec.h (MoeRouteSpec, MoePackSpec,
// MoeGemmSpec, MoeCombineSpec); the generators decode their keys through
// them. The grouped GEMM's kernel: kHopper (sm_90a, bf16, K % 8 == 0: TMA +
// wgmma, moe/sm90/kernel.cuh), kMatrixCore (mma.sync: bf16, K % 8 == 0),
// kSimt otherwise; Hopper clusters of 2 or 4 CTAs.
// The Hopper kernel stores full tiles by TMA when the plan tile is its CTA
// tile (64 or 128 rows), N % 8 == 0 and C is 16-byte aligned; it runs
// swap-AB (W rows as wgmma's M, the tile's tokens as its N) for plan tiles
// of at most 32 rows. Its 128-row launches run the cooperative kernel (both
// consumer warpgroups on one tile) or the ping-pong kernel (each owns a
// tile, moe/sm90/kernel_pingpong.cuh): cooperative unless moe.consumers=
// pingpong forces ping-pong.
// The tuning keys (moe/tuning.h) moe.gemm=portable pick the mma.sync kernel
// on Hopper too, moe.store=registers the Hopper kernel's register stores for
// every tile, moe.swap_ab=off the 64-row kernel for small tiles (all for
// comparisons); $TAILOR_CUDA_PIPELINE_CHECKS=1 compiles the Hopper kernel
// with the pipeline's protocol checks (runtime/cuda/pipeline.cuh; tests).
// One grouped-GEMM kernel serves the core and every tail class.
// FP8 (a scale mode; moe/fp8_launch.cc): the TMA + wgmma FP8 kernel on
// sm_90a, else (and with moe.gemm=portable) the mma.sync kernel that
// converts e4m3 in registers (moe/fp8_grouped_gemm_sm80.cuh); the
// quantizing Pack on every sm_80+ device.
//
// Background JIT (generic_kernels.h): while a key compiles, its launch runs
// the generic kernel of its family and dtype (route: the same kernels;
// grouped GEMM: the portable mma.sync kernel, or SIMT, with runtime N, K
// and tile rows and 64-row CTAs, for Hopper keys too; FP8: the portable FP8
// kernel and the quantizing Pack with runtime dims, per scale mode).
#ifndef TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_
#define TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "backends/cuda/generic_kernels.h"
#include "backends/cuda/moe/tuning.h"
#include "backends/cuda/tma/descriptor_pool.h"
#include "core/backend.h"
#include "core/engine.h"
#include "ops/moe/kernels.h"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

class CudaBackend;

// The source of a MoE key (moe.route, moe.pack, moe.grouped_gemm,
// moe.combine); Unimplemented for other ops. For tests and tools that
// compile kernels offline.
absl::StatusOr<tailor::internal::KernelSource> GenerateMoeKernel(
    const tailor::internal::SpecKey& key);

// Every kernel a MoE step of `layer` can launch on a device of `target.arch`
// (sm_XY, sm_90a), under any routing and batch, with the launches' own key
// builders: the route kernels for E (the fused one when E fits its block),
// pack, the gate|up and down GEMMs for each tile size the policy resolves
// to (tile_rows 0: 64, and on sm_90a 128 and the swap-AB tiles 8 and 32:
// the cost model's choices)
// with the kernel the device picks (Hopper unless moe.gemm=portable;
// mma.sync for bf16 with K % 8 == 0 and for FP8; SIMT otherwise), combine,
// as `tuning` shapes them. No device is needed (warm-up for another
// machine). InvalidArgument naming policy.tile_rows when it is out of range;
// Unimplemented for an FP8 layer on a target older than sm_80 or not in
// block mode. Without the CUDA headers (cuda_backend_unavailable.cc):
// Unavailable.
absl::StatusOr<std::vector<tailor::internal::KernelJob>> MoeLayerKernels(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::MoeLayerShape& layer, const MoeTuning& tuning);

// The tensor maps of a Hopper grouped-GEMM launch (MoeGroupedGemmSm90Params,
// templates/cuda/moe/params.h), from `descriptors`: A [rows, K] in boxes of
// `a_rows` rows x 64 K and W [E * N, K] in 64 x 64 boxes; C [rows, output
// columns] in 64 x 64 boxes when full tiles leave by TMA stores
// (`tma_store`, the plan tile is the CTA tile, C rows are 16-byte multiples,
// C is 16-byte aligned and its map legal; else c is zero and tma_store
// false). A and C span the buffers' reserved rows (GroupedGemmLaunch::
// row_capacity, else the step's rows), never a step's count: the TMA unit
// zero-fills loads and drops stores past a map's end, and the kernel stores
// only the work list's rows, so every step on one workspace reuses the same
// maps, encoded once.
struct HopperGemmMaps {
  TensorMap a = {}, w = {}, c = {};
  bool tma_store = false;
};
absl::StatusOr<HopperGemmMaps> EncodeHopperGemmMaps(
    DescriptorPool& descriptors,
    const tailor::internal::GroupedGemmLaunch& launch, int a_rows,
    bool tma_store);

class CudaMoeKernels final : public tailor::internal::MoeKernels {
 public:
  static constexpr int32_t kMaxTileRows = 128;

  // `backend` fills and copies device memory and counts resident clusters;
  // `multiprocessors` sizes the
  // persistent GEMM grids and `l2_bytes` (the device's L2) picks their W
  // cache policy; `hopper` (an sm_90a device) enables the TMA + wgmma GEMM,
  // whose tensor maps come from `descriptors`; `generics` serve background
  // JIT; `tuning` overrides the cost model's choices.
  CudaMoeKernels(CudaBackend& backend, int multiprocessors, int64_t l2_bytes,
                 bool hopper, DescriptorPool& descriptors,
                 CudaGenericKernels& generics, const MoeTuning& tuning);

  // The cost model's tile (per step, deterministic): MoeDefaultTileRows
  // (backends/cuda/moe/heuristics.h) on this device.
  int32_t DefaultTileRows(int64_t assignments, int64_t experts,
                          int64_t max_expert_rows) const override;
  int32_t MaxTileRows() const override { return kMaxTileRows; }
  // FP8: every scale mode (GroupedGemm and Experts) on every device
  // (sm_80+): the Hopper kernels on sm_90a, the portable mma.sync kernel
  // elsewhere or with moe.gemm=portable.
  absl::Status SupportsScaleMode(moe::ScaleMode mode) const override;
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
  // The quantizing Pack (moe/fp8_launch.cc): block or per-tensor mode, bf16
  // hidden, H and (block) the scale rows as the GEMM's A-scale map wants
  // (multiples of 128, 4).
  absl::Status Fp8Pack(tailor::internal::Engine& engine,
                       const tailor::internal::PackLaunch& launch);
  // The FP8 GEMM (moe/fp8_launch.cc): every scale mode, C bf16 or e4m3
  // (block; per tensor with a static scale), block scale rows multiples of
  // 4; the Hopper kernel on sm_90a, else the portable one.
  absl::Status Fp8GroupedGemm(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch);
  // Its portable kernel (mma.sync, e4m3 converted in registers): devices
  // other than sm_90a, and moe.gemm=portable.
  absl::Status PortableFp8GroupedGemm(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch);
  // That kernel's launch with `kernel`: specialized for `launch` (`generic`
  // false) or the generic one (64-row CTAs, counted as a fallback).
  absl::Status PortableFp8Launch(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch,
      const tailor::internal::Kernel& kernel, bool generic);
  // What a Hopper launch runs: the kernel's variant and its grid.
  struct HopperVariant {
    int cta_rows = 0;  // the CTA tile's rows (64 or 128)
    int a_rows = 0;    // the A box's rows (swap-AB: the tokens, 8 to 32)
    bool swap_ab = false;
    bool pingpong = false;  // a tile per consumer (a_rows 64 of 128)
    bool tma_store = false;
    int cluster = 1;
    uint32_t ctas = 0;
  };
  // Fills the params of `launch` (of at most `max_tiles` tiles): its tensor
  // maps, work list, scratch and schedule, each by the cost model's rule or
  // its knob; returns the variant that runs them.
  absl::StatusOr<HopperVariant> HopperParams(
      const tailor::internal::GroupedGemmLaunch& launch, int64_t max_tiles,
      MoeGroupedGemmSm90Params& params);
  // The plan summary's record of that launch.
  tailor::internal::GemmConfig HopperConfig(
      const tailor::internal::GroupedGemmLaunch& launch,
      const HopperVariant& variant,
      const MoeGroupedGemmSm90Params& params) const;
  // The portable grouped GEMM's launch with `kernel`: specialized for
  // `launch` (`generic` false) or the generic one.
  absl::Status PortableGroupedGemm(
      tailor::internal::Engine& engine,
      const tailor::internal::GroupedGemmLaunch& launch,
      const tailor::internal::Kernel& kernel, bool generic);
  // Launches `key`'s kernel, or while it compiles (background JIT) generic
  // kernel `id` with the same config and params.
  absl::Status LaunchKernel(tailor::internal::Engine& engine,
                            const tailor::internal::SpecKey& key,
                            tailor::internal::KernelGeneratorFn generate,
                            GenericKernelId id,
                            const tailor::internal::LaunchConfig& config,
                            const void* params, size_t params_size);
  absl::StatusOr<SelectedKernel> Select(
      tailor::internal::Engine& engine, const tailor::internal::SpecKey& key,
      tailor::internal::KernelGeneratorFn generate, GenericKernelId id);

  // How many clusters of `cluster` CTAs of the 128-row kernel the device
  // runs at once: sms / 2 for pairs (an SM pair, a TPC, always fits); for
  // 4, the occupancy query's count (a GPC of 18 SMs fits 4 clusters of 4),
  // queried at the first launch that needs it.
  absl::StatusOr<int> MaxClusters(int cluster);

  CudaBackend& backend_;
  int multiprocessors_;
  int64_t l2_bytes_;
  bool hopper_;
  bool pipeline_checks_;
  bool tma_store_;         // full Hopper tiles may leave by TMA stores
  bool dynamic_schedule_;  // Hopper tiles from a counter, not blockIdx strides
  bool split_k_;           // Hopper launches of few tiles split K
  bool swap_ab_;           // Hopper tiles of <= 32 rows run swap-AB
  int cluster_;            // moe.cluster: 1, 2 or 4
  std::once_flag quads_query_;
  absl::StatusOr<int> max_quads_ = 0;  // clusters of 4: written once, under it
  // moe.expert_groups: the bounds it forces for every Hopper launch
  // (kMoeGroups*); -1 for the rule (MoeSm90ExpertGroups).
  int expert_groups_;
  // moe.w_evict_first: auto (MoeSm90EvictFirstW), off or on (every launch
  // without clusters).
  tailor::internal::Switch w_evict_first_;
  // moe.prefetch_w: auto (overlapped steps whose W fits in the L2,
  // kMoeSm90PrefetchWKBlocks), off or on (every launch without clusters).
  tailor::internal::Switch prefetch_w_;
  // moe.wave_sync: auto (MoeSm90WaveSync), off or on (every Hopper launch).
  tailor::internal::Switch wave_sync_;
  // moe.consumers: auto and cooperative run the cooperative kernel; on
  // (pingpong) the ping-pong kernel for every launch it fits.
  tailor::internal::Switch pingpong_;
  DescriptorPool& descriptors_;
  CudaGenericKernels& generics_;
};

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_MOE_KERNELS_H_
