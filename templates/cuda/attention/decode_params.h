// templates/cuda/attention/decode_params.h — params and shared-memory layout of the
// paged-decode CUDA kernels (decode_sm80.cuh, decode_sm90.cuh), the one
// definition that the host glue (src/backends/cuda/attention/decode_kernels.cc) and
// the device templates both include.
//
// Contract: plain C++ (host g++ and device NVRTC), no CUDA keywords, no
// standard headers. Strides count elements.
//
// The work list comes from the host planner (src/plan/decode_plan.h): CTA c
// runs items [worker_begin[c], worker_begin[c + 1]); an item is the token
// range [kv_begin, kv_end) of one (sequence, KV head) pair. A CTA steps
// through its items' tokens in tiles of kDecodeTileTokens; the plan's
// pieces begin at multiples of it.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_PARAMS_H_

#include "runtime/cuda/tensor_map.h"

namespace tailor::cuda {

// The layout of plan::DecodeWorkItem (checked by the host glue).
struct DecodeWorkItem {
  int seq;            // b
  int kv_head;        // h
  int kv_begin;       // first token, a multiple of kDecodeTileTokens
  int kv_end;         // one past the last token (planned)
  int seq_len;        // planned length of sequence b
  int partial;        // -1: write out / lse; else the partial slot
  int first_partial;  // -1, or the first slot of the pair's pieces (also
                      // the index of the pair's merge counter)
  int pieces;         // pieces of the pair
};

// A group or page size of 0 in a kernel's template is read from the params
// at run time: the generic kernels of background JIT (src/backends/cuda/
// generic_kernels.h), built once per dtype, head dim and arch, serve every
// group and page size with the code of the specialized ones.
inline constexpr int kDecodeRuntimeDim = 0;

// Tokens per pipeline stage (K and V tiles of kDecodeTileTokens rows).
inline constexpr int kDecodeTileTokens = 64;
// Warps that compute; each takes 16 tokens of every tile.
inline constexpr int kDecodeConsumerWarps = 4;
// Most pipeline stages a kernel is built with.
inline constexpr int kDecodeMaxStages = 4;

// Variants (SpecKey::variant).
inline constexpr unsigned kDecodeVariantCpAsync = 0;  // sm_80+: cp.async
inline constexpr unsigned kDecodeVariantTma = 1;      // sm_90a: TMA producer

// Error words (u64 each, scratch after the counters): the lowest
// (position << 32 | uint32 value) recorded with atomicMin; all ones: none.
inline constexpr int kDecodeErrorBadPage = 0;       // b * max_pages + j, id
inline constexpr int kDecodeErrorBadSeqLen = 1;     // b, device seq_lens[b]
inline constexpr int kDecodeErrorTooManyPages = 2;  // b, pages needed
inline constexpr int kDecodeErrorWords = 3;

// Launch flags: the word after worker_begin's last entry
// (worker_begin[gridDim.x + 1]), written with each plan.
//   kDecodeLaunchEvictFirst  K and V copies carry an L2 evict-first policy.
//     Read once, they then displace each other rather than the lines L2
//     already holds (dirty ones included, whose write-back would share the
//     DRAM with the stream). The host decides per plan.
inline constexpr int kDecodeLaunchEvictFirst = 1;
//   kDecodeLaunchHeadGroups  the plan's items come in head groups
//     (plan::DecodePlanParams::head_group = kDecodeHeadGroup): runs of 4
//     items, heads h .. h + 3 of one sequence over one token range. The TMA
//     kernel then loads 16 tokens of all 4 heads in one copy (16 KB for D =
//     128, against 4 KB a head: scattered small reads stream slower) and
//     warp w computes head h + w alone. Other kernels run the items one by
//     one, as any plan's.
inline constexpr int kDecodeLaunchHeadGroups = 2;

//   kDecodeLaunchClusterMerges  the plan's split pairs each run on
//     consecutive CTAs of one cluster (plan::DecodePlan::cluster_merges), so
//     a TMA launch in clusters merges them in shared memory
//     (DecodeClusterLayout). Without it, pairs merge through L2.
inline constexpr int kDecodeLaunchClusterMerges = 4;

// KV heads of a head group: one per consumer warp.
inline constexpr int kDecodeHeadGroup = kDecodeConsumerWarps;

struct DecodeKernelParams {
  // TMA variant: maps over the whole caches, rank 5, innermost first:
  //   dims    {64, page_size, D / 64, Hkv, num_pages}
  //   strides {token, 128 bytes, head, page} (bytes)
  //   box     {64, box_tokens, D / 64, 1, 1}, 128-byte swizzle
  // so a box lands as [D / 64][box_tokens][64] with 128-byte rows, and the
  // page id is the last coordinate. Unused by the cp.async variant.
  TensorMap k_map;
  TensorMap v_map;
  // Head groups (kDecodeLaunchHeadGroups): the same maps with the box
  // {64, 16, D / 64, kDecodeHeadGroup, 1}, landing as kDecodeHeadGroup
  // per-head boxes of 16 tokens. Set only for such plans.
  TensorMap k_heads_map;
  TensorMap v_heads_map;
  const void* q;  // [B, Hq, D], or [rows, Hq, D] with q_rows
  long long q_stride_b;
  long long q_stride_h;
  // [B] the q / out / lse row of sequence b, or null: row b. A ragged step
  // runs its decode rows here, wherever they sit among its query rows.
  const int* q_rows;
  const void* k_cache;  // [num_pages, page_size, Hkv, D]
  const void* v_cache;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  const int* block_table;  // [B, max_pages], or [nnz] with page_indptr
  long long block_table_stride;
  int max_pages;           // block_table's last dim
  const int* page_indptr;  // [B + 1] or null (page_table.cuh)
  int num_pages;
  const int* seq_lens;  // [B] device lengths (checked against the plan)
  void* out;            // [B, Hq, D] (rows as q)
  long long out_stride_b;
  long long out_stride_h;
  float* lse;  // [B, Hq] (rows as q) natural log, or null
  long long lse_stride_b;
  float score_scale;  // sm_scale * log2(e) (no cap); log2(e) * soft_cap
  float cap_scale;    // sm_scale / soft_cap; 0: no soft cap
  const DecodeWorkItem* items;  // [num_items]
  const int* worker_begin;      // [gridDim.x + 1], then the launch flags
  // [gridDim.x] each CTA's first item (read beside worker_begin: one
  // memory round trip before the first load instead of two).
  const DecodeWorkItem* first_items;
  // [partials, group, D] normalized, in the q / out type (16 bits; the
  // host sizes the buffer for f32, the CPU backend's partials).
  void* partial_out;
  float* partial_lse;          // [partials, group] log2 domain
  int* counters;               // [partials] zero between launches
  unsigned long long* errors;  // [kDecodeErrorWords]
  int group;                   // query heads per KV head (generic kernel)
  int page_size;               // tokens per page (generic kernel)
};

// The most pieces one split pair may have. A pair has at most one piece per
// worker, so the CUDA backend plans at most this many workers (two CTAs an
// SM on 144 SMs); the last piece's merge reads every piece of its pair, so
// the cap bounds that tail.
inline constexpr int kDecodeMaxPieces = 288;

// Shared memory of one CTA, in bytes from a 1024-byte aligned base (the
// 128-byte swizzle repeats every 1024 bytes). Host and device compute it
// with the same function.
struct DecodeSmemLayout {
  unsigned tile_bytes;   // one K or V tile: 64 tokens x D x 2 bytes
  unsigned q_row_bytes;  // 2 D + 16: padded, so ldmatrix rows miss banks
  unsigned q_bytes;      // 16 rows
  unsigned merge_row;    // floats per merge row: D + 8
  unsigned kv;           // [stages][K tile, V tile]
  unsigned q_stage;      // [stages] query rows of an item's first tile
  unsigned q;            // the running item's query rows
  unsigned merge_out;    // [4 warps][group][merge_row] f32
  unsigned merge_max;    // [4 warps][16] f32
  unsigned merge_sum;    // [4 warps][16] f32
  unsigned row_scale;    // [4 warps][16] f32
  unsigned masks;        // [stages] u64 valid-token bits of each tile
  unsigned barriers;     // [2 * stages] u64 mbarriers (full, empty)
  unsigned flag;         // int: this CTA merges ([4] with head groups)
  unsigned total;        // bytes used
};

inline constexpr unsigned DecodeAlignUp(unsigned n, unsigned a) {
  return (n + a - 1) / a * a;
}

inline constexpr DecodeSmemLayout MakeDecodeSmemLayout(int head_dim, int group,
                                                       int stages) {
  DecodeSmemLayout l = {};
  l.tile_bytes = kDecodeTileTokens * head_dim * 2;
  l.q_row_bytes = head_dim * 2 + 16;
  l.q_bytes = 16 * l.q_row_bytes;
  l.merge_row = head_dim + 8;
  l.kv = 0;
  l.q_stage = l.kv + stages * 2 * l.tile_bytes;
  l.q = l.q_stage + stages * l.q_bytes;
  l.merge_out = DecodeAlignUp(l.q + l.q_bytes, 16);
  l.merge_max = l.merge_out + kDecodeConsumerWarps * group * l.merge_row * 4;
  l.merge_sum = l.merge_max + kDecodeConsumerWarps * 16 * 4;
  l.row_scale = l.merge_sum + kDecodeConsumerWarps * 16 * 4;
  l.masks = DecodeAlignUp(l.row_scale + kDecodeConsumerWarps * 16 * 4, 8);
  l.barriers = l.masks + stages * 8;
  l.flag = l.barriers + 2 * stages * 8;
  l.total = l.flag + 16;
  return l;
}

// Head groups: warp w's query rows (16 rows of q_row_bytes) live at q_stage
// + w q_bytes, over the query and merge buffers that such items do not use
// (no stage carries query rows, no warps combine). True when they fit.
inline constexpr bool DecodeHeadGroupFits(int head_dim, int group, int stages) {
  const DecodeSmemLayout l = MakeDecodeSmemLayout(head_dim, group, stages);
  return l.merge_max - l.q_stage >= kDecodeHeadGroup * l.q_bytes &&
         l.flag + 4 * kDecodeHeadGroup <= l.total;
}

// Dynamic shared memory to request: the layout plus the slack that aligns
// its base to 1024 bytes.
inline constexpr unsigned DecodeSharedBytes(int head_dim, int group,
                                            int stages) {
  return MakeDecodeSmemLayout(head_dim, group, stages).total + 1024;
}

// Cluster merges (a TMA launch in clusters of `cluster` CTAs, plan::
// DecodePlanParams::cluster_workers): a split pair whose pieces all run in
// one cluster is merged in the shared memory of its first piece's CTA (the
// receiver), past the layout. The other pieces store their partials there
// (st.async, completing the barrier's transaction bytes) and are done: no
// merge counter, no partial slot, no round trip through L2. A CTA receives
// for at most one pair (a first piece is its worker's last item).
struct DecodeClusterLayout {
  unsigned slots;    // [cluster][group][D] partials, 16-bit, by piece
  unsigned lse;      // [cluster][group] f32, log2 domain
  unsigned barrier;  // u64 mbarrier: count 1 (the receiver), tx = the rest
  unsigned total;    // bytes used, from the 1024-byte aligned base
};

inline constexpr DecodeClusterLayout MakeDecodeClusterLayout(int head_dim,
                                                             int group,
                                                             int stages,
                                                             int cluster) {
  DecodeClusterLayout l = {};
  l.slots =
      DecodeAlignUp(MakeDecodeSmemLayout(head_dim, group, stages).total, 16);
  l.lse = l.slots + cluster * group * head_dim * 2;
  l.barrier = DecodeAlignUp(l.lse + cluster * group * 4, 8);
  l.total = l.barrier + 8;
  return l;
}

// Dynamic shared memory of a launch in clusters of `cluster` CTAs.
inline constexpr unsigned DecodeClusterSharedBytes(int head_dim, int group,
                                                   int stages, int cluster) {
  return MakeDecodeClusterLayout(head_dim, group, stages, cluster).total + 1024;
}

// Bytes of the merge counters and error words for `partials` slots.
inline constexpr long long DecodeScratchBytes(long long partials) {
  return (partials * 4 + 7) / 8 * 8 + kDecodeErrorWords * 8;
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_PARAMS_H_
