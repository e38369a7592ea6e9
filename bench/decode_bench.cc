// bench/decode_bench.cc — CPU paged decode: attention::RunDecode throughput.
//
// One decode step (PlanDecode once, then RunDecode in the loop) over a
// bf16 paged KV cache in NHD layout with pages placed at random, on a warm
// Runtime with `threads` CPU threads. Counters: KV GB/s (K and V bytes the
// step must read, 2 * sum(len) * Hkv * D * 2 bytes, over wall time) and
// the plan's split pairs (merged in a second launch).
//
// Shapes (head_dim 128, page 16): Llama-3-8B (Hq 32, Hkv 8, group 4) and
// Qwen3-30B-A3B (Hq 32, Hkv 4, group 8); batches: 8 sequences of 512
// tokens, 1 sequence of 8192 (split over every worker), 32 sequences of
// mixed length 1..1024 (seed 1).
//
// Build target: decode_bench (bench/decode_bench.cc; links tailor and
// benchmark::benchmark; it has its own main).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "tailor/ops/attention.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace {

using tailor::DType;
using tailor::TensorRef;
namespace attention = tailor::attention;

constexpr int64_t kHeadDim = 128;
constexpr int64_t kPageSize = 16;

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

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct Shape {
  const char* name;
  int64_t qo_heads, kv_heads;
};
const Shape kShapes[] = {{"llama3_8b", 32, 8}, {"qwen3_30b_a3b", 32, 4}};

std::vector<int32_t> Lengths(int64_t batch_kind) {
  switch (batch_kind) {
    case 0:
      return std::vector<int32_t>(8, 512);
    case 1:
      return {8192};
    default: {
      std::mt19937 rng(1);
      std::vector<int32_t> lens(32);
      for (int32_t& n : lens) n = 1 + static_cast<int32_t>(rng() % 1024);
      return lens;
    }
  }
}

// One step's buffers: q, caches with pages at random, block table, out.
struct DecodeProblem {
  DecodeProblem(const Shape& s, std::vector<int32_t> lens_in)
      : shape(s), lens(std::move(lens_in)) {
    std::mt19937_64 rng(2);
    const int64_t batch = static_cast<int64_t>(lens.size());
    for (int32_t n : lens) {
      max_pages = std::max<int64_t>(max_pages, (n + kPageSize - 1) / kPageSize);
      num_pages += (n + kPageSize - 1) / kPageSize;
    }
    std::vector<int32_t> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    table.assign(batch * max_pages, 0);
    for (int64_t b = 0, next = 0; b < batch; ++b) {
      for (int64_t j = 0; j < (lens[b] + kPageSize - 1) / kPageSize; ++j) {
        table[b * max_pages + j] = order[next++];
      }
    }
    std::uniform_real_distribution<float> dist(-1, 1);
    auto fill = [&](std::vector<uint16_t>& v, int64_t n) {
      v.resize(n);
      for (uint16_t& x : v) x = ToBf16(dist(rng));
    };
    const int64_t cache = num_pages * kPageSize * s.kv_heads * kHeadDim;
    fill(k, cache);
    fill(v, cache);
    fill(q, batch * s.qo_heads * kHeadDim);
    out.assign(q.size(), 0);
  }
  int64_t batch() const { return static_cast<int64_t>(lens.size()); }
  double kv_bytes() const {
    const int64_t tokens = std::accumulate(lens.begin(), lens.end(), 0LL);
    return 2.0 * tokens * shape.kv_heads * kHeadDim * 2;
  }
  attention::PlanDecodeArgs PlanArgs() {
    return {
        .seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {batch()}),
        .page_size = kPageSize,
        .num_qo_heads = shape.qo_heads,
        .num_kv_heads = shape.kv_heads,
        .head_dim = kHeadDim,
        .dtype = DType::kBF16};
  }
  attention::RunDecodeArgs RunArgs() {
    attention::RunDecodeArgs args;
    const std::initializer_list<int64_t> qd = {batch(), shape.qo_heads,
                                               kHeadDim};
    const std::initializer_list<int64_t> cd = {num_pages, kPageSize,
                                               shape.kv_heads, kHeadDim};
    args.q = TensorRef::Contiguous(q.data(), DType::kBF16, qd);
    args.k_cache = TensorRef::Contiguous(k.data(), DType::kBF16, cd);
    args.v_cache = TensorRef::Contiguous(v.data(), DType::kBF16, cd);
    args.block_table =
        TensorRef::Contiguous(table.data(), DType::kI32, {batch(), max_pages});
    args.seq_lens = TensorRef::Contiguous(lens.data(), DType::kI32, {batch()});
    args.out = TensorRef::Contiguous(out.data(), DType::kBF16, qd);
    return args;
  }

  const Shape& shape;
  std::vector<int32_t> lens;
  int64_t max_pages = 0, num_pages = 0;
  std::vector<int32_t> table;
  std::vector<uint16_t> q, k, v, out;
};

void Check(const absl::Status& status, benchmark::State& state) {
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
}

// Args: shape index, batch kind (0: 8 x 512, 1: 1 x 8192, 2: 32 mixed),
// threads.
void BM_Decode(benchmark::State& state) {
  const Shape& shape = kShapes[state.range(0)];
  DecodeProblem p(shape, Lengths(state.range(1)));
  tailor::Runtime& runtime =
      RuntimeWithThreads(static_cast<int>(state.range(2)));
  attention::DecodeWorkspace ws;
  Check(attention::PlanDecode(runtime, p.PlanArgs(), ws), state);
  const attention::RunDecodeArgs args = p.RunArgs();
  Check(attention::RunDecode(runtime, args, ws), state);  // warm: compile
  for (auto _ : state) {
    Check(attention::RunDecode(runtime, args, ws), state);
    benchmark::DoNotOptimize(p.out.data());
  }
  state.SetLabel(shape.name);
  state.counters["KV_GB/s"] = benchmark::Counter(
      p.kv_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["split_pairs"] = static_cast<double>(ws.plan().split_pairs);
}
BENCHMARK(BM_Decode)
    ->ArgNames({"shape", "batch", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
