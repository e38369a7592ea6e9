// plan/attention_plan.h — the inspector of ragged paged attention: query
// tiles, KV ranges, tile classes, splits and their merges, and the balanced
// assignment of the tiles to workers.
//
// A serving step mixes every row kind: new prompts (q_len = kv_len), chunks
// of long prompts over a cached prefix (q_len < kv_len), speculative rows
// (q_len 2..8) and decode rows (q_len 1). Each sequence b has q_len[b] query
// tokens, aligned to the END of its kv_len[b] KV positions (query token t
// sits at position kv_len - q_len + t, as in vLLM and FlashInfer).
//
// Rows. The query heads of one KV head share every K and V tile, so a tile
// packs `head_pack` of them into its rows (GQA packing): packed row r of
// sequence b is token r / head_pack, query head q_head + r % head_pack. A
// decode row of Qwen3 (group 8) is then 8 rows of one tile instead of 1 row
// of 8 tiles, and 4 speculative tokens fill 32 rows.
//
// Core plus tail. The q_len[b] * head_pack packed rows of each (sequence,
// head pack) are cut into tiles of tile_rows rows: floor(rows / tile_rows)
// full tiles plus at most one tail tile. Each tile attends the KV range its
// rows need: [0, kv_len) without a mask; with causal, up to the diagonal of
// its last token; with a sliding window of window_left, from the window
// start of its first token. That range is walked in blocks of kv_block
// positions, and a block needs a mask only where a row's limit falls inside
// it: the causal diagonal, the window's left edge, or the sequence's end.
// Every other block runs the mask-free path. So a tile's class is a
// combination of AttentionTileClass bits:
//   full, unmasked     (0)                    the core: no per-element work
//   kAttentionTailRows        rows < tile_rows (its stores are predicated)
//   kAttentionMaskedBlocks    some blocks masked (diagonal, window, KV end)
// Lengths never reach a kernel: kernels are specialized on the static
// quantities (dtype, head_dim, head_pack, page size, mask kind) and read
// a tile's class and ranges from its work item.
//
// Balance. A tile costs item_cost plus kv_block per block (plus
// masked_block_extra per masked block), in KV positions. When one tile
// costs more than a worker's fair share (the total over num_workers), it is
// split into pieces of consecutive blocks, at least min_piece_blocks each,
// at most max_pieces; pieces write partial results (output and log-sum-exp)
// to partial slots, and a merge group per split tile combines them (the
// decode planner's cutting idea, applied to query tiles). The tiles are then
// assigned longest first to the least loaded worker (LPT list scheduling):
// the busiest worker costs at most the mean plus one piece, and tiles that
// run at the same time are the long ones of every head, which read the same
// KV prefixes (the L2 serves the rest).
//
//   sequence b, head pack p:  rows [0, q_len * head_pack)
//     | tile 0 | tile 1 | ... | tail |      (tile_rows rows each)
//   tile i: KV blocks [kv_begin, kv_end), kv_block positions each
//     | unmasked ... unmasked | masked (diagonal / KV end) |
//
// Plan/run split: BuildAttentionPlan refills a caller-owned AttentionPlan;
// after Reserve() (or once the buffers have grown to the largest step seen)
// it never allocates. Nothing here depends on a backend: the backend
// supplies tile_rows, kv_block, head_pack, num_workers and the costs.
//
// Example (Hq = Hkv = 1, tile_rows 4, kv_block 4, causal, 2 workers):
//   q_lens {6}, kv_lens {8}: tokens sit at positions 2..7.
//   tile 0: rows [0, 4), tokens 0..3 at 2..5 -> KV [0, 6): both blocks
//           masked (token 0 stops at 2)                  class kMaskedBlocks
//   tile 1: rows [4, 6), tokens 4..5 at 6..7 -> KV [0, 8): block [0,4)
//           unmasked, [4,8) masked              class kTailRows|kMaskedBlocks
#ifndef TAILOR_PLAN_ATTENTION_PLAN_H_
#define TAILOR_PLAN_ATTENTION_PLAN_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tailor::plan {

// Limits: positions, rows and slots are int32 on devices.
inline constexpr int64_t kMaxAttentionLen = int64_t{1} << 30;
inline constexpr int64_t kMaxAttentionBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxAttentionHeads = 1024;
inline constexpr int64_t kMaxAttentionWorkers = int64_t{1} << 16;
inline constexpr int64_t kMaxAttentionTileRows = 1024;
inline constexpr int64_t kMaxAttentionKvBlock = 4096;
inline constexpr int32_t kMaxAttentionPieces = 64;

// Bits of AttentionWorkItem::tile_class.
inline constexpr int32_t kAttentionTailRows = 1;      // rows < tile_rows
inline constexpr int32_t kAttentionMaskedBlocks = 2;  // some block masked

// How to cut. An aggregate; rules (ValidateAttentionPlanParams):
//   num_qo_heads        in [1, kMaxAttentionHeads], a multiple of
//                       num_kv_heads
//   num_kv_heads        in [1, num_qo_heads]
//   head_pack           a power of two dividing the group (Hq / Hkv) and
//                       tile_rows: query heads packed into a tile's rows
//   tile_rows           in [1, kMaxAttentionTileRows]
//   kv_block            in [1, kMaxAttentionKvBlock]
//   num_workers         in [1, kMaxAttentionWorkers]
//   causal, window_left window_left -1 (none) or >= 0, which needs causal:
//                       query position i attends [i - window_left, i]
//   item_cost, masked_block_extra  in [0, 1 << 20] KV positions
//   min_piece_blocks    in [1, 1 << 20]
//   max_pieces          in [1, kMaxAttentionPieces]; 1: never split
//   skip_decode_rows    sequences with q_len 1 get no tiles: a backend runs
//                       them on its decode kernel (plan::BuildDecodePlan
//                       plans them; the op front partitions the step)
struct AttentionPlanParams {
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_pack = 1;
  int32_t tile_rows = 0;
  int32_t kv_block = 0;
  int32_t num_workers = 0;
  bool causal = false;
  int32_t window_left = -1;
  int32_t item_cost = 0;
  int32_t masked_block_extra = 0;
  int32_t min_piece_blocks = 4;
  int32_t max_pieces = 16;
  bool skip_decode_rows = false;
  friend bool operator==(const AttentionPlanParams&,
                         const AttentionPlanParams&) = default;
};

absl::Status ValidateAttentionPlanParams(const AttentionPlanParams& params);

// One query tile (or one piece of a split tile): sixteen int32 (64 bytes),
// copied as is into device buffers. Backends mirror it in their params
// headers and check the layout.
struct AttentionWorkItem {
  int32_t seq;           // b: its block-table row
  int32_t q_head;        // first query head of the tile's pack
  int32_t q_token;       // global q/out row of the tile's first token:
                         // sum of q_len before b, plus row_begin / head_pack
  int32_t row_begin;     // first packed row within (b, pack): a multiple of
                         // tile_rows
  int32_t rows;          // packed rows computed and stored: tile_rows, or
                         // fewer (kAttentionTailRows)
  int32_t q_len;         // planned query length of b
  int32_t kv_len;        // planned KV length of b
  int32_t kv_begin;      // first KV position: a multiple of kv_block
  int32_t kv_end;        // one past the last; kv_begin <= kv_end, and
                         // kv_begin == kv_end only for a tile with no KV
  int32_t partial;       // -1: writes out and lse; else its partial slot
  int32_t tile_class;    // AttentionTileClass bits
  int32_t masked_below;  // blocks [0, masked_below) need a mask (window)
  int32_t masked_from;   // blocks [masked_from, blocks) need a mask
  int32_t merge;         // -1, or the merge group of the split tile
  int32_t reserved0;
  int32_t reserved1;

  // KV blocks of the item.
  int32_t Blocks(int32_t kv_block) const {
    return (kv_end - kv_begin + kv_block - 1) / kv_block;
  }
  friend bool operator==(const AttentionWorkItem&,
                         const AttentionWorkItem&) = default;
};
static_assert(sizeof(AttentionWorkItem) == 64);
static_assert(std::is_trivially_copyable_v<AttentionWorkItem> &&
              std::is_standard_layout_v<AttentionWorkItem>);

// A split tile: its pieces wrote partial slots [first_partial, first_partial
// + pieces), rows x head_dim each; the merge writes the tile's rows.
struct AttentionMergeGroup {
  int32_t seq;
  int32_t q_head;
  int32_t q_token;
  int32_t row_begin;
  int32_t rows;
  int32_t first_partial;
  int32_t pieces;
  int32_t reserved;
  friend bool operator==(const AttentionMergeGroup&,
                         const AttentionMergeGroup&) = default;
};
static_assert(sizeof(AttentionMergeGroup) == 32);

// What a plan looks like, for logs, tests and benches.
struct AttentionPlanStats {
  int32_t tiles = 0;          // query tiles before splitting
  int32_t skipped_seqs = 0;   // decode sequences left to a decode kernel
  int32_t items = 0;          // pieces run (whole tiles included)
  int32_t tail_tiles = 0;     // tiles with kAttentionTailRows
  int32_t masked_tiles = 0;   // tiles with kAttentionMaskedBlocks
  int32_t split_tiles = 0;    // tiles in more than one piece
  int32_t partials = 0;       // slots used
  int32_t busy_workers = 0;   // workers with at least one item
  int64_t useful_rows = 0;    // packed query rows of the step
  int64_t executed_rows = 0;  // tiles x tile_rows
  int64_t blocks = 0;         // KV blocks of all items
  int64_t masked_blocks = 0;  // of which masked
  int64_t max_worker_cost = 0;
  double mean_worker_cost = 0;  // over all workers
};

// Upper bounds for buffers sized once: items and partial slots of any plan
// of at most `max_tiles` query tiles (AttentionTileCount) for `params`.
int64_t MaxAttentionItems(int64_t max_tiles, const AttentionPlanParams& params);
int64_t MaxAttentionPartials(int64_t max_tiles,
                             const AttentionPlanParams& params);

// Query tiles of a step with these query lengths (before splitting; none
// for the sequences skip_decode_rows skips).
int64_t AttentionTileCount(absl::Span<const int32_t> q_lens,
                           const AttentionPlanParams& params);

class AttentionPlan {
 public:
  AttentionPlan() = default;

  const AttentionPlanParams& params() const { return params_; }
  int32_t batch() const { return static_cast<int32_t>(q_lens_.size()); }
  absl::Span<const int32_t> q_lens() const { return q_lens_; }
  absl::Span<const int32_t> kv_lens() const { return kv_lens_; }
  // [batch + 1] prefix sums of q_lens: the query indptr.
  absl::Span<const int32_t> q_begin() const { return q_begin_; }
  int64_t total_q() const { return q_begin_.empty() ? 0 : q_begin_.back(); }
  // [num_items] worker by worker, each worker's longest first.
  absl::Span<const AttentionWorkItem> items() const { return items_; }
  // [num_workers + 1] worker w runs items [worker_begin[w],
  // worker_begin[w + 1]).
  absl::Span<const int32_t> worker_begin() const { return worker_begin_; }
  // [split tiles] in the order of their first slot.
  absl::Span<const AttentionMergeGroup> merge_groups() const {
    return merge_groups_;
  }
  int32_t num_partials() const { return num_partials_; }
  const AttentionPlanStats& stats() const { return stats_; }

  // Grows every buffer for steps of up to `max_batch` sequences and
  // `max_tiles` query tiles, so that building such plans never allocates.
  absl::Status Reserve(int64_t max_batch, int64_t max_tiles,
                       const AttentionPlanParams& params);
  size_t CapacityBytes() const;

  // "batch=2 tiles=3 items=4 split=1 partials=2 workers=2/4 max_cost=..."
  std::string ToString() const;

 private:
  friend absl::Status BuildAttentionPlan(absl::Span<const int32_t> q_lens,
                                         absl::Span<const int32_t> kv_lens,
                                         const AttentionPlanParams& params,
                                         AttentionPlan* plan);
  void Clear();
  void MakeTiles();
  void SplitLongTiles();
  void AssignWorkers();
  int64_t CostOf(const AttentionWorkItem& item) const;

  AttentionPlanParams params_;
  std::vector<int32_t> q_lens_;                    // [batch]
  std::vector<int32_t> kv_lens_;                   // [batch]
  std::vector<int32_t> q_begin_;                   // [batch + 1]
  std::vector<AttentionWorkItem> tiles_;           // [tiles] before splitting
  std::vector<AttentionWorkItem> pieces_;          // [items] after splitting
  std::vector<int64_t> cost_;                      // [items] of pieces_
  std::vector<int32_t> order_;                     // [items] longest first
  std::vector<int32_t> worker_of_;                 // [items]
  std::vector<std::pair<int64_t, int32_t>> heap_;  // [workers] (load, w)
  std::vector<AttentionWorkItem> items_;           // [items] by worker
  std::vector<int32_t> worker_begin_;              // [num_workers + 1]
  std::vector<AttentionMergeGroup> merge_groups_;
  int32_t num_partials_ = 0;
  AttentionPlanStats stats_;
};

// Plans the step (q_lens[b], kv_lens[b], b < batch <= kMaxAttentionBatch,
// each in [0, kMaxAttentionLen]; with causal q_lens[b] <= kv_lens[b]) into
// `*plan`, reusing its buffers. On error the plan is left empty (batch 0).
// InvalidArgument naming "q_lens[i]", "kv_lens[i]" or the params field.
absl::Status BuildAttentionPlan(absl::Span<const int32_t> q_lens,
                                absl::Span<const int32_t> kv_lens,
                                const AttentionPlanParams& params,
                                AttentionPlan* plan);

}  // namespace tailor::plan

#endif  // TAILOR_PLAN_ATTENTION_PLAN_H_
