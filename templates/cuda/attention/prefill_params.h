// templates/cuda/attention/prefill_params.h — params, work items and
// shared-memory layout of the ragged paged-attention CUDA kernels
// (prefill_sm90.cuh and its mainloop / epilogue, prefill_merge.cuh): the one
// definition that the host glue and the device templates both include.
//
// Contract: plain C++ (host g++ and device NVRTC), no CUDA keywords, no
// standard headers. Strides count elements.
//
// Two kernels read the same params and work lists: the Hopper kernel
// (prefill_sm90.cuh, 128-row tiles, TMA) and the portable one
// (prefill_sm80.cuh, kPrefillSm80TileRows-row tiles, cp.async, sm_80+).
//
// The work list comes from the host planner (src/plan/attention_plan.h):
// CTA c runs items [worker_begin[c], worker_begin[c + 1]); an item is one
// query tile of the kernel's tile rows of packed rows (row r: token r / pack, query
// head q_head + r % pack) over the KV blocks [kv_begin, kv_end) of one
// sequence. Pieces of a split tile write partial slots that the merge kernel
// combines.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_PARAMS_H_

#include "runtime/cuda/tensor_map.h"

namespace tailor::cuda {

// The layout of plan::AttentionWorkItem (checked by the host glue).
struct PrefillWorkItem {
  int seq;           // b: its block-table row
  int q_head;        // first query head of the tile's pack
  int q_token;       // global q / out row of the tile's first token
  int row_begin;     // first packed row of the tile within (b, pack)
  int rows;          // packed rows stored (the tile rows or fewer)
  int q_len;         // planned query length of b
  int kv_len;        // planned KV length of b
  int kv_begin;      // first KV position, a multiple of the KV block
  int kv_end;        // one past the last
  int partial;       // -1: writes out / lse; else its partial slot
  int tile_class;    // plan bits (tail rows, masked blocks)
  int masked_below;  // blocks [0, masked_below) need a mask (window)
  int masked_from;   // blocks [masked_from, blocks) need a mask
  int merge;         // -1 or the merge group
  int reserved0;
  int reserved1;
};

// The layout of plan::AttentionMergeGroup.
struct PrefillMergeGroup {
  int seq;
  int q_head;
  int q_token;
  int row_begin;
  int rows;
  int first_partial;
  int pieces;
  int reserved;
};

// Packed query rows per tile of the Hopper kernel: two consumer
// warpgroups of 64 rows.
inline constexpr int kPrefillTileRows = 128;
inline constexpr int kPrefillConsumerRows = 64;
// Elements per 128-byte swizzled row (one TMA box's inner dimension).
inline constexpr int kPrefillChunk = 64;

// The portable kernel: 64-row tiles, one warp a 16-row m16n8k16 strip.
inline constexpr int kPrefillSm80TileRows = 64;
inline constexpr int kPrefillSm80Threads = 128;

// A template argument read from the params instead (the generic kernels of
// background JIT): the portable kernel's kPack and kPageSize (both or
// neither), the merge's kTileRows.
inline constexpr int kPrefillRuntimeDim = 0;

// The portable kernel's KV block and cp.async stages (K and V of a block
// share a stage) for a head_dim, sized for the 99 KB of shared memory a
// CTA may have on sm_86 / sm_89:
//   D = 64:  8 KB queries + 3 x 16 KB stages (blocks of 64)
//   D = 128: 16 KB queries + 2 x 32 KB stages (blocks of 64)
//   D = 256: 32 KB queries + 2 x 32 KB stages (blocks of 32)
struct PrefillSm80Shape {
  int kv_block;
  int stages;
};

inline constexpr PrefillSm80Shape PrefillSm80ShapeFor(int head_dim) {
  return head_dim <= 64    ? PrefillSm80Shape{64, 3}
         : head_dim <= 128 ? PrefillSm80Shape{64, 2}
                           : PrefillSm80Shape{32, 2};
}

// The portable kernel's shared memory, in bytes from a 128-byte aligned
// base: the query tile, then per stage a K tile and a V tile, then a u64
// of attended-position bits per stage.
struct PrefillSm80Layout {
  unsigned q_bytes;     // 64 rows x D x 2
  unsigned tile_bytes;  // one K or V tile: kv_block x D x 2
  unsigned q;
  unsigned kv;     // [stages][K tile, V tile]
  unsigned masks;  // [stages] u64
  unsigned total;
};

inline constexpr PrefillSm80Layout MakePrefillSm80Layout(int head_dim) {
  const PrefillSm80Shape shape = PrefillSm80ShapeFor(head_dim);
  PrefillSm80Layout l = {};
  l.q_bytes = kPrefillSm80TileRows * head_dim * 2;
  l.tile_bytes = shape.kv_block * head_dim * 2;
  l.q = 0;
  l.kv = l.q_bytes;
  l.masks = l.kv + shape.stages * 2 * l.tile_bytes;
  l.total = l.masks + 8 * shape.stages;
  return l;
}

// Dynamic shared memory to request for the portable kernel: the layout
// plus the slack that aligns its base to 128 bytes.
inline constexpr unsigned PrefillSm80SharedBytes(int head_dim) {
  return MakePrefillSm80Layout(head_dim).total + 128;
}

// Error words (u64 each): the lowest (position << 32 | uint32 value)
// recorded with atomicMin; all ones: none.
inline constexpr int kPrefillErrorBadPage = 0;   // b * max_pages + j, page id
inline constexpr int kPrefillErrorBadKvLen = 1;  // b, kv_lens[b] on the device
inline constexpr int kPrefillErrorWords = 2;

// The tile shape and pipeline depths of the Hopper kernel for a head_dim:
// KV positions per block, K stages, V stages, query buffers. K and V have
// rings of their own: a K stage is free once Q K^T has read it, half an
// iteration before the P V that reads its V, so the producer refills it a
// block ahead. Sized so that the query buffers and stages fit the 227 KB
// of shared memory:
//   D = 64:  2 x 16 KB queries + 4 + 4 x 16 KB stages (blocks of 128)
//   D = 128: 2 x 32 KB queries + 2 + 2 x 32 KB stages (blocks of 128)
//   D = 256: 1 x 64 KB queries + 2 + 2 x 32 KB stages (blocks of 64)
struct PrefillSm90Shape {
  int kv_block;
  int k_stages;
  int v_stages;
  int q_buffers;
};

inline constexpr PrefillSm90Shape PrefillSm90ShapeFor(int head_dim) {
  return head_dim <= 64    ? PrefillSm90Shape{128, 4, 4, 2}
         : head_dim <= 128 ? PrefillSm90Shape{128, 2, 2, 2}
                           : PrefillSm90Shape{64, 2, 2, 1};
}

// Shared memory of one CTA, in bytes from a 1024-byte aligned base.
struct PrefillSm90Layout {
  unsigned q_bytes;     // one query buffer: 128 rows x D x 2
  unsigned tile_bytes;  // one K or V tile: kv_block x D x 2
  unsigned q;           // [q_buffers] query buffers (then output staging)
  unsigned k;           // [k_stages] K tiles
  unsigned v;           // [v_stages] V tiles
  unsigned barriers;    // the K ring, the V ring, then 2 x q_buffers
  unsigned total;
};

inline constexpr unsigned PrefillAlignUp(unsigned n, unsigned a) {
  return (n + a - 1) / a * a;
}

// `ring_bytes`: sizeof the kernel's two PipelineRings, each rounded up to 8
// (device side; the host passes an upper bound, kPrefillRingBytesBound).
inline constexpr PrefillSm90Layout MakePrefillSm90Layout(int head_dim,
                                                         unsigned ring_bytes) {
  const PrefillSm90Shape shape = PrefillSm90ShapeFor(head_dim);
  PrefillSm90Layout l = {};
  l.q_bytes = kPrefillTileRows * head_dim * 2;
  l.tile_bytes = shape.kv_block * head_dim * 2;
  l.q = 0;
  l.k = l.q + shape.q_buffers * l.q_bytes;
  l.v = l.k + shape.k_stages * l.tile_bytes;
  l.barriers = l.v + shape.v_stages * l.tile_bytes;
  l.total = l.barriers + ring_bytes + 2 * 8 * shape.q_buffers;
  return l;
}

// Bytes two PipelineRings of up to 4 stages take, with their protocol
// checks.
inline constexpr unsigned kPrefillRingBytesBound =
    2 * (4 * (8 + 8 + 4 + 8) + 16);

// Dynamic shared memory to request: the layout plus the slack that aligns
// its base to 1024 bytes.
inline constexpr unsigned PrefillSm90SharedBytes(int head_dim) {
  return MakePrefillSm90Layout(head_dim, kPrefillRingBytesBound).total + 1024;
}

struct PrefillParams {
  // Queries and outputs as rank-5 maps, innermost first:
  //   dims    {64, pack, Hq / pack, tokens, D / 64}
  //   strides {head, pack heads, token, 128 bytes} (bytes)
  // q_map's box {64, pack, 1, 128 / pack, 1} lands a tile's 128 packed rows
  // (row = token * pack + head) as one 128-byte swizzled chunk of D;
  // out_map's box {64, pack, 1, 64 / pack, 1} stores one consumer's rows.
  TensorMap q_map;
  TensorMap out_map;
  // K and V caches, rank 5: dims {64, page_size, D / 64, Hkv, num_pages},
  // strides {token, 128 bytes, head, page} (bytes), box {64, box_tokens, 1,
  // 1, 1}: a box is box_tokens tokens of one 64-element chunk of one head,
  // and the page id is the last coordinate (num_pages: out of bounds, read
  // as zeros).
  TensorMap k_map;
  TensorMap v_map;
  // V again by pointer: the producer copies the last, partial box of a
  // sequence itself, zeroing the rows past its end (TMA would read whatever
  // the cache holds there, and P = 0 must not meet a NaN).
  const void* v_cache;
  long long v_stride_page, v_stride_token, v_stride_head;
  void* out;  // [tokens, Hq, D]: tails and merges store by pointer
  long long out_stride_token, out_stride_head;
  float* lse;  // [tokens, Hq] natural log, or null
  long long lse_stride_token;
  const int* block_table;  // [B, max_pages], or [nnz] with page_indptr
  long long block_table_stride;
  int max_pages;           // block_table's last dim
  const int* page_indptr;  // [B + 1] or null (page_table.cuh)
  int num_pages;
  const PrefillWorkItem* items;  // [num_items]
  const int* worker_begin;       // [gridDim.x + 1]
  float* partial_out;            // [partials, tile rows, D] normalized
  float* partial_lse;            // [partials, tile rows] log2
  unsigned long long* errors;    // [kPrefillErrorWords]
  // [B] the caller's device KV lengths, or null: each item's sequence is
  // checked against the planned item.kv_len (kPrefillErrorBadKvLen); the
  // item attends the planned length either way.
  const int* kv_lens;
  // Scores in the log2 domain: without a soft cap s2 = score_scale * q.k
  // (score_scale = sm_scale log2 e); with one (cap_scale != 0) s2 =
  // score_scale * tanh(cap_scale * q.k) (score_scale = cap log2 e,
  // cap_scale = sm_scale / cap).
  float score_scale;
  float cap_scale;
  int causal;       // 1: query token t attends positions <= kv_len - q_len + t
  int window_left;  // -1: none; else also positions >= that - window_left
  int group;        // Hq / Hkv
  // The portable kernel reads q and the K cache by pointer (the Hopper
  // kernel through q_map and k_map); both are [.., D] with D contiguous.
  const void* q;  // [tokens, Hq, D]
  long long q_stride_token, q_stride_head;
  const void* k_cache;
  long long k_stride_page, k_stride_token, k_stride_head;
  // What the portable kernel compiles in unless it is the generic one
  // (kPrefillRuntimeDim), which reads them here: the page size, the head
  // pack, and the plan's tile rows (kPrefillSm80TileRows, or
  // kPrefillTileRows: the generic kernel also runs the Hopper kernel's
  // plans, a tile as 64-row strips, partial slots of tile_rows rows).
  int page_size;
  int head_pack;
  int tile_rows;
};

// The merge of split tiles: grid-stride over merge groups.
struct PrefillMergeParams {
  const PrefillMergeGroup* groups;  // [*num_groups]
  const int* num_groups;            // device count (graph replays read it)
  const float* partial_out;         // [partials, tile rows, D]
  const float* partial_lse;         // [partials, tile rows] log2
  void* out;                        // [tokens, Hq, D]
  long long out_stride_token, out_stride_head;
  float* lse;  // [tokens, Hq] or null
  long long lse_stride_token;
  int pack;       // query heads per packed row group
  int tile_rows;  // rows of a partial slot (read when kTileRows is runtime)
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_PARAMS_H_
