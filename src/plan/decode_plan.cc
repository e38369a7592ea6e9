#include "plan/decode_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tailor/status.h"

namespace tailor::plan {
namespace {

absl::Status OutOfRange(absl::string_view field, int64_t lo, int64_t hi,
                        int64_t got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "params.", field, ": must be in [", lo, ", ", hi, "], got ", got));
}

int64_t RoundUp(int64_t n, int64_t quantum) {
  return (n + quantum - 1) / quantum * quantum;
}

// floor(total * w / workers) without overflowing int64 (total < 2^62,
// workers <= 2^16).
int64_t Boundary(int64_t total, int64_t w, int64_t workers) {
  return total / workers * w + total % workers * w / workers;
}

// A unit's cost in the cut: per head of its group, its fixed item cost and
// its pages.
int64_t UnitCost(int32_t len, const DecodePlanParams& params) {
  return params.head_group *
         (params.item_cost_tokens + RoundUp(len, params.page_size));
}

// Units (sequence, head group) of one sequence.
int32_t UnitsPerSeq(const DecodePlanParams& params) {
  return params.num_kv_heads / params.head_group;
}

// Pieces of a pair of `len` tokens cut into pieces of at most `piece_tiles`
// tiles (one piece for an empty or one-tile pair).
int64_t PiecesFor(int64_t len, int64_t piece_tiles, int64_t tile) {
  const int64_t tiles = (len + tile - 1) / tile;
  return tiles <= 1 ? 1 : (tiles + piece_tiles - 1) / piece_tiles;
}

// The first worker of a unit of `pieces` pieces whose predecessor ended
// before worker `w`: w, or with clusters (DecodePlanParams::cluster_workers)
// the next cluster's first when the pieces do not fit what is left of w's.
int64_t UnitStart(int64_t w, int64_t pieces, const DecodePlanParams& params) {
  const int64_t cluster = params.cluster_workers;
  if (cluster == 0 || w % cluster + pieces <= cluster) return w;
  return (w / cluster + 1) * cluster;
}

// Workers the whole-workers cut with `piece_tiles` takes (the last one used,
// plus one).
int64_t WholeWorkersUsed(absl::Span<const int32_t> seq_lens,
                         const DecodePlanParams& params, int64_t piece_tiles) {
  int64_t w = 0;
  for (int32_t len : seq_lens) {
    const int64_t pieces = PiecesFor(len, piece_tiles, params.tile_tokens);
    for (int32_t u = 0; u < UnitsPerSeq(params); ++u) {
      w = UnitStart(w, pieces, params) + pieces;
    }
  }
  return w;
}

// The whole-workers cut (see BuildDecodePlan): the fewest tiles per piece
// such that every unit's pieces get a worker each (with clusters: at most a
// cluster's workers, all in one cluster), or -1 when there are more units
// than workers.
int64_t WholeWorkersPieceTiles(absl::Span<const int32_t> seq_lens,
                               const DecodePlanParams& params) {
  const int64_t units = UnitsPerSeq(params), tile = params.tile_tokens;
  const int64_t cut_workers = DecodeCutWorkers(params);
  if (static_cast<int64_t>(seq_lens.size()) * units > cut_workers) {
    return -1;
  }
  // lo: with clusters, at most a cluster's workers a unit.
  const int64_t cluster = params.cluster_workers;
  int64_t lo = 1, hi = 1;  // hi: one piece per pair, always fits
  for (int32_t len : seq_lens) {
    const int64_t tiles = (len + tile - 1) / tile;
    hi = std::max(hi, tiles);
    if (cluster > 0) lo = std::max(lo, (tiles + cluster - 1) / cluster);
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (WholeWorkersUsed(seq_lens, params, mid) <= cut_workers) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The busiest worker's cost (item cost + tokens rounded to pages) under the
// whole-workers cut with `piece_tiles`: units split evenly over their tiles.
int64_t WholeWorkersMaxCost(absl::Span<const int32_t> seq_lens,
                            const DecodePlanParams& params,
                            int64_t piece_tiles) {
  const int64_t tile = params.tile_tokens;
  int64_t max_cost = 0;
  for (int32_t len : seq_lens) {
    const int64_t tiles = (len + tile - 1) / tile;
    const int64_t pieces = PiecesFor(len, piece_tiles, tile);
    const int64_t largest =
        std::min<int64_t>(len, (tiles + pieces - 1) / pieces * tile);
    max_cost = std::max(
        max_cost, params.head_group * (params.item_cost_tokens +
                                       RoundUp(largest, params.page_size)));
  }
  return max_cost;
}

// Whether whole units, in stream order, fit the cut's workers with no
// worker over `max_cost` (each worker filled before the next opens).
bool WholePairsFit(absl::Span<const int32_t> seq_lens,
                   const DecodePlanParams& params, int64_t max_cost) {
  int64_t workers = 1, filled = 0;
  for (int32_t len : seq_lens) {
    const int64_t cost = UnitCost(len, params);
    if (cost > max_cost) return false;
    for (int32_t u = 0; u < UnitsPerSeq(params); ++u) {
      if (filled + cost > max_cost) {
        ++workers;
        filled = 0;
      }
      filled += cost;
    }
  }
  return workers <= DecodeCutWorkers(params);
}

// The least busiest-worker cost of the whole-pairs cut (see BuildDecodePlan)
// if it is at most `limit`, else -1. The search starts at the larger of the
// mean and the largest pair, so it only runs for batches of similar pairs.
int64_t WholePairsMaxCost(absl::Span<const int32_t> seq_lens,
                          const DecodePlanParams& params, int64_t limit) {
  if (seq_lens.empty() || !WholePairsFit(seq_lens, params, limit)) return -1;
  int64_t total = 0, largest = 0;
  for (int32_t len : seq_lens) {
    const int64_t cost = UnitCost(len, params);
    total += UnitsPerSeq(params) * cost;
    largest = std::max(largest, cost);
  }
  const int64_t workers = DecodeCutWorkers(params);
  int64_t lo = std::max(largest, (total + workers - 1) / workers), hi = limit;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (WholePairsFit(seq_lens, params, mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace

absl::Status ValidateDecodePlanParams(const DecodePlanParams& p) {
  if (p.num_kv_heads < 1 || p.num_kv_heads > kMaxDecodeKvHeads) {
    return OutOfRange("num_kv_heads", 1, kMaxDecodeKvHeads, p.num_kv_heads);
  }
  if (p.num_workers < 1 || p.num_workers > kMaxDecodeWorkers) {
    return OutOfRange("num_workers", 1, kMaxDecodeWorkers, p.num_workers);
  }
  if (p.cut_workers < 0 || p.cut_workers > p.num_workers) {
    return OutOfRange("cut_workers", 0, p.num_workers, p.cut_workers);
  }
  if (p.tile_tokens < 1 || p.tile_tokens > 4096) {
    return OutOfRange("tile_tokens", 1, 4096, p.tile_tokens);
  }
  if (p.page_size < 1 || p.page_size > 4096) {
    return OutOfRange("page_size", 1, 4096, p.page_size);
  }
  if (p.item_cost_tokens < 0 || p.item_cost_tokens > (1 << 20)) {
    return OutOfRange("item_cost_tokens", 0, 1 << 20, p.item_cost_tokens);
  }
  if (p.head_group < 1 || p.head_group > p.num_kv_heads ||
      p.num_kv_heads % p.head_group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("params.head_group: must divide num_kv_heads (",
                     p.num_kv_heads, "), got ", p.head_group));
  }
  if (p.cluster_workers != 0 &&
      (p.cluster_workers < 2 || p.cluster_workers > kMaxDecodeClusterWorkers ||
       p.num_workers % p.cluster_workers != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("params.cluster_workers: must be 0 or in [2, ",
                     kMaxDecodeClusterWorkers, "] and divide num_workers (",
                     p.num_workers, "), got ", p.cluster_workers));
  }
  return absl::OkStatus();
}

int64_t MaxDecodeItems(int64_t batch, int64_t num_kv_heads, int64_t num_workers,
                       int64_t head_group) {
  return batch * num_kv_heads +
         head_group * std::max<int64_t>(num_workers - 1, 0);
}

int64_t MaxDecodePartials(int64_t num_workers, int64_t head_group) {
  return 2 * head_group * std::max<int64_t>(num_workers - 1, 0);
}

// ---- DecodePlan -------------------------------------------------------------

void DecodePlan::Clear() {
  seq_lens_.clear();
  worker_begin_.clear();
  first_items_.clear();
  max_seq_len_ = 0;
  num_items_ = 0;
  num_merge_groups_ = 0;
  num_partials_ = 0;
  last_worker_ = 0;
  whole_workers_ = false;
  cluster_merges_ = false;
}

absl::Status DecodePlan::Reserve(int64_t max_batch,
                                 const DecodePlanParams& params) {
  TAILOR_RETURN_IF_ERROR(ValidateDecodePlanParams(params));
  if (max_batch < 0 || max_batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch: must be in [0, ", kMaxDecodeBatch, "], got ", max_batch));
  }
  const int64_t items = MaxDecodeItems(max_batch, params.num_kv_heads,
                                       params.num_workers, params.head_group);
  seq_lens_.reserve(max_batch);
  if (items_.size() < static_cast<size_t>(items)) items_.resize(items);
  worker_begin_.reserve(params.num_workers + 1);
  first_items_.reserve(params.num_workers);
  worker_cost_.reserve(params.num_workers);
  const int64_t groups =
      params.head_group * std::max<int64_t>(params.num_workers - 1, 0);
  if (merge_groups_.size() < static_cast<size_t>(groups)) {
    merge_groups_.resize(groups);
  }
  return absl::OkStatus();
}

size_t DecodePlan::CapacityBytes() const {
  return seq_lens_.capacity() * sizeof(int32_t) +
         items_.capacity() * sizeof(DecodeWorkItem) +
         worker_begin_.capacity() * sizeof(int32_t) +
         first_items_.capacity() * sizeof(DecodeWorkItem) +
         worker_cost_.capacity() * sizeof(int64_t) +
         merge_groups_.capacity() * sizeof(DecodeMergeGroup);
}

void DecodePlan::Emit(const DecodeWorkItem& item, int32_t worker) {
  if (num_items_ == items_.size()) items_.push_back(item);  // not reserved
  items_[num_items_] = item;
  // Workers are non-decreasing: open every worker up to `worker`.
  while (static_cast<int32_t>(worker_begin_.size()) <= worker) {
    worker_begin_.push_back(static_cast<int32_t>(num_items_));
  }
  worker_cost_[worker] +=
      params_.item_cost_tokens +
      RoundUp(item.kv_end - item.kv_begin, params_.page_size);
  last_worker_ = worker;
  ++num_items_;
}

// Emits one piece of unit `unit` of sequence `seq`: an item of tokens
// [begin, end) for each head of the unit's group, in head order.
void DecodePlan::EmitUnit(int32_t seq, int32_t unit, int64_t begin, int64_t end,
                          int32_t worker) {
  for (int32_t i = 0; i < params_.head_group; ++i) {
    Emit({.seq = seq,
          .kv_head = unit * params_.head_group + i,
          .kv_begin = static_cast<int32_t>(begin),
          .kv_end = static_cast<int32_t>(end),
          .seq_len = seq_lens_[seq],
          .partial = -1,
          .first_partial = -1,
          .pieces = 1},
         worker);
  }
}

// Gives the pieces of one unit, items_[first_item, num_items_) (head_group
// items a piece), their slots: each head's pieces get consecutive slots.
void DecodePlan::NumberPieces(size_t first_item) {
  const int32_t group = params_.head_group;
  const int32_t pieces =
      static_cast<int32_t>((num_items_ - first_item) / group);
  if (pieces < 2) return;
  for (int32_t h = 0; h < group; ++h) {
    const int32_t first = num_partials_;
    for (int32_t i = 0; i < pieces; ++i) {
      DecodeWorkItem& item = items_[first_item + i * group + h];
      item.partial = first + i;
      item.first_partial = first;
      item.pieces = pieces;
    }
    const DecodeWorkItem& head = items_[first_item + h];
    const DecodeMergeGroup merge = {.seq = head.seq,
                                    .kv_head = head.kv_head,
                                    .first_partial = first,
                                    .pieces = pieces};
    if (num_merge_groups_ == merge_groups_.size()) {
      merge_groups_.push_back(merge);
    }
    merge_groups_[num_merge_groups_++] = merge;
    num_partials_ += pieces;
  }
}

DecodePlanStats DecodePlan::stats() const {
  DecodePlanStats s;
  for (int32_t len : seq_lens_) s.tokens += len;
  s.tokens *= params_.num_kv_heads;
  s.items = static_cast<int32_t>(num_items_);
  s.split_pairs = static_cast<int32_t>(num_merge_groups_);
  s.partials = num_partials_;
  int64_t total = 0;
  for (size_t w = 0; w + 1 < worker_begin_.size(); ++w) {
    s.busy_workers += worker_begin_[w + 1] > worker_begin_[w];
    s.max_worker_cost = std::max(s.max_worker_cost, worker_cost_[w]);
    total += worker_cost_[w];
  }
  if (params_.num_workers > 0) {
    s.mean_worker_cost = static_cast<double>(total) / DecodeCutWorkers(params_);
  }
  return s;
}

std::string DecodePlan::ToString() const {
  const DecodePlanStats s = stats();
  return absl::StrFormat(
      "batch=%d items=%d split=%d partials=%d workers=%d/%d max_cost=%d "
      "mean=%.1f",
      batch(), s.items, s.split_pairs, s.partials, s.busy_workers,
      params_.num_workers, s.max_worker_cost, s.mean_worker_cost);
}

// ---- cuts -------------------------------------------------------------------

// Forgets the items of a cut (the lengths and parameters stay).
void DecodePlan::ResetItems() {
  worker_begin_.clear();
  first_items_.clear();
  num_items_ = 0;
  num_merge_groups_ = 0;
  num_partials_ = 0;
  last_worker_ = 0;
}

// The stream cut (file comment): units end to end, num_workers ranges of
// equal cost; `total` is the stream's cost. A unit's token t sits at cost
// position start + g (item_cost + t) (g = head_group).
void DecodePlan::CutStream(int64_t total) {
  const int64_t tile = params_.tile_tokens, g = params_.head_group;
  const int64_t item_cost = params_.item_cost_tokens;
  worker_cost_.assign(params_.num_workers, 0);
  const int64_t workers = DecodeCutWorkers(params_);
  int64_t w = 0;      // the worker being filled
  int64_t start = 0;  // cost position of the current unit
  for (size_t b = 0; b < seq_lens_.size(); ++b) {
    const int32_t len = seq_lens_[b];
    for (int32_t u = 0; u < UnitsPerSeq(params_); ++u) {
      const size_t first_item = num_items_;
      int64_t begin = 0;
      do {
        // Skip workers whose range ends at or before this position.
        while (w + 1 < workers && Boundary(total, w + 1, workers) <=
                                      start + g * (item_cost + begin)) {
          ++w;
        }
        int64_t end = len;
        if (w + 1 < workers) {
          // Tokens of this unit that fit worker w, rounded to a tile.
          const int64_t fit =
              (Boundary(total, w + 1, workers) - start) / g - item_cost;
          const int64_t cut =
              std::max<int64_t>(fit + tile / 2, 0) / tile * tile;
          end = std::min<int64_t>(cut, len);
        }
        if (end <= begin && len > 0) {
          ++w;  // worker w takes nothing more; the last one takes the rest
          continue;
        }
        end = std::max(end, begin);
        EmitUnit(static_cast<int32_t>(b), u, begin, end,
                 static_cast<int32_t>(w));
        begin = end;
        if (begin < len) ++w;
      } while (begin < len);
      NumberPieces(first_item);
      start += UnitCost(len, params_);
    }
  }
}

// The whole-workers cut: unit after unit, each split evenly over its tiles
// into PiecesFor(len, piece_tiles) pieces, one worker per piece (a unit
// that would straddle two clusters starts the next one).
void DecodePlan::CutWholeWorkers(int64_t piece_tiles) {
  worker_cost_.assign(params_.num_workers, 0);
  const int64_t tile = params_.tile_tokens;
  int64_t w = 0;
  for (size_t b = 0; b < seq_lens_.size(); ++b) {
    const int32_t len = seq_lens_[b];
    const int64_t tiles = (len + tile - 1) / tile;
    const int64_t pieces = PiecesFor(len, piece_tiles, tile);
    for (int32_t u = 0; u < UnitsPerSeq(params_); ++u) {
      w = UnitStart(w, pieces, params_);
      const size_t first_item = num_items_;
      for (int64_t j = 0; j < pieces; ++j) {
        const int64_t begin = j * tiles / pieces * tile;
        const int64_t end =
            std::min<int64_t>((j + 1) * tiles / pieces * tile, len);
        EmitUnit(static_cast<int32_t>(b), u, begin, end,
                 static_cast<int32_t>(w++));
      }
      NumberPieces(first_item);
    }
  }
}

// The whole-pairs cut: units in stream order, each whole, a worker filled
// up to `max_cost` before the next opens.
void DecodePlan::CutWholePairs(int64_t max_cost) {
  worker_cost_.assign(params_.num_workers, 0);
  int32_t w = 0;
  for (size_t b = 0; b < seq_lens_.size(); ++b) {
    const int32_t len = seq_lens_[b];
    const int64_t cost = UnitCost(len, params_);
    for (int32_t u = 0; u < UnitsPerSeq(params_); ++u) {
      if (worker_cost_[w] > 0 && worker_cost_[w] + cost > max_cost) ++w;
      EmitUnit(static_cast<int32_t>(b), u, 0, len, w);
    }
  }
}

int64_t DecodePlan::MaxWorkerCost() const {
  int64_t max_cost = 0;
  for (int64_t cost : worker_cost_) max_cost = std::max(max_cost, cost);
  return max_cost;
}

// Opens the idle workers at the end and copies each worker's first item;
// says whether split pairs merge in clusters.
void DecodePlan::FinishWorkers() {
  cluster_merges_ =
      params_.cluster_workers > 0 && (whole_workers_ || num_merge_groups_ == 0);
  const int64_t workers = params_.num_workers;
  while (static_cast<int64_t>(worker_begin_.size()) <= workers) {
    worker_begin_.push_back(static_cast<int32_t>(num_items_));
  }
  for (int64_t w = 0; w < workers; ++w) {
    const int32_t first = worker_begin_[w];
    first_items_.push_back(first < worker_begin_[w + 1] ? items_[first]
                                                        : DecodeWorkItem{});
  }
}

// ---- BuildDecodePlan --------------------------------------------------------

absl::Status BuildDecodePlan(absl::Span<const int32_t> seq_lens,
                             const DecodePlanParams& params, DecodePlan* plan) {
  plan->Clear();
  TAILOR_RETURN_IF_ERROR(ValidateDecodePlanParams(params));
  if (static_cast<int64_t>(seq_lens.size()) > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_lens: at most ", kMaxDecodeBatch, " sequences, got ",
                     seq_lens.size()));
  }
  const int64_t page = params.page_size;
  const int64_t item_cost = params.item_cost_tokens;
  int64_t total = 0;
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    if (seq_lens[b] < 0 || seq_lens[b] > kMaxDecodeSeqLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("seq_lens[", b, "]: must be in [0, ", kMaxDecodeSeqLen,
                       "], got ", seq_lens[b]));
    }
    total += params.num_kv_heads * (item_cost + RoundUp(seq_lens[b], page));
  }
  plan->seq_lens_.assign(seq_lens.begin(), seq_lens.end());
  for (int32_t len : seq_lens) {
    plan->max_seq_len_ = std::max(plan->max_seq_len_, len);
  }
  if (params.head_group_always) {
    plan->Cut(seq_lens, params, total);
    plan->FinishWorkers();
    return absl::OkStatus();
  }
  DecodePlanParams single = params;
  single.head_group = 1;
  plan->Cut(seq_lens, single, total);
  // Head groups only as whole units (nothing split) whose busiest worker
  // costs at most 1/32 more (see DecodePlanParams::head_group).
  if (params.head_group > 1) {
    const int64_t single_cost = plan->MaxWorkerCost();
    const int64_t units_cost =
        WholePairsMaxCost(seq_lens, params, single_cost + single_cost / 32);
    if (units_cost >= 0) {
      plan->ResetItems();
      plan->params_ = params;
      plan->CutWholePairs(units_cost);
    }
  }
  plan->FinishWorkers();
  return absl::OkStatus();
}

// The best of the three cuts for `params` (BuildDecodePlan).
void DecodePlan::Cut(absl::Span<const int32_t> seq_lens,
                     const DecodePlanParams& params, int64_t total) {
  params_ = params;
  whole_workers_ = false;
  CutStream(total);
  // With no more pairs than workers, a pair may instead get whole workers:
  // one piece each, so no worker pays two items' fixed costs (a worker that
  // a stream cut gives the end of one pair and the start of the next runs
  // both). Taken when its busiest worker costs no more: on a tie it has the
  // fewer pieces, and the last piece of a pair merges them all (B = 1, L =
  // 4096, 8 KV heads, item cost 128: 16 pieces a head, not 16 or 17).
  const int64_t stream_cost = MaxWorkerCost();
  const int64_t piece_tiles = WholeWorkersPieceTiles(seq_lens, params);
  const int64_t workers_cost =
      piece_tiles > 0 ? WholeWorkersMaxCost(seq_lens, params, piece_tiles) : -1;
  const int64_t allowed = params.cluster_workers > 0
                              ? kDecodeClusterCostRatio * stream_cost
                              : stream_cost;
  const bool whole_workers = workers_cost >= 0 && workers_cost <= allowed;
  const int64_t best_cost = whole_workers ? workers_cost : stream_cost;
  // And a cut at pair boundaries only, when it costs no more than the
  // better of those: no pair split, so no partials and no merges.
  const int64_t pairs_cost = WholePairsMaxCost(seq_lens, params, best_cost);
  if (pairs_cost >= 0) {
    ResetItems();
    CutWholePairs(pairs_cost);
  } else if (whole_workers) {
    ResetItems();
    CutWholeWorkers(piece_tiles);
    whole_workers_ = true;
  }
}

}  // namespace tailor::plan
