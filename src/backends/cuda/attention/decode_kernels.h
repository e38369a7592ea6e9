// backends/cuda/attention/decode_kernels.h — the paged-decode kernel family on
// the CUDA backend.
//
// Generator and launch glue for templates/cuda/attention/decode_sm80.cuh
// (cp.async, any page size, sm_80+) and decode_sm90.cuh (TMA producer warp,
// sm_90a); params and shared-memory layout:
// templates/cuda/attention/decode_params.h.
//
// One launch per RunDecode: grid = the plan's workers (DecodeCtasPerSm
// CTAs per SM, from the workspace's batch bucket), whatever B is, so a
// captured graph replays any plan of its bucket. The
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
// Key: a DecodeSpec (ops/attention/decode_spec.h) of 64-token tiles, 4
// consumer warps, the pipeline depth (from the device's shared memory and
// the CTAs per SM) and the kernel (kPortable: cp.async, or kTma),
// so a model needs two kernels (one CTA an SM and two), four if some
// layer's cache is not TMA-legal.
//
// Background JIT (generic_kernels.h): while the key compiles, the launch
// runs the generic cp.async kernel of its dtype and head dim (runtime group
// and page size, 2 stages, no TMA) on the same plan, grid and scratch.
//
// Scratch (DecodeScratchBytes): [partials] i32 merge counters, then
// kDecodeErrorWords u64 error words (all ones: no error).
#ifndef TAILOR_BACKENDS_CUDA_ATTENTION_DECODE_KERNELS_H_
#define TAILOR_BACKENDS_CUDA_ATTENTION_DECODE_KERNELS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backends/cuda/attention/heuristics.h"
#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "core/backend.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention/kernels.h"

namespace tailor::cuda {

class CudaBackend;

// What the decode launch rules read of a device: queried once by
// CudaDecodeKernels, or described for a device that is not here (tests, the
// variant count of tests/backends/cuda/attention/variant_count_test.cc).
struct CudaDecodeDevice {
  std::string arch;  // "sm_90a"
  int multiprocessors = 0;
  int64_t shared_limit = 0;  // opt-in shared memory per block, bytes
  int64_t l2_bytes = 0;
};

// The pipeline depth of a launch of `workers` CTAs on `device`
// (DecodeLaunchStages, capped by tuning.stages): a field of the kernel's
// key. Unimplemented when two stages of `shape` do not fit.
absl::StatusOr<int> CudaDecodeStagesFor(
    const tailor::internal::DecodeShape& shape, int64_t workers,
    const CudaDecodeDevice& device, const DecodeTuning& tuning);

// CudaDecodeKernels::PlanConfig's rules on `device` with `tuning` (whose
// head_group is the forced one, if any). `cluster_capacity` is called only
// for a bucket that could launch in clusters: on a device it compiles a
// probe kernel the first time.
absl::StatusOr<tailor::internal::DecodePlanConfig> CudaDecodePlanConfig(
    const tailor::internal::DecodeShape& shape, int64_t bucket,
    absl::Span<const int32_t> seq_lens, const CudaDecodeDevice& device,
    const DecodeTuning& tuning,
    absl::FunctionRef<DecodeClusterCapacity()> cluster_capacity);

class CudaDecodeKernels final : public tailor::internal::DecodeKernels {
 public:
  enum class Path { kAuto = 0, kCpAsync = 1, kTma = 2 };

  // `tuning` (the decode.* tuning keys) fixes parts of the plan's shape.
  CudaDecodeKernels(CudaBackend& backend, const DecodeTuning& tuning)
      : backend_(backend), tuning_(tuning) {}

  // Workers: DecodeCtasPerSm(shape, bucket) per SM (or DecodeTuning's);
  // tiles of 64 tokens. The cut: DecodeCutWorkers. Unimplemented when even
  // two pipeline stages of `shape` do not fit the device's shared memory.
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

  // Tests and benches: force a path (kTma fails with FailedPrecondition
  // where it is not legal), and see which one the last launch took.
  void ForcePathForTesting(Path path) { forced_.store(path); }
  // Tests: plans get this head group (1 or kDecodeHeadGroup) where the
  // kernel allows head groups, whatever their lengths (kDecodeHeadGroup:
  // and never clusters); 0 restores the default (DecodeTuning, then
  // DecodeHeadGroupFor's rule).
  void ForceHeadGroupForTesting(int head_group) {
    forced_head_group_.store(head_group);
  }
  Path last_path() const { return last_.load(); }

 private:
  // SM count, opt-in shared memory per block and L2 size, queried once.
  absl::Status QueryDevice();
  // The device QueryDevice read.
  CudaDecodeDevice Device() const;
  // The device's DecodeClusterCapacity, queried at the first call (after
  // QueryDevice), so that only servers whose buckets could launch in
  // clusters pay for its compile.
  DecodeClusterCapacity ClusterCapacity();
  // DecodeClusterCapacity of the device (sm_90+; else zeros): the occupancy
  // of a kernel that does nothing, compiled for the purpose, with all of an
  // SM's shared memory. A failure is logged and leaves zeros.
  DecodeClusterCapacity QueryClusterCapacity(int shared_limit);
  // CudaDecodeStagesFor on this device.
  absl::StatusOr<int> StagesFor(const tailor::internal::DecodeShape& shape,
                                int64_t workers);

  CudaBackend& backend_;
  const DecodeTuning tuning_;
  std::atomic<int> multiprocessors_{0};
  std::atomic<int> shared_limit_{0};
  std::atomic<int64_t> l2_bytes_{0};
  std::once_flag cluster_query_;
  DecodeClusterCapacity cluster_capacity_;  // written once, under it
  std::atomic<Path> forced_{Path::kAuto};
  std::atomic<int> forced_head_group_{0};
  std::atomic<Path> last_{Path::kAuto};
};

// The launch rules (DecodeStagesFor, DecodeCtasPerSm, DecodeCutWorkers, the
// L2 policy, head groups, clusters) are in backends/cuda/attention/
// heuristics.h.

// Whether the TMA kernel can serve `page_size` (the template's rule).
bool DecodeTmaPageSize(int64_t page_size);

// Whether the TMA kernel of `shape` at `stages` runs head groups
// (kDecodeLaunchHeadGroups): sm_90a, pages of 16, KV heads a multiple of
// kDecodeHeadGroup, the warps' query rows in its shared memory (the
// template's kHeadGroups).
bool DecodeHeadGroupsFit(const tailor::internal::DecodeShape& shape, int stages,
                         absl::string_view arch);

// The rank-5 map over one cache tensor ([num_pages, page_size, Hkv, D] with
// element strides {page, token, head}; see decode_params.h): boxes of one
// KV head, or with `box_heads` = kDecodeHeadGroup the head groups' boxes.
TensorMapSpec DecodeCacheMapSpec(const tailor::internal::DecodeShape& shape,
                                 int64_t num_pages, const void* cache,
                                 const int64_t (&strides)[3],
                                 int box_heads = 1);

// The key of one decode kernel variant (tests, tools, the bench's variant
// count). `variant` is kDecodeVariantCpAsync or kDecodeVariantTma.
tailor::internal::SpecKey CudaDecodeKey(
    const tailor::internal::Engine& engine,
    const tailor::internal::DecodeShape& shape, uint32_t variant,
    int32_t stages);

tailor::internal::SpecKey CudaDecodeKey(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::DecodeShape& shape, uint32_t variant,
    int32_t stages);

// The opt-in shared memory per block of a device of `arch` ("sm_90a": 227
// KiB), for keys built without a device; 0 for an arch it does not know.
int64_t SharedLimitOfArch(absl::string_view arch);

// The decode kernels a RunDecode of `shape` can launch on a device of
// `target.arch`, without the device (warm-up): the cp.async variant, and on
// sm_90a the TMA variant when the page size allows it (a cache whose strides
// are not TMA-legal falls back to cp.async), at the depths that arch's shared
// memory gives one CTA and two CTAs an SM (capped by decode.stages).
// Unimplemented for an unknown arch or a shape no depth fits;
// InvalidArgument naming the key field the templates cannot build. Without
// the CUDA headers (cuda_backend_unavailable.cc): Unavailable.
absl::StatusOr<std::vector<tailor::internal::KernelJob>> DecodeLayerKernels(
    const tailor::internal::KeyTarget& target,
    const tailor::internal::DecodeShape& shape, const DecodeTuning& tuning);

// The source of a decode key: includes plus one TAILOR_CUDA_ENTRY.
// InvalidArgument naming the key field the templates cannot build.
absl::StatusOr<tailor::internal::KernelSource> GenerateCudaDecode(
    const tailor::internal::SpecKey& key);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_ATTENTION_DECODE_KERNELS_H_
