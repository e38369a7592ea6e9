// bench/moe_cuda_bench — tailor's MoE layer on a CUDA GPU, tailor alone
// (for quick iteration; the anchored comparison, every method in one
// process, is bench/moe_gpu_bench.py). The anchor grid (the baseline
// scripts' shapes; the scripts are not part of this repository):
// Mixtral-8x7B (E8 k2 H4096 I14336), DeepSeek-V3 (E256 k8 H7168 I2048),
// Qwen3-30B-A3B (E128 k8 H2048 I768) x T in {1, 16, 64, 256, 1024, 4096,
// 16384}, Zipf(1.0) expert popularity, k distinct experts per token, bf16:
//   route    the device inspector (3 launches)
//   r+p+c    route + pack + combine (the memory-bound part of a step)
//   gemm13   gate/up grouped GEMM with silu_and_mul (N = 2I, K = H)
//   gemm2    down grouped GEMM (N = H, K = I)
//   experts  the whole layer
// Median of 20 timed runs after 3 warm-ups (CUDA events, one stream).
// "bw" = the GEMM's minimum bytes (active experts' weights + A + C) over
// its time, as a fraction of the copy bandwidth measured in this run.
//
// Usage: moe_cuda_bench [mixtral|deepseek_v3|qwen3_30b_a3b ...] [--tokens=T]
// [--step] (--tokens: only that T, e.g. to profile one shape with ncu;
// --step: each op's time alone, on the host, queued and graph-replayed,
// ReportStep says how). Prints "skipped" and exits 0 without a device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "tailor/ops/moe.h"

namespace tailor {
namespace {

using cuda::testing::CudaTestRuntime;
using cuda::testing::DeviceBuffer;
using cuda::testing::TestStream;

struct Model {
  const char* name;
  int64_t experts, topk, hidden, intermediate;
};
constexpr Model kModels[] = {{"mixtral", 8, 2, 4096, 14336},
                             {"deepseek_v3", 256, 8, 7168, 2048},
                             {"qwen3_30b_a3b", 128, 8, 2048, 768}};
constexpr int64_t kTokens[] = {1, 16, 64, 256, 1024, 4096, 16384};

void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

void CheckCu(CUresult result, const char* what) {
  Check(cuda::CudaResultToStatus(result, what), what);
}

// Fills `buffer` with a repeated random bf16 pattern (never zeros).
void FillRandomBf16(const cuda::DriverApi& api, const DeviceBuffer& buffer,
                    std::mt19937_64& rng, float scale) {
  std::vector<uint16_t> pattern(size_t{1} << 22);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (uint16_t& h : pattern) {
    const float x = dist(rng);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    h = static_cast<uint16_t>(u >> 16);
  }
  const size_t chunk = pattern.size() * 2;
  for (size_t off = 0; off < buffer.bytes(); off += chunk) {
    CheckCu(api.cuMemcpyHtoD(buffer.ptr() + off, pattern.data(),
                             std::min(chunk, buffer.bytes() - off)),
            "cuMemcpyHtoD");
  }
}

// topk_ids [T, k]: Zipf(1.0) popularity over a random expert order, k
// distinct experts per token (as the anchors' torch baselines draw it).
std::vector<int32_t> ZipfRouting(std::mt19937_64& rng, int64_t tokens,
                                 int64_t experts, int64_t k) {
  std::vector<double> weight(experts);
  std::vector<int32_t> order(experts);
  for (int64_t e = 0; e < experts; ++e) order[e] = static_cast<int32_t>(e);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t e = 0; e < experts; ++e) weight[order[e]] = 1.0 / (e + 1);
  std::vector<int32_t> ids(tokens * k);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> w = weight;
    for (int64_t j = 0; j < k; ++j) {
      std::discrete_distribution<int32_t> pick(w.begin(), w.end());
      const int32_t e = pick(rng);
      ids[t * k + j] = e;
      w[e] = 0;
    }
  }
  return ids;
}

// GPU microseconds between events recorded around `run` on `stream`.
double EventsUs(const cuda::DriverApi& api, CUstream stream,
                const std::function<void()>& run) {
  CUevent start, stop;
  CheckCu(api.cuEventCreate(&start, 0), "event");
  CheckCu(api.cuEventCreate(&stop, 0), "event");
  CheckCu(api.cuEventRecord(start, stream), "record");
  run();
  CheckCu(api.cuEventRecord(stop, stream), "record");
  CheckCu(api.cuEventSynchronize(stop), "sync");
  float ms = 0;
  CheckCu(api.cuEventElapsedTime(&ms, start, stop), "elapsed");
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  return ms * 1e3;
}

// Median GPU milliseconds of `run` on `stream`, one call per measurement.
double TimeMs(const cuda::DriverApi& api, CUstream stream,
              const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i) run();
  CheckCu(api.cuStreamSynchronize(stream), "sync");
  std::vector<double> times;
  for (int i = 0; i < 20; ++i)
    times.push_back(EventsUs(api, stream, run) / 1e3);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// ---- --step: where a small step's time goes ------------------------------
// For each op, microseconds per call measured four ways:
//   alone   events around one call (TimeMs): host work + launch + kernels,
//           what an eager server pays for an op on an idle stream
//   host    the host's wall time to issue one call (kStepCalls back to
//           back, no sync): the CPU cost of tailor's launch path
//   queued  events around kStepCalls back-to-back calls: the GPU's time when
//           the host keeps ahead of it, else the host's issue rate
//   graph   a CUDA graph of kStepCalls calls, replayed: the kernels and the
//           gaps between them, no host work (what a graph-captured server
//           pays)
constexpr int kStepCalls = 32;

struct StepOp {
  const char* name;
  std::function<void()> run;
};

// Median over 5 measurements of `measure`, each of kStepCalls calls.
double MedianPerCall(const std::function<double()>& measure) {
  std::vector<double> us;
  for (int i = 0; i < 5; ++i) us.push_back(measure() / kStepCalls);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void ReportStep(const cuda::DriverApi& api, CUstream stream, const char* model,
                int64_t tokens, const std::vector<StepOp>& ops) {
  auto calls = [](const std::function<void()>& run) {
    for (int i = 0; i < kStepCalls; ++i) run();
  };
  for (const StepOp& op : ops) {
    const double alone = TimeMs(api, stream, op.run) * 1e3;
    const double host = MedianPerCall([&] {
      CheckCu(api.cuStreamSynchronize(stream), "sync");
      const auto start = std::chrono::steady_clock::now();
      calls(op.run);
      const std::chrono::duration<double, std::micro> us =
          std::chrono::steady_clock::now() - start;
      CheckCu(api.cuStreamSynchronize(stream), "sync");
      return us.count();
    });
    const double queued = MedianPerCall(
        [&] { return EventsUs(api, stream, [&] { calls(op.run); }); });
    CUgraph graph;
    CUgraphExec exec;
    CheckCu(
        api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture");
    calls(op.run);
    CheckCu(api.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
    CheckCu(api.cuGraphInstantiateWithFlags(&exec, graph, 0),
            "cuGraphInstantiateWithFlags");
    CheckCu(api.cuGraphLaunch(exec, stream), "cuGraphLaunch");  // warm
    const double graphed = MedianPerCall([&] {
      return EventsUs(api, stream, [&] {
        CheckCu(api.cuGraphLaunch(exec, stream), "launch");
      });
    });
    api.cuGraphExecDestroy(exec);
    api.cuGraphDestroy(graph);
    std::printf(
        "%-14s T=%5lld %-8s alone %8.1f us | host %6.1f us | queued %8.1f us "
        "| graph %8.1f us\n",
        model, static_cast<long long>(tokens), op.name, alone, host, queued,
        graphed);
  }
  std::fflush(stdout);
}

double CopyBandwidth(const cuda::DriverApi& api, CUstream stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(api, bytes), b(api, bytes);
  CheckCu(api.cuMemsetD8(a.ptr(), 7, bytes), "memset");
  const double ms = TimeMs(api, stream, [&] {
    CheckCu(api.cuMemcpyDtoDAsync(b.ptr(), a.ptr(), bytes, stream), "copy");
  });
  return 2.0 * bytes / (ms * 1e-3);  // read + write, bytes/s
}

TensorRef View(const DeviceBuffer& b, DType dtype,
               std::initializer_list<int64_t> dims) {
  return TensorRef::Contiguous(b.data(), dtype, dims,
                               {.type = DeviceType::kCuda, .index = 0});
}

void RunModel(CudaTestRuntime& env, CUstream stream, const Model& m,
              double copy_bw, int64_t only_tokens, bool step) {
  const cuda::DriverApi& api = env.api();
  std::mt19937_64 rng(1234);
  const int64_t E = m.experts, k = m.topk, H = m.hidden, I = m.intermediate;
  DeviceBuffer w13(api, E * 2 * I * H * 2), w2(api, E * H * I * 2);
  FillRandomBf16(api, w13, rng, 0.02f);
  FillRandomBf16(api, w2, rng, 0.02f);
  const int64_t max_t = kTokens[std::size(kTokens) - 1];
  DeviceBuffer hidden(api, max_t * H * 2), out(api, max_t * H * 2),
      rows_h(api, max_t * k * H * 2), rows_i(api, max_t * k * I * 2),
      ids_d(api, max_t * k * 4), weights_d(api, max_t * k * 4);
  FillRandomBf16(api, hidden, rng, 1.0f);
  moe::Workspace ws;
  Check(moe::ReserveWorkspace(env.runtime(),
                              {.max_tokens = max_t,
                               .topk = k,
                               .num_experts = E,
                               .hidden = H,
                               .intermediate = I,
                               .dtype = DType::kBF16},
                              ws),
        "ReserveWorkspace");
  for (int64_t t : kTokens) {
    if (only_tokens != 0 && t != only_tokens) continue;
    std::vector<int32_t> ids = ZipfRouting(rng, t, E, k);
    std::vector<float> weights(t * k, 1.0f / k);
    Check(ids_d.Upload(ids), "upload ids");
    Check(weights_d.Upload(weights), "upload weights");
    const int64_t rows = t * k;
    const int64_t active = std::set<int32_t>(ids.begin(), ids.end()).size();
    const TensorRef x = View(hidden, DType::kBF16, {t, H});
    const TensorRef y = View(out, DType::kBF16, {t, H});
    const TensorRef a = View(rows_h, DType::kBF16, {rows, H});
    const TensorRef act = View(rows_i, DType::kBF16, {rows, I});
    const TensorRef ids_t = View(ids_d, DType::kI32, {t, k});
    const TensorRef w_t = View(weights_d, DType::kF32, {t, k});
    const moe::RouteArgs route_args = {
        .topk_ids = ids_t, .num_experts = E, .stream = stream};
    const std::function<void()> route = [&] {
      Check(moe::Route(env.runtime(), route_args, ws), "Route");
    };
    const std::function<void()> pack = [&] {
      Check(moe::Pack(env.runtime(), {.hidden = x,
                                      .permutation = ws.permutation(),
                                      .topk = k,
                                      .a = a,
                                      .stream = stream}),
            "Pack");
    };
    const std::function<void()> combine = [&] {
      Check(moe::Combine(env.runtime(), {.c = a,
                                         .topk_weights = w_t,
                                         .inverse = ws.inverse(),
                                         .out = y,
                                         .stream = stream}),
            "Combine");
    };
    const std::function<void()> gemm13 = [&] {
      Check(moe::GroupedGemm(env.runtime(),
                             {.a = a,
                              .w = View(w13, DType::kBF16, {E, 2 * I, H}),
                              .c = act,
                              .epilogue = moe::Epilogue::kSiluAndMul,
                              .stream = stream},
                             ws),
            "GroupedGemm 13");
    };
    const std::function<void()> gemm2 = [&] {
      Check(moe::GroupedGemm(env.runtime(),
                             {.a = act,
                              .w = View(w2, DType::kBF16, {E, H, I}),
                              .c = a,
                              .stream = stream},
                             ws),
            "GroupedGemm 2");
    };
    const std::function<void()> experts = [&] {
      Check(moe::Experts(env.runtime(),
                         {.hidden = x,
                          .w13 = View(w13, DType::kBF16, {E, 2 * I, H}),
                          .w2 = View(w2, DType::kBF16, {E, H, I}),
                          .topk_weights = w_t,
                          .topk_ids = ids_t,
                          .out = y,
                          .stream = stream},
                         ws),
            "Experts");
    };
    if (step) {
      ReportStep(api, stream, m.name, t,
                 {{"route", route},
                  {"pack", pack},
                  {"gemm13", gemm13},
                  {"gemm2", gemm2},
                  {"combine", combine},
                  {"experts", experts}});
      continue;
    }
    const double route_ms = TimeMs(api, stream, route);
    const double rpc_ms = TimeMs(api, stream, [&] {
      route();
      pack();
      combine();
    });
    const double gemm13_ms = TimeMs(api, stream, gemm13);
    const double gemm2_ms = TimeMs(api, stream, gemm2);
    const double experts_ms = TimeMs(api, stream, experts);
    const double bytes13 = 2.0 * (active * 2 * I * H + rows * H + rows * I);
    const double bytes2 = 2.0 * (active * H * I + rows * I + rows * H);
    const double flops13 = 2.0 * rows * H * 2 * I, flops2 = 2.0 * rows * I * H;
    std::printf(
        "%-14s T=%5lld rows=%6lld act=%3lld | route %7.1f us | r+p+c %7.1f us "
        "| gemm13 %8.3f ms %5.0f TF/s bw %3.0f%% | gemm2 %8.3f ms %5.0f TF/s "
        "bw %3.0f%% | experts %8.3f ms\n",
        m.name, static_cast<long long>(t), static_cast<long long>(rows),
        static_cast<long long>(active), route_ms * 1e3, rpc_ms * 1e3, gemm13_ms,
        flops13 / gemm13_ms / 1e9, 100 * bytes13 / (gemm13_ms * 1e-3) / copy_bw,
        gemm2_ms, flops2 / gemm2_ms / 1e9,
        100 * bytes2 / (gemm2_ms * 1e-3) / copy_bw, experts_ms);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace tailor

int main(int argc, char** argv) {
  using namespace tailor;
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
      CudaTestRuntime::Create();
  if (!env.ok()) {
    std::printf("moe_cuda_bench: skipped (%s)\n",
                std::string(env.status().message()).c_str());
    return 0;
  }
  const cuda::DriverApi& api = (*env)->api();
  TestStream stream(api);
  const double copy_bw = CopyBandwidth(api, stream.get());
  std::printf("moe_cuda_bench: %s, copy bandwidth %.2f TB/s (read + write)\n",
              (*env)->runtime().arch().c_str(), copy_bw / 1e12);
  int64_t only_tokens = 0;
  bool step = false;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--tokens=", 0) == 0) {
      only_tokens = std::stoll(arg.substr(9));
    } else if (arg == "--step") {
      step = true;
    } else {
      models.push_back(arg);
    }
  }
  for (const Model& m : kModels) {
    const bool wanted =
        models.empty() ||
        std::find(models.begin(), models.end(), m.name) != models.end();
    if (wanted) RunModel(**env, stream.get(), m, copy_bw, only_tokens, step);
  }
  return 0;
}
