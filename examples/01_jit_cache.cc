// Example 01: the JIT path end to end on the CPU backend, public API only.
//
//   1. create a Runtime (CPU backend, disk cache in $TAILOR_CACHE_DIR or
//      ~/.cache/tailor)
//   2. run a specialized kernel (moe::Pack gathers rows into a new order):
//      compiled on first use, or loaded from disk
//   3. run it again with another order: a memory-cache hit
//   4. print where the kernel came from and the stats (JSON and Prometheus)
//
// Run it twice: the second process compiles nothing.
#include <cstdio>
#include <iostream>
#include <numeric>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

int main() {
  // 1. A runtime on the CPU backend.
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::cerr << "cannot create runtime: " << runtime.status() << "\n";
    return 1;
  }
  std::printf("backend cpu, arch %s, cache %s\n", (*runtime)->arch().c_str(),
              (*runtime)->cache_dir().empty()
                  ? "(memory only)"
                  : (*runtime)->cache_dir().c_str());

  // 2-3. Gather 8 rows of 64 floats twice through the same specialization
  // (the kernel is specialized on the row length and dtype, never on the
  // number of rows or the order).
  constexpr int kRows = 8, kCols = 64;
  std::vector<float> hidden(kRows * kCols), packed(kRows * kCols);
  std::iota(hidden.begin(), hidden.end(), 0.0f);
  std::vector<int32_t> order(kRows);
  for (int step = 0; step < 2; ++step) {
    for (int r = 0; r < kRows; ++r) order[r] = step == 0 ? kRows - 1 - r : r;
    absl::Status s = tailor::moe::Pack(
        **runtime, {.hidden = tailor::TensorRef::Contiguous(
                        hidden.data(), tailor::DType::kF32, {kRows, kCols}),
                    .permutation = tailor::TensorRef::Contiguous(
                        order.data(), tailor::DType::kI32, {kRows}),
                    .topk = 1,
                    .a = tailor::TensorRef::Contiguous(
                        packed.data(), tailor::DType::kF32, {kRows, kCols})});
    if (!s.ok()) {
      std::cerr << "pack failed: " << s << "\n";
      return 1;
    }
    if (packed[0] != hidden[order[0] * kCols]) {
      std::cerr << "wrong result: " << packed[0] << "\n";
      return 1;
    }
  }

  // 4. Where it came from.
  tailor::StatsSnapshot stats = (*runtime)->stats();
  std::printf("kernel came from: %s\n",
              stats.compiles    ? "a compile (first run on this cache)"
              : stats.disk_hits ? "the disk cache (no compile)"
                                : "memory");
  std::cout << stats.ToPrometheus();
  return 0;
}
