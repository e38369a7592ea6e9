// tests/ops/attention/decode_test_util.h — paged-decode test data and the fp64
// reference, shared by the CPU op test and the CUDA test (no GoogleTest, no
// backend code: plain host buffers).
//
// PagedCase describes one batch; BuildPagedBatch makes host bytes for it:
//   q          [rows, Hq, D] with a batch stride of q_batch_stride elements
//              (>= Hq * D: padding between sequences, as a slice of qkv)
//   k, v       [num_pages, page_size, Hkv, D] in NHD or HND memory order,
//              pages placed at random (non-contiguous), sequences sharing
//              their first `shared_prefix_pages` pages with sequence 0 (at
//              most its full pages, as a prefix cache shares them), and
//              every cache slot no sequence owns filled with NaN so that a
//              kernel that lets an unattended token through fails
//   block_table [rows, max_pages] i32; entries past a sequence's pages hold
//              garbage (-7, 1 << 30) that must never be read
//   seq_lens   [rows] i32, rows >= B (rows past B are padding: length 0)
// Reference computes out / lse in double from the stored (rounded) values.
#ifndef TAILOR_TESTS_OPS_ATTENTION_DECODE_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_ATTENTION_DECODE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tailor/tensor.h"

namespace tailor::attention::testing {

// ---- 16-bit floats on the host ----------------------------------------------

inline uint16_t FloatToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Exact for every f16; used to round f32 to f16 by search-free RNE below.
inline float F16ToFloat(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    value = mant ? std::numeric_limits<float>::quiet_NaN()
                 : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -value : value;
}

inline uint16_t FloatToF16(float x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7c00;
  // Scale to an integer count of the ulp at a's binade, round half even.
  int exp = a == 0 ? -24 : std::max(std::ilogb(a) - 10, -24);
  const double q = std::nearbyint(std::ldexp(a, -exp));  // RNE (default mode)
  const uint32_t units = static_cast<uint32_t>(q);
  // units * 2^exp: normal numbers have units in [1024, 2048).
  if (exp == -24 && units < 1024) return sign | static_cast<uint16_t>(units);
  uint32_t mant = units, e = static_cast<uint32_t>(exp + 25);
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  if (e >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((e << 10) | (mant & 0x3ff));
}

inline uint16_t Round16(DType dtype, float x) {
  return dtype == DType::kBF16 ? FloatToBf16(x) : FloatToF16(x);
}
inline float Widen16(DType dtype, uint16_t h) {
  return dtype == DType::kBF16 ? Bf16ToFloat(h) : F16ToFloat(h);
}

// ---- the case ---------------------------------------------------------------

enum class KvLayout { kNhd, kHnd };
inline const char* KvLayoutName(KvLayout layout) {
  return layout == KvLayout::kNhd ? "NHD" : "HND";
}

struct PagedCase {
  std::vector<int32_t> lens;  // [B]
  int64_t page_size = 16;
  int64_t num_qo_heads = 4;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 64;
  DType dtype = DType::kBF16;
  KvLayout layout = KvLayout::kNhd;
  int64_t shared_prefix_pages = 0;  // pages shared with sequence 0
  int64_t padding_rows = 0;         // rows past B (length 0, untouched)
  int64_t q_padding = 0;            // extra elements between q rows of b
  int64_t extra_pages = 3;          // unowned (NaN) pages in the cache
  float soft_cap = 0;
  uint64_t seed = 1;

  int64_t batch() const { return static_cast<int64_t>(lens.size()); }
  int64_t rows() const { return batch() + padding_rows; }
  int64_t group() const { return num_qo_heads / num_kv_heads; }
  std::string ToString() const {
    return absl::StrCat(DTypeName(dtype), " D=", head_dim, " Hq=", num_qo_heads,
                        " Hkv=", num_kv_heads, " page=", page_size, " ",
                        KvLayoutName(layout), " lens={",
                        absl::StrJoin(lens, ","),
                        "} prefix=", shared_prefix_pages, " cap=", soft_cap);
  }
};

// Host bytes of one case (see the file comment). Element offsets count
// elements of the 16-bit dtype.
struct PagedBatch {
  PagedCase c;
  int64_t num_pages = 0, max_pages = 0;
  int64_t q_stride_b = 0;            // elements
  int64_t cache_strides[4] = {};     // [page, token, head, d] elements
  std::vector<uint16_t> q, k, v;     // raw 16-bit values
  std::vector<int32_t> block_table;  // [rows, max_pages]
  std::vector<int32_t> seq_lens;     // [rows]

  TensorRef QRef(void* data, Device device = {}) const {
    TensorRef t = TensorRef::Contiguous(
        data, c.dtype, {c.rows(), c.num_qo_heads, c.head_dim}, device);
    t.strides[0] = q_stride_b;
    return t;
  }
  TensorRef CacheRef(void* data, Device device = {}) const {
    TensorRef t = TensorRef::Contiguous(
        data, c.dtype, {num_pages, c.page_size, c.num_kv_heads, c.head_dim},
        device);
    for (int i = 0; i < 4; ++i) t.strides[i] = cache_strides[i];
    return t;
  }
  TensorRef TableRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(data, DType::kI32, {c.rows(), max_pages},
                                 device);
  }
  TensorRef LensRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(data, DType::kI32, {c.rows()}, device);
  }
  TensorRef OutRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(
        data, c.dtype, {c.rows(), c.num_qo_heads, c.head_dim}, device);
  }
  TensorRef LseRef(void* data, Device device = {}) const {
    return TensorRef::Contiguous(data, DType::kF32, {c.rows(), c.num_qo_heads},
                                 device);
  }
  int64_t CacheOffset(int64_t page, int64_t slot, int64_t head) const {
    return page * cache_strides[0] + slot * cache_strides[1] +
           head * cache_strides[2];
  }
};

inline PagedBatch BuildPagedBatch(const PagedCase& c) {
  PagedBatch p;
  p.c = c;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t P = c.page_size, H = c.num_kv_heads, D = c.head_dim;
  // Pages each sequence owns beyond the shared prefix.
  std::vector<int64_t> pages(c.batch());
  int64_t owned = 0;
  for (int64_t b = 0; b < c.batch(); ++b) {
    pages[b] = (c.lens[b] + P - 1) / P;
    p.max_pages = std::max(p.max_pages, pages[b]);
  }
  // A prefix cache shares whole pages only: a sequence 0 shorter than the
  // prefix shares its full pages, never one whose tail it did not write
  // (the others would attend to its NaN-poisoned slots).
  const int64_t prefix = std::min<int64_t>(
      c.shared_prefix_pages, c.batch() > 0 ? c.lens[0] / P : 0);
  for (int64_t b = 0; b < c.batch(); ++b) {
    owned += b == 0 ? pages[b] : std::max<int64_t>(pages[b] - prefix, 0);
  }
  p.max_pages = std::max<int64_t>(p.max_pages + 1, 1);  // room for garbage
  p.num_pages = owned + c.extra_pages;
  std::vector<int32_t> order(p.num_pages);
  for (int64_t i = 0; i < p.num_pages; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  // Block table: sequence 0 takes the first pages of `order`; the others
  // share its first `prefix` pages (when their length reaches them).
  p.block_table.assign(c.rows() * p.max_pages, 0);
  for (int64_t b = 0; b < c.rows(); ++b) {
    for (int64_t j = 0; j < p.max_pages; ++j) {
      p.block_table[b * p.max_pages + j] = (j % 2) ? -7 : (1 << 30);
    }
  }
  int64_t next = 0;
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t j = 0; j < pages[b]; ++j) {
      const bool shared = b > 0 && j < prefix;
      p.block_table[b * p.max_pages + j] =
          shared ? p.block_table[j] : order[next++];
    }
  }
  // Strides (elements).
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
  // Caches: NaN everywhere, then random values in the slots of every token.
  const uint16_t nan16 = c.dtype == DType::kBF16 ? 0x7fc1 : 0x7e01;
  p.k.assign(p.num_pages * P * H * D, nan16);
  p.v.assign(p.num_pages * P * H * D, nan16);
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t t = 0; t < c.lens[b]; ++t) {
      const int64_t page = p.block_table[b * p.max_pages + t / P];
      if (b > 0 && t / P < prefix) continue;  // written by sequence 0
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = p.CacheOffset(page, t % P, h);
        for (int64_t d = 0; d < D; ++d) {
          p.k[base + d] = Round16(c.dtype, uniform(rng));
          p.v[base + d] = Round16(c.dtype, uniform(rng));
        }
      }
    }
  }
  // Queries: scaled so that softmaxes are neither flat nor one-hot.
  p.q_stride_b = c.num_qo_heads * D + c.q_padding;
  p.q.assign(std::max<int64_t>(c.rows() * p.q_stride_b, 1), nan16);
  for (int64_t b = 0; b < c.rows(); ++b) {
    for (int64_t i = 0; i < c.num_qo_heads * D; ++i) {
      p.q[b * p.q_stride_b + i] = Round16(c.dtype, 2.0f * uniform(rng));
    }
  }
  p.seq_lens.assign(c.rows(), 0);
  for (int64_t b = 0; b < c.batch(); ++b) p.seq_lens[b] = c.lens[b];
  return p;
}

// out [B, Hq, D] and lse [B, Hq] in double, from the stored values.
struct Expected {
  std::vector<double> out;
  std::vector<double> lse;
};

inline Expected Reference(const PagedBatch& p, double sm_scale) {
  const PagedCase& c = p.c;
  const int64_t D = c.head_dim, Hq = c.num_qo_heads, g = c.group();
  Expected e;
  e.out.assign(c.batch() * Hq * D, 0.0);
  e.lse.assign(c.batch() * Hq, -std::numeric_limits<double>::infinity());
  std::vector<double> s, qrow(D);
  for (int64_t b = 0; b < c.batch(); ++b) {
    const int64_t len = c.lens[b];
    for (int64_t j = 0; j < Hq; ++j) {
      const int64_t h = j / g;
      for (int64_t d = 0; d < D; ++d) {
        qrow[d] = Widen16(c.dtype, p.q[b * p.q_stride_b + j * D + d]);
      }
      s.assign(len, 0.0);
      double max_s = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < len; ++t) {
        const int64_t page = p.block_table[b * p.max_pages + t / c.page_size];
        const int64_t base = p.CacheOffset(page, t % c.page_size, h);
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += qrow[d] * Widen16(c.dtype, p.k[base + d]);
        double score = sm_scale * dot;
        if (c.soft_cap > 0) score = c.soft_cap * std::tanh(score / c.soft_cap);
        s[t] = score;
        max_s = std::max(max_s, score);
      }
      if (len == 0) continue;
      double sum = 0;
      for (int64_t t = 0; t < len; ++t) sum += std::exp(s[t] - max_s);
      double* out = &e.out[(b * Hq + j) * D];
      for (int64_t t = 0; t < len; ++t) {
        const double w = std::exp(s[t] - max_s) / sum;
        const int64_t page = p.block_table[b * p.max_pages + t / c.page_size];
        const int64_t base = p.CacheOffset(page, t % c.page_size, h);
        for (int64_t d = 0; d < D; ++d)
          out[d] += w * Widen16(c.dtype, p.v[base + d]);
      }
      e.lse[b * Hq + j] = max_s + std::log(sum);
    }
  }
  return e;
}

// The worst relative L2 error over the (b, head) rows of `out` (16-bit
// values, [rows, Hq, D] contiguous) against `e`, and the worst absolute lse
// error; NaN never passes (reported as infinity).
struct Errors {
  double out_rel = 0;
  double lse_abs = 0;
  std::string worst;  // where out_rel is worst
};

inline Errors Compare(const PagedBatch& p, const Expected& e,
                      const std::vector<uint16_t>& out,
                      const std::vector<float>* lse) {
  const PagedCase& c = p.c;
  const int64_t D = c.head_dim, Hq = c.num_qo_heads;
  Errors err;
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t j = 0; j < Hq; ++j) {
      double diff = 0, norm = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double got = Widen16(c.dtype, out[(b * Hq + j) * D + d]);
        const double want = e.out[(b * Hq + j) * D + d];
        diff += (got - want) * (got - want);
        norm += want * want;
        if (std::isnan(got)) diff = std::numeric_limits<double>::infinity();
      }
      // Zero rows (length 0) must be exactly zero.
      const double rel = norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
      if (!(rel <= err.out_rel)) {
        err.out_rel =
            std::isnan(rel) ? std::numeric_limits<double>::infinity() : rel;
        err.worst = absl::StrCat("b=", b, " head=", j, " len=", c.lens[b]);
      }
      if (lse != nullptr) {
        const double got = (*lse)[b * Hq + j], want = e.lse[b * Hq + j];
        double abs_err = std::isinf(want) ? (got == want ? 0 : INFINITY)
                                          : std::fabs(got - want);
        if (std::isnan(abs_err)) abs_err = INFINITY;
        err.lse_abs = std::max(err.lse_abs, abs_err);
      }
    }
  }
  return err;
}

}  // namespace tailor::attention::testing

#endif  // TAILOR_TESTS_OPS_ATTENTION_DECODE_TEST_UTIL_H_
