// backends/cpu/decode_kernels.h — the paged-decode kernel family on the CPU
// backend.
//
// Generators and launch glue for templates/cpu/decode_{attention,merge}.h
// (params: templates/cpu/decode_params.h). Host plans only.
//
// Keys (static quantities only; B and lengths never appear):
//   attention.decode        dtypes {x}  dims {D, group, page}
//   attention.decode_merge  dtypes {x}  dims {D, group}
// Decode launches one work item per plan worker (the plan balances them),
// then, when the plan split pairs, one merge item per split pair.
#ifndef TAILOR_BACKENDS_CPU_DECODE_KERNELS_H_
#define TAILOR_BACKENDS_CPU_DECODE_KERNELS_H_

#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention_kernels.h"

namespace tailor::internal::cpu {

class CpuDecodeKernels final : public DecodeKernels {
 public:
  // `num_threads`: the backend's threads (pool workers plus the caller).
  explicit CpuDecodeKernels(int num_threads) : num_threads_(num_threads) {}

  // Workers: 2 per thread, tiles of 16 tokens (the template's block).
  absl::StatusOr<DecodePlanConfig> PlanConfig(
      const DecodeShape& shape) override;
  absl::Status Decode(Engine& engine, const DecodeLaunch& launch) override;

 private:
  int num_threads_;
};

// The keys of the two kernels, for tests and tools that enumerate kernels.
SpecKey DecodeAttentionKey(const Engine& engine, const DecodeShape& shape);
SpecKey DecodeMergeKey(const Engine& engine, const DecodeShape& shape);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_DECODE_KERNELS_H_
