// backends/cuda/attention/decode_kernels.h — the paged-decode kernel family on the
// CUDA backend.
//
// Generator and launch glue for templates/cuda/attention/decode_sm80.cuh (cp.async,
// any page size, sm_80+) and decode_sm90.cuh (TMA producer warp, sm_90a);
// params and shared-memory layout: templates/cuda/attention/decode_params.h.
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
// Key (static quantities only; B and lengths never appear):
//   attention.decode  dtypes {x}  dims {D, group, page}  tile.m = 64 tokens,
//                     tile.warps = 4, tile.stages = pipeline depth (from the
//                     device's shared memory and the CTAs per SM),
//                     variant = kDecodeVariant*
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
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "core/backend.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "ops/attention/kernels.h"

namespace tailor::cuda {

class CudaBackend;

// How many clusters of 8 and of 16 CTAs (one an SM: the decode kernel's
// shared memory) the device runs at once; 0 where it runs none.
struct DecodeClusterCapacity {
  int of8 = 0;
  int of16 = 0;
};

// The cluster size of a workspace of `bucket` sequences
// (plan::DecodePlanParams::cluster_workers; its launch has that size times
// capacity's count of CTAs): 16 when the bucket's (sequence, KV head) pairs
// fit one cluster each of those the device runs at once, else 8 when they
// fit those, else 0 (no clusters). `forced` (DecodeTuning::cluster): 1
// never, 8 or 16 only that size. Only where `tma` (the TMA kernel may run:
// sm_90a, its page sizes) and the receiver's slots fit beside a `stages`
// deep pipeline in `shared_limit` bytes.
// Why: at B = 1 a split pair's merge is the tail of the launch; in the
// shared memory of one cluster it skips the merge counter's and the
// partials' round trips through L2 (H100, bench/results/decode_h100.txt,
// session 19).
int DecodeClusterWorkersFor(const tailor::internal::DecodeShape& shape,
                            int64_t bucket, bool tma, int stages,
                            int64_t shared_limit,
                            const DecodeClusterCapacity& capacity, int forced);

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
  // Tests: decode keys are generated by `generate` instead (e.g. a template
  // that does not compile); null restores the library's generator.
  void SetGeneratorForTesting(tailor::internal::KernelGeneratorFn generate) {
    test_generator_.store(generate);
  }

 private:
  // SM count, opt-in shared memory per block and L2 size, queried once.
  absl::Status QueryDevice();
  // The device's DecodeClusterCapacity, queried at the first call (after
  // QueryDevice), so that only servers whose buckets could launch in
  // clusters pay for its compile (~70 ms of NVRTC).
  DecodeClusterCapacity ClusterCapacity();
  // DecodeClusterCapacity of the device (sm_90+; else zeros): the occupancy
  // of a kernel that does nothing, compiled for the purpose, with all of an
  // SM's shared memory. A failure is logged and leaves zeros.
  DecodeClusterCapacity QueryClusterCapacity(int shared_limit);
  // The depth of a launch of `workers` CTAs: what two co-resident CTAs fit
  // when there are more workers than SMs (and two fit), else what one fits.
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
  std::atomic<tailor::internal::KernelGeneratorFn> test_generator_{nullptr};
};

// The deepest pipeline (2..kDecodeMaxStages) for which `ctas_per_sm` CTAs
// fit an SM whose opt-in shared memory per block is `shared_limit` bytes
// (the SM has 1 KiB more, and every resident CTA reserves 1 KiB); 0 when
// none does.
int DecodeStagesFor(int64_t head_dim, int64_t group, int64_t shared_limit,
                    int ctas_per_sm = 1);

// CTAs of decode work per SM for plans on a workspace of `batch` sequences:
// two co-resident CTAs (each at the depth two fit) when the batch has at
// least an SM's worth of (sequence, KV head) pairs and two fit, else one.
// Two CTAs hide one's item starts and merges behind the other's streaming
// (H100, bench/results/decode_h100.txt: 3-7 % on Llama B=32 L=1024, ragged
// and one-long-plus-short batches); with fewer pairs than SMs the long pairs
// are split, and twice the workers make twice the pieces to merge (Qwen3
// B=1 L=4096: 16.0 -> 19.2 us).
int DecodeCtasPerSm(const tailor::internal::DecodeShape& shape, int64_t batch,
                    int multiprocessors, int64_t shared_limit);

// The workers a plan of `seq_lens` on a launch of `workers` CTAs fills: all,
// or one an SM when the launch has two an SM, the plan fewer pairs than
// SMs and less than kDecodeNarrowTilesPerWorker tiles a worker. (H100, a
// workspace for 256 with two CTAs an SM: B=1 and Qwen3 B=32 L=1024 run as
// fast as on one CTA an SM only narrowed; B=8 L=32768 runs 4-5 % slower
// narrowed, as one CTA an SM of two stages streams less than two.)
inline constexpr int64_t kDecodeNarrowTilesPerWorker = 16;
int DecodeCutWorkers(const tailor::internal::DecodeShape& shape,
                     absl::Span<const int32_t> seq_lens, int workers,
                     int multiprocessors);

// Sum of `seq_lens` (negatives as 0) times the KV heads: the batch's KV
// tokens, what the cut and the L2 policy are sized by.
int64_t DecodeKvTokens(const tailor::internal::DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens);

// The most tokens (DecodeKvTokens) of a batch whose K and V the kernels
// stream with an L2 evict-first policy (PlanConfig then sets
// kDecodeLaunchEvictFirst in the plan's launch flags):
// kDecodeEvictFirstMaxL2s times the L2 in KV bytes. H100 (50 MiB L2,
// cuda_decode_bench, the anchors' protocol: L2 full of dirty lines before
// each run): evict-first takes Qwen3 B=1 L=32768 (67 MB) 41.4 -> 36.5 us
// and Llama (134 MB) 65.0 -> 60.6 us, is even at 268 MB (Qwen3 B=128
// L=1024) and costs 2-3 % from 537 MB up (Llama B=128 L=4096 725 -> 742
// us).
inline constexpr int64_t kDecodeEvictFirstMaxL2s = 4;
int64_t DecodeEvictFirstMaxTokens(const tailor::internal::DecodeShape& shape,
                                  int64_t l2_bytes);

// Whether the TMA kernel can serve `page_size` (the template's rule).
bool DecodeTmaPageSize(int64_t page_size);

// Whether the TMA kernel of `shape` at `stages` runs head groups
// (kDecodeLaunchHeadGroups): sm_90a, pages of 16, KV heads a multiple of
// kDecodeHeadGroup, the warps' query rows in its shared memory (the
// template's kHeadGroups).
bool DecodeHeadGroupsFit(const tailor::internal::DecodeShape& shape, int stages,
                         absl::string_view arch);

// The head group of a plan of `seq_lens` on `workers` CTAs
// (plan::DecodePlanParams::head_group): kDecodeHeadGroup where `fits`
// (DecodeHeadGroupsFit) and the batch has at least
// kDecodeHeadGroupMinTilesPerWorker tiles of 64 tokens per worker, else 1;
// `forced` (DecodeTuning::head_group) 1 or kDecodeHeadGroup overrides the
// length rule. With no lengths (a workspace reservation): the largest any
// plan may get (kDecodeHeadGroup where it fits, forced or not), which sizes
// the work list and partial slots.
// A head group's pieces are 4x coarser, so small batches keep one head an
// item: B=1 L=4096 would split 4096 tokens into pieces of all 4 heads, and
// each pair's merge would wait on 4x the pieces' ends.
inline constexpr int64_t kDecodeHeadGroupMinTilesPerWorker = 16;
int DecodeHeadGroupFor(const tailor::internal::DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens, int workers,
                       bool fits, int forced);

// Whether a grouped plan of `seq_lens` on `workers` CTAs may split head
// groups (plan::DecodePlanParams::head_group_always): at least
// kDecodeHeadGroupSplitMinTilesPerWorker tiles of 64 tokens per worker.
// Below that the planner takes groups only whole (none split). A split
// group's pieces end together, so its heads' merges (one warp each) all run
// in the CTA of its last piece, at the end of the launch; a worker must
// stream long enough for the 4 KB -> 16 KB copies to pay that tail. H100,
// session 18 (forced groups vs none, cuda_decode_bench): 124 tiles a worker
// gained 0.5-1.1 % (Llama B=8 L=32768, B=32 L=8192, ragged; Qwen3 B=128
// L=4096), 62 lost 0.3-3.3 % (Qwen3 B=8 L=32768, B=32 L=8192, ragged,
// B=128 L=1024); the bound sits between.
inline constexpr int64_t kDecodeHeadGroupSplitMinTilesPerWorker = 96;
bool DecodeHeadGroupsSplit(const tailor::internal::DecodeShape& shape,
                           absl::Span<const int32_t> seq_lens, int workers);

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
