// templates/cpu/attention/ragged_params.h — params of the ragged-attention
// CPU kernels, the one definition that the host glue
// (src/backends/cpu/attention/ragged_kernels.cc) fills and the templates
// (ragged.h, ragged_merge.h) read.
//
// Contract: plain C++ that compiles both as host code (g++) and as JIT code
// (Clang, no system headers). Element pointers are void: the templates cast
// them to T (bf16 or f16). Strides count elements.
//
// A work item is one query tile of the host plan (src/plan/attention_plan.h):
// packed rows [row_begin, row_begin + rows) of sequence `seq` and the query
// heads q_head .. q_head + pack - 1 (row r: token r / pack, head q_head +
// r % pack) over KV positions [kv_begin, kv_end). Pieces of a split tile
// write partial slots that ragged_merge.h combines.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_PARAMS_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_PARAMS_H_

#include "runtime/cpu/types.h"

namespace tailor::kernels {

// Packed query rows per tile: the rows that share each K / V block read.
inline constexpr int32_t kRaggedTileRows = 32;

// The layout of plan::AttentionWorkItem (checked by the host glue).
struct RaggedWorkItem {
  int32_t seq;
  int32_t q_head;
  int32_t q_token;    // global q / out row of the tile's first token
  int32_t row_begin;  // first packed row within (seq, pack)
  int32_t rows;
  int32_t q_len;
  int32_t kv_len;
  int32_t kv_begin;
  int32_t kv_end;
  int32_t partial;  // -1: writes out / lse; else its partial slot
  int32_t tile_class;
  int32_t masked_below;
  int32_t masked_from;
  int32_t merge;
  int32_t reserved0;
  int32_t reserved1;
};

// The layout of plan::AttentionMergeGroup.
struct RaggedMergeGroup {
  int32_t seq;
  int32_t q_head;
  int32_t q_token;
  int32_t row_begin;
  int32_t rows;
  int32_t first_partial;
  int32_t pieces;
  int32_t reserved;
};

// One JIT work item per plan worker: it runs items [worker_begin[w],
// worker_begin[w + 1]).
struct RaggedParams {
  const void* q;  // [Σq, Hq, D]
  int64_t q_stride_token, q_stride_head;
  const void* k_cache;  // [pages, page_size, Hkv, D]
  const void* v_cache;
  int64_t k_stride_page, k_stride_token, k_stride_head;
  int64_t v_stride_page, v_stride_token, v_stride_head;
  // Pages of sequence b: block_table[row_b + j], row_b = page_indptr ?
  // page_indptr[b] : b * block_table_stride.
  const int32_t* block_table;
  int64_t block_table_stride;
  const int32_t* page_indptr;  // [B + 1] or null
  int64_t num_pages;           // entries outside [0, num_pages) are skipped
  void* out;                   // [Σq, Hq, D]
  int64_t out_stride_token, out_stride_head;
  float* lse;  // [Σq, Hq] natural log, or null
  int64_t lse_stride_token;
  float sm_scale;
  float soft_cap;       // 0: none
  int32_t causal;       // 1: token t attends positions <= kv_len - q_len + t
  int32_t window_left;  // -1: none; else also >= that position - window_left
  int32_t group;        // Hq / Hkv
  const RaggedWorkItem* items;  // [num_items]
  const int32_t* worker_begin;  // [num_workers + 1]
  float* partial_out;           // [partials, kRaggedTileRows, D] normalized
  float* partial_lse;           // [partials, kRaggedTileRows] natural log
};

// One JIT work item per merge group.
struct RaggedMergeParams {
  const RaggedMergeGroup* groups;  // [num_groups]
  const float* partial_out;        // [partials, kRaggedTileRows, D]
  const float* partial_lse;        // [partials, kRaggedTileRows]
  void* out;                       // [Σq, Hq, D]
  int64_t out_stride_token, out_stride_head;
  float* lse;  // [Σq, Hq] or null
  int64_t lse_stride_token;
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_PARAMS_H_
