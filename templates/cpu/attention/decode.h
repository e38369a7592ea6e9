// templates/cpu/attention/decode.h — paged-KV decode attention, one plan
// worker per work item.
//
// A worker runs its plan items (templates/cpu/attention/decode_params.h) in order.
// An item is the token range [kv_begin, kv_end) of one (sequence b, KV head
// h) pair: the kGroup query heads h * kGroup .. h * kGroup + kGroup - 1 of
// sequence b attend it with an online softmax in f32:
//
//   for each block of kBlock tokens (pages looked up in the block table):
//     s[g][t] = sm_scale * q[g] . k[t]   (soft-capped: c * tanh(s / c))
//     m' = max(m, max_t s);  l = l * e^(m - m') + sum_t e^(s - m');
//     o = o * e^(m - m') + sum_t e^(s - m') v[t]
//
// Each K and V row is read once for all kGroup heads: widened to f32 into
// a stack buffer per block (Rows: 2 x 16 tokens x D x 4 bytes, 16 KiB at
// D = 128, 64 KiB at 512) that every head's loops then read. A whole
// pair writes out = o / l and lse = m + log l (zeros and -inf when it has
// no tokens); a piece of a split pair writes the same to its partial slot
// and decode_merge.h combines the slots. Block-table entries outside
// [0, num_pages) are skipped (the host checks them first).
//
// Template parameters (the specialization; SpecKey dims {D, group, page}):
//   T          bf16 or f16 (storage; compute is f32)
//   kHeadDim   D: a multiple of 8 (the vector width)
//   kGroup     query heads per KV head, 1..16
//   kPageSize  tokens per page, 1..256
// Params: DecodeParams; work item = plan worker.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_H_

#include "runtime/cpu/half.h"
#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/attention/decode_params.h"

namespace tailor::kernels {

inline constexpr float kNegativeInfinity = -__builtin_inff();

template <typename T, int kHeadDim, int kGroup, int kPageSize>
struct DecodeAttentionKernel {
  static_assert(kHeadDim % kLanes == 0 && kHeadDim <= 512,
                "head_dim must be a multiple of 8 (vector width), <= 512");
  static_assert(kGroup >= 1 && kGroup <= 16, "group must be in [1, 16]");
  static_assert(kPageSize >= 1 && kPageSize <= 4096,
                "page_size must be in [1, 4096]");
  static constexpr int kChunks = kHeadDim / kLanes;  // float8 per row
  static constexpr int kBlock = 16;                  // tokens per step

  using Params = DecodeParams;

  // The online-softmax state of one item: kGroup query rows.
  struct State {
    float8 q[kGroup][kChunks];  // sm_scale * q
    float8 o[kGroup][kChunks];  // unnormalized output
    float m[kGroup];            // running max of the scores
    float l[kGroup];            // running sum of e^(s - m)
  };

  static void Begin(const Params& p, const DecodeWorkItem& item, State& s) {
    const T* q = static_cast<const T*>(p.q) + item.seq * p.q_stride_b;
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      const T* row = q + (int64_t{item.kv_head} * kGroup + g) * p.q_stride_h;
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) {
        s.q[g][c] = Load8(row + c * kLanes) * p.sm_scale;
        s.o[g][c] = 0;
      }
      s.m[g] = kNegativeInfinity;
      s.l[g] = 0;
    }
  }

  // The largest divisor of kChunks up to 8: chunks of o a value pass holds.
  static constexpr int ValueChunks() {
    int chunks = 8;
    while (kChunks % chunks != 0) --chunks;
    return chunks;
  }

  // The block's K and V rows in f32, converted once for all kGroup heads
  // (converting per head cost a widen and a shift per FMA).
  struct Rows {
    float8 k[kBlock][kChunks];
    float8 v[kBlock][kChunks];
  };

  // Looks up the pages of tokens [t0, t0 + n) and converts their K and V
  // rows into `rows`; returns how many tokens have a valid page.
  static int Gather(const Params& p, const DecodeWorkItem& item, int32_t t0,
                    int n, Rows& rows) {
    const int32_t* table = p.block_table + item.seq * p.block_table_stride;
    int count = 0;
    TAILOR_NO_UNROLL
    for (int j = 0; j < n; ++j) {
      const int32_t t = t0 + j;
      const int32_t page = table[t / kPageSize];
      if (page < 0 || page >= p.num_pages) continue;  // dropped
      const int64_t slot = t % kPageSize;
      const T* k = static_cast<const T*>(p.k_cache) + page * p.k_stride_page +
                   slot * p.k_stride_token + item.kv_head * p.k_stride_head;
      const T* v = static_cast<const T*>(p.v_cache) + page * p.v_stride_page +
                   slot * p.v_stride_token + item.kv_head * p.v_stride_head;
      for (int c = 0; c < kChunks; ++c) {
        rows.k[count][c] = Load8(k + c * kLanes);
        rows.v[count][c] = Load8(v + c * kLanes);
      }
      ++count;
    }
    return count;
  }

  // Tokens [t0, t0 + n) of the item's pair, n <= kBlock. Head g's loops run
  // over the block's tokens with its q (scores) or its o (values) held in
  // registers; per (g, lane) the sums keep the token order.
  static void Block(const Params& p, const DecodeWorkItem& item, int32_t t0,
                    int n, State& s) {
    Rows rows;
    const int count = Gather(p, item, t0, n, rows);
    if (count == 0) return;
    float weight[kGroup][kBlock];  // scores, then e^(s - m')
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      TAILOR_NO_UNROLL
      for (int j = 0; j < count; ++j) {
        float8 acc = 0;
        for (int c = 0; c < kChunks; ++c) acc += s.q[g][c] * rows.k[j][c];
        weight[g][j] = SumLanes(acc);
      }
    }
    if (p.soft_cap > 0) {
      TAILOR_NO_UNROLL
      for (int g = 0; g < kGroup; ++g) {
        TAILOR_NO_UNROLL
        for (int j = 0; j < count; ++j) {
          const float capped = __builtin_tanhf(weight[g][j] / p.soft_cap);
          weight[g][j] = p.soft_cap * capped;
        }
      }
    }
    float alpha[kGroup];  // o's rescale to the new running max
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      float block_max = kNegativeInfinity;
      for (int j = 0; j < count; ++j) block_max = Max(block_max, weight[g][j]);
      const float m_new = Max(s.m[g], block_max);
      alpha[g] = 1.0f;
      if (m_new == kNegativeInfinity) {  // only -inf scores so far: no weight
        for (int j = 0; j < count; ++j) weight[g][j] = 0;
        continue;
      }
      alpha[g] = s.m[g] == kNegativeInfinity ? 0.0f : Exp(s.m[g] - m_new);
      float sum = 0;
      for (int j = 0; j < count; ++j) {
        weight[g][j] = Exp(weight[g][j] - m_new);
        sum += weight[g][j];
      }
      s.l[g] = s.l[g] * alpha[g] + sum;
      s.m[g] = m_new;
    }
    // o[g] in kValueChunks registers at a time (AVX2 has 16).
    constexpr int kValueChunks = ValueChunks();
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      TAILOR_NO_UNROLL
      for (int c0 = 0; c0 < kChunks; c0 += kValueChunks) {
        float8 o[kValueChunks];
        for (int c = 0; c < kValueChunks; ++c) o[c] = s.o[g][c0 + c] * alpha[g];
        TAILOR_NO_UNROLL
        for (int j = 0; j < count; ++j) {
          const float w = weight[g][j];
          for (int c = 0; c < kValueChunks; ++c) o[c] += w * rows.v[j][c0 + c];
        }
        for (int c = 0; c < kValueChunks; ++c) s.o[g][c0 + c] = o[c];
      }
    }
  }

  // Writes o / l and the log-sum-exp of every row: to out / lse for a
  // whole pair, to the item's partial slot for a piece.
  static void Finish(const Params& p, const DecodeWorkItem& item,
                     const State& s) {
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      const bool empty = s.l[g] == 0;
      const float inverse = empty ? 0.0f : 1.0f / s.l[g];
      const float lse =
          empty ? kNegativeInfinity : s.m[g] + __builtin_logf(s.l[g]);
      const int64_t head = int64_t{item.kv_head} * kGroup + g;
      if (item.partial < 0) {
        T* row = static_cast<T*>(p.out) + item.seq * p.out_stride_b +
                 head * p.out_stride_h;
        TAILOR_NO_UNROLL
        for (int c = 0; c < kChunks; ++c)
          Store8(row + c * kLanes, s.o[g][c] * inverse);
        if (p.lse != nullptr) p.lse[item.seq * p.lse_stride_b + head] = lse;
      } else {
        const int64_t slot = int64_t{item.partial} * kGroup + g;
        float* row = p.partial_out + slot * kHeadDim;
        TAILOR_NO_UNROLL
        for (int c = 0; c < kChunks; ++c)
          Store8(row + c * kLanes, s.o[g][c] * inverse);
        p.partial_lse[slot] = lse;
      }
    }
  }

  static void Run(const Params& p, int64_t worker) {
    for (int32_t i = p.worker_begin[worker]; i < p.worker_begin[worker + 1];
         ++i) {
      const DecodeWorkItem item = p.items[i];
      State s;
      Begin(p, item, s);
      for (int32_t t = item.kv_begin; t < item.kv_end; t += kBlock)
        Block(p, item, t, Min(kBlock, item.kv_end - t), s);
      Finish(p, item, s);
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_H_
