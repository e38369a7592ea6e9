// Example 01: the JIT path end to end on the CPU backend.
//
//   1. create a Runtime (CPU backend, disk cache in $TAILOR_CACHE_DIR or
//   ~/.cache/tailor)
//   2. run a small specialized kernel: compiled on first use, or loaded from
//   disk
//   3. run it again: a memory-cache hit
//   4. print where the kernel came from and the stats (JSON and Prometheus)
//
// Run it twice: the second process compiles nothing.
#include <cstdio>
#include <iostream>
#include <vector>

#include "ops/test_ops.h"
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

  // 2-3. y = 2x + y twice through the same specialization.
  std::vector<float> x(4096, 1.0f), y(4096, 0.5f);
  auto tx =
      tailor::TensorRef::Contiguous(x.data(), tailor::DType::kF32, {4096});
  auto ty =
      tailor::TensorRef::Contiguous(y.data(), tailor::DType::kF32, {4096});
  for (int step = 0; step < 2; ++step) {
    absl::Status s = tailor::internal::Axpy(**runtime, 2.0f, tx, ty);
    if (!s.ok()) {
      std::cerr << "axpy failed: " << s << "\n";
      return 1;
    }
  }
  if (y[4095] != 4.5f) {
    std::cerr << "wrong result: " << y[4095] << "\n";
    return 1;
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
