// tests/ops/attention/ragged_test_util.h — ragged-attention test data and
// the fp64 reference, shared by the CPU op test, the conformance suite and
// the CUDA test (no GoogleTest, no backend code: plain host buffers).
//
// RaggedCase describes one step; BuildRaggedBatch makes host bytes for it:
//   q           [Σq + padding_rows, Hq, D], random
//   k, v        [num_pages, page_size, Hkv, D] in NHD or HND order, pages
//               placed at random (non-contiguous), sequences sharing the
//               first `shared_prefix_pages` full pages of sequence 0 (a
//               prefix cache), every slot no sequence owns NaN
//   block_table [B, max_pages] i32; entries past a sequence's pages hold
//               garbage (-7, 1 << 30) that must never be read
//   kv_indices / page_indptr: the same pages in FlashInfer's form
//   q_indptr [B + 1], kv_lens [B], last_page_len [B]
// RaggedReference computes out / lse in double from the stored values.
#ifndef TAILOR_TESTS_OPS_ATTENTION_RAGGED_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_ATTENTION_RAGGED_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/attention/decode_test_util.h"
#include "tailor/tensor.h"

namespace tailor::attention::testing {

struct RaggedCase {
  std::vector<int32_t> q_lens;   // [B]
  std::vector<int32_t> kv_lens;  // [B], >= q_lens under causal
  int64_t page_size = 16;
  int64_t num_qo_heads = 4;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 64;
  DType dtype = DType::kBF16;
  KvLayout layout = KvLayout::kNhd;
  bool causal = true;
  int64_t window_left = -1;
  float soft_cap = 0;
  int64_t shared_prefix_pages = 0;
  int64_t padding_rows = 0;  // q / out rows past Σq (untouched)
  int64_t extra_pages = 3;   // unowned (NaN) pages in the cache
  uint64_t seed = 1;

  int64_t batch() const { return static_cast<int64_t>(q_lens.size()); }
  int64_t total_q() const {
    int64_t n = 0;
    for (int32_t q : q_lens) n += q;
    return n;
  }
  int64_t rows() const { return total_q() + padding_rows; }
  int64_t group() const { return num_qo_heads / num_kv_heads; }
  std::string ToString() const {
    return absl::StrCat(
        DTypeName(dtype), " D=", head_dim, " Hq=", num_qo_heads,
        " Hkv=", num_kv_heads, " page=", page_size, " ", KvLayoutName(layout),
        " causal=", causal, " window=", window_left, " cap=", soft_cap, " q={",
        absl::StrJoin(q_lens, ","), "} kv={", absl::StrJoin(kv_lens, ","),
        "} prefix=", shared_prefix_pages);
  }
};

struct RaggedBatch {
  RaggedCase c;
  int64_t num_pages = 0, max_pages = 0;
  int64_t cache_strides[4] = {};
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> block_table;    // [B, max_pages]
  std::vector<int32_t> kv_indices;     // FlashInfer: pages, sequence-major
  std::vector<int32_t> page_indptr;    // [B + 1] into kv_indices
  std::vector<int32_t> last_page_len;  // [B]
  std::vector<int32_t> q_indptr;       // [B + 1]
  std::vector<int32_t> kv_lens;        // [B]

  TensorRef QRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(
        data, c.dtype, {c.rows(), c.num_qo_heads, c.head_dim}, device);
  }
  TensorRef CacheRef(void* data, Device device = {}) const {
    TensorRef t = TensorRef::Contiguous(
        data, c.dtype, {num_pages, c.page_size, c.num_kv_heads, c.head_dim},
        device);
    for (int i = 0; i < 4; ++i) t.strides[i] = cache_strides[i];
    return t;
  }
  TensorRef TableRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(data, DType::kI32, {c.batch(), max_pages},
                                 device);
  }
  TensorRef LseRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(data, DType::kF32, {c.rows(), c.num_qo_heads},
                                 device);
  }
  int64_t CacheOffset(int64_t page, int64_t slot, int64_t head) const {
    return page * cache_strides[0] + slot * cache_strides[1] +
           head * cache_strides[2];
  }
  int64_t PageOf(int64_t b, int64_t t) const {
    return block_table[b * max_pages + t / c.page_size];
  }
};

inline RaggedBatch BuildRaggedBatch(const RaggedCase& c) {
  RaggedBatch p;
  p.c = c;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t P = c.page_size, H = c.num_kv_heads, D = c.head_dim;
  std::vector<int64_t> pages(c.batch());
  for (int64_t b = 0; b < c.batch(); ++b) {
    pages[b] = (c.kv_lens[b] + P - 1) / P;
    p.max_pages = std::max(p.max_pages, pages[b]);
  }
  const int64_t prefix = std::min<int64_t>(
      c.shared_prefix_pages, c.batch() > 0 ? c.kv_lens[0] / P : 0);
  int64_t owned = 0;
  for (int64_t b = 0; b < c.batch(); ++b) {
    owned += b == 0 ? pages[b] : std::max<int64_t>(pages[b] - prefix, 0);
  }
  p.max_pages += 1;  // room for garbage
  p.num_pages = owned + c.extra_pages;
  std::vector<int32_t> order(p.num_pages);
  for (int64_t i = 0; i < p.num_pages; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  p.block_table.assign(c.batch() * p.max_pages, 0);
  for (int64_t i = 0; i < c.batch() * p.max_pages; ++i) {
    p.block_table[i] = (i % 2) ? -7 : (1 << 30);
  }
  int64_t next = 0;
  p.page_indptr = {0};
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t j = 0; j < pages[b]; ++j) {
      const bool shared = b > 0 && j < prefix;
      const int32_t page = shared ? p.block_table[j] : order[next++];
      p.block_table[b * p.max_pages + j] = page;
      p.kv_indices.push_back(page);
    }
    p.page_indptr.push_back(static_cast<int32_t>(p.kv_indices.size()));
    p.last_page_len.push_back(
        pages[b] == 0
            ? 0
            : static_cast<int32_t>(c.kv_lens[b] - (pages[b] - 1) * P));
  }
  if (c.layout == KvLayout::kNhd) {
    p.cache_strides[0] = P * H * D;
    p.cache_strides[1] = H * D;
    p.cache_strides[2] = D;
  } else {
    p.cache_strides[0] = H * P * D;
    p.cache_strides[1] = D;
    p.cache_strides[2] = P * D;
  }
  p.cache_strides[3] = 1;
  const uint16_t nan16 = c.dtype == DType::kBF16 ? 0x7fc1 : 0x7e01;
  p.k.assign(std::max<int64_t>(p.num_pages * P * H * D, 1), nan16);
  p.v.assign(std::max<int64_t>(p.num_pages * P * H * D, 1), nan16);
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t t = 0; t < c.kv_lens[b]; ++t) {
      if (b > 0 && t / P < prefix) continue;  // written by sequence 0
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = p.CacheOffset(p.PageOf(b, t), t % P, h);
        for (int64_t d = 0; d < D; ++d) {
          p.k[base + d] = Round16(c.dtype, uniform(rng));
          p.v[base + d] = Round16(c.dtype, uniform(rng));
        }
      }
    }
  }
  p.q.assign(std::max<int64_t>(c.rows() * c.num_qo_heads * D, 1), nan16);
  for (int64_t i = 0; i < c.total_q() * c.num_qo_heads * D; ++i) {
    p.q[i] = Round16(c.dtype, 2.0f * uniform(rng));
  }
  p.q_indptr = {0};
  for (int32_t q : c.q_lens) p.q_indptr.push_back(p.q_indptr.back() + q);
  p.kv_lens = c.kv_lens;
  return p;
}

// out [Σq, Hq, D] and lse [Σq, Hq] in double, from the stored values.
inline Expected RaggedReference(const RaggedBatch& p, double sm_scale) {
  const RaggedCase& c = p.c;
  const int64_t D = c.head_dim, Hq = c.num_qo_heads, g = c.group();
  Expected e;
  e.out.assign(c.total_q() * Hq * D, 0.0);
  e.lse.assign(c.total_q() * Hq, -std::numeric_limits<double>::infinity());
  std::vector<double> s, qrow(D);
  for (int64_t b = 0; b < c.batch(); ++b) {
    const int64_t kv = c.kv_lens[b], ql = c.q_lens[b];
    for (int64_t t = 0; t < ql; ++t) {
      const int64_t row = p.q_indptr[b] + t, pos = kv - ql + t;
      const int64_t hi = c.causal ? std::min(pos + 1, kv) : kv;
      const int64_t lo =
          c.window_left >= 0 ? std::max<int64_t>(pos - c.window_left, 0) : 0;
      for (int64_t j = 0; j < Hq; ++j) {
        for (int64_t d = 0; d < D; ++d) {
          qrow[d] = Widen16(c.dtype, p.q[(row * Hq + j) * D + d]);
        }
        if (hi <= lo) continue;
        s.assign(hi - lo, 0.0);
        double max_s = -std::numeric_limits<double>::infinity();
        for (int64_t x = lo; x < hi; ++x) {
          const int64_t base =
              p.CacheOffset(p.PageOf(b, x), x % c.page_size, j / g);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qrow[d] * Widen16(c.dtype, p.k[base + d]);
          double score = sm_scale * dot;
          if (c.soft_cap > 0)
            score = c.soft_cap * std::tanh(score / c.soft_cap);
          s[x - lo] = score;
          max_s = std::max(max_s, score);
        }
        double sum = 0;
        for (double v : s) sum += std::exp(v - max_s);
        double* out = &e.out[(row * Hq + j) * D];
        for (int64_t x = lo; x < hi; ++x) {
          const double w = std::exp(s[x - lo] - max_s) / sum;
          const int64_t base =
              p.CacheOffset(p.PageOf(b, x), x % c.page_size, j / g);
          for (int64_t d = 0; d < D; ++d)
            out[d] += w * Widen16(c.dtype, p.v[base + d]);
        }
        e.lse[row * Hq + j] = max_s + std::log(sum);
      }
    }
  }
  return e;
}

// The worst relative L2 error over the (row, head) rows of `out` ([rows,
// Hq, D] contiguous 16-bit values) and the worst absolute lse error; NaN
// never passes (infinity). Rows that attend nothing must be exactly zero.
inline Errors CompareRagged(const RaggedBatch& p, const Expected& e,
                            const std::vector<uint16_t>& out,
                            const std::vector<float>* lse) {
  const RaggedCase& c = p.c;
  const int64_t D = c.head_dim, Hq = c.num_qo_heads;
  Errors err;
  for (int64_t i = 0; i < c.total_q() * Hq; ++i) {
    double diff = 0, norm = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double got = Widen16(c.dtype, out[i * D + d]);
      const double want = e.out[i * D + d];
      diff += (got - want) * (got - want);
      norm += want * want;
      if (std::isnan(got)) diff = std::numeric_limits<double>::infinity();
    }
    const double rel = norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
    if (!(rel <= err.out_rel)) {
      err.out_rel =
          std::isnan(rel) ? std::numeric_limits<double>::infinity() : rel;
      err.worst = absl::StrCat("row=", i / Hq, " head=", i % Hq);
    }
    if (lse != nullptr) {
      const double got = (*lse)[i], want = e.lse[i];
      double abs_err = std::isinf(want) ? (got == want ? 0 : INFINITY)
                                        : std::fabs(got - want);
      if (std::isnan(abs_err)) abs_err = INFINITY;
      err.lse_abs = std::max(err.lse_abs, abs_err);
    }
  }
  return err;
}

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_OPS_ATTENTION_RAGGED_TEST_UTIL_H_
