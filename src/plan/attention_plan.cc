#include "plan/attention_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "plan/ragged_partition.h"

namespace tailor::plan {
namespace {

absl::Status OutOfRange(absl::string_view field, int64_t lo, int64_t hi,
                        int64_t got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "params.", field, ": must be in [", lo, ", ", hi, "], got ", got));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Clamp(int64_t v, int64_t lo, int64_t hi) {
  return std::min(std::max(v, lo), hi);
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Packs of query heads: the units whose rows are cut into tiles.
int32_t PacksPerSeq(const AttentionPlanParams& params) {
  return params.num_qo_heads / params.head_pack;
}

// Whether a sequence of `q_len` query tokens gets no tiles here.
bool SkippedSeq(const AttentionPlanParams& params, int32_t q_len) {
  return params.skip_decode_rows && q_len == kDecodeRowQueryLen;
}

absl::Status ValidateLengths(absl::Span<const int32_t> q_lens,
                             absl::Span<const int32_t> kv_lens,
                             const AttentionPlanParams& params) {
  if (q_lens.size() != kv_lens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_lens: has ", kv_lens.size(), " entries, q_lens has ",
                     q_lens.size()));
  }
  if (static_cast<int64_t>(q_lens.size()) > kMaxAttentionBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q_lens: ", q_lens.size(), " sequences exceed ", kMaxAttentionBatch));
  }
  int64_t total_q = 0;
  for (size_t b = 0; b < q_lens.size(); ++b) {
    if (q_lens[b] < 0 || q_lens[b] > kMaxAttentionLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("q_lens[", b, "]: ", q_lens[b], " is outside [0, ",
                       kMaxAttentionLen, "]"));
    }
    if (kv_lens[b] < 0 || kv_lens[b] > kMaxAttentionLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_lens[", b, "]: ", kv_lens[b], " is outside [0, ",
                       kMaxAttentionLen, "]"));
    }
    if (params.causal && q_lens[b] > kv_lens[b]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "q_lens[", b, "]: ", q_lens[b], " exceeds kv_lens[", b, "] = ",
          kv_lens[b], "; causal queries are the last q_len of their KV"));
    }
    total_q += q_lens[b];
  }
  if (total_q > kMaxAttentionLen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q_lens: ", total_q, " query tokens exceed ", kMaxAttentionLen));
  }
  return absl::OkStatus();
}

// The KV range and masked blocks of the tile of rows [row_begin, row_begin
// + rows) of a sequence (see the file comment).
void SetKvRange(const AttentionPlanParams& params, AttentionWorkItem& tile) {
  const int64_t pack = params.head_pack, block = params.kv_block;
  const int64_t first_token = tile.row_begin / pack;
  const int64_t last_token = (tile.row_begin + tile.rows - 1) / pack;
  const int64_t shift = int64_t{tile.kv_len} - tile.q_len;  // token -> pos
  int64_t lo = 0, hi = tile.kv_len;
  // Blocks from `mask_hi` on hold a position past some row's limit; blocks
  // before `mask_lo` one before some row's window start.
  int64_t mask_hi = tile.kv_len, mask_lo = 0;
  if (params.causal) {
    hi = std::min<int64_t>(tile.kv_len, shift + last_token + 1);
    mask_hi = std::min<int64_t>(tile.kv_len, shift + first_token + 1);
    if (params.window_left >= 0) {
      lo = std::max<int64_t>(0, shift + first_token - params.window_left);
      mask_lo = shift + last_token - params.window_left;
    }
  }
  const int64_t begin = lo / block * block;
  const int64_t blocks = hi > begin ? CeilDiv(hi - begin, block) : 0;
  tile.kv_begin = static_cast<int32_t>(begin);
  tile.kv_end = static_cast<int32_t>(std::max(hi, begin));
  tile.masked_from =
      static_cast<int32_t>(Clamp((mask_hi - begin) / block, 0, blocks));
  tile.masked_below =
      static_cast<int32_t>(Clamp(CeilDiv(mask_lo - begin, block), 0, blocks));
  if (tile.masked_below > tile.masked_from) {
    tile.masked_below = tile.masked_from;  // every block is masked anyway
  }
  const bool masked = tile.masked_from < blocks || tile.masked_below > 0;
  tile.tile_class = (tile.rows < params.tile_rows ? kAttentionTailRows : 0) |
                    (masked ? kAttentionMaskedBlocks : 0);
}

}  // namespace

absl::Status ValidateAttentionPlanParams(const AttentionPlanParams& params) {
  if (params.num_qo_heads < 1 || params.num_qo_heads > kMaxAttentionHeads) {
    return OutOfRange("num_qo_heads", 1, kMaxAttentionHeads,
                      params.num_qo_heads);
  }
  if (params.num_kv_heads < 1 || params.num_kv_heads > params.num_qo_heads) {
    return OutOfRange("num_kv_heads", 1, params.num_qo_heads,
                      params.num_kv_heads);
  }
  if (params.num_qo_heads % params.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "params.num_qo_heads: ", params.num_qo_heads,
        " is not a multiple of num_kv_heads ", params.num_kv_heads));
  }
  if (params.tile_rows < 1 || params.tile_rows > kMaxAttentionTileRows) {
    return OutOfRange("tile_rows", 1, kMaxAttentionTileRows, params.tile_rows);
  }
  const int32_t group = params.num_qo_heads / params.num_kv_heads;
  if (!IsPowerOfTwo(params.head_pack) || group % params.head_pack != 0 ||
      params.tile_rows % params.head_pack != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("params.head_pack: ", params.head_pack,
                     " must be a power of two dividing the group ", group,
                     " and tile_rows ", params.tile_rows));
  }
  if (params.kv_block < 1 || params.kv_block > kMaxAttentionKvBlock) {
    return OutOfRange("kv_block", 1, kMaxAttentionKvBlock, params.kv_block);
  }
  if (params.num_workers < 1 || params.num_workers > kMaxAttentionWorkers) {
    return OutOfRange("num_workers", 1, kMaxAttentionWorkers,
                      params.num_workers);
  }
  if (params.window_left < -1 || params.window_left >= kMaxAttentionLen) {
    return OutOfRange("window_left", -1, kMaxAttentionLen - 1,
                      params.window_left);
  }
  if (params.window_left >= 0 && !params.causal) {
    return absl::InvalidArgumentError(
        "params.window_left: a sliding window needs causal attention");
  }
  constexpr int64_t kMaxCost = int64_t{1} << 20;
  if (params.item_cost < 0 || params.item_cost > kMaxCost) {
    return OutOfRange("item_cost", 0, kMaxCost, params.item_cost);
  }
  if (params.masked_block_extra < 0 || params.masked_block_extra > kMaxCost) {
    return OutOfRange("masked_block_extra", 0, kMaxCost,
                      params.masked_block_extra);
  }
  if (params.min_piece_blocks < 1 || params.min_piece_blocks > kMaxCost) {
    return OutOfRange("min_piece_blocks", 1, kMaxCost, params.min_piece_blocks);
  }
  if (params.max_pieces < 1 || params.max_pieces > kMaxAttentionPieces) {
    return OutOfRange("max_pieces", 1, kMaxAttentionPieces, params.max_pieces);
  }
  return absl::OkStatus();
}

int64_t AttentionTileCount(absl::Span<const int32_t> q_lens,
                           const AttentionPlanParams& params) {
  int64_t tiles = 0;
  for (int32_t q : q_lens) {
    if (SkippedSeq(params, q)) continue;
    tiles += CeilDiv(int64_t{q} * params.head_pack, params.tile_rows);
  }
  return tiles * PacksPerSeq(params);
}

// Only tiles costing more than the total over num_workers are split, into
// at most cost / (total / workers) + 1 pieces each: at most 2 num_workers
// pieces in all.
int64_t MaxAttentionPartials(int64_t max_tiles,
                             const AttentionPlanParams& params) {
  if (params.max_pieces <= 1) return 0;
  return std::min<int64_t>(2 * int64_t{params.num_workers},
                           max_tiles * params.max_pieces);
}

int64_t MaxAttentionItems(int64_t max_tiles,
                          const AttentionPlanParams& params) {
  return max_tiles + MaxAttentionPartials(max_tiles, params);
}

int64_t AttentionPlan::CostOf(const AttentionWorkItem& item) const {
  const int64_t blocks = item.Blocks(params_.kv_block);
  const int64_t masked =
      std::max<int64_t>(0, blocks - item.masked_from) + item.masked_below;
  return params_.item_cost + blocks * params_.kv_block +
         std::min(masked, blocks) * params_.masked_block_extra;
}

void AttentionPlan::Clear() {
  q_lens_.clear();
  kv_lens_.clear();
  q_begin_.clear();
  tiles_.clear();
  pieces_.clear();
  items_.clear();
  worker_begin_.clear();
  merge_groups_.clear();
  num_partials_ = 0;
  stats_ = {};
}

void AttentionPlan::MakeTiles() {
  const int32_t pack = params_.head_pack, m = params_.tile_rows;
  for (int32_t b = 0; b < batch(); ++b) {
    if (SkippedSeq(params_, q_lens_[b])) {
      ++stats_.skipped_seqs;
      continue;
    }
    const int64_t rows = int64_t{q_lens_[b]} * pack;
    for (int32_t p = 0; p < PacksPerSeq(params_); ++p) {
      for (int64_t r = 0; r < rows; r += m) {
        AttentionWorkItem tile = {};
        tile.seq = b;
        tile.q_head = p * pack;
        tile.row_begin = static_cast<int32_t>(r);
        tile.rows = static_cast<int32_t>(std::min<int64_t>(m, rows - r));
        tile.q_token = q_begin_[b] + static_cast<int32_t>(r / pack);
        tile.q_len = q_lens_[b];
        tile.kv_len = kv_lens_[b];
        tile.partial = -1;
        tile.merge = -1;
        SetKvRange(params_, tile);
        tiles_.push_back(tile);
        stats_.useful_rows += tile.rows;
        stats_.tail_tiles += (tile.tile_class & kAttentionTailRows) != 0;
        stats_.masked_tiles += (tile.tile_class & kAttentionMaskedBlocks) != 0;
      }
    }
  }
  stats_.tiles = static_cast<int32_t>(tiles_.size());
  stats_.executed_rows = int64_t{stats_.tiles} * m;
}

// Tiles costing more than a worker's fair share become pieces of at least
// min_piece_blocks blocks each (see the file comment).
void AttentionPlan::SplitLongTiles() {
  int64_t total = 0;
  for (const AttentionWorkItem& tile : tiles_) total += CostOf(tile);
  const int64_t share = CeilDiv(total, params_.num_workers);
  const int64_t min_piece =
      int64_t{params_.min_piece_blocks} * params_.kv_block + params_.item_cost;
  const int64_t cap = std::max(share, min_piece);
  for (const AttentionWorkItem& tile : tiles_) {
    const int64_t blocks = tile.Blocks(params_.kv_block);
    const int64_t cost = CostOf(tile);
    int64_t pieces = 1;
    if (cost > cap) {
      pieces = std::min({CeilDiv(cost, cap), blocks / params_.min_piece_blocks,
                         int64_t{params_.max_pieces}});
    }
    if (pieces <= 1) {
      pieces_.push_back(tile);
      continue;
    }
    const int32_t group = static_cast<int32_t>(merge_groups_.size());
    merge_groups_.push_back({.seq = tile.seq,
                             .q_head = tile.q_head,
                             .q_token = tile.q_token,
                             .row_begin = tile.row_begin,
                             .rows = tile.rows,
                             .first_partial = num_partials_,
                             .pieces = static_cast<int32_t>(pieces),
                             .reserved = 0});
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t first = blocks * i / pieces,
                    last = blocks * (i + 1) / pieces;
      AttentionWorkItem piece = tile;
      piece.kv_begin =
          tile.kv_begin + static_cast<int32_t>(first) * params_.kv_block;
      piece.kv_end = static_cast<int32_t>(std::min<int64_t>(
          tile.kv_end, tile.kv_begin + last * params_.kv_block));
      piece.masked_from = static_cast<int32_t>(
          Clamp(tile.masked_from - first, 0, last - first));
      piece.masked_below = static_cast<int32_t>(
          Clamp(tile.masked_below - first, 0, last - first));
      piece.partial = num_partials_++;
      piece.merge = group;
      pieces_.push_back(piece);
    }
    ++stats_.split_tiles;
  }
}

// LPT: longest first, each to the least loaded worker (lowest index on
// ties); a worker runs its items in the order they were given.
void AttentionPlan::AssignWorkers() {
  const int32_t n = static_cast<int32_t>(pieces_.size());
  const int32_t workers = params_.num_workers;
  cost_.resize(n);
  order_.resize(n);
  worker_of_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    cost_[i] = CostOf(pieces_[i]);
    order_[i] = i;
  }
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return cost_[a] != cost_[b] ? cost_[a] > cost_[b] : a < b;
  });
  // Min-heap on (load, worker).
  const auto later = [](const std::pair<int64_t, int32_t>& a,
                        const std::pair<int64_t, int32_t>& b) { return a > b; };
  heap_.clear();
  for (int32_t w = 0; w < workers; ++w) heap_.push_back({0, w});
  worker_begin_.assign(workers + 1, 0);
  for (int32_t i : order_) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    auto& [load, w] = heap_.back();
    worker_of_[i] = w;
    load += cost_[i];
    ++worker_begin_[w + 1];
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  for (int32_t w = 0; w < workers; ++w) {
    worker_begin_[w + 1] += worker_begin_[w];
  }
  // Place each item after its worker's earlier ones (a counting sort; the
  // heap's loads, no longer needed, count the items placed).
  items_.resize(n);
  for (int32_t w = 0; w < workers; ++w) heap_[w] = {0, w};
  for (int32_t i : order_) {
    const int32_t w = worker_of_[i];
    items_[worker_begin_[w] + heap_[w].first++] = pieces_[i];
  }
  int64_t max_cost = 0, sum = 0;
  for (int32_t w = 0; w < workers; ++w) {
    int64_t load = 0;
    for (int32_t i = worker_begin_[w]; i < worker_begin_[w + 1]; ++i) {
      load += CostOf(items_[i]);
    }
    stats_.busy_workers += worker_begin_[w + 1] > worker_begin_[w];
    max_cost = std::max(max_cost, load);
    sum += load;
  }
  stats_.max_worker_cost = max_cost;
  stats_.mean_worker_cost = static_cast<double>(sum) / workers;
}

absl::Status AttentionPlan::Reserve(int64_t max_batch, int64_t max_tiles,
                                    const AttentionPlanParams& params) {
  if (absl::Status s = ValidateAttentionPlanParams(params); !s.ok()) return s;
  if (max_batch < 0 || max_batch > kMaxAttentionBatch) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch: must be in [0, ",
                                                   kMaxAttentionBatch,
                                                   "], got ", max_batch));
  }
  if (max_tiles < 0 || max_tiles > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tiles: must be in [0, 2^28], got ", max_tiles));
  }
  const int64_t items = MaxAttentionItems(max_tiles, params);
  q_lens_.reserve(max_batch);
  kv_lens_.reserve(max_batch);
  q_begin_.reserve(max_batch + 1);
  tiles_.reserve(max_tiles);
  pieces_.reserve(items);
  cost_.reserve(items);
  order_.reserve(items);
  worker_of_.reserve(items);
  items_.reserve(items);
  heap_.reserve(params.num_workers);
  worker_begin_.reserve(params.num_workers + 1);
  merge_groups_.reserve(std::min<int64_t>(max_tiles, params.num_workers));
  return absl::OkStatus();
}

size_t AttentionPlan::CapacityBytes() const {
  return (q_lens_.capacity() + kv_lens_.capacity() + q_begin_.capacity() +
          order_.capacity() + worker_of_.capacity() +
          worker_begin_.capacity()) *
             sizeof(int32_t) +
         (tiles_.capacity() + pieces_.capacity() + items_.capacity()) *
             sizeof(AttentionWorkItem) +
         cost_.capacity() * sizeof(int64_t) +
         heap_.capacity() * sizeof(heap_[0]) +
         merge_groups_.capacity() * sizeof(AttentionMergeGroup);
}

std::string AttentionPlan::ToString() const {
  return absl::StrFormat(
      "batch=%d tiles=%d items=%d tail=%d masked=%d split=%d partials=%d "
      "workers=%d/%d max_cost=%d mean=%.1f rows=%d/%d skipped=%d",
      batch(), stats_.tiles, stats_.items, stats_.tail_tiles,
      stats_.masked_tiles, stats_.split_tiles, stats_.partials,
      stats_.busy_workers, params_.num_workers, stats_.max_worker_cost,
      stats_.mean_worker_cost, stats_.useful_rows, stats_.executed_rows,
      stats_.skipped_seqs);
}

absl::Status BuildAttentionPlan(absl::Span<const int32_t> q_lens,
                                absl::Span<const int32_t> kv_lens,
                                const AttentionPlanParams& params,
                                AttentionPlan* plan) {
  plan->Clear();
  if (absl::Status s = ValidateAttentionPlanParams(params); !s.ok()) return s;
  if (absl::Status s = ValidateLengths(q_lens, kv_lens, params); !s.ok()) {
    return s;
  }
  plan->params_ = params;
  plan->q_lens_.assign(q_lens.begin(), q_lens.end());
  plan->kv_lens_.assign(kv_lens.begin(), kv_lens.end());
  plan->q_begin_.push_back(0);
  for (int32_t q : q_lens) plan->q_begin_.push_back(plan->q_begin_.back() + q);
  plan->MakeTiles();
  plan->SplitLongTiles();
  plan->AssignWorkers();
  AttentionPlanStats& stats = plan->stats_;
  stats.items = static_cast<int32_t>(plan->items_.size());
  stats.partials = plan->num_partials_;
  for (const AttentionWorkItem& item : plan->items_) {
    const int64_t blocks = item.Blocks(params.kv_block);
    stats.blocks += blocks;
    stats.masked_blocks += std::min<int64_t>(
        blocks,
        std::max<int64_t>(0, blocks - item.masked_from) + item.masked_below);
  }
  return absl::OkStatus();
}

}  // namespace tailor::plan
