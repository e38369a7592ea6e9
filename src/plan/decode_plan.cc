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

}  // namespace

absl::Status ValidateDecodePlanParams(const DecodePlanParams& p) {
  if (p.num_kv_heads < 1 || p.num_kv_heads > kMaxDecodeKvHeads) {
    return OutOfRange("num_kv_heads", 1, kMaxDecodeKvHeads, p.num_kv_heads);
  }
  if (p.num_workers < 1 || p.num_workers > kMaxDecodeWorkers) {
    return OutOfRange("num_workers", 1, kMaxDecodeWorkers, p.num_workers);
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
  return absl::OkStatus();
}

int64_t MaxDecodeItems(int64_t batch, int64_t num_kv_heads,
                       int64_t num_workers) {
  return batch * num_kv_heads + std::max<int64_t>(num_workers - 1, 0);
}

int64_t MaxDecodePartials(int64_t num_workers) {
  return 2 * std::max<int64_t>(num_workers - 1, 0);
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
}

absl::Status DecodePlan::Reserve(int64_t max_batch,
                                 const DecodePlanParams& params) {
  TAILOR_RETURN_IF_ERROR(ValidateDecodePlanParams(params));
  if (max_batch < 0 || max_batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch: must be in [0, ", kMaxDecodeBatch, "], got ", max_batch));
  }
  const int64_t items =
      MaxDecodeItems(max_batch, params.num_kv_heads, params.num_workers);
  seq_lens_.reserve(max_batch);
  if (items_.size() < static_cast<size_t>(items)) items_.resize(items);
  worker_begin_.reserve(params.num_workers + 1);
  first_items_.reserve(params.num_workers);
  worker_cost_.reserve(params.num_workers);
  const int64_t groups = std::max<int64_t>(params.num_workers - 1, 0);
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

// Gives the pieces items_[first_item, num_items_) of one pair their slots.
void DecodePlan::NumberPieces(size_t first_item) {
  const int32_t pieces = static_cast<int32_t>(num_items_ - first_item);
  if (pieces < 2) return;
  const int32_t first = num_partials_;
  for (int32_t i = 0; i < pieces; ++i) {
    DecodeWorkItem& item = items_[first_item + i];
    item.partial = first + i;
    item.first_partial = first;
    item.pieces = pieces;
  }
  const DecodeWorkItem& head = items_[first_item];
  const DecodeMergeGroup group = {.seq = head.seq,
                                  .kv_head = head.kv_head,
                                  .first_partial = first,
                                  .pieces = pieces};
  if (num_merge_groups_ == merge_groups_.size()) {
    merge_groups_.push_back(group);
  }
  merge_groups_[num_merge_groups_++] = group;
  num_partials_ += pieces;
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
    s.mean_worker_cost = static_cast<double>(total) / params_.num_workers;
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

// ---- BuildDecodePlan
// ----------------------------------------------------------

absl::Status BuildDecodePlan(absl::Span<const int32_t> seq_lens,
                             const DecodePlanParams& params, DecodePlan* plan) {
  plan->Clear();
  TAILOR_RETURN_IF_ERROR(ValidateDecodePlanParams(params));
  if (static_cast<int64_t>(seq_lens.size()) > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_lens: at most ", kMaxDecodeBatch, " sequences, got ",
                     seq_lens.size()));
  }
  const int64_t page = params.page_size, tile = params.tile_tokens;
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
  plan->params_ = params;
  plan->seq_lens_.assign(seq_lens.begin(), seq_lens.end());
  plan->worker_cost_.assign(params.num_workers, 0);
  const int64_t workers = params.num_workers;
  int64_t w = 0;      // the worker being filled
  int64_t start = 0;  // cost position of the current pair
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    const int32_t len = seq_lens[b];
    plan->max_seq_len_ = std::max(plan->max_seq_len_, len);
    for (int32_t h = 0; h < params.num_kv_heads; ++h) {
      DecodeWorkItem item = {.seq = static_cast<int32_t>(b),
                             .kv_head = h,
                             .kv_begin = 0,
                             .kv_end = 0,
                             .seq_len = len,
                             .partial = -1,
                             .first_partial = -1,
                             .pieces = 1};
      const size_t first_item = plan->num_items_;
      int64_t begin = 0;
      do {
        // Skip workers whose range ends at or before this position.
        while (w + 1 < workers &&
               Boundary(total, w + 1, workers) <= start + item_cost + begin) {
          ++w;
        }
        int64_t end = len;
        if (w + 1 < workers) {
          // Tokens of this pair that fit worker w, rounded to a tile.
          const int64_t fit =
              Boundary(total, w + 1, workers) - start - item_cost;
          const int64_t cut =
              std::max<int64_t>(fit + tile / 2, 0) / tile * tile;
          end = std::min<int64_t>(cut, len);
        }
        if (end <= begin && len > 0) {
          ++w;  // worker w takes nothing more; the last one takes the rest
          continue;
        }
        item.kv_begin = static_cast<int32_t>(begin);
        item.kv_end = static_cast<int32_t>(std::max(end, begin));
        plan->Emit(item, static_cast<int32_t>(w));
        begin = item.kv_end;
        if (begin < len) ++w;
      } while (begin < len);
      plan->NumberPieces(first_item);
      start += item_cost + RoundUp(len, page);
    }
  }
  while (static_cast<int64_t>(plan->worker_begin_.size()) <= workers) {
    plan->worker_begin_.push_back(static_cast<int32_t>(plan->num_items_));
  }
  for (int64_t w = 0; w < workers; ++w) {
    const int32_t first = plan->worker_begin_[w];
    plan->first_items_.push_back(first < plan->worker_begin_[w + 1]
                                     ? plan->items_[first]
                                     : DecodeWorkItem{});
  }
  return absl::OkStatus();
}

}  // namespace tailor::plan
