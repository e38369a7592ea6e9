// serve_demo — `make demo`: a ragged MoE serving trace through tailor.
//
//   1. create a Runtime on the best backend present (disk cache on)
//   2. for each model-like shape, replay a continuous-batching trace: every
//      step routes its tokens to experts and runs one MoE layer (Experts)
//   3. check a sample of tokens against an fp64 reference
//   4. print the table: throughput, cache behaviour, kernel variants, and the
//      work wasted by core-plus-tail vs pad-to-power-of-two vs pad-to-block
//
// Run it twice: the second run compiles nothing (every kernel from disk).
//   serve_demo [--steps N] [--backend auto|cpu|cuda]
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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

constexpr int kTileRows = 16;
constexpr int kCheckEvery = 8;     // check one step in this many
constexpr int kTokensChecked = 4;  // tokens per checked step
constexpr uint16_t kBf16Nan = 0x7fc0;

// Rows one step executes when every expert's rows are padded: to the next
// power of two (pad-and-mask layouts), or to a multiple of `block` (vLLM's
// moe_align_block_size). Empty experts stay empty in both.
int64_t PaddedRows(const TensorRef& counts, int64_t block) {
  int64_t rows = 0;
  for (int64_t e = 0; e < counts.dims[0]; ++e) {
    const int64_t n = counts.as<const int32_t>()[e];
    if (n == 0) continue;
    rows += block == 0
                ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)))
                : (n + block - 1) / block * block;
  }
  return rows;
}

// Adds this step's per-expert counts to the waste accounting of all three
// ways of cutting the work.
void Account(const tailor::moe::Workspace& ws, ShapeReport& report) {
  tailor::moe::PlanSummary plan = ws.plan();
  report.useful_rows += plan.useful_rows;
  report.core_tail_rows += plan.executed_rows;
  report.pow2_rows += PaddedRows(ws.counts(), 0);
  report.block16_rows += PaddedRows(ws.counts(), 16);
  report.block64_rows += PaddedRows(ws.counts(), 64);
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

absl::Status RunShape(tailor::Runtime& runtime, const ModelShape& shape,
                      int steps, ShapeReport& report) {
  MoeLayer layer(shape, /*seed=*/17);
  Trace trace(TraceConfig{}, /*seed=*/23);
  Router router(shape.experts, shape.topk, /*seed=*/29);
  std::mt19937_64 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  tailor::moe::Workspace ws;
  std::vector<uint16_t> hidden, out;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  const int64_t E = shape.experts, k = shape.topk, H = shape.hidden,
                I = shape.intermediate;

  tailor::StatsSnapshot before = runtime.stats();
  report.shape = shape;
  for (int step = 0; step < steps; ++step) {
    const int T = trace.NextStepTokens();
    router.Route(T, ids, weights);
    hidden.resize(static_cast<size_t>(T) * H);
    for (auto& x : hidden) x = ToBf16(dist(rng));
    out.assign(hidden.size(),
               kBf16Nan);  // poisoned: every element must be written

    auto start = std::chrono::steady_clock::now();
    TAILOR_RETURN_IF_ERROR(tailor::moe::Experts(
        runtime,
        {.hidden = TensorRef::Contiguous(hidden.data(), DType::kBF16, {T, H}),
         .w13 = TensorRef::Contiguous(layer.w13.data(), DType::kBF16,
                                      {E, 2 * I, H}),
         .w2 = TensorRef::Contiguous(layer.w2.data(), DType::kBF16, {E, H, I}),
         .topk_weights =
             TensorRef::Contiguous(weights.data(), DType::kF32, {T, k}),
         .topk_ids = TensorRef::Contiguous(ids.data(), DType::kI32, {T, k}),
         .policy = {.tile_rows = kTileRows},
         .out = TensorRef::Contiguous(out.data(), DType::kBF16, {T, H})},
        ws));
    report.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    report.steps += 1;
    report.tokens += T;
    Account(ws, report);
    if (step % kCheckEvery == 0)
      Check(layer, hidden, ids, weights, out, T, rng, report);
    PrintProgress(report, steps);
  }
  report.stats = Delta(runtime.stats(), before);
  return absl::OkStatus();
}

}  // namespace
}  // namespace serve_demo

int main(int argc, char** argv) {
  using namespace serve_demo;
  int steps = 48;
  tailor::Runtime::Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0)
      steps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--backend") == 0) {
      std::string b = argv[i + 1];
      options.backend = b == "cpu"    ? tailor::BackendKind::kCpu
                        : b == "cuda" ? tailor::BackendKind::kCuda
                                      : tailor::BackendKind::kAuto;
    }
  }
  options.log_level = "warn";

  // 1. The runtime: CUDA when a device is present, else the CPU backend. The
  // MoE kernels exist for the CPU backend today; a GPU runtime falls back to
  // it (see the note printed below).
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "cannot create a runtime: %s\n",
                 runtime.status().ToString().c_str());
    return 1;
  }
  if ((*runtime)->backend() != tailor::BackendKind::kCpu) {
    std::printf(
        "note: the MoE kernels run on the cpu backend for now; using it\n");
    options.backend = tailor::BackendKind::kCpu;
    runtime = tailor::Runtime::Create(options);
    if (!runtime.ok()) return 1;
  }
  std::printf("tailor serve_demo: backend %s, arch %s, cache %s\n",
              std::string(tailor::BackendName((*runtime)->backend())).c_str(),
              (*runtime)->arch().c_str(),
              (*runtime)->cache_dir().empty()
                  ? "(memory only)"
                  : (*runtime)->cache_dir().c_str());

  // 2-3. The trace, per shape (real models' E and k, dims scaled for a CPU).
  const ModelShape shapes[] = {
      {"mixtral-8x7b/8", 8, 2, 512, 1792},
      {"qwen3-30b-a3b/4", 64, 8, 512, 192},
  };
  std::vector<ShapeReport> reports;
  for (const ModelShape& shape : shapes) {
    ShapeReport report;
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
