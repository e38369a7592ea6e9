// backends/hip/attention/decode_kernels.h — paged decode on the HIP backend.
//
// Generator and launch glue for templates/hip/attention/decode.h (params and
// launch shape: templates/hip/attention/decode_params.h). A device-memory
// backend: the plan is uploaded into the workspace, one launch of `workers`
// work-groups (one per CU) runs every piece and merges split pairs; bad device
// data lands in the scratch's error words (the CUDA layout,
// DecodeScratchBytes).
//
// Key: a DecodeSpec (ops/attention/decode_spec.h) of 64-token tiles.
// Shapes: D in {64, 128, 256}, group in [1, 16], group * D <= 2048
// (HipDecodeShapeFits); others are Unimplemented.
#ifndef TAILOR_BACKENDS_HIP_ATTENTION_DECODE_KERNELS_H_
#define TAILOR_BACKENDS_HIP_ATTENTION_DECODE_KERNELS_H_

#include "core/backend.h"
#include "core/engine.h"
#include "ops/attention/kernels.h"

namespace tailor::hip {

// The key of the decode kernel for `shape` on `target`. InvalidArgument
// naming the field for a dtype other than bf16/f16; Unimplemented when the
// shape does not fit (see above).
absl::StatusOr<tailor::internal::SpecKey> HipDecodeKey(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::DecodeShape& shape);

// The source of an attention.decode key; Unimplemented for other ops,
// InvalidArgument naming the field of a key the template cannot build.
absl::StatusOr<tailor::internal::KernelSource> GenerateHipDecode(
    const tailor::internal::SpecKey& key);

class HipDecodeKernels final : public tailor::internal::DecodeKernels {
 public:
  // Plans cost an item this many tokens besides its own (query load,
  // merge); the CUDA value.
  static constexpr int32_t kItemCostTokens = 16;

  // `compute_units` workers (at least 1: offline backends plan for one).
  HipDecodeKernels(tailor::internal::Backend& backend, int compute_units)
      : backend_(backend), workers_(compute_units > 0 ? compute_units : 1) {}

  absl::StatusOr<tailor::internal::DecodePlanConfig> PlanConfig(
      const tailor::internal::DecodeShape& shape, int64_t bucket,
      absl::Span<const int32_t> seq_lens) override;
  int64_t ScratchBytes(int64_t max_partials) const override;
  absl::Status InitScratch(tailor::internal::Engine& engine, void* scratch,
                           int64_t max_partials, void* stream) override;
  absl::Status UploadPlan(tailor::internal::Engine& engine, const void* host,
                          void* device, size_t bytes, void* stream) override;
  absl::StatusOr<tailor::internal::DecodeErrors> TakeErrors(
      tailor::internal::Engine& engine, void* scratch, int64_t max_partials,
      void* stream) override;
  absl::Status Decode(tailor::internal::Engine& engine,
                      const tailor::internal::DecodeLaunch& launch) override;

 private:
  tailor::internal::Backend& backend_;
  int workers_;
};

}  // namespace tailor::hip

#endif  // TAILOR_BACKENDS_HIP_ATTENTION_DECODE_KERNELS_H_
