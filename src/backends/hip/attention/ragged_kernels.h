// backends/hip/attention/ragged_kernels.h — ragged paged attention on the
// HIP backend (compile-verified: no AMD GPU has run it).
//
// Generator and launch glue for templates/hip/attention/ragged.h (params and
// launch shape: templates/hip/attention/ragged_params.h). A device-memory
// backend: the plan is uploaded into the workspace; one launch of `workers`
// work-groups (one per CU) runs every item, then the merge of split tiles
// (grid-stride over the plan's merge groups, their count read on the
// device); bad page ids land in the scratch's error word (the CUDA layout,
// kPrefillErrorWords).
//
// Plans: 64-row tiles over KV blocks of HipRaggedKvBlock(D) (32, or 16 at
// D = 256), query heads packed as on CUDA; q_len = 1 rows run as tiles too
// (the HIP decode kernel reads no q_indptr / page_indptr).
// Keys: RaggedKernelSpec / RaggedMergeSpec (ops/attention/ragged_spec.h),
// tile rows 64. Shapes: bf16 / f16, D in {64, 128, 256}, pages of 1..256
// tokens; others are Unimplemented from PlanConfig.
#ifndef TAILOR_BACKENDS_HIP_ATTENTION_RAGGED_KERNELS_H_
#define TAILOR_BACKENDS_HIP_ATTENTION_RAGGED_KERNELS_H_

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/engine.h"
#include "ops/attention/ragged_kernels.h"

namespace tailor::hip {

// How plans for `shape` are cut on `workers` work-groups; Unimplemented
// naming the field for a shape no HIP kernel serves.
absl::StatusOr<tailor::internal::RaggedPlanConfig> HipRaggedPlanConfig(
    const tailor::internal::RaggedShape& shape, int workers);

// The source of an attention.ragged or attention.ragged_merge key;
// Unimplemented for other ops, InvalidArgument naming the field of a key
// the templates cannot build.
absl::StatusOr<tailor::internal::KernelSource> GenerateHipRagged(
    const tailor::internal::SpecKey& key);

class HipRaggedKernels final : public tailor::internal::RaggedKernels {
 public:
  // `compute_units` workers (at least 1: offline backends plan for one).
  HipRaggedKernels(tailor::internal::Backend& backend, int compute_units)
      : backend_(backend), workers_(compute_units > 0 ? compute_units : 1) {}

  absl::StatusOr<tailor::internal::RaggedPlanConfig> PlanConfig(
      const tailor::internal::RaggedShape& shape) override;
  int64_t ScratchBytes() const override;
  absl::Status InitScratch(tailor::internal::Engine& engine, void* scratch,
                           void* stream) override;
  absl::Status UploadPlan(tailor::internal::Engine& engine, const void* host,
                          void* device, size_t bytes, void* stream) override;
  absl::StatusOr<tailor::internal::RaggedErrors> TakeErrors(
      tailor::internal::Engine& engine, void* scratch, void* stream) override;
  absl::Status Run(tailor::internal::Engine& engine,
                   const tailor::internal::RaggedLaunch& launch) override;

 private:
  tailor::internal::Backend& backend_;
  int workers_;
};

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_ATTENTION_RAGGED_KERNELS_H_
