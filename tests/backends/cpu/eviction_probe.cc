// A process for DiskLimitTest.FourProcessesShareOneLimit: serves moe::Pack
// at several widths (each its own kernel) through a Runtime whose disk cache
// is argv[1] with a size limit of argv[2] bytes, checks every result, and
// prints the stats snapshot as JSON. Process argv[3] (0, 1, ...) uses its
// own widths plus two that every process shares.
#include <cstdlib>
#include <iostream>
#include <vector>

#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr
        << "usage: tailor_eviction_probe <cache_dir> <max_bytes> <index>\n";
    return 2;
  }
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  options.cache_dir = argv[1];
  options.cache_max_bytes = std::strtoull(argv[2], nullptr, 10);
  options.cpu_threads = 1;
  options.compile_threads = 1;
  options.log_level = "error";
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::cerr << runtime.status() << "\n";
    return 1;
  }
  const int index = std::atoi(argv[3]);
  std::vector<int64_t> widths = {1024, 1032};  // shared by every process
  for (int j = 0; j < 5; ++j) widths.push_back(8 * (index * 5 + j + 1));
  for (int64_t hidden : widths) {
    std::vector<float> x(2 * hidden), a(2 * hidden, -1);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    std::vector<int32_t> permutation = {1, 0};
    absl::Status s = tailor::moe::Pack(
        **runtime, {.hidden = tailor::TensorRef::Contiguous(
                        x.data(), tailor::DType::kF32, {2, hidden}),
                    .permutation = tailor::TensorRef::Contiguous(
                        permutation.data(), tailor::DType::kI32, {2}),
                    .topk = 1,
                    .a = tailor::TensorRef::Contiguous(
                        a.data(), tailor::DType::kF32, {2, hidden})});
    if (!s.ok() || a[0] != x[hidden] || a[2 * hidden - 1] != x[hidden - 1]) {
      std::cerr << "pack of width " << hidden << " failed: " << s << "\n";
      return 1;
    }
  }
  std::cout << (*runtime)->stats().ToJson() << "\n";
  return 0;
}
