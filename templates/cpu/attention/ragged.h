// templates/cpu/attention/ragged.h — ragged paged attention over query tiles,
// one plan worker per JIT work item.
//
// A worker runs its plan items (ragged_params.h) in order. An item is a tile
// of up to kRaggedTileRows packed query rows of one sequence (GQA packing:
// row r is token r / kPack of query head q_head + r % kPack, all of one KV
// head) over KV positions [kv_begin, kv_end). Each K and V row is widened
// to f32 once per block and read by every row of the tile; each row keeps
// an online softmax in f32:
//
//   s = sm_scale * q . k  (soft-capped: c * tanh(s / c)), for the positions
//       the row attends: all of [0, kv_len), or with causal those <= its
//       own position kv_len - q_len + token (and >= that - window_left)
//   m' = max(m, max s);  l = l e^(m - m') + sum e^(s - m');
//   o = o e^(m - m') + sum e^(s - m') v
//
// A whole tile writes out = o / l and lse = m + log l (0 and -inf for a row
// that attends nothing); a piece of a split tile writes the same to its
// partial slot and ragged_merge.h combines the slots. Page entries outside
// [0, num_pages) are skipped (the host checks them first).
//
// Template parameters (the specialization; ops/attention/ragged_spec.h):
//   T          bf16 or f16 (storage; compute is f32)
//   kHeadDim   D: a multiple of 8 (the vector width)
//   kPack      query heads packed into a tile's rows: 1, 2, 4, 8 or 16
//   kPageSize  tokens per page, 1..256
// Params: RaggedParams; work item = plan worker.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_H_

#include "runtime/cpu/half.h"
#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/attention/ragged_params.h"

namespace tailor::kernels {

template <typename T, int kHeadDim, int kPack, int kPageSize>
struct RaggedAttentionKernel {
  static_assert(kHeadDim % kLanes == 0 && kHeadDim <= 256,
                "head_dim must be a multiple of 8 (vector width), <= 256");
  static_assert(kPack >= 1 && kPack <= 16 && (kPack & (kPack - 1)) == 0,
                "pack must be a power of two in [1, 16]");
  static_assert(kRaggedTileRows % kPack == 0,
                "tile rows must hold whole packs");
  static_assert(kPageSize >= 1 && kPageSize <= 256,
                "page_size must be in [1, 256]");
  static constexpr int kChunks = kHeadDim / kLanes;  // float8 per row
  static constexpr int kRows = kRaggedTileRows;
  static constexpr int kBlock = 16;  // KV positions per step
  static constexpr float kNegInf = -__builtin_inff();

  using Params = RaggedParams;

  // The online-softmax state of one tile.
  struct State {
    float8 q[kRows][kChunks];  // sm_scale * q
    float8 o[kRows][kChunks];  // unnormalized output
    float m[kRows];            // running max
    float l[kRows];            // running sum of e^(s - m)
    int32_t lo[kRows];         // first attended position
    int32_t hi[kRows];         // one past the last
  };

  // K and V rows of one block in f32, and which positions have a page.
  struct Block {
    float8 k[kBlock][kChunks];
    float8 v[kBlock][kChunks];
    bool valid[kBlock];
  };

  static void Begin(const Params& p, const RaggedWorkItem& item, State& s) {
    const int32_t shift = item.kv_len - item.q_len;  // token -> position
    TAILOR_NO_UNROLL
    for (int r = 0; r < item.rows; ++r) {
      const int32_t token = r / kPack;  // row_begin is a multiple of kPack
      const int64_t head = item.q_head + r % kPack;
      const T* row = static_cast<const T*>(p.q) +
                     (item.q_token + token) * p.q_stride_token +
                     head * p.q_stride_head;
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) {
        s.q[r][c] = Load8(row + c * kLanes) * p.sm_scale;
        s.o[r][c] = 0;
      }
      s.m[r] = kNegInf;
      s.l[r] = 0;
      const int32_t pos = shift + item.row_begin / kPack + token;
      s.hi[r] = p.causal ? Min(pos + 1, item.kv_len) : item.kv_len;
      s.lo[r] = p.window_left >= 0 ? Max(pos - p.window_left, 0) : 0;
    }
  }

  static void Gather(const Params& p, const RaggedWorkItem& item, int32_t t0,
                     int n, Block& b) {
    const int64_t row = p.page_indptr != nullptr
                            ? int64_t{p.page_indptr[item.seq]}
                            : item.seq * p.block_table_stride;
    const int64_t kv_head = item.q_head / p.group;
    TAILOR_NO_UNROLL
    for (int j = 0; j < n; ++j) {
      const int32_t t = t0 + j;
      const int32_t page = p.block_table[row + t / kPageSize];
      b.valid[j] = page >= 0 && page < p.num_pages;
      if (!b.valid[j]) {  // dropped; zeros, since P V reads every position
        for (int c = 0; c < kChunks; ++c) b.v[j][c] = 0;
        continue;
      }
      const int64_t slot = t % kPageSize;
      const T* k = static_cast<const T*>(p.k_cache) + page * p.k_stride_page +
                   slot * p.k_stride_token + kv_head * p.k_stride_head;
      const T* v = static_cast<const T*>(p.v_cache) + page * p.v_stride_page +
                   slot * p.v_stride_token + kv_head * p.v_stride_head;
      for (int c = 0; c < kChunks; ++c) {
        b.k[j][c] = Load8(k + c * kLanes);
        b.v[j][c] = Load8(v + c * kLanes);
      }
    }
  }

  // Row r over the block's positions [t0, t0 + n).
  static void Row(const Params& p, const Block& b, int32_t t0, int n, int r,
                  State& s) {
    float w[kBlock];
    float block_max = kNegInf;
    TAILOR_NO_UNROLL
    for (int j = 0; j < n; ++j) {
      const int32_t t = t0 + j;
      w[j] = kNegInf;
      if (!b.valid[j] || t < s.lo[r] || t >= s.hi[r]) continue;
      float8 acc = 0;
      for (int c = 0; c < kChunks; ++c) acc += s.q[r][c] * b.k[j][c];
      float score = SumLanes(acc);
      if (p.soft_cap > 0) {
        score = p.soft_cap * __builtin_tanhf(score / p.soft_cap);
      }
      w[j] = score;
      block_max = Max(block_max, score);
    }
    if (block_max == kNegInf) return;  // nothing attended here
    const float m_new = Max(s.m[r], block_max);
    const float alpha = s.m[r] == kNegInf ? 0.0f : Exp(s.m[r] - m_new);
    float sum = 0;
    for (int j = 0; j < n; ++j) {
      w[j] = w[j] == kNegInf ? 0.0f : Exp(w[j] - m_new);
      sum += w[j];
    }
    s.l[r] = s.l[r] * alpha + sum;
    s.m[r] = m_new;
    TAILOR_NO_UNROLL
    for (int c = 0; c < kChunks; ++c) {
      float8 o = s.o[r][c] * alpha;
      for (int j = 0; j < n; ++j) o += w[j] * b.v[j][c];
      s.o[r][c] = o;
    }
  }

  // o / l and the log-sum-exp of every row: to out / lse for a whole tile,
  // to the item's partial slot for a piece.
  static void Finish(const Params& p, const RaggedWorkItem& item,
                     const State& s) {
    TAILOR_NO_UNROLL
    for (int r = 0; r < item.rows; ++r) {
      const bool empty = s.l[r] == 0;
      const float inverse = empty ? 0.0f : 1.0f / s.l[r];
      const float lse = empty ? kNegInf : s.m[r] + __builtin_logf(s.l[r]);
      if (item.partial < 0) {
        const int64_t token = item.q_token + r / kPack;
        const int64_t head = item.q_head + r % kPack;
        T* row = static_cast<T*>(p.out) + token * p.out_stride_token +
                 head * p.out_stride_head;
        TAILOR_NO_UNROLL
        for (int c = 0; c < kChunks; ++c)
          Store8(row + c * kLanes, s.o[r][c] * inverse);
        if (p.lse != nullptr) p.lse[token * p.lse_stride_token + head] = lse;
      } else {
        const int64_t slot = int64_t{item.partial} * kRows + r;
        float* row = p.partial_out + slot * kHeadDim;
        TAILOR_NO_UNROLL
        for (int c = 0; c < kChunks; ++c)
          Store8(row + c * kLanes, s.o[r][c] * inverse);
        p.partial_lse[slot] = lse;
      }
    }
  }

  static void Run(const Params& p, int64_t worker) {
    for (int32_t i = p.worker_begin[worker]; i < p.worker_begin[worker + 1];
         ++i) {
      const RaggedWorkItem item = p.items[i];
      State s;
      Block b;
      Begin(p, item, s);
      for (int32_t t = item.kv_begin; t < item.kv_end; t += kBlock) {
        const int n = Min(kBlock, item.kv_end - t);
        Gather(p, item, t, n, b);
        TAILOR_NO_UNROLL
        for (int r = 0; r < item.rows; ++r) Row(p, b, t, n, r, s);
      }
      Finish(p, item, s);
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_H_
