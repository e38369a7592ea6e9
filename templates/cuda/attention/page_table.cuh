// templates/cuda/attention/page_table.cuh — where a sequence's pages sit in
// the block table the attention kernels read, in either of the two forms
// serving engines hand over:
//   vLLM        block_table [B, max_pages]: sequence b's page j at
//               b * stride + j (page_indptr null)
//   FlashInfer  kv_indices [nnz] with kv_indptr [B + 1] (page_indptr):
//               sequence b's pages at [page_indptr[b], page_indptr[b + 1]),
//               within [0, nnz) (max_pages = nnz)
// Both read device memory the host has not checked: a range outside the
// table, or reversed, holds no pages. So are the device KV lengths that
// come with the table (vLLM's seq_lens): CheckKvLen compares one with the
// plan's.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PAGE_TABLE_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PAGE_TABLE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/error_word.cuh"

namespace tailor::cuda {

struct PageRow {
  long long first;  // block-table offset of the sequence's page 0
  int count;        // its pages in the table
};

TAILOR_DEVICE PageRow PageRowOf(const int* block_table_indptr, long long stride,
                                int max_pages, int seq) {
  if (block_table_indptr == nullptr) {
    return {static_cast<long long>(seq) * stride, max_pages};
  }
  const int begin = __ldg(block_table_indptr + seq);
  const int end = __ldg(block_table_indptr + seq + 1);
  if (begin < 0 || end > max_pages || end < begin) return {0, 0};
  return {begin, end - begin};
}

// Page `index` of the row, or `missing` past its pages.
TAILOR_DEVICE int PageAt(const int* block_table, const PageRow& row, int index,
                         int missing) {
  return index < row.count ? __ldg(block_table + row.first + index) : missing;
}

// Records (seq, kv_lens[seq]) in error word `word` of `errors` when the
// device length differs from `planned`; nothing when kv_lens is null.
TAILOR_DEVICE void CheckKvLen(const int* kv_lens, int seq, int planned,
                              unsigned long long* errors, int word) {
  if (kv_lens == nullptr) return;
  const int device_len = __ldg(kv_lens + seq);
  if (device_len != planned) RecordLowestError(errors, word, seq, device_len);
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PAGE_TABLE_CUH_
