// templates/cpu/attention/decode_params.h — params of the paged-decode CPU kernels,
// the one definition that the host glue (src/backends/cpu/attention/decode_kernels.cc)
// fills and the templates (decode_attention.h, decode_merge.h) read.
//
// Contract: plain C++ that compiles both as host code (g++) and as JIT code
// (Clang, no system headers). Element pointers are void: the templates cast
// them to their element type T (bf16 or f16). Strides count elements.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_PARAMS_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_PARAMS_H_

#include "runtime/cpu/types.h"

namespace tailor::kernels {

// One piece of one (sequence, KV head) pair. The layout of
// plan::DecodeWorkItem (src/plan/decode_plan.h), checked by the host glue.
struct DecodeWorkItem {
  int32_t seq;            // b
  int32_t kv_head;        // h
  int32_t kv_begin;       // first token of the piece
  int32_t kv_end;         // one past its last token
  int32_t seq_len;        // planned length of sequence b
  int32_t partial;        // -1: write out / lse; else the partial slot
  int32_t first_partial;  // -1 or the first slot of the pair's pieces
  int32_t pieces;         // pieces of the pair
};

// A split pair: plan::DecodeMergeGroup.
struct DecodeMergeGroup {
  int32_t seq;
  int32_t kv_head;
  int32_t first_partial;
  int32_t pieces;
};

// One work item per plan worker: it runs items [worker_begin[w],
// worker_begin[w + 1]).
struct DecodeParams {
  const void* q;  // [B, Hq, D]
  int64_t q_stride_b;
  int64_t q_stride_h;
  const void* k_cache;  // [pages, page_size, Hkv, D]
  const void* v_cache;  // [pages, page_size, Hkv, D]
  int64_t k_stride_page, k_stride_token, k_stride_head;
  int64_t v_stride_page, v_stride_token, v_stride_head;
  const int32_t* block_table;  // [B, max_pages]
  int64_t block_table_stride;
  int64_t num_pages;  // entries outside [0, num_pages) are skipped
  void* out;          // [B, Hq, D]
  int64_t out_stride_b;
  int64_t out_stride_h;
  float* lse;  // [B, Hq] or null
  int64_t lse_stride_b;
  float sm_scale;
  float soft_cap;               // 0: none
  const DecodeWorkItem* items;  // [num_items]
  const int32_t* worker_begin;  // [num_workers + 1]
  float* partial_out;           // [partials, group, D]
  float* partial_lse;           // [partials, group]
};

// One work item per split pair.
struct DecodeMergeParams {
  const DecodeMergeGroup* groups;  // [num_groups]
  const float* partial_out;        // [partials, group, D]
  const float* partial_lse;        // [partials, group]
  void* out;                       // [B, Hq, D]
  int64_t out_stride_b;
  int64_t out_stride_h;
  float* lse;  // [B, Hq] or null
  int64_t lse_stride_b;
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_PARAMS_H_
