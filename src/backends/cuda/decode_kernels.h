// backends/cuda/decode_kernels.h — the paged-decode kernel family on the
// CUDA backend.
//
// Generator and launch glue for templates/cuda/decode_sm80.cuh (cp.async,
// any page size, sm_80+) and decode_sm90.cuh (TMA producer warp, sm_90a);
// params and shared-memory layout: templates/cuda/decode_params.h.
//
// One launch per RunDecode: grid = the plan's workers (one CTA per SM),
// whatever B is, so a captured graph replays any plan of its bucket. The
// plan (work items, worker ranges) lives in the device workspace; split
// pairs are merged in the same launch by the CTA that finishes last (merge
// counters in the scratch, reset by that CTA).
//
// Path choice per launch: the TMA kernel when the device is sm_90a, the
// page size is a multiple of 8 that divides 64 or is a multiple of 64, and
// the two cache maps (rank 5, page id as the outer coordinate, see
// decode_params.h) pass the TMA legality checker and encode (descriptor
// pool: one encode per cache tensor); the cp.async kernel otherwise.
//
// Key (static quantities only; B and lengths never appear):
//   attention.decode  dtypes {x}  dims {D, group, page}  tile.m = 64 tokens,
//                     tile.warps = 4, tile.stages = pipeline depth (from the
//                     device's shared memory), variant = kDecodeVariant*
// so a model needs one kernel (two if some layer's cache is not
// TMA-legal).
//
// Scratch (DecodeScratchBytes): [partials] i32 merge counters, then
// kDecodeErrorWords u64 error words (all ones: no error).
#ifndef TAILOR_BACKENDS_CUDA_DECODE_KERNELS_H_
#define TAILOR_BACKENDS_CUDA_DECODE_KERNELS_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "core/backend.h"
#include "core/spec_key.h"
#include "ops/attention_kernels.h"

namespace tailor::cuda {

class CudaBackend;

class CudaDecodeKernels final : public tailor::internal::DecodeKernels {
 public:
  enum class Path { kAuto = 0, kCpAsync = 1, kTma = 2 };

  explicit CudaDecodeKernels(CudaBackend& backend) : backend_(backend) {}

  // Workers: one per SM; tiles of 64 tokens. Unimplemented when even two
  // pipeline stages of `shape` do not fit the device's shared memory.
  absl::StatusOr<tailor::internal::DecodePlanConfig> PlanConfig(
      const tailor::internal::DecodeShape& shape) override;
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

  // Tests and benches: force a path (kTma fails with FailedPrecondition
  // where it is not legal), and see which one the last launch took.
  void ForcePathForTesting(Path path) { forced_.store(path); }
  Path last_path() const { return last_.load(); }

 private:
  // SM count and opt-in shared memory per block, queried once.
  absl::Status QueryDevice();
  absl::StatusOr<int> StagesFor(const tailor::internal::DecodeShape& shape);

  CudaBackend& backend_;
  std::atomic<int> multiprocessors_{0};
  std::atomic<int> shared_limit_{0};
  std::atomic<Path> forced_{Path::kAuto};
  std::atomic<Path> last_{Path::kAuto};
};

// The deepest pipeline (2..kDecodeMaxStages) whose shared memory fits
// `shared_limit` bytes; 0 when none does.
int DecodeStagesFor(int64_t head_dim, int64_t group, int64_t shared_limit);

// Whether the TMA kernel can serve `page_size` (the template's rule).
bool DecodeTmaPageSize(int64_t page_size);

// The rank-5 map over one cache tensor ([num_pages, page_size, Hkv, D] with
// element strides {page, token, head}; see decode_params.h).
TensorMapSpec DecodeCacheMapSpec(const tailor::internal::DecodeShape& shape,
                                 int64_t num_pages, const void* cache,
                                 const int64_t (&strides)[3]);

// The key of one decode kernel variant (tests, tools, the bench's variant
// count). `variant` is kDecodeVariantCpAsync or kDecodeVariantTma.
tailor::internal::SpecKey CudaDecodeKey(
    const tailor::internal::Engine& engine,
    const tailor::internal::DecodeShape& shape, uint32_t variant,
    int32_t stages);

// The source of a decode key: includes plus one TAILOR_CUDA_ENTRY.
// InvalidArgument naming the key field the templates cannot build.
absl::StatusOr<tailor::internal::KernelSource> GenerateCudaDecode(
    const tailor::internal::SpecKey& key);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_DECODE_KERNELS_H_
