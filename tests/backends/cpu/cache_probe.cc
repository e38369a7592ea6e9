// A second process for runtime_cache_test: runs one axpy through a Runtime
// whose disk cache is argv[1] and prints the stats snapshot as JSON.
#include <iostream>
#include <vector>

#include "kernels/test_ops.h"
#include "tailor/runtime.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tailor_cache_probe <cache_dir>\n";
    return 2;
  }
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  options.cache_dir = argv[1];
  options.log_level = "warn";
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::cerr << runtime.status() << "\n";
    return 1;
  }
  std::vector<float> x(100, 1.0f), y(100, 1.0f);
  absl::Status s = tailor::internal::Axpy(
      **runtime, 3.0f,
      tailor::TensorRef::Contiguous(x.data(), tailor::DType::kF32, {100}),
      tailor::TensorRef::Contiguous(y.data(), tailor::DType::kF32, {100}));
  if (!s.ok() || y[99] != 4.0f) {
    std::cerr << "axpy failed: " << s << " y[99]=" << y[99] << "\n";
    return 1;
  }
  std::cout << (*runtime)->stats().ToJson() << "\n";
  return 0;
}
