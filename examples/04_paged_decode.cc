// Example 04: paged-KV decode attention (tailor/ops/attention.h), the
// header's example as a program, on the CPU backend.
//
//   1. reserve a DecodeWorkspace for the layer shape (once)
//   2. every step: PlanDecode with the host sequence lengths, then RunDecode
//      for every layer with the same plan
//   3. check one layer against a plain reference, and TakeErrors at a sync
//      point of the caller's choice
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "tailor/ops/attention.h"
#include "tailor/runtime.h"
#include "tailor/status.h"

namespace {

using tailor::DType;
using tailor::TensorRef;
namespace attention = tailor::attention;

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 64, kPage = 16;
constexpr int64_t kPages = 8, kMaxPages = 4, kLayers = 2;

uint16_t ToBf16(float x) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
float FromBf16(uint16_t x) {
  uint32_t bits = uint32_t{x} << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

struct Layer {
  std::vector<uint16_t> k, v;  // [kPages, kPage, kKvHeads, kDim] bf16
};

// out[b, head, :] by the definition, in double.
std::vector<double> Reference(const std::vector<uint16_t>& q, const Layer& l,
                              const std::vector<int32_t>& block_table,
                              int64_t b, int64_t len, int64_t head) {
  auto at = [&](const std::vector<uint16_t>& cache, int64_t t, int64_t d) {
    int64_t page = block_table[b * kMaxPages + t / kPage];
    int64_t kv_head = head / (kHeads / kKvHeads);
    return FromBf16(
        cache[((page * kPage + t % kPage) * kKvHeads + kv_head) * kDim + d]);
  };
  std::vector<double> s(len), out(kDim, 0.0);
  double max_s = -INFINITY, sum = 0;
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t d = 0; d < kDim; ++d)
      s[t] += FromBf16(q[(b * kHeads + head) * kDim + d]) * at(l.k, t, d);
    s[t] /= std::sqrt(double{kDim});
    max_s = std::max(max_s, s[t]);
  }
  for (int64_t t = 0; t < len; ++t) sum += std::exp(s[t] - max_s);
  for (int64_t t = 0; t < len; ++t)
    for (int64_t d = 0; d < kDim; ++d)
      out[d] += std::exp(s[t] - max_s) / sum * at(l.v, t, d);
  return out;
}

absl::Status Decode(tailor::Runtime& runtime) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto random_bf16 = [&](size_t n) {
    std::vector<uint16_t> x(n);
    for (uint16_t& e : x) e = ToBf16(uniform(rng));
    return x;
  };
  const std::vector<int32_t> lens = {17, 1, 40};  // host seq_lens [B]
  const int64_t B = static_cast<int64_t>(lens.size());
  std::vector<int32_t> block_table = {3, 5, 0, 0, 7, 0, 0, 0, 1, 2, 4, 0};
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.k = random_bf16(kPages * kPage * kKvHeads * kDim);
    l.v = random_bf16(kPages * kPage * kKvHeads * kDim);
  }
  std::vector<uint16_t> q_data = random_bf16(B * kHeads * kDim);
  std::vector<uint16_t> out_data(B * kHeads * kDim);
  TensorRef q =
      TensorRef::Contiguous(q_data.data(), DType::kBF16, {B, kHeads, kDim});
  TensorRef out =
      TensorRef::Contiguous(out_data.data(), DType::kBF16, {B, kHeads, kDim});
  TensorRef table =
      TensorRef::Contiguous(block_table.data(), DType::kI32, {B, kMaxPages});
  TensorRef device_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {B});
  void* stream = nullptr;  // the CPU backend runs synchronously
  auto cache = [&](std::vector<uint16_t>& x) {
    return TensorRef::Contiguous(x.data(), DType::kBF16,
                                 {kPages, kPage, kKvHeads, kDim});
  };

  // 1. Once: the workspace for batches up to 256.
  attention::DecodeWorkspace ws;
  TAILOR_RETURN_IF_ERROR(
      attention::ReserveDecodeWorkspace(runtime,
                                        {.max_batch = 256,
                                         .num_qo_heads = kHeads,
                                         .num_kv_heads = kKvHeads,
                                         .head_dim = kDim,
                                         .page_size = kPage,
                                         .dtype = DType::kBF16},
                                        ws));
  // 2. Every step: plan once, run every layer.
  TAILOR_RETURN_IF_ERROR(attention::PlanDecode(
      runtime,
      {.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {B}),
       .page_size = kPage,
       .num_qo_heads = kHeads,
       .num_kv_heads = kKvHeads,
       .head_dim = kDim,
       .dtype = DType::kBF16,
       .stream = stream},
      ws));
  for (Layer& l : layers) {
    TAILOR_RETURN_IF_ERROR(attention::RunDecode(runtime,
                                                {.q = q,
                                                 .k_cache = cache(l.k),
                                                 .v_cache = cache(l.v),
                                                 .block_table = table,
                                                 .seq_lens = device_lens,
                                                 .out = out,
                                                 .stream = stream},
                                                ws));
  }
  // 3. The last layer's output against the reference; then the errors the
  // device would have recorded (none on the host, which checks up front).
  double err = 0, norm = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<double> ref =
          Reference(q_data, layers.back(), block_table, b, lens[b], h);
      for (int64_t d = 0; d < kDim; ++d) {
        double got = FromBf16(out_data[(b * kHeads + h) * kDim + d]);
        err += (got - ref[d]) * (got - ref[d]);
        norm += ref[d] * ref[d];
      }
    }
  }
  const double relative = std::sqrt(err / norm);
  std::printf("decode: B=%lld, %s, relative error %.2e\n",
              static_cast<long long>(B), ws.plan().ToString().c_str(),
              relative);
  if (!(relative < 1e-2)) {
    return absl::InternalError("decode output differs from the reference");
  }
  return ws.TakeErrors(runtime, stream);
}

}  // namespace

int main() {
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::cerr << "cannot create runtime: " << runtime.status() << "\n";
    return 1;
  }
  absl::Status status = Decode(**runtime);
  if (!status.ok()) {
    std::cerr << "decode failed: " << status << "\n";
    return 1;
  }
  return 0;
}
