// Example 03: the stats endpoint of a serving process, under load.
//
//   1. create a Runtime whose stats are served over HTTP (Options::stats_addr
//      or $TAILOR_STATS_ADDR): GET /metrics, /stats, /healthz
//   2. launch warm kernels from several threads for a while, as a server's
//      workers do (moe::Pack of a few rows: mostly dispatch, little work)
//   3. print the per-launch time, so that runs with and without the
//      endpoint (and with a scraper hammering it) can be compared
//
//   03_stats_endpoint [--addr 127.0.0.1:9464 | --no-endpoint]
//                     [--seconds 10] [--threads 4]
// The first line printed is "stats endpoint: http://ADDR/metrics" (or
// "stats endpoint: off"); the last is "launch: N ns per call (...)".
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

namespace {

constexpr int kRows = 4, kCols = 64;

struct Config {
  std::string addr = "127.0.0.1:0";
  double seconds = 10;
  int threads = 4;
};

Config Parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--no-endpoint") c.addr.clear();
    if (i + 1 >= argc) continue;
    if (arg == "--addr") c.addr = argv[++i];
    if (arg == "--seconds") c.seconds = std::atof(argv[++i]);
    if (arg == "--threads") c.threads = std::atoi(argv[++i]);
  }
  return c;
}

// One worker: Pack calls until `stop`; returns how many, or -1 on error.
int64_t Launch(tailor::Runtime& runtime, const std::atomic<bool>& stop) {
  std::vector<float> hidden(kRows * kCols, 1.0f), packed(kRows * kCols);
  std::vector<int32_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  const tailor::moe::PackArgs args = {
      .hidden = tailor::TensorRef::Contiguous(
          hidden.data(), tailor::DType::kF32, {kRows, kCols}),
      .permutation = tailor::TensorRef::Contiguous(
          order.data(), tailor::DType::kI32, {kRows}),
      .topk = 1,
      .a = tailor::TensorRef::Contiguous(packed.data(), tailor::DType::kF32,
                                         {kRows, kCols})};
  int64_t calls = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    absl::Status s = tailor::moe::Pack(runtime, args);
    if (!s.ok()) {
      std::fprintf(stderr, "pack: %s\n", s.ToString().c_str());
      return -1;
    }
    ++calls;
  }
  return calls;
}

}  // namespace

int main(int argc, char** argv) {
  const Config config = Parse(argc, argv);
  // 1. A CPU runtime, with or without the endpoint.
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  options.log_level = "warn";
  options.stats_addr = config.addr;
  if (config.addr.empty()) setenv("TAILOR_STATS_ADDR", "", 1);
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "cannot create runtime: %s\n",
                 runtime.status().ToString().c_str());
    return 1;
  }
  const std::string address = (*runtime)->stats_address();
  if (address.empty()) {
    std::printf("stats endpoint: off\n");
  } else {
    std::printf("stats endpoint: http://%s/metrics\n", address.c_str());
  }
  std::fflush(stdout);

  // 2. Warm the kernel, then launch from every thread for a while.
  std::atomic<bool> stop{true};
  if (Launch(**runtime, stop) < 0) return 1;
  stop = false;
  std::vector<int64_t> calls(config.threads);
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < config.threads; ++t) {
    workers.emplace_back([&, t] { calls[t] = Launch(**runtime, stop); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(config.seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  // 3. Per-launch time: thread-seconds spent per call.
  int64_t total = 0;
  for (int64_t n : calls) {
    if (n < 0) return 1;
    total += n;
  }
  std::printf("launch: %.0f ns per call (%d threads, %lld calls in %.1f s)\n",
              elapsed * config.threads / static_cast<double>(total) * 1e9,
              config.threads, static_cast<long long>(total), elapsed);
  return 0;
}
