#include "backends/cpu/moe/generic.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/host_elements.h"

namespace tailor::internal::cpu {
namespace {

constexpr int64_t kTileN = kernels::kMoeGroupedGemmTileN;

void PackRows(const void* params, int64_t begin, int64_t end) {
  const auto& p = *static_cast<const GenericPackParams*>(params);
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(DTypeSize(p.dtype));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t token = p.base.permutation[row] / p.base.topk;
    std::memcpy(static_cast<char*>(p.base.a) + row * row_bytes,
                static_cast<const char*>(p.base.hidden) + token * row_bytes,
                row_bytes);
  }
}

// a[row, :] · w[w_row, :] in f32.
float Dot(const GenericGemmParams& p, int64_t row, int64_t w_row) {
  float sum = 0;
  for (int64_t i = 0; i < p.k; ++i) {
    sum += LoadAsFloat(p.base.a, row * p.k + i, p.dtype) *
           LoadAsFloat(p.base.w, w_row * p.k + i, p.dtype);
  }
  return sum;
}

void GemmItems(const void* params, int64_t begin, int64_t end) {
  const auto& p = *static_cast<const GenericGemmParams*>(params);
  const int64_t out_cols = p.gated ? p.n / 2 : p.n;
  const int64_t out_per_tile = p.gated ? kTileN / 2 : kTileN;
  for (int64_t index = begin; index < end; ++index) {
    const int64_t n_tile = index / p.base.num_work;
    const kernels::MoeWorkItem& item = p.base.work[index % p.base.num_work];
    const int64_t out0 = n_tile * out_per_tile;
    const int64_t out_end = std::min(out_cols, out0 + out_per_tile);
    const int64_t w0 = int64_t{item.group} * p.n;  // expert's first W row
    for (int64_t r = item.row_begin; r < item.row_begin + item.rows; ++r) {
      for (int64_t o = out0; o < out_end; ++o) {
        float value;
        if (p.gated) {
          const float gate = Dot(p, r, w0 + o);
          const float up = Dot(p, r, w0 + out_cols + o);
          value = gate / (1.0f + std::exp(-gate)) * up;
        } else {
          value = Dot(p, r, w0 + o);
        }
        StoreFromFloat(p.base.c, r * out_cols + o, p.dtype, value);
      }
    }
  }
}

void CombineTokens(const void* params, int64_t begin, int64_t end) {
  const auto& p = *static_cast<const GenericCombineParams*>(params);
  for (int64_t token = begin; token < end; ++token) {
    for (int64_t h = 0; h < p.hidden; ++h) {
      float acc = 0;
      for (int64_t j = 0; j < p.topk; ++j) {
        const int32_t row = p.base.inverse[token * p.topk + j];
        if (row < 0) continue;
        acc += p.base.weights[token * p.topk + j] *
               LoadAsFloat(p.base.c, int64_t{row} * p.hidden + h, p.dtype);
      }
      StoreFromFloat(p.base.out, token * p.hidden + h, p.dtype, acc);
    }
  }
}

}  // namespace

const Kernel& GenericPackKernel() {
  static const CpuKernel kernel(&PackRows);
  return kernel;
}

const Kernel& GenericGemmKernel() {
  static const CpuKernel kernel(&GemmItems);
  return kernel;
}

const Kernel& GenericCombineKernel() {
  static const CpuKernel kernel(&CombineTokens);
  return kernel;
}

}  // namespace tailor::internal::cpu
