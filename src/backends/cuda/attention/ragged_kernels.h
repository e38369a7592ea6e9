// backends/cuda/attention/ragged_kernels.h — the ragged-attention kernel
// family on the CUDA backend: two attention kernels over the same plan,
// each with the split-tile merge (prefill_merge.cuh); params and layouts:
// prefill_params.h.
//   - the Hopper kernel (templates/cuda/attention/prefill_sm90.cuh):
//     warp-specialized, TMA + wgmma, 128-row tiles; on sm_90a for pages a
//     multiple of 8 (at most 256) that divides its KV block or is a
//     multiple of it (the TMA page-id path, RaggedTmaPageSize);
//   - the portable kernel (prefill_sm80.cuh): mma.sync + cp.async with a
//     per-position page lookup, 64-row tiles; everywhere else on sm_80 and
//     newer (sm_80..sm_89, sm_90 without a, sm_90a with other page sizes),
//     and on every device under the tuning key ragged.kernel=portable.
// Pages of 1..256 tokens; older devices and other page sizes get
// Unimplemented from PlanConfig (ReserveRaggedWorkspace and PlanRagged
// name the rule).
//
// Launches per RunRagged, both with grids that depend on the device and
// the kernel only (one CTA per SM; the portable kernel two up to head_dim
// 128), so one captured graph replays any plan of its
// workspace: the attention kernel over the uploaded work list, then the
// merge kernel, which reads the plan's merge-group count on the device (a
// plan without split tiles makes it return at once).
//
// Descriptors (Hopper kernel only): the q / out maps (rank 5, the
// packed-row view of prefill_params.h) and the K / V cache maps (page id as
// the outer coordinate) come from the backend's descriptor pool: encoded
// once per tensor and layer shape, looked up afterwards.
//
// Background JIT: while a layer's specialized attention or merge kernel
// compiles, Run launches the generic one of its dtype and head dim
// (generic_kernel_table.h, served by CudaGenericKernels::Select as for
// decode): the portable kernel with the pack and page size read from the
// params, which runs the plan of either kernel (a Hopper kernel's 128-row
// tile as two 64-row strips), and the merge with runtime tile rows.
//
// Keys: RaggedKernelSpec / RaggedMergeSpec (ops/attention/ragged_spec.h),
// tile rows kPrefillTileRows (Hopper) or kPrefillSm80TileRows (portable,
// which also sets the spec's `portable`). The q_len = 1 rows of a step run
// on the paged-decode kernel (decode_kernels.h, launched by the op front) unless
// ragged.decode_rows=prefill or a sliding window asks for prefill tiles.
#ifndef TAILOR_BACKENDS_CUDA_ATTENTION_RAGGED_KERNELS_H_
#define TAILOR_BACKENDS_CUDA_ATTENTION_RAGGED_KERNELS_H_

#include <atomic>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention/ragged_kernels.h"

namespace tailor::cuda {

class CudaBackend;

class CudaRaggedKernels final : public tailor::internal::RaggedKernels {
 public:
  // `enabled`: the ragged.cuda tuning key (attention/tuning.h); when off,
  // PlanConfig reports Unimplemented and nothing else runs. `decode_rows`:
  // the ragged.decode_rows key (RaggedPlanConfig::decode_rows).
  // `portable_forced`: the ragged.kernel=portable key.
  // $TAILOR_CUDA_PIPELINE_CHECKS=1 (read here, a developer knob) builds the
  // kernel with its protocol checks and wait watch (RaggedKernelSpec).
  CudaRaggedKernels(CudaBackend& backend, bool enabled, bool decode_rows,
                    bool portable_forced);

  absl::StatusOr<tailor::internal::RaggedPlanConfig> PlanConfig(
      const tailor::internal::RaggedShape& shape) override;
  int64_t ScratchBytes() const override;
  absl::Status InitScratch(tailor::internal::Engine& engine, void* scratch,
                           void* stream) override;
  absl::Status UploadPlan(tailor::internal::Engine& engine, const void* host,
                          void* device, size_t bytes, void* stream) override;
  absl::StatusOr<tailor::internal::RaggedErrors> TakeErrors(
      tailor::internal::Engine& engine, void* scratch, void* stream) override;
  // True while `stream` is capturing (or when that cannot be told).
  bool MayReplay(tailor::internal::Engine& engine, void* stream) override;
  absl::Status Run(tailor::internal::Engine& engine,
                   const tailor::internal::RaggedLaunch& launch) override;

 private:
  absl::StatusOr<int> Multiprocessors();
  absl::Status LaunchAttention(tailor::internal::Engine& engine,
                               const tailor::internal::RaggedLaunch& launch);
  absl::Status LaunchMerge(tailor::internal::Engine& engine,
                           const tailor::internal::RaggedLaunch& launch);

  CudaBackend& backend_;
  const bool enabled_;
  const bool decode_rows_;
  const bool portable_forced_;
  const bool pipeline_checks_;
  std::atomic<int> multiprocessors_{0};
};

// The source of any CUDA attention.ragged* key.
absl::StatusOr<tailor::internal::KernelSource> GenerateCudaRagged(
    const tailor::internal::SpecKey& key);

// CudaRaggedKernels::PlanConfig of a shape it serves, on a device of
// `multiprocessors` SMs; `decode_rows`: the ragged.decode_rows key;
// `portable`: RaggedUsesPortable. For plans and keys of a device that is
// not here (tests, the variant count).
tailor::internal::RaggedPlanConfig CudaRaggedPlanConfig(
    const tailor::internal::RaggedShape& shape, int multiprocessors,
    bool decode_rows, bool portable);

// Whether the sm_90a kernel serves `page_size` for `head_dim`.
bool RaggedTmaPageSize(int64_t page_size, int64_t head_dim);

// Whether a layer of `shape` on `arch` (an sm_80 or newer arch name) runs
// the portable kernel: unless the arch is sm_90a and the sm_90a kernel
// serves the page size, or always when `portable_forced`
// (ragged.kernel=portable).
bool RaggedUsesPortable(absl::string_view arch,
                        const tailor::internal::RaggedShape& shape,
                        bool portable_forced);

// The kernels a layer of `shape` launches (warm-up): the attention kernel
// RaggedUsesPortable picks and its merge. Unimplemented, as PlanConfig, for
// a target older than sm_80 or a page size outside 1..256.
absl::StatusOr<std::vector<tailor::internal::KernelJob>> RaggedLayerKernels(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::RaggedShape& shape, bool portable_forced);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_ATTENTION_RAGGED_KERNELS_H_
