// plan/decode_plan.h — balanced split-KV work lists for paged decode.
//
// Decode attention reads every KV token of every (sequence, KV head) pair
// once. Lengths differ by orders of magnitude (one 16k-token sequence among
// 127 short ones; B = 1), so one worker (a CUDA CTA, a CPU task) per pair
// leaves most of the machine idle. The planner is the inspector of the
// decode op: it lays the pairs end to end in one *cost stream* (sequence
// major, KV head minor; a pair costs item_cost_tokens plus its length
// rounded up to whole pages) and cuts the stream into num_workers ranges of
// equal cost. A pair that a cut falls into is split into *pieces* at a
// multiple of tile_tokens; the pieces of one pair land on consecutive
// workers, write partial results (output and log-sum-exp) to *partial
// slots*, and a merge combines them.
//
//   cost stream:  | pair (0,0) | pair (0,1) ...  | pair (1,0) | ...
//   workers:      |   w0   |   w1   |   w2   |   w3   |   w4   | ...
//   a pair cut by k worker boundaries becomes k + 1 pieces
//
// With head_group g > 1 the stream's units are (sequence, g consecutive KV
// heads) instead of pairs: every piece of a unit is g items, one per head,
// with the same token range, consecutive on one worker (a CUDA CTA whose
// warps each take one head loads a page of all g heads in one copy). Each
// head still has its own pieces, partial slots and merge; a cut then splits
// up to g pairs at once.
//
// So every worker gets the average cost up to one tile (plus item costs),
// whatever the lengths are, and only O(num_workers) pieces need a merge:
//   items     <= batch * num_kv_heads + g * (num_workers - 1)
//   partials  <= 2 * g * (num_workers - 1)   (MaxDecodePartials)
// A worker that a cut gives the end of one pair and the start of the next
// runs two items and pays two items' fixed costs. So when there are no more
// pairs than workers, the planner also prices a *whole-workers* cut (each
// pair split evenly over its tiles into pieces of at most P tiles, one
// worker per piece, the smallest P that fits) and takes it when its busiest
// worker costs no more (B = 1: 8 heads x 16 workers instead of 132 ranges).
// And when many similar pairs fill the workers, it prices a *whole-pairs*
// cut (the stream cut only at pair boundaries, at the least busiest-worker
// cost that fits) and takes it when that costs no more: nothing is split,
// so nothing is merged (Qwen3 B = 128, L = 1024, 264 workers: 2 pairs a
// worker instead of 224 split pairs).
// A worker's items are contiguous in items(): [worker_begin()[w],
// worker_begin()[w + 1]). Sequences of length 0 get one item of no tokens
// (their output is zeros, their log-sum-exp -inf).
//
// Plan/run split: BuildDecodePlan refills a caller-owned DecodePlan; after
// Reserve() (or once the buffers have grown to the largest batch seen) it
// never allocates. Nothing here depends on a backend: the backend supplies
// num_workers, tile_tokens and item_cost_tokens (ops/attention/kernels.h).
//
// Example (one KV head, 4 workers, tiles of 16 tokens, pages of 16, no item
// cost): lengths {64, 0, 16} cost 64 + 0 + 16 = 80, 20 per worker. The
// stream cut (cuts at 20, 40, 60 rounded to tiles) runs
//   {seq 0, [0, 16)} {seq 0, [16, 48)} {seq 0, [48, 64)} {seq 1, [0, 0)}
//   {seq 2, [0, 16)}: busiest worker 32 tokens, seq 0 in 3 pieces;
// the whole-workers cut (pieces of at most 2 tiles) runs
//   {seq 0, [0, 32), slot 0} {seq 0, [32, 64), slot 1} {seq 1, [0, 0)}
//   {seq 2, [0, 16)}: busiest worker 32 tokens too, 2 pieces: the plan.
#ifndef TAILOR_PLAN_DECODE_PLAN_H_
#define TAILOR_PLAN_DECODE_PLAN_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tailor::plan {

// Limits of a decode plan: token positions and slots are int32 on devices.
inline constexpr int64_t kMaxDecodeSeqLen = int64_t{1} << 30;
inline constexpr int64_t kMaxDecodeBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxDecodeKvHeads = 1024;
inline constexpr int64_t kMaxDecodeWorkers = int64_t{1} << 16;
inline constexpr int32_t kMaxDecodeClusterWorkers = 16;
// How much busier than the stream cut's a cluster-aligned whole-workers
// cut's busiest worker may be and still be taken (cluster_workers): at
// B = 1 half the workers read about as fast as all of them, and the merge
// in shared memory is shorter than the one through L2
// (bench/results/decode_design.txt, "Cluster merges").
inline constexpr int64_t kDecodeClusterCostRatio = 2;

// How to cut. An aggregate; rules (ValidateDecodePlanParams):
//   num_kv_heads      in [1, kMaxDecodeKvHeads]
//   num_workers       in [1, kMaxDecodeWorkers]: the launch's workers
//   cut_workers       in [0, num_workers]: the workers the cut spreads the
//                     work over (0: all); the rest get no items. A backend
//                     whose launch is fixed per workspace (a captured graph)
//                     narrows small batches this way.
//   tile_tokens       in [1, 4096]: pieces begin at multiples of it
//   page_size         in [1, 4096]: a pair costs its length rounded up to
//                     pages (what is read)
//   item_cost_tokens  in [0, 1 << 20]: fixed cost of one item, in tokens
//   head_group        in [1, num_kv_heads], dividing it: KV heads whose
//                     items may run together (file comment); 1: none. The
//                     plan groups them only when that splits no pair and
//                     its busiest worker costs at most 1/32 more than with
//                     one head an item, else it plans one head an item;
//                     params() says which. (Whole groups pay a little
//                     more cost; split groups cost their pieces' merges:
//                     bench/results/decode_design.txt, "Head groups". A
//                     backend whose split groups pay sets
//                     head_group_always.)
struct DecodePlanParams {
  int32_t num_kv_heads = 0;
  int32_t num_workers = 0;
  int32_t tile_tokens = 0;
  int32_t page_size = 0;
  int32_t item_cost_tokens = 0;
  int32_t cut_workers = 0;
  int32_t head_group = 1;
  // Group heads whatever that costs, splitting groups if need be: A/B runs,
  // tests, and a backend that knows its split groups pay (the CUDA one, for
  // long streams a worker: cuda::DecodeHeadGroupsSplit).
  bool head_group_always = false;
  // 0, or in [2, kMaxDecodeClusterWorkers] dividing num_workers: workers
  // come in clusters of this many (CUDA thread-block clusters, whose CTAs
  // merge a pair's pieces in on-chip memory when all of them run in one
  // cluster). The whole-workers cut then gives a pair at most this many
  // pieces and never splits one over two clusters (a pair that does not
  // fit what is left of a cluster starts the next), and it is taken when
  // its busiest worker costs at most kDecodeClusterCostRatio times the
  // stream cut's: the on-chip merge saves more than the imbalance costs.
  int32_t cluster_workers = 0;
  friend bool operator==(const DecodePlanParams&,
                         const DecodePlanParams&) = default;
};

// The workers a cut with `params` fills: cut_workers, or all of them.
inline int64_t DecodeCutWorkers(const DecodePlanParams& params) {
  return params.cut_workers > 0 ? params.cut_workers : params.num_workers;
}

absl::Status ValidateDecodePlanParams(const DecodePlanParams& params);

// One piece of one (sequence, KV head) pair: eight int32 (32 bytes), copied
// as is into device buffers. Backends mirror it in their params headers.
struct DecodeWorkItem {
  int32_t seq;            // b
  int32_t kv_head;        // h
  int32_t kv_begin;       // first token, a multiple of tile_tokens
  int32_t kv_end;         // one past the last token; kv_begin < kv_end
                          // unless the sequence is empty
  int32_t seq_len;        // the planned length of sequence b
  int32_t partial;        // -1: the pair in one piece; else its slot
  int32_t first_partial;  // -1, or the first slot of the pair's pieces
  int32_t pieces;         // 1, or how many pieces the pair has (>= 2)

  friend bool operator==(const DecodeWorkItem&,
                         const DecodeWorkItem&) = default;
};
static_assert(sizeof(DecodeWorkItem) == 32);
static_assert(std::is_trivially_copyable_v<DecodeWorkItem> &&
              std::is_standard_layout_v<DecodeWorkItem>);

// A split pair: its pieces wrote slots [first_partial, first_partial +
// pieces).
struct DecodeMergeGroup {
  int32_t seq;
  int32_t kv_head;
  int32_t first_partial;
  int32_t pieces;

  friend bool operator==(const DecodeMergeGroup&,
                         const DecodeMergeGroup&) = default;
};
static_assert(sizeof(DecodeMergeGroup) == 16);

// What a plan looks like, for logs, tests and benches.
struct DecodePlanStats {
  int64_t tokens = 0;           // sum of lengths times KV heads
  int32_t items = 0;            // pieces, whole pairs included
  int32_t split_pairs = 0;      // pairs in more than one piece
  int32_t partials = 0;         // slots used
  int32_t busy_workers = 0;     // workers with at least one item
  int64_t max_worker_cost = 0;  // tokens (pages rounded) + item costs
  double mean_worker_cost = 0;  // over the cut's workers
};

// Items a plan of `batch` sequences can have; the device buffer size.
int64_t MaxDecodeItems(int64_t batch, int64_t num_kv_heads, int64_t num_workers,
                       int64_t head_group = 1);
// Partial slots any plan for `num_workers` workers can use.
int64_t MaxDecodePartials(int64_t num_workers, int64_t head_group = 1);

class DecodePlan {
 public:
  DecodePlan() = default;

  const DecodePlanParams& params() const { return params_; }
  int32_t batch() const { return static_cast<int32_t>(seq_lens_.size()); }
  // [batch] the lengths planned.
  absl::Span<const int32_t> seq_lens() const { return seq_lens_; }
  int32_t max_seq_len() const { return max_seq_len_; }
  // [num_items] worker by worker; see the file comment.
  absl::Span<const DecodeWorkItem> items() const {
    return {items_.data(), num_items_};
  }
  // [num_workers + 1] worker w runs items [worker_begin[w],
  // worker_begin[w + 1]); empty before the first build.
  absl::Span<const int32_t> worker_begin() const { return worker_begin_; }
  // [num_workers] a copy of each worker's first item (zeros for an idle
  // worker): a device worker reads it beside worker_begin, one memory round
  // trip instead of two before its first load.
  absl::Span<const DecodeWorkItem> first_items() const { return first_items_; }
  // [split pairs] by first slot.
  absl::Span<const DecodeMergeGroup> merge_groups() const {
    return {merge_groups_.data(), num_merge_groups_};
  }
  int32_t num_partials() const { return num_partials_; }
  // With clusters (params().cluster_workers): whether every split pair's
  // pieces run on consecutive workers of one cluster, piece i on the
  // worker of piece 0 plus i (the whole-workers cut, or nothing split).
  // Other cuts may skip a worker between two pieces.
  bool cluster_merges() const { return cluster_merges_; }
  DecodePlanStats stats() const;

  // Grows every buffer for plans of up to `max_batch` sequences with
  // `params`, so that building such plans never allocates.
  // InvalidArgument for arguments out of range.
  absl::Status Reserve(int64_t max_batch, const DecodePlanParams& params);
  size_t CapacityBytes() const;

  // "batch=2 items=5 split=1 partials=3 workers=4/4 max_cost=20 mean=20.0"
  std::string ToString() const;

 private:
  friend absl::Status BuildDecodePlan(absl::Span<const int32_t> seq_lens,
                                      const DecodePlanParams& params,
                                      DecodePlan* plan);
  void Clear();
  void ResetItems();
  void Cut(absl::Span<const int32_t> seq_lens, const DecodePlanParams& params,
           int64_t total);
  void CutStream(int64_t total);
  void CutWholeWorkers(int64_t piece_tiles);
  void CutWholePairs(int64_t max_cost);
  int64_t MaxWorkerCost() const;
  void FinishWorkers();
  void Emit(const DecodeWorkItem& item, int32_t worker);
  void EmitUnit(int32_t seq, int32_t unit, int64_t begin, int64_t end,
                int32_t worker);
  void NumberPieces(size_t first_item);

  DecodePlanParams params_;
  std::vector<int32_t> seq_lens_;  // [batch]
  int32_t max_seq_len_ = 0;
  // [>= num_items_]; only grows, so a build never zeroes what it rewrites.
  std::vector<DecodeWorkItem> items_;
  size_t num_items_ = 0;
  std::vector<int32_t> worker_begin_;           // [num_workers + 1]
  std::vector<DecodeWorkItem> first_items_;     // [num_workers]
  std::vector<int64_t> worker_cost_;            // [num_workers]
  std::vector<DecodeMergeGroup> merge_groups_;  // [>= num_merge_groups_]
  size_t num_merge_groups_ = 0;
  int32_t num_partials_ = 0;
  int32_t last_worker_ = 0;     // worker of the last emitted item
  bool whole_workers_ = false;  // the last Cut took CutWholeWorkers
  bool cluster_merges_ = false;
};

// Plans `seq_lens` ([batch] lengths, each in [0, kMaxDecodeSeqLen]; batch
// <= kMaxDecodeBatch) into `*plan`, reusing its buffers. On error the plan
// is left empty (batch 0). InvalidArgument naming "seq_lens[i]" or the
// params field.
absl::Status BuildDecodePlan(absl::Span<const int32_t> seq_lens,
                             const DecodePlanParams& params, DecodePlan* plan);

}  // namespace tailor::plan

#endif  // TAILOR_PLAN_DECODE_PLAN_H_
