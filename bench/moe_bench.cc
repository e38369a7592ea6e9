// bench/moe_bench.cc — CPU MoE: grouped GEMM GFLOP/s and Experts overhead.
//
// Grouped GEMM benches count USEFUL flops only, 2 * R * N * K with R the
// routed rows (N is the gate|up width for silu_and_mul), so padding shows up
// as lost GFLOP/s. Methods:
//   tailor     the plan Route makes: unmasked core tiles of 16 rows plus one
//              kernel per power-of-two tail class
//   pad_block  the same tailor kernels on a copy of A in which every expert
//              is padded to a multiple of 16 rows, as vLLM's
//              moe_align_block_size does: core tiles only, more rows
//   naive      a straightforward row x n x k triple loop, f32 accumulation,
//              one thread, built by the host compiler with the project flags
// The tailor methods run on a Runtime with `threads` CPU threads (1 or 2);
// times are wall-clock (UseRealTime), so rates include the thread pool.
//
// Experts overhead: moe::Experts at tiny dims (H = 16, I = 8, E = 8, k = 2) on
// a warm runtime. T = 0 measures validation + Route only (nothing to launch,
// no kernel lookup); T = 1 adds the 4 kernel lookups and launches of the
// pipeline with kernel bodies of a few hundred flops.
//
// Routing is uniform random top-k (distinct experts per token), seed 1.
// Build target: moe_bench (bench/moe_bench.cc; links tailor and
// benchmark::benchmark; it has its own main).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace {

using tailor::DType;
using tailor::TensorRef;
namespace moe = tailor::moe;

// ---- runtime and data -------------------------------------------------------

tailor::Runtime& RuntimeWithThreads(int threads) {
  static std::map<int, std::unique_ptr<tailor::Runtime>> runtimes;
  std::unique_ptr<tailor::Runtime>& runtime = runtimes[threads];
  if (runtime == nullptr) {
    tailor::Runtime::Options options;
    options.backend = tailor::BackendKind::kCpu;
    options.cpu_threads = threads;
    options.log_level = "warn";
    auto created = tailor::Runtime::Create(options);
    if (!created.ok()) {
      std::fprintf(stderr, "Runtime::Create: %s\n",
                   created.status().ToString().c_str());
      std::abort();
    }
    runtime = *std::move(created);
  }
  return *runtime;
}

void Check(const absl::Status& status, benchmark::State& state) {
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
}

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Raw elements of one dtype, random in [-1, 1).
struct Buffer {
  Buffer(DType dtype, std::vector<int64_t> dims, std::mt19937_64& rng)
      : dtype(dtype), dims(std::move(dims)) {
    int64_t n = std::accumulate(this->dims.begin(), this->dims.end(),
                                int64_t{1}, std::multiplies<>());
    bytes.resize(static_cast<size_t>(n) * tailor::DTypeSize(dtype));
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int64_t i = 0; i < n; ++i) Set(i, dist(rng));
  }
  void Set(int64_t i, float v) {
    if (dtype == DType::kBF16) {
      reinterpret_cast<uint16_t*>(bytes.data())[i] = ToBf16(v);
    } else {
      reinterpret_cast<float*>(bytes.data())[i] = v;
    }
  }
  float Get(int64_t i) const {
    return dtype == DType::kBF16
               ? FromBf16(reinterpret_cast<const uint16_t*>(bytes.data())[i])
               : reinterpret_cast<const float*>(bytes.data())[i];
  }
  TensorRef ref() const {
    TensorRef t = TensorRef::Contiguous(bytes.data(), dtype, {});
    t.rank = static_cast<int>(dims.size());
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.dims[d] = dims[d];
      t.strides[d] = stride;
      stride *= dims[d];
    }
    return t;
  }
  DType dtype;
  std::vector<int64_t> dims;
  std::vector<unsigned char> bytes;
};

std::vector<int32_t> RandomTopkIds(int64_t tokens, int64_t k, int64_t experts) {
  std::mt19937_64 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k)), choices(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(choices.begin(), choices.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<int64_t> pick(j, experts - 1);
      std::swap(choices[j], choices[pick(rng)]);
      ids[t * k + j] = choices[j];
    }
  }
  return ids;
}

// ---- grouped GEMM -----------------------------------------------------------

struct GemmShape {
  const char* name;
  int64_t experts, topk, n, k;
  moe::Epilogue epilogue;
};

// 0: E=8 plain 512x512; 1, 2: Qwen3-30B-A3B scaled down 4x (H=512, I=256),
// gemm1 (gate|up + silu_and_mul) and gemm2.
const GemmShape kShapes[] = {
    {"e8_k2_n512_k512", 8, 2, 512, 512, moe::Epilogue::kNone},
    {"qwen3s_gemm1_n512_k512_silu", 64, 8, 512, 512,
     moe::Epilogue::kSiluAndMul},
    {"qwen3s_gemm2_n512_k256", 64, 8, 512, 256, moe::Epilogue::kNone},
};

enum Method { kTailor = 0, kPadBlock = 1, kNaive = 2 };

// One routed problem: A in expert-sorted order, W, C, and its plans.
struct GemmProblem {
  GemmProblem(const GemmShape& s, DType dtype, int64_t tokens)
      : shape(s), rng(2), w(dtype, {s.experts, s.n, s.k}, rng) {
    std::vector<int32_t> ids = RandomTopkIds(tokens, s.topk, s.experts);
    tailor::Runtime& runtime = RuntimeWithThreads(1);
    routed = moe::Route(runtime,
                        {.topk_ids = TensorRef::Contiguous(
                             ids.data(), DType::kI32, {tokens, s.topk}),
                         .num_experts = s.experts},
                        ws);
    rows = ws.num_rows();
    a = std::make_unique<Buffer>(dtype, std::vector<int64_t>{rows, s.k}, rng);
    c = std::make_unique<Buffer>(dtype, std::vector<int64_t>{rows, out_n()},
                                 rng);
    BuildPadded(runtime, dtype);
  }
  int64_t out_n() const {
    return shape.epilogue == moe::Epilogue::kSiluAndMul ? shape.n / 2 : shape.n;
  }
  double useful_flops() const { return 2.0 * rows * shape.n * shape.k; }

  // Every expert padded to a multiple of 16 rows (pad rows zero).
  void BuildPadded(tailor::Runtime& runtime, DType dtype) {
    const int32_t* counts = ws.counts().as<int32_t>();
    const int32_t* offsets = ws.offsets().as<int32_t>();
    std::vector<int32_t> padded(shape.experts);
    for (int64_t e = 0; e < shape.experts; ++e)
      padded[e] = (counts[e] + 15) / 16 * 16;
    padded_rows = std::accumulate(padded.begin(), padded.end(), int64_t{0});
    a_pad = std::make_unique<Buffer>(
        dtype, std::vector<int64_t>{padded_rows, shape.k}, rng);
    c_pad = std::make_unique<Buffer>(
        dtype, std::vector<int64_t>{padded_rows, out_n()}, rng);
    std::fill(a_pad->bytes.begin(), a_pad->bytes.end(), 0);
    const size_t row_bytes = shape.k * tailor::DTypeSize(dtype);
    for (int64_t e = 0, dst = 0; e < shape.experts; dst += padded[e], ++e) {
      std::memcpy(a_pad->bytes.data() + dst * row_bytes,
                  a->bytes.data() + offsets[e] * row_bytes,
                  counts[e] * row_bytes);
    }
    padded_status =
        moe::PlanRows(runtime,
                      {.counts = TensorRef::Contiguous(
                           padded.data(), DType::kI32, {shape.experts})},
                      ws_pad);
  }

  // Straightforward reference: every row, every output column, a dot over K.
  void RunNaive() {
    const int32_t* offsets = ws.offsets().as<int32_t>();
    const bool gated = shape.epilogue == moe::Epilogue::kSiluAndMul;
    const int64_t n_out = out_n();
    for (int64_t e = 0; e < shape.experts; ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        for (int64_t col = 0; col < n_out; ++col) {
          float sum = 0, up = 0;
          for (int64_t kk = 0; kk < shape.k; ++kk) {
            float x = a->Get(r * shape.k + kk);
            sum += x * w.Get((e * shape.n + col) * shape.k + kk);
            if (gated)
              up += x * w.Get((e * shape.n + n_out + col) * shape.k + kk);
          }
          c->Set(r * n_out + col,
                 gated ? sum / (1 + std::exp(-sum)) * up : sum);
        }
      }
    }
  }

  const GemmShape& shape;
  std::mt19937_64 rng;
  Buffer w;
  moe::Workspace ws, ws_pad;
  absl::Status routed, padded_status;
  int64_t rows = 0, padded_rows = 0;
  std::unique_ptr<Buffer> a, c, a_pad, c_pad;
};

// Args: shape index, dtype (0 f32, 1 bf16), tokens, method, threads.
void BM_GroupedGemm(benchmark::State& state) {
  const GemmShape& shape = kShapes[state.range(0)];
  const DType dtype = state.range(1) ? DType::kBF16 : DType::kF32;
  const Method method = static_cast<Method>(state.range(3));
  const int threads = static_cast<int>(state.range(4));
  GemmProblem p(shape, dtype, state.range(2));
  Check(p.routed, state);
  Check(p.padded_status, state);
  tailor::Runtime& runtime = RuntimeWithThreads(threads);
  const bool pad = method == kPadBlock;
  moe::GroupedGemmArgs args = {.a = (pad ? p.a_pad : p.a)->ref(),
                               .w = p.w.ref(),
                               .c = (pad ? p.c_pad : p.c)->ref(),
                               .epilogue = shape.epilogue};
  const moe::Workspace& ws = pad ? p.ws_pad : p.ws;
  if (method != kNaive)
    Check(moe::GroupedGemm(runtime, args, ws), state);  // warm up
  for (auto _ : state) {
    if (method == kNaive) {
      p.RunNaive();
    } else {
      Check(moe::GroupedGemm(runtime, args, ws), state);
    }
    benchmark::DoNotOptimize(p.c->bytes.data());
  }
  state.SetLabel(shape.name);
  state.counters["GFLOP/s"] = benchmark::Counter(
      p.useful_flops() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rows"] = static_cast<double>(p.rows);
  state.counters["exec_rows"] =
      static_cast<double>(method == kPadBlock ? p.padded_rows
                          : method == kTailor ? ws.plan().executed_rows
                                              : p.rows);
  state.counters["variants"] = method == kNaive ? 0 : ws.plan().variants;
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "bf16", "T", "method", "threads"});
  for (int64_t shape : {0, 1, 2}) {
    for (int64_t bf16 : {1, 0}) {
      for (int64_t tokens : {16, 256}) {
        for (int64_t method : {kTailor, kPadBlock, kNaive}) {
          for (int64_t threads : {1, 2}) {
            if (method == kNaive && threads != 1) continue;
            b->Args({shape, bf16, tokens, method, threads});
          }
        }
      }
    }
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_GroupedGemm)->Apply(GemmArgs);

// ---- Experts ----------------------------------------------------------------

// Args: tokens, hidden (= intermediate), experts, topk, threads.
void BM_Experts(benchmark::State& state) {
  const int64_t tokens = state.range(0), hidden = state.range(1),
                experts = state.range(2), k = state.range(3),
                inter = hidden / 2;
  tailor::Runtime& runtime =
      RuntimeWithThreads(static_cast<int>(state.range(4)));
  std::mt19937_64 rng(3);
  Buffer x(DType::kBF16, {tokens, hidden}, rng),
      out(DType::kBF16, {tokens, hidden}, rng);
  Buffer w13(DType::kBF16, {experts, 2 * inter, hidden}, rng);
  Buffer w2(DType::kBF16, {experts, hidden, inter}, rng);
  Buffer weights(DType::kF32, {tokens, k}, rng);
  std::vector<int32_t> ids = RandomTopkIds(tokens, k, experts);
  moe::ExpertsArgs args = {
      .hidden = x.ref(),
      .w13 = w13.ref(),
      .w2 = w2.ref(),
      .topk_weights = weights.ref(),
      .topk_ids = TensorRef::Contiguous(ids.data(), DType::kI32, {tokens, k}),
      .out = out.ref()};
  moe::Workspace ws;
  Check(moe::Experts(runtime, args, ws), state);  // warm: compile, grow ws
  for (auto _ : state) Check(moe::Experts(runtime, args, ws), state);
  const double flops =
      2.0 * ws.num_rows() * (2 * inter * hidden + hidden * inter);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Experts)
    ->ArgNames({"T", "H", "E", "k", "threads"})
    ->Args({0, 16, 8, 2, 1})  // dispatch: validation + Route, no launch
    ->Args({1, 16, 8, 2, 1})  // dispatch: + 4 lookups and launches, tiny bodies
    ->Args({1, 16, 8, 2, 2})
    ->Args({16, 512, 64, 8, 2})   // Qwen3-30B-A3B scaled: decode-like
    ->Args({256, 512, 64, 8, 2})  // prefill-like
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
