// backends/cpu/moe/kernels.h — the MoE kernel family on the CPU backend.
//
// Generators and launch glue for templates/cpu/moe_{pack,grouped_gemm,
// combine}.h (params: templates/cpu/moe/params.h). Host plans only: the op
// front routes and plans on the host.
//
// Keys: the typed specs of ops/moe/spec.h (MoePackSpec, MoeGemmSpec with a
// tail class per variant, MoeCombineSpec).
// GroupedGemm launches the plan's core variant and one variant per tail
// class present, as batches of independent launches (their work items share
// one parallel loop).
//
// Background JIT (Engine::background_jit): a kernel not ready yet is
// replaced, launch by launch, by its generic kernel (moe_generic.h), while
// the specialized one compiles on the cache's compile workers.
#ifndef TAILOR_BACKENDS_CPU_MOE_KERNELS_H_
#define TAILOR_BACKENDS_CPU_MOE_KERNELS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/moe/kernels.h"

namespace tailor::internal::cpu {

class CpuMoeKernels final : public MoeKernels {
 public:
  // 16 rows: a tile's W stream is reused 16 times from cache; tails are at
  // most 15 rows.
  int32_t DefaultTileRows(int64_t, int64_t, int64_t) const override {
    return 16;
  }
  // The template keeps a tile's accumulators on the stack: 128 KiB at 64.
  int32_t MaxTileRows() const override { return 64; }
  absl::Status Pack(Engine& engine, const PackLaunch& launch) override;
  absl::Status GroupedGemm(Engine& engine,
                           const GroupedGemmLaunch& launch) override;
  absl::Status Combine(Engine& engine, const CombineLaunch& launch) override;

  // Tests: generate `op`'s (moe.pack, moe.grouped_gemm, moe.combine)
  // specialized kernels with `generate` instead of the library's templates
  // (null: the library's again), e.g. a source that does not compile.
  void SetGeneratorForTesting(OpKind op, KernelGeneratorFn generate);

 private:
  // The kernel for `key`: blocking, or in background mode the ready kernel
  // or null (serve the generic one).
  absl::StatusOr<std::shared_ptr<Kernel>> KernelFor(Engine& engine,
                                                    const SpecKey& key,
                                                    KernelGeneratorFn library);

  // Test overrides by op: pack, grouped GEMM, combine.
  std::array<std::atomic<KernelGeneratorFn>, 3> test_generators_{};
};

// ---- keys and sources without a launch (tests, warm-up)
// ---------------------- The launches build their keys with these, so the two
// cannot drift.

SpecKey PackKey(const KeyTarget& target, DType dtype, int64_t hidden_dim);
// The key of one GroupedGemm variant (tail_class 0: core); reads the launch's
// dtype, n, k, tile_rows and epilogue only.
SpecKey GroupedGemmKey(const KeyTarget& target, const GroupedGemmLaunch& launch,
                       int32_t tail_class);
SpecKey GroupedGemmKey(const Engine& engine, const GroupedGemmLaunch& launch,
                       int32_t tail_class);
SpecKey CombineKey(const KeyTarget& target, DType dtype, int64_t hidden_dim,
                   int64_t topk);

// The source of any CPU moe.* key (moe.pack, moe.grouped_gemm, moe.combine);
// InvalidArgument naming the op for any other key.
absl::StatusOr<KernelSource> GenerateMoeKernel(const SpecKey& key);

// The tail classes `policy` can produce on this backend, core (0) first:
// {0, 1, 2, 4, 8, 16} for tile_rows 16 (or 0, the backend's 16) and pow2
// tails. InvalidArgument naming policy.tile_rows or policy.tail when the
// policy is out of range.
absl::StatusOr<std::vector<int32_t>> TailClassesOf(
    const moe::RoutingPolicy& policy);

// Every kernel moe::Experts can launch for `layer` under any routing and
// batch, in a stable order: pack, the gate|up GEMM (silu_and_mul) and the
// down GEMM for every tail class, combine. Errors: TailClassesOf's.
absl::StatusOr<std::vector<KernelJob>> MoeLayerKernels(
    const KeyTarget& target, const MoeLayerShape& layer);

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_MOE_KERNELS_H_
