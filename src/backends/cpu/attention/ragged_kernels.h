// backends/cpu/attention/ragged_kernels.h — the ragged-attention kernel
// family on the CPU backend.
//
// Generators and launch glue for templates/cpu/attention/ragged{,_merge}.h
// (params: templates/cpu/attention/ragged_params.h), built from the typed
// specs of ops/attention/ragged_spec.h. Host plans only: Run launches one
// JIT work item per plan worker, then one per merge group.
//
// The CPU kernels apply masks per row at run time, so every mask kind of a
// layer compiles to the same source; the key still names the mask kind
// (the family's keys are backend-neutral).
//
// Background JIT: these kernels have no generic fallback yet, so a cold key
// compiles on the calling thread even in background mode.
#ifndef TAILOR_BACKENDS_CPU_ATTENTION_RAGGED_KERNELS_H_
#define TAILOR_BACKENDS_CPU_ATTENTION_RAGGED_KERNELS_H_

#include <vector>

#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention/ragged_kernels.h"

namespace tailor::internal::cpu {

class CpuRaggedKernels final : public RaggedKernels {
 public:
  // `num_threads`: the backend's threads (pool workers plus the caller).
  explicit CpuRaggedKernels(int num_threads) : num_threads_(num_threads) {}

  // Workers: 2 per thread; tiles of kRaggedTileRows packed rows with the
  // largest power-of-two divisor of the group (<= 16) packed; KV blocks of
  // 16 positions.
  absl::StatusOr<RaggedPlanConfig> PlanConfig(
      const RaggedShape& shape) override;
  absl::Status Run(Engine& engine, const RaggedLaunch& launch) override;

 private:
  int num_threads_;
};

// The source of any CPU attention.ragged* key; InvalidArgument naming the
// key field for any other key.
absl::StatusOr<KernelSource> GenerateRaggedKernel(const SpecKey& key);

// Both kernels a RunRagged of `shape` can launch (attention, then merge):
// for warm-up and tests.
absl::StatusOr<std::vector<KernelJob>> RaggedLayerKernels(
    const KeyTarget& target, const RaggedShape& shape, int num_threads);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_ATTENTION_RAGGED_KERNELS_H_
