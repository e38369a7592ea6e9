#include "backends/cpu/attention/decode_generic.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/host_elements.h"

namespace tailor::internal::cpu {
namespace {

using kernels::DecodeMergeGroup;
using kernels::DecodeWorkItem;

constexpr int32_t kMaxHeadDim = kGenericDecodeMaxHeadDim;
constexpr int32_t kMaxGroup = kGenericDecodeMaxGroup;
constexpr int32_t kBlock = kGenericDecodeBlock;
constexpr int kLanes = 8;  // partial sums of a dot product, as float8
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// `n` 16-bit elements of `dtype` at `row`, widened into `out`.
void WidenRow(const uint16_t* row, DType dtype, int32_t n, float* out) {
  if (dtype == DType::kBF16) {
    for (int32_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(row[i]);
  } else {
    for (int32_t i = 0; i < n; ++i) out[i] = F16BitsToFloat(row[i]);
  }
}

// a · b over n (a multiple of kLanes) elements: kLanes interleaved partial
// sums, reduced in the template's order (vector.h SumLanes).
float Dot(const float* a, const float* b, int32_t n) {
  float lane[kLanes] = {};
  for (int32_t i = 0; i < n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * b[i + l];
  }
  const float quad[4] = {lane[0] + lane[4], lane[1] + lane[5],
                         lane[2] + lane[6], lane[3] + lane[7]};
  return (quad[0] + quad[2]) + (quad[1] + quad[3]);
}

// The online-softmax state of one item: `group` query rows.
struct ItemState {
  float q[kMaxGroup][kMaxHeadDim];  // sm_scale * q
  float o[kMaxGroup][kMaxHeadDim];  // unnormalized output
  float m[kMaxGroup];               // running max of the scores
  float l[kMaxGroup];               // running sum of e^(s - m)
};

void Begin(const GenericDecodeParams& p, const DecodeWorkItem& item,
           ItemState& s) {
  const kernels::DecodeParams& b = p.base;
  const uint16_t* q =
      static_cast<const uint16_t*>(b.q) + item.seq * b.q_stride_b;
  for (int32_t g = 0; g < p.group; ++g) {
    WidenRow(q + (int64_t{item.kv_head} * p.group + g) * b.q_stride_h, p.dtype,
             p.head_dim, s.q[g]);
    for (int32_t d = 0; d < p.head_dim; ++d) {
      s.q[g][d] *= b.sm_scale;
      s.o[g][d] = 0;
    }
    s.m[g] = kNegativeInfinity;
    s.l[g] = 0;
  }
}

// Rescales row g by the block's scores (in `weight`, turned into
// e^(s - m')): the template's online-softmax step.
void Rescale(int32_t head_dim, int count, int32_t g, float* weight,
             ItemState& s) {
  float block_max = kNegativeInfinity;
  for (int j = 0; j < count; ++j) block_max = std::max(block_max, weight[j]);
  const float m_new = std::max(s.m[g], block_max);
  if (m_new == kNegativeInfinity) {  // only -inf scores so far: no weight
    std::fill(weight, weight + count, 0.0f);
    return;
  }
  const float alpha =
      s.m[g] == kNegativeInfinity ? 0.0f : std::exp(s.m[g] - m_new);
  float sum = 0;
  for (int j = 0; j < count; ++j) {
    weight[j] = std::exp(weight[j] - m_new);
    sum += weight[j];
  }
  s.l[g] = s.l[g] * alpha + sum;
  for (int32_t d = 0; d < head_dim; ++d) s.o[g][d] *= alpha;
  s.m[g] = m_new;
}

// Tokens [t0, t0 + n) of the item's pair, n <= kBlock.
void Block(const GenericDecodeParams& p, const DecodeWorkItem& item, int32_t t0,
           int n, ItemState& s) {
  const kernels::DecodeParams& b = p.base;
  const int32_t* table = b.block_table + item.seq * b.block_table_stride;
  const uint16_t* k_rows[kBlock];
  const uint16_t* v_rows[kBlock];
  int count = 0;
  for (int j = 0; j < n; ++j) {
    const int32_t t = t0 + j;
    const int32_t page = table[t / p.page_size];
    if (page < 0 || page >= b.num_pages) continue;  // dropped
    const int64_t slot = t % p.page_size;
    k_rows[count] = static_cast<const uint16_t*>(b.k_cache) +
                    page * b.k_stride_page + slot * b.k_stride_token +
                    item.kv_head * b.k_stride_head;  // [D]
    v_rows[count] = static_cast<const uint16_t*>(b.v_cache) +
                    page * b.v_stride_page + slot * b.v_stride_token +
                    item.kv_head * b.v_stride_head;  // [D]
    ++count;
  }
  if (count == 0) return;
  float row[kMaxHeadDim];           // one K or V row, widened
  float weight[kMaxGroup][kBlock];  // scores, then e^(s - m')
  for (int j = 0; j < count; ++j) {
    WidenRow(k_rows[j], p.dtype, p.head_dim, row);
    for (int32_t g = 0; g < p.group; ++g) {
      float score = Dot(s.q[g], row, p.head_dim);
      if (b.soft_cap > 0) score = b.soft_cap * std::tanh(score / b.soft_cap);
      weight[g][j] = score;
    }
  }
  for (int32_t g = 0; g < p.group; ++g) {
    Rescale(p.head_dim, count, g, weight[g], s);
  }
  for (int j = 0; j < count; ++j) {
    WidenRow(v_rows[j], p.dtype, p.head_dim, row);
    for (int32_t g = 0; g < p.group; ++g) {
      const float w = weight[g][j];
      for (int32_t d = 0; d < p.head_dim; ++d) s.o[g][d] += w * row[d];
    }
  }
}

// o / l and the log-sum-exp of every row: to out / lse for a whole pair, to
// the item's partial slot for a piece.
void Finish(const GenericDecodeParams& p, const DecodeWorkItem& item,
            const ItemState& s) {
  const kernels::DecodeParams& b = p.base;
  for (int32_t g = 0; g < p.group; ++g) {
    const bool empty = s.l[g] == 0;
    const float inverse = empty ? 0.0f : 1.0f / s.l[g];
    const float lse = empty ? kNegativeInfinity : s.m[g] + std::log(s.l[g]);
    const int64_t head = int64_t{item.kv_head} * p.group + g;
    if (item.partial < 0) {
      const int64_t row = item.seq * b.out_stride_b + head * b.out_stride_h;
      for (int32_t d = 0; d < p.head_dim; ++d) {
        StoreFromFloat(b.out, row + d, p.dtype, s.o[g][d] * inverse);
      }
      if (b.lse != nullptr) b.lse[item.seq * b.lse_stride_b + head] = lse;
    } else {
      const int64_t slot = int64_t{item.partial} * p.group + g;
      float* row = b.partial_out + slot * p.head_dim;
      for (int32_t d = 0; d < p.head_dim; ++d) row[d] = s.o[g][d] * inverse;
      b.partial_lse[slot] = lse;
    }
  }
}

void RunWorkers(const void* params, int64_t begin, int64_t end) {
  const auto& p = *static_cast<const GenericDecodeParams*>(params);
  ItemState s;
  for (int64_t worker = begin; worker < end; ++worker) {
    for (int32_t i = p.base.worker_begin[worker];
         i < p.base.worker_begin[worker + 1]; ++i) {
      const DecodeWorkItem item = p.base.items[i];
      Begin(p, item, s);
      for (int32_t t = item.kv_begin; t < item.kv_end; t += kBlock) {
        Block(p, item, t, std::min(kBlock, item.kv_end - t), s);
      }
      Finish(p, item, s);
    }
  }
}

// One split pair: lse = log sum_i e^(lse_i), out = sum_i e^(lse_i - lse) o_i
// per query head (decode_merge.h).
void MergeGroup(const GenericDecodeMergeParams& p,
                const DecodeMergeGroup& group) {
  const kernels::DecodeMergeParams& b = p.base;
  float acc[kMaxHeadDim];
  for (int32_t g = 0; g < p.group; ++g) {
    auto slot_of = [&](int32_t i) {
      return (int64_t{group.first_partial} + i) * p.group + g;
    };
    float max_lse = kNegativeInfinity;
    for (int32_t i = 0; i < group.pieces; ++i) {
      max_lse = std::max(max_lse, b.partial_lse[slot_of(i)]);
    }
    std::fill(acc, acc + p.head_dim, 0.0f);
    float lse = kNegativeInfinity;
    if (max_lse != kNegativeInfinity) {
      float sum = 0;
      for (int32_t i = 0; i < group.pieces; ++i) {
        sum += std::exp(b.partial_lse[slot_of(i)] - max_lse);
      }
      for (int32_t i = 0; i < group.pieces; ++i) {
        const float w = std::exp(b.partial_lse[slot_of(i)] - max_lse) / sum;
        const float* row = b.partial_out + slot_of(i) * p.head_dim;
        for (int32_t d = 0; d < p.head_dim; ++d) acc[d] += w * row[d];
      }
      lse = max_lse + std::log(sum);
    }
    const int64_t head = int64_t{group.kv_head} * p.group + g;
    const int64_t out = group.seq * b.out_stride_b + head * b.out_stride_h;
    for (int32_t d = 0; d < p.head_dim; ++d) {
      StoreFromFloat(b.out, out + d, p.dtype, acc[d]);
    }
    if (b.lse != nullptr) b.lse[group.seq * b.lse_stride_b + head] = lse;
  }
}

void RunMerges(const void* params, int64_t begin, int64_t end) {
  const auto& p = *static_cast<const GenericDecodeMergeParams*>(params);
  for (int64_t i = begin; i < end; ++i) MergeGroup(p, p.base.groups[i]);
}

}  // namespace

const Kernel& GenericDecodeAttentionKernel() {
  static const CpuKernel kernel(&RunWorkers);
  return kernel;
}

const Kernel& GenericDecodeMergeKernel() {
  static const CpuKernel kernel(&RunMerges);
  return kernel;
}

}  // namespace tailor::internal::cpu
