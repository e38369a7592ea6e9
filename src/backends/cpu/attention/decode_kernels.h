// backends/cpu/attention/decode_kernels.h — the paged-decode kernel family on
// the CPU backend.
//
// Generators and launch glue for templates/cpu/decode_{attention,merge}.h
// (params: templates/cpu/attention/decode_params.h). Host plans only.
//
// Keys: DecodeSpec (no tile, one kernel) and DecodeMergeSpec
// (ops/attention/decode_spec.h).
// Decode launches one work item per plan worker (the plan balances them),
// then, when the plan split pairs, one merge item per split pair.
//
// Background JIT (Engine::background_jit): a kernel not ready yet is
// replaced, launch by launch, by its generic kernel (decode_generic.h),
// while the specialized one compiles on the cache's compile workers.
#ifndef TAILOR_BACKENDS_CPU_ATTENTION_DECODE_KERNELS_H_
#define TAILOR_BACKENDS_CPU_ATTENTION_DECODE_KERNELS_H_

#include <array>
#include <atomic>
#include <memory>
#include <vector>

#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention/kernels.h"

namespace tailor::internal::cpu {

class CpuDecodeKernels final : public DecodeKernels {
 public:
  // `num_threads`: the backend's threads (pool workers plus the caller).
  explicit CpuDecodeKernels(int num_threads) : num_threads_(num_threads) {}

  // Workers: 2 per thread, tiles of 16 tokens (the template's block),
  // whatever the batch.
  absl::StatusOr<DecodePlanConfig> PlanConfig(
      const DecodeShape& shape, int64_t bucket,
      absl::Span<const int32_t> seq_lens) override;
  absl::Status Decode(Engine& engine, const DecodeLaunch& launch) override;

 private:
  // The kernel for `key`: blocking, or in background mode (for shapes the
  // generic kernels serve) the ready kernel or null (serve the generic one).
  absl::StatusOr<std::shared_ptr<Kernel>> KernelFor(Engine& engine,
                                                    const SpecKey& key,
                                                    const DecodeShape& shape);
  // The merge of split pairs (the plan has merge groups).
  absl::Status Merge(Engine& engine, const DecodeLaunch& launch);

  int num_threads_;
};

// The keys of the two kernels (Decode builds its keys with these), for tests
// and tools that enumerate kernels. DecodeShape::num_kv_heads is not in them.
SpecKey DecodeAttentionKey(const KeyTarget& target, const DecodeShape& shape);
SpecKey DecodeMergeKey(const KeyTarget& target, const DecodeShape& shape);

// The source of any CPU attention.decode* key; InvalidArgument naming the op
// for any other key.
absl::StatusOr<KernelSource> GenerateDecodeKernel(const SpecKey& key);

// Both kernels a RunDecode of `shape` can launch (attention, then merge):
// for warm-up. InvalidArgument naming dtype unless it is bf16 or f16.
absl::StatusOr<std::vector<KernelJob>> DecodeLayerKernels(
    const KeyTarget& target, const DecodeShape& shape);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_ATTENTION_DECODE_KERNELS_H_
