// tests/ops/moe/moe_test_util.h — shared pieces of the moe:: op tests.
//
// - SharedRuntime(): one CPU Runtime per test binary. Its disk cache lives in
//   TAILOR_MOE_TEST_CACHE_DIR (set by tests/ops/CMakeLists.txt to a folder
//   of the build tree, so the one-process-per-test ctest runs share compiled
//   kernels; keys hash every header, so a stale entry is never used), else
//   in a TempDir of the process.
// - HostTensor: an owning buffer of f32 / bf16 / i32 elements with a
//   TensorRef view, element access in double, and NaN poisoning.
// - Reference implementations in double precision.
// - Routing generators (uniform, one expert, subset of experts) and error
//   metrics (relative L2 error, NaN never passes).
#ifndef TAILOR_TESTS_OPS_MOE_MOE_TEST_UTIL_H_
#define TAILOR_TESTS_OPS_MOE_MOE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"
#include "test_util.h"

namespace tailor::moe::testing {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;

// Model dims every test uses, so kernels are shared across tests.
inline constexpr int64_t kHidden = 64;        // H
inline constexpr int64_t kIntermediate = 32;  // I

inline Runtime& SharedRuntime() {
  static Runtime* runtime = [] {
#ifdef TAILOR_MOE_TEST_CACHE_DIR
    static std::string cache_dir = TAILOR_MOE_TEST_CACHE_DIR;
#else
    static ::tailor::testing::TempDir temp_dir;
    static std::string cache_dir = temp_dir.path();
#endif
    Runtime::Options options;
    options.backend = BackendKind::kCpu;
    options.cache_dir = cache_dir;
    options.log_level = "error";
    absl::StatusOr<std::unique_ptr<Runtime>> created = Runtime::Create(options);
    if (!created.ok()) {
      ADD_FAILURE() << "Runtime::Create: " << created.status();
      return static_cast<Runtime*>(nullptr);
    }
    return created->release();  // lives until exit, like the cache
  }();
  return *runtime;
}

// ---- bf16 on the host -------------------------------------------------------

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

// ---- HostTensor -------------------------------------------------------------

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> dims)
      : dtype_(dtype), dims_(std::move(dims)) {
    numel_ = std::accumulate(dims_.begin(), dims_.end(), int64_t{1},
                             std::multiplies<>());
    bytes_.resize(static_cast<size_t>(numel_) * DTypeSize(dtype_));
  }

  TensorRef ref() const {
    TensorRef t = TensorRef::Contiguous(numel_ == 0 ? nullptr : bytes_.data(),
                                        dtype_, {});
    t.rank = static_cast<int>(dims_.size());
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.dims[d] = dims_[d];
      t.strides[d] = stride;
      stride *= dims_[d];
    }
    return t;
  }

  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }

  double at(int64_t i) const {
    switch (dtype_) {
      case DType::kF32:
        return reinterpret_cast<const float*>(bytes_.data())[i];
      case DType::kBF16:
        return Bf16ToFloat(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
      case DType::kI32:
        return reinterpret_cast<const int32_t*>(bytes_.data())[i];
      default:
        return NAN;
    }
  }
  void set(int64_t i, double v) {
    switch (dtype_) {
      case DType::kF32:
        reinterpret_cast<float*>(bytes_.data())[i] = static_cast<float>(v);
        break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes_.data())[i] =
            FloatToBf16(static_cast<float>(v));
        break;
      case DType::kI32:
        reinterpret_cast<int32_t*>(bytes_.data())[i] = static_cast<int32_t>(v);
        break;
      default:
        break;
    }
  }
  std::vector<double> ToDoubles() const {
    std::vector<double> values(static_cast<size_t>(numel_));
    for (int64_t i = 0; i < numel_; ++i) values[i] = at(i);
    return values;
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes_.data()); }
  const int32_t* i32() const {
    return reinterpret_cast<const int32_t*>(bytes_.data());
  }

  // Uniform values in [-scale, scale), rounded to the dtype.
  void FillRandom(std::mt19937_64& rng, double scale = 1.0) {
    std::uniform_real_distribution<double> dist(-scale, scale);
    for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
  }
  // Every element NaN (f32/bf16), so an unwritten output never passes.
  void Poison() {
    for (int64_t i = 0; i < numel_; ++i) set(i, NAN);
  }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  std::vector<unsigned char> bytes_;
};

// ||out - ref|| / ||ref|| over all elements; +inf when out has a NaN (or
// when ref is all zero and out is not).
inline double RelativeError(const HostTensor& out,
                            const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    double o = out.at(i);
    if (std::isnan(o)) return INFINITY;
    diff += (o - ref[i]) * (o - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (norm == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / norm);
}

inline double Tolerance(DType dtype) {
  return dtype == DType::kBF16 ? 1e-2 : 1e-5;
}

// ---- routing generators -----------------------------------------------------

enum class Spread {
  kUniform,    // k distinct experts per token, uniformly over all E
  kOneExpert,  // every token's first slot is expert E-1 (others uniform)
  kSubset,     // ids from the first max(k, E/4) experts only: most are empty
};

// topk_ids [T, k] with distinct ids per token drawn from [0, num_ids).
inline HostTensor RandomTopkIds(std::mt19937_64& rng, int64_t tokens, int64_t k,
                                int64_t num_ids, Spread spread) {
  HostTensor ids(DType::kI32, {tokens, k});
  int64_t pool =
      spread == Spread::kSubset ? std::max<int64_t>(k, num_ids / 4) : num_ids;
  std::vector<int32_t> choices(pool);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(choices.begin(), choices.end(), 0);
    if (spread == Spread::kOneExpert) std::swap(choices[0], choices[pool - 1]);
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates
      if (spread != Spread::kOneExpert || j > 0) {
        std::uniform_int_distribution<int64_t> pick(j, pool - 1);
        std::swap(choices[j], choices[pick(rng)]);
      }
      ids.i32()[t * k + j] = choices[j];
    }
  }
  return ids;
}

// An expert map over `global` experts that keeps `local` of them (random
// global ids, local ids in a random order) and maps the rest to -1.
inline HostTensor RandomExpertMap(std::mt19937_64& rng, int64_t global,
                                  int64_t local) {
  std::vector<int32_t> order(global);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  HostTensor map(DType::kI32, {global});
  for (int64_t g = 0; g < global; ++g) map.i32()[g] = -1;
  for (int64_t e = 0; e < local; ++e)
    map.i32()[order[e]] = static_cast<int32_t>(e);
  return map;
}

// Local expert of assignment i (or -1).
inline int32_t LocalExpert(const HostTensor& ids, const HostTensor* map,
                           int64_t i) {
  int32_t id = ids.i32()[i];
  return map != nullptr ? map->i32()[id] : id;
}

// ---- references (double precision) ------------------------------------------

inline double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// c[r, :] = epilogue(a[r, :] · w[e]ᵀ) for rows r of expert e per `offsets`.
inline std::vector<double> ReferenceGroupedGemm(
    const HostTensor& a_tensor, const HostTensor& w_tensor,
    const std::vector<int32_t>& offsets, int64_t n, int64_t k, bool gated) {
  const std::vector<double> a = a_tensor.ToDoubles(), w = w_tensor.ToDoubles();
  int64_t rows = offsets.back();
  int64_t out_n = gated ? n / 2 : n;
  std::vector<double> c(static_cast<size_t>(rows * out_n));
  std::vector<double> acc(static_cast<size_t>(n));
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      for (int64_t col = 0; col < n; ++col) {
        const double* w_row = &w[(static_cast<int64_t>(e) * n + col) * k];
        double sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) sum += a[r * k + kk] * w_row[kk];
        acc[col] = sum;
      }
      for (int64_t col = 0; col < out_n; ++col) {
        c[r * out_n + col] =
            gated ? Silu(acc[col]) * acc[out_n + col] : acc[col];
      }
    }
  }
  return c;
}

struct ExpertsInputs {
  const HostTensor& hidden;   // [T, kHidden]
  const HostTensor& w13;      // [E, 2 * kIntermediate, kHidden]
  const HostTensor& w2;       // [E, kHidden, kIntermediate]
  const HostTensor& weights;  // [T, k]
  const HostTensor& ids;      // [T, k]
  const HostTensor* map;      // [E_global] or null
};

// vLLM fused_experts in double:
// out[t] = sum_j w[t, j] * w2[e] · silu_and_mul(w13[e] · x[t]) over local e.
inline std::vector<double> ReferenceExperts(const ExpertsInputs& in,
                                            int64_t tokens, int64_t k) {
  const int64_t h = kHidden, inter = kIntermediate;
  const std::vector<double> x = in.hidden.ToDoubles(), w13 = in.w13.ToDoubles(),
                            w2 = in.w2.ToDoubles();
  std::vector<double> out(static_cast<size_t>(tokens * h), 0.0), act(inter);
  auto dot = [](const double* p, const double* q, int64_t len) {
    double sum = 0;
    for (int64_t i = 0; i < len; ++i) sum += p[i] * q[i];
    return sum;
  };
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = LocalExpert(in.ids, in.map, t * k + j);
      if (e < 0) continue;
      for (int64_t i = 0; i < inter; ++i) {
        double gate = dot(&w13[(e * 2 * inter + i) * h], &x[t * h], h);
        double up = dot(&w13[(e * 2 * inter + inter + i) * h], &x[t * h], h);
        act[i] = Silu(gate) * up;
      }
      for (int64_t y = 0; y < h; ++y) {
        out[t * h + y] += in.weights.at(t * k + j) *
                          dot(&w2[(e * h + y) * inter], act.data(), inter);
      }
    }
  }
  return out;
}

}  // namespace tailor::moe::testing

#endif  // TAILOR_TESTS_OPS_MOE_MOE_TEST_UTIL_H_
