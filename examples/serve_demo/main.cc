// serve_demo — `make demo`: a ragged MoE serving trace through tailor.
//
//   1. create a Runtime on the best backend present (disk cache on): CUDA
//      when a GPU is there, else the CPU
//   2. for each model-like shape, replay a continuous-batching trace: every
//      step routes its tokens to experts and runs one MoE layer (Experts).
//      On a GPU: the real Mixtral-8x7B and Qwen3-30B-A3B layer shapes, the
//      weights uploaded once, a workspace reserved once for the largest
//      step; on the CPU: the same E and k with dims scaled down
//   3. check a sample of tokens against an fp64 reference
//   4. print the table: throughput, time per step, cache behaviour, kernel
//      variants, and the work wasted by core-plus-tail vs pad-to-power-of-two
//      vs pad-to-block
//
// Run it twice: the second run compiles nothing (every kernel from disk).
//   serve_demo [--steps N] [--backend auto|cpu|cuda|hip] [--help]
// (flags.h: every argument is checked before anything runs).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flags.h"
#include "moe_layer.h"
#include "report.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/status.h"
#include "trace.h"

namespace serve_demo {
namespace {

using tailor::DType;
using tailor::TensorRef;

constexpr int kCheckEvery = 8;     // check one step in this many
constexpr int kTokensChecked = 4;  // tokens per checked step
constexpr uint16_t kBf16Nan = 0x7fc0;

// Rows one step executes when every expert's rows are padded: to the next
// power of two (pad-and-mask layouts), or to a multiple of `block` (vLLM's
// moe_align_block_size). Empty experts stay empty in both.
int64_t PaddedRows(const std::vector<int32_t>& counts, int64_t block) {
  int64_t rows = 0;
  for (const int32_t n : counts) {
    if (n == 0) continue;
    rows += block == 0
                ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)))
                : (n + block - 1) / block * block;
  }
  return rows;
}

// Rows tailor's plan executes: full tiles of `tile` rows, and each tail
// padded to its class, the next power of two (at most a tile).
int64_t CoreTailRows(const std::vector<int32_t>& counts, int64_t tile) {
  int64_t rows = 0;
  for (const int32_t n : counts) {
    const int64_t rest = n % tile;
    rows += n / tile * tile +
            (rest == 0
                 ? 0
                 : std::min<int64_t>(tile, static_cast<int64_t>(std::bit_ceil(
                                               static_cast<uint64_t>(rest)))));
  }
  return rows;
}

// Adds this step's per-expert counts to the waste accounting of all three
// ways of cutting the work.
void Account(const std::vector<int32_t>& counts, int64_t tile_rows,
             ShapeReport& report) {
  for (const int32_t n : counts) report.useful_rows += n;
  report.tile_rows = tile_rows;
  report.core_tail_rows += CoreTailRows(counts, tile_rows);
  report.pow2_rows += PaddedRows(counts, 0);
  report.block16_rows += PaddedRows(counts, 16);
  report.block64_rows += PaddedRows(counts, 64);
}

// Relative error of a few tokens of `out` against the fp64 reference.
void Check(const MoeLayer& layer, const std::vector<uint16_t>& hidden,
           const std::vector<int32_t>& ids, const std::vector<float>& weights,
           const std::vector<uint16_t>& out, int tokens, std::mt19937_64& rng,
           ShapeReport& report) {
  const ModelShape& s = layer.shape;
  double err = 0, norm = 0;
  for (int n = 0; n < kTokensChecked; ++n) {
    int t = static_cast<int>(rng() % tokens);
    std::vector<double> ref =
        ReferenceToken(layer, &hidden[static_cast<size_t>(t) * s.hidden],
                       &ids[t * s.topk], &weights[t * s.topk]);
    for (int h = 0; h < s.hidden; ++h) {
      double d = FromBf16(out[static_cast<size_t>(t) * s.hidden + h]) - ref[h];
      err += d * d;
      norm += ref[h] * ref[h];
    }
  }
  double rel = std::sqrt(err / std::max(norm, 1e-300));
  if (std::isnan(rel)) rel = INFINITY;  // NaN never passes
  report.max_rel_error = std::max(report.max_rel_error, rel);
  report.tokens_checked += kTokensChecked;
}

// Where a step's tensors live: host vectors on the CPU backend, memory on
// the runtime's device (weights uploaded once) on a GPU.
class StepMemory {
 public:
  StepMemory(tailor::Runtime& runtime, const MoeLayer& layer, int max_tokens)
      : runtime_(runtime),
        on_host_(runtime.device().type == tailor::DeviceType::kCpu),
        layer_(layer) {
    if (on_host_) return;
    const ModelShape& s = layer.shape;
    const size_t rows = static_cast<size_t>(max_tokens);
    w13_ = Upload(layer.w13.data(), layer.w13.size() * 2);
    w2_ = Upload(layer.w2.data(), layer.w2.size() * 2);
    hidden_ = Allocate(rows * s.hidden * 2);
    out_ = Allocate(rows * s.hidden * 2);
    ids_ = Allocate(rows * s.topk * 4);
    weights_ = Allocate(rows * s.topk * 4);
  }
  const absl::Status& status() const { return status_; }

  // The Experts arguments of one step over the host data; uploads it first
  // on a GPU.
  absl::StatusOr<tailor::moe::ExpertsArgs> Args(
      const std::vector<uint16_t>& hidden, const std::vector<int32_t>& ids,
      const std::vector<float>& weights, std::vector<uint16_t>& out, int T) {
    const ModelShape& s = layer_.shape;
    const int64_t E = s.experts, k = s.topk, H = s.hidden, I = s.intermediate;
    const tailor::Device dev = runtime_.device();
    auto view = [&](const void* host, const std::shared_ptr<void>& device,
                    DType dtype, std::initializer_list<int64_t> dims) {
      return TensorRef::Contiguous(on_host_ ? host : device.get(), dtype, dims,
                                   dev);
    };
    if (!on_host_) {
      TAILOR_RETURN_IF_ERROR(Copy(hidden_, hidden.data(), hidden.size() * 2));
      TAILOR_RETURN_IF_ERROR(Copy(out_, out.data(), out.size() * 2));
      TAILOR_RETURN_IF_ERROR(Copy(ids_, ids.data(), ids.size() * 4));
      TAILOR_RETURN_IF_ERROR(
          Copy(weights_, weights.data(), weights.size() * 4));
    }
    return tailor::moe::ExpertsArgs{
        .hidden = view(hidden.data(), hidden_, DType::kBF16, {T, H}),
        .w13 = view(layer_.w13.data(), w13_, DType::kBF16, {E, 2 * I, H}),
        .w2 = view(layer_.w2.data(), w2_, DType::kBF16, {E, H, I}),
        .topk_weights = view(weights.data(), weights_, DType::kF32, {T, k}),
        .topk_ids = view(ids.data(), ids_, DType::kI32, {T, k}),
        .out = view(out.data(), out_, DType::kBF16, {T, H})};
  }

  // The step's output back on the host (a no-op on the CPU).
  absl::Status Download(std::vector<uint16_t>& out) {
    if (on_host_) return absl::OkStatus();
    return runtime_.CopyToHost(out.data(), out_.get(), out.size() * 2);
  }

 private:
  std::shared_ptr<void> Allocate(size_t bytes) {
    absl::StatusOr<std::shared_ptr<void>> memory = runtime_.Allocate(bytes);
    if (!memory.ok()) {
      status_.Update(memory.status());
      return nullptr;
    }
    return *memory;
  }
  std::shared_ptr<void> Upload(const void* host, size_t bytes) {
    std::shared_ptr<void> memory = Allocate(bytes);
    if (memory != nullptr) status_.Update(Copy(memory, host, bytes));
    return memory;
  }
  absl::Status Copy(const std::shared_ptr<void>& dst, const void* src,
                    size_t bytes) {
    return runtime_.CopyToDevice(dst.get(), src, bytes);
  }

  tailor::Runtime& runtime_;
  bool on_host_;
  const MoeLayer& layer_;
  absl::Status status_;
  std::shared_ptr<void> w13_, w2_, hidden_, out_, ids_, weights_;
};

// The per-expert row counts of the last Route, on the host.
absl::StatusOr<std::vector<int32_t>> Counts(tailor::Runtime& runtime,
                                            const tailor::moe::Workspace& ws) {
  TensorRef counts = ws.counts();
  std::vector<int32_t> host(counts.dims[0]);
  TAILOR_RETURN_IF_ERROR(
      runtime.CopyToHost(host.data(), counts.data, host.size() * 4));
  return host;
}

absl::Status RunShape(tailor::Runtime& runtime, const ModelShape& shape,
                      int steps, ShapeReport& report) {
  const MoeLayer layer(shape, /*seed=*/17);
  const TraceConfig trace_config;
  Trace trace(trace_config, /*seed=*/23);
  Router router(shape.experts, shape.topk, /*seed=*/29);
  std::mt19937_64 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  StepMemory memory(runtime, layer, trace_config.token_budget);
  TAILOR_RETURN_IF_ERROR(memory.status());
  tailor::moe::Workspace ws;  // reserved once for the largest step
  TAILOR_RETURN_IF_ERROR(
      tailor::moe::ReserveWorkspace(runtime,
                                    {.max_tokens = trace_config.token_budget,
                                     .topk = shape.topk,
                                     .num_experts = shape.experts,
                                     .hidden = shape.hidden,
                                     .intermediate = shape.intermediate,
                                     .dtype = DType::kBF16},
                                    ws));
  std::vector<uint16_t> hidden, out;
  std::vector<int32_t> ids;
  std::vector<float> weights;

  tailor::StatsSnapshot before = runtime.stats();
  report.shape = shape;
  for (int step = 0; step < steps; ++step) {
    const int T = trace.NextStepTokens();
    router.Route(T, ids, weights);
    hidden.resize(static_cast<size_t>(T) * shape.hidden);
    for (auto& x : hidden) x = ToBf16(dist(rng));
    out.assign(hidden.size(),
               kBf16Nan);  // poisoned: every element must be written
    TAILOR_ASSIGN_OR_RETURN(tailor::moe::ExpertsArgs args,
                            memory.Args(hidden, ids, weights, out, T));

    auto start = std::chrono::steady_clock::now();
    TAILOR_RETURN_IF_ERROR(tailor::moe::Experts(runtime, args, ws));
    TAILOR_RETURN_IF_ERROR(runtime.Synchronize());
    report.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    report.steps += 1;
    report.tokens += T;
    TAILOR_RETURN_IF_ERROR(ws.TakeErrors(runtime));
    TAILOR_ASSIGN_OR_RETURN(std::vector<int32_t> counts, Counts(runtime, ws));
    Account(counts, ws.plan().tile_rows, report);
    if (step % kCheckEvery == 0) {
      TAILOR_RETURN_IF_ERROR(memory.Download(out));
      Check(layer, hidden, ids, weights, out, T, rng, report);
    }
    PrintProgress(report, steps);
  }
  report.stats = Delta(runtime.stats(), before);
  return absl::OkStatus();
}

}  // namespace
}  // namespace serve_demo

int main(int argc, char** argv) {
  using namespace serve_demo;
  absl::StatusOr<DemoFlags> flags = ParseDemoFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr,
                 "serve_demo: %s\n(serve_demo --help prints the usage)\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const int steps = flags->steps;
  tailor::Runtime::Options options;
  options.backend = flags->backend;
  options.log_level = "warn";

  // 1. The runtime: CUDA when a device is present, else the CPU backend.
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "cannot create a runtime: %s\n",
                 runtime.status().ToString().c_str());
    return 1;
  }
  const bool on_gpu = (*runtime)->device().type != tailor::DeviceType::kCpu;
  std::printf("tailor serve_demo: backend %s (%s), arch %s, cache %s\n",
              std::string(tailor::BackendName((*runtime)->backend())).c_str(),
              tailor::DeviceName((*runtime)->device()).c_str(),
              (*runtime)->arch().c_str(),
              (*runtime)->cache_dir().empty()
                  ? "(memory only)"
                  : (*runtime)->cache_dir().c_str());

  // 2-3. The trace, per shape: the real layer shapes on a GPU; on the CPU
  // the real E and k with dims scaled down.
  const std::vector<ModelShape> shapes =
      on_gpu ? std::vector<ModelShape>{{"mixtral-8x7b", 8, 2, 4096, 14336},
                                       {"qwen3-30b-a3b", 128, 8, 2048, 768}}
             : std::vector<ModelShape>{{"mixtral-8x7b/8", 8, 2, 512, 1792},
                                       {"qwen3-30b-a3b/4", 64, 8, 512, 192}};
  std::vector<ShapeReport> reports;
  for (const ModelShape& shape : shapes) {
    ShapeReport report;
    report.device = tailor::DeviceName((*runtime)->device());
    absl::Status s = RunShape(**runtime, shape, steps, report);
    if (!s.ok()) {
      std::fprintf(stderr, "\n%s failed: %s\n", shape.name.c_str(),
                   s.ToString().c_str());
      return 1;
    }
    reports.push_back(report);
  }

  // 4. The table.
  PrintTable(reports, (*runtime)->stats(), (*runtime)->cache_dir());
  for (const ShapeReport& r : reports) {
    if (!(r.max_rel_error < 1e-2)) {
      std::fprintf(stderr, "FAILED: %s relative error %.3g >= 1e-2\n",
                   r.shape.name.c_str(), r.max_rel_error);
      return 1;
    }
  }
  return 0;
}
