// tests/conformance/conformance.h — the backend matrix of the conformance
// suite: every op family runs on every backend present against an fp64
// reference, through the public API only (as ggml's test-backend-ops does).
//
// Each test is parametrized over every BackendKind. A kind whose Runtime
// cannot start here skips with the reason (the CPU always runs, so CI covers
// it; CUDA runs on a GPU machine, HIP where an AMD device exists). Tensors
// live where the Runtime says (Runtime::Allocate / CopyToDevice), so one
// test body serves host and device backends alike.
#ifndef TAILOR_TESTS_CONFORMANCE_CONFORMANCE_H_
#define TAILOR_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"
#include "test_util.h"

namespace tailor::conformance {

inline const std::vector<BackendKind>& AllBackends() {
  static const std::vector<BackendKind> kinds = {
      BackendKind::kCpu, BackendKind::kCuda, BackendKind::kHip};
  return kinds;
}

// One Runtime per kind and process (its kernels are shared by the tests),
// or why none starts here. The disk cache lives in the build tree
// (TAILOR_CONFORMANCE_CACHE_DIR), so ctest's one process per test compiles
// each kernel once.
inline absl::StatusOr<Runtime*> RuntimeOf(BackendKind kind) {
  static auto* runtimes =
      new std::map<BackendKind, absl::StatusOr<std::unique_ptr<Runtime>>>();
  auto it = runtimes->find(kind);
  if (it == runtimes->end()) {
    Runtime::Options options;
    options.backend = kind;
    options.log_level = "error";
#ifdef TAILOR_CONFORMANCE_CACHE_DIR
    options.cache_dir = TAILOR_CONFORMANCE_CACHE_DIR;
#else
    options.disable_disk_cache = true;
#endif
    it = runtimes->emplace(kind, Runtime::Create(options)).first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

// A test fixture parametrized by backend kind; SetUp skips when the kind
// cannot start here.
class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    absl::StatusOr<Runtime*> runtime = RuntimeOf(GetParam());
    if (!runtime.ok()) {
      GTEST_SKIP() << BackendName(GetParam())
                   << " backend not present here: " << runtime.status();
    }
    runtime_ = *runtime;
  }
  Runtime& runtime() { return *runtime_; }

 private:
  Runtime* runtime_ = nullptr;
};

inline std::string BackendParamName(
    const ::testing::TestParamInfo<BackendKind>& info) {
  return std::string(BackendName(info.param));
}

// `bytes` of memory where the runtime's tensors live, filled from and read
// back to host vectors.
class Buffer {
 public:
  Buffer(Runtime& runtime, size_t bytes) : runtime_(runtime), bytes_(bytes) {
    absl::StatusOr<std::shared_ptr<void>> memory =
        runtime.Allocate(bytes == 0 ? 1 : bytes);
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (memory.ok()) memory_ = *memory;
  }
  void* data() const { return memory_.get(); }
  size_t bytes() const { return bytes_; }

  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_LE(host.size() * sizeof(T), bytes_);
    if (host.empty()) return;
    TAILOR_ASSERT_OK(
        runtime_.CopyToDevice(data(), host.data(), host.size() * sizeof(T)));
  }
  template <typename T>
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    EXPECT_LE(count * sizeof(T), bytes_);
    if (count == 0) return host;
    absl::Status status =
        runtime_.CopyToHost(host.data(), data(), count * sizeof(T));
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

 private:
  Runtime& runtime_;
  size_t bytes_;
  std::shared_ptr<void> memory_;
};

// A TensorRef of `dims` (contiguous) over `buffer` on `runtime`'s device.
inline TensorRef ViewOf(Runtime& runtime, const Buffer& buffer, DType dtype,
                        std::initializer_list<int64_t> dims) {
  return TensorRef::Contiguous(buffer.data(), dtype, dims, runtime.device());
}

}  // namespace tailor::conformance

#endif  // TAILOR_TESTS_CONFORMANCE_CONFORMANCE_H_
