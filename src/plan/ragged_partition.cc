#include "plan/ragged_partition.h"

#include "plan/attention_plan.h"

namespace tailor::plan {

void CollectDecodeRows(absl::Span<const int32_t> q_lens,
                       absl::Span<const int32_t> kv_lens,
                       std::vector<int32_t>* seqs,
                       std::vector<int32_t>* seq_kv_lens) {
  seqs->clear();
  seq_kv_lens->clear();
  for (size_t b = 0; b < q_lens.size(); ++b) {
    if (q_lens[b] != kDecodeRowQueryLen) continue;
    seqs->push_back(static_cast<int32_t>(b));
    seq_kv_lens->push_back(kv_lens[b]);
  }
}

void RenumberDecodeItems(const DecodePlan& plan, absl::Span<const int32_t> seqs,
                         std::vector<DecodeWorkItem>* items,
                         std::vector<DecodeWorkItem>* first_items) {
  items->assign(plan.items().begin(), plan.items().end());
  for (DecodeWorkItem& item : *items) item.seq = seqs[item.seq];
  first_items->assign(plan.first_items().begin(), plan.first_items().end());
  const auto begin = plan.worker_begin();
  for (size_t w = 0; w < first_items->size(); ++w) {
    if (begin[w] < begin[w + 1]) {
      (*first_items)[w].seq = seqs[(*first_items)[w].seq];
    }
  }
}

}  // namespace tailor::plan
