// backends/cuda/attention/heuristics.h — the paged-decode family's launch
// rules on the CUDA backend: pipeline depth, CTAs per SM, the plan's cut,
// the L2 policy, head groups and clusters. Pure host functions of the
// shape, the batch and the device's size, deterministic, pinned by
// tests/backends/cuda/attention/heuristics_test.cc.
//
// What the kernels themselves require (TMA page sizes, whether head groups
// fit the kernel's shared memory) is legality, in decode_kernels.h; the
// shared-memory layout is in templates/cuda/attention/decode_params.h. Each
// rule below says what it decides and why; the measurements behind it are
// in bench/results/decode_design.txt under the heading named.
#ifndef TAILOR_BACKENDS_CUDA_ATTENTION_HEURISTICS_H_
#define TAILOR_BACKENDS_CUDA_ATTENTION_HEURISTICS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "ops/attention/kernels.h"

namespace tailor::cuda {

// What a work item costs the planner besides its tokens, in tokens: query
// rows, the first tile's block-table lookup and load, the warps' merge, the
// output row or partial (plan::DecodePlanParams::item_cost_tokens).
// Heading: "Item cost".
inline constexpr int32_t kDecodeItemCostTokens = 128;

// The deepest pipeline (2..kDecodeMaxStages) for which `ctas_per_sm` CTAs
// fit an SM whose opt-in shared memory per block is `shared_limit` bytes
// (the SM has 1 KiB more, and every resident CTA reserves 1 KiB); 0 when
// none does.
int DecodeStagesFor(int64_t head_dim, int64_t group, int64_t shared_limit,
                    int ctas_per_sm = 1);

// The depth of a launch of `workers` CTAs on `multiprocessors` SMs: what two
// co-resident CTAs fit when there are more workers than SMs (and two fit),
// else what one fits; `max_stages` (decode.stages, 0: none) caps it; 0 when
// not even two stages fit. The depth is in the kernel's key: it follows the
// workspace's workers (its bucket), never a step's lengths.
int DecodeLaunchStages(int64_t head_dim, int64_t group, int64_t workers,
                       int multiprocessors, int64_t shared_limit,
                       int max_stages);

// CTAs of decode work per SM for plans on a workspace of `batch` sequences:
// two co-resident CTAs (each at the depth two fit) when the batch has at
// least an SM's worth of (sequence, KV head) pairs and two fit, else one.
// Two CTAs hide one's item starts and merges behind the other's streaming;
// with fewer pairs than SMs the long pairs are split, and twice the workers
// would make twice the pieces to merge. Heading: "CTAs per SM".
int DecodeCtasPerSm(const tailor::internal::DecodeShape& shape, int64_t batch,
                    int multiprocessors, int64_t shared_limit);

// The workers a plan of `seq_lens` on a launch of `workers` CTAs fills: all,
// or one an SM when the launch has two an SM, the plan fewer pairs than
// SMs and less than kDecodeNarrowTilesPerWorker tiles a worker (one CTA an
// SM then streams as fast, with half the pieces). Heading: "Narrow cut".
inline constexpr int64_t kDecodeNarrowTilesPerWorker = 16;
int DecodeCutWorkers(const tailor::internal::DecodeShape& shape,
                     absl::Span<const int32_t> seq_lens, int workers,
                     int multiprocessors);

// Sum of `seq_lens` (negatives as 0) times the KV heads: the batch's KV
// tokens, what the cut and the L2 policy are sized by.
int64_t DecodeKvTokens(const tailor::internal::DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens);

// The most tokens (DecodeKvTokens) of a batch whose K and V the kernels
// stream with an L2 evict-first policy (kDecodeLaunchEvictFirst):
// kDecodeEvictFirstMaxL2s times the L2 in KV bytes. Read once, K and V then
// displace each other rather than the lines the L2 holds; past a few L2s of
// KV the policy costs more than it saves. Heading: "KV evict-first".
inline constexpr int64_t kDecodeEvictFirstMaxL2s = 4;
int64_t DecodeEvictFirstMaxTokens(const tailor::internal::DecodeShape& shape,
                                  int64_t l2_bytes);

// The head group of a plan of `seq_lens` on `workers` CTAs
// (plan::DecodePlanParams::head_group): kDecodeHeadGroup where `fits`
// (DecodeHeadGroupsFit) and the batch has at least
// kDecodeHeadGroupMinTilesPerWorker tiles of 64 tokens per worker, else 1;
// `forced` (a developer override) 1 or kDecodeHeadGroup overrides the
// length rule. With no lengths (a workspace reservation): the largest any
// plan may get (kDecodeHeadGroup where it fits, forced or not), which sizes
// the work list and partial slots. A head group's pieces are 4x coarser, so
// small batches keep one head an item. Heading: "Head groups".
inline constexpr int64_t kDecodeHeadGroupMinTilesPerWorker = 16;
int DecodeHeadGroupFor(const tailor::internal::DecodeShape& shape,
                       absl::Span<const int32_t> seq_lens, int workers,
                       bool fits, int forced);

// Whether a grouped plan of `seq_lens` on `workers` CTAs may split head
// groups (plan::DecodePlanParams::head_group_always): at least
// kDecodeHeadGroupSplitMinTilesPerWorker tiles of 64 tokens per worker.
// A split group's heads all merge in the CTA of its last piece, at the end
// of the launch: a worker must stream long enough for the wider copies to
// pay that tail. Heading: "Head groups".
inline constexpr int64_t kDecodeHeadGroupSplitMinTilesPerWorker = 96;
bool DecodeHeadGroupsSplit(const tailor::internal::DecodeShape& shape,
                           absl::Span<const int32_t> seq_lens, int workers);

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
// fit those, else 0 (no clusters). `forced` (a developer override): 1
// never, 8 or 16 only that size. Only where `tma` (the TMA kernel may run)
// and the receiver's slots fit beside a `stages` deep pipeline in
// `shared_limit` bytes. At B = 1 a split pair's merge is the tail of the
// launch; in one cluster's shared memory it skips the merge counter's and
// the partials' round trips through L2. Heading: "Cluster merges".
int DecodeClusterWorkersFor(const tailor::internal::DecodeShape& shape,
                            int64_t bucket, bool tma, int stages,
                            int64_t shared_limit,
                            const DecodeClusterCapacity& capacity, int forced);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_ATTENTION_HEURISTICS_H_
