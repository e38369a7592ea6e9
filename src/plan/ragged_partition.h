// plan/ragged_partition.h — a ragged step cut between query tiles and a
// decode plan (AttentionPlanParams::skip_decode_rows).
//
// With skip_decode_rows the attention planner gives sequences of q_len 1 no
// tiles. CollectDecodeRows lists them (ascending b) with their KV lengths,
// the input of plan::BuildDecodePlan; that plan's items then name an index
// into the list, and RenumberDecodeItems turns it back into the step's
// sequence b, which a decode kernel reading the step's block table and query
// rows needs. Nothing allocates once the output vectors have the capacity of
// the largest step.
//
// Example: q_lens {4, 1, 0, 1}, kv_lens {9, 30, 5, 7}: tiles for sequence 0
// only; seqs {1, 3}, seq_kv_lens {30, 7}; a decode item {seq 1, ...} becomes
// {seq 3, ...}.
#ifndef TAILOR_PLAN_RAGGED_PARTITION_H_
#define TAILOR_PLAN_RAGGED_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "plan/decode_plan.h"

namespace tailor::plan {

// The query length skip_decode_rows leaves to a decode kernel.
inline constexpr int32_t kDecodeRowQueryLen = 1;

// Refills `seqs` with every b whose q_lens[b] is kDecodeRowQueryLen and
// `seq_kv_lens` with their kv_lens[b] (q_lens and kv_lens of one size).
void CollectDecodeRows(absl::Span<const int32_t> q_lens,
                       absl::Span<const int32_t> kv_lens,
                       std::vector<int32_t>* seqs,
                       std::vector<int32_t>* seq_kv_lens);

// Refills `items` and `first_items` with the plan's, item.seq mapped through
// `seqs` (the list the plan was built over). An idle worker's first item
// (no item of the worker) is copied as is: kernels never read it.
void RenumberDecodeItems(const DecodePlan& plan, absl::Span<const int32_t> seqs,
                         std::vector<DecodeWorkItem>* items,
                         std::vector<DecodeWorkItem>* first_items);

}  // namespace tailor::plan

#endif  // TAILOR_PLAN_RAGGED_PARTITION_H_
