// templates/hip/attention/ragged_params.h — params and launch shape of the
// ragged paged-attention HIP kernels (templates/hip/attention/ragged.h), the
// one definition that the host glue (src/backends/hip/attention/
// ragged_kernels.cc) and the device templates include.
//
// Contract: plain C++ (host g++ and device hiprtc), no HIP keywords, no
// standard headers. Strides count elements.
//
// The work list, its item and merge-group layouts, the partial slots and
// the error words are the CUDA kernels'
// (templates/cuda/attention/prefill_params.h): the same host planner cuts
// the same kind of plan (here: 64-row tiles over KV blocks of
// HipRaggedKvBlock), and the op front reads the same errors. The params
// carry no TMA maps; the merge's are PrefillMergeParams.
#ifndef TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_PARAMS_H_
#define TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_PARAMS_H_

#include "templates/cuda/attention/prefill_params.h"

namespace tailor::hip {

using ::tailor::cuda::kPrefillErrorBadKvLen;
using ::tailor::cuda::kPrefillErrorBadPage;
using ::tailor::cuda::kPrefillErrorWords;
using ::tailor::cuda::PrefillMergeGroup;
using ::tailor::cuda::PrefillMergeParams;
using ::tailor::cuda::PrefillWorkItem;

// One work-group per worker: 4 waves; a tile of 64 packed rows, each row
// owned by 4 consecutive lanes (a quarter of its KV positions for the
// scores, a quarter of D for the output).
inline constexpr int kHipRaggedTileRows = 64;
inline constexpr int kHipRaggedLanesPerRow = 4;
inline constexpr int kHipRaggedThreads =
    kHipRaggedTileRows * kHipRaggedLanesPerRow;
inline constexpr int kHipRaggedMergeThreads = 128;

constexpr bool HipRaggedHeadDimFits(long long head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

// KV positions per block: the query tile and one block of K and V (all
// 16-bit) fit the 64 KiB of LDS a work-group may have.
constexpr int HipRaggedKvBlock(int head_dim) {
  return head_dim <= 128 ? 32 : 16;
}

// LDS of one work-group (all static in the kernel; the host checks it).
constexpr int HipRaggedLdsBytes(int head_dim) {
  return 2 * (kHipRaggedTileRows + 2 * HipRaggedKvBlock(head_dim)) * head_dim +
         4 * HipRaggedKvBlock(head_dim);
}

struct HipRaggedParams {
  const void* q;  // [tokens, Hq, D]
  long long q_stride_token, q_stride_head;
  const void* k_cache;  // [num_pages, page_size, Hkv, D] (any strides)
  const void* v_cache;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  const int* block_table;  // [B, max_pages], or [nnz] with page_indptr
  long long block_table_stride;
  int max_pages;           // block_table's last dim
  const int* page_indptr;  // [B + 1] or null (page_table.cuh)
  int num_pages;
  // [B] the caller's KV lengths, or null: each item's planned kv_len is
  // compared with its sequence's, a mismatch recorded in the error words.
  const int* kv_lens;
  void* out;  // [tokens, Hq, D]
  long long out_stride_token, out_stride_head;
  float* lse;  // [tokens, Hq] natural log, or null
  long long lse_stride_token;
  const PrefillWorkItem* items;  // [num_items]
  const int* worker_begin;       // [gridDim.x + 1]
  float* partial_out;            // [partials, 64, D] normalized
  float* partial_lse;            // [partials, 64] log2
  unsigned long long* errors;    // [kPrefillErrorWords]
  // Scores in the log2 domain, as prefill_params.h: s2 = score_scale * q.k,
  // or with a soft cap (cap_scale != 0) score_scale * tanh(cap_scale * q.k).
  float score_scale;
  float cap_scale;
  int causal;       // 1: query token t attends positions <= kv_len - q_len + t
  int window_left;  // -1: none; else also positions >= that - window_left
  int group;        // Hq / Hkv
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_PARAMS_H_
