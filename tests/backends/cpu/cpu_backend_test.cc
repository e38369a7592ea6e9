#include "backends/cpu/cpu_backend.h"

#include <random>
#include <vector>

#include "kernels/test_op_kinds.h"
#include "test_util.h"

namespace tailor::internal::cpu {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

struct AxpyParams {
  const float* x;
  float* y;
  int64_t n;
  float a;
};

KernelSource AxpySource(int block) {
  return KernelSource{.code =
                          "#include \"templates/cpu/test_kernels.h\"\n"
                          "TAILOR_CPU_ENTRY((tailor::kernels::AxpyKernel<" +
                          std::to_string(block) + ">))\n",
                      .entry = "tailor_entry"};
}

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = CpuBackend::Create(4);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    key_.op = tailor::internal::kTestAxpyOp;
    key_.backend = BackendKind::kCpu;
    key_.SetArch(backend_->arch());
  }
  std::unique_ptr<CpuBackend> backend_;
  SpecKey key_;
};

TEST_F(CpuBackendTest, CompileLoadLaunchMatchesReference) {
  auto object = backend_->Compile(key_, AxpySource(64));
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->substr(0, 4),
            "\x7f"
            "ELF");
  auto kernel = backend_->Load(key_, AxpySource(64), *object);
  ASSERT_TRUE(kernel.ok()) << kernel.status();

  std::mt19937 rng(::tailor::testing::TestSeed());
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t n : {0, 1, 63, 64, 65, 577, 10007}) {
    std::vector<float> x(n), y(n), expected(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = dist(rng);
      y[i] = dist(rng);
      expected[i] = 0.5f * x[i] + y[i];
    }
    AxpyParams params = {.x = x.data(), .y = y.data(), .n = n, .a = 0.5f};
    LaunchConfig config;
    config.grid.x = static_cast<uint32_t>((n + 63) / 64);
    TAILOR_ASSERT_OK(
        backend_->Launch(**kernel, config, &params, sizeof(params)));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[i], expected[i]) << "n=" << n << " i=" << i;
  }
}

TEST_F(CpuBackendTest, LaunchBatchRunsEveryItemOfEveryRequestOnce) {
  std::vector<std::shared_ptr<Kernel>> kernels;
  for (int block : {8, 64}) {
    auto object = backend_->Compile(key_, AxpySource(block));
    ASSERT_TRUE(object.ok()) << object.status();
    auto kernel = backend_->Load(key_, AxpySource(block), *object);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    kernels.push_back(*kernel);
  }
  std::mt19937 rng(::tailor::testing::TestSeed());
  for (int rep = 0; rep < 20; ++rep) {
    // Three requests of ragged sizes (one empty) over separate arrays.
    std::vector<int64_t> sizes = {static_cast<int64_t>(rng() % 1000), 0,
                                  static_cast<int64_t>(rng() % 5000)};
    std::vector<std::vector<float>> xs, ys;
    std::vector<AxpyParams> params(sizes.size());
    std::vector<LaunchRequest> requests(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      xs.emplace_back(sizes[i], 1.0f + i);
      ys.emplace_back(sizes[i], 0.25f);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int block = i == 1 ? 8 : 64;
      params[i] = {
          .x = xs[i].data(), .y = ys[i].data(), .n = sizes[i], .a = 2.0f};
      requests[i] = {.kernel = kernels[i == 1 ? 0 : 1].get(),
                     .params = &params[i],
                     .params_size = sizeof(AxpyParams)};
      requests[i].config.grid.x =
          static_cast<uint32_t>((sizes[i] + block - 1) / block);
      requests[i].config.block.x = 1 + rng() % 3;
    }
    TAILOR_ASSERT_OK(backend_->LaunchBatch(requests));
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int64_t j = 0; j < sizes[i]; ++j) {
        ASSERT_EQ(ys[i][j], 2.0f * (1.0f + i) + 0.25f)
            << "request " << i << " item " << j;
      }
    }
  }
}

TEST_F(CpuBackendTest, CompileErrorIsInternalWithTheLog) {
  KernelSource bad = {.code =
                          "#include \"runtime/cpu/tailor_cpu.h\"\nint f() { "
                          "return undeclared; }\n",
                      .entry = "tailor_entry"};
  EXPECT_THAT(backend_->Compile(key_, bad),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("use of undeclared identifier 'undeclared'")));
}

TEST_F(CpuBackendTest, SystemHeadersAreNotVisible) {
  KernelSource bad = {.code = "#include <stdio.h>\n", .entry = "tailor_entry"};
  EXPECT_THAT(backend_->Compile(key_, bad),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("'stdio.h' file not found")));
}

TEST_F(CpuBackendTest, MissingEntrySymbolIsAnError) {
  KernelSource source = {.code = "extern \"C\" void other() {}\n",
                         .entry = "tailor_entry"};
  auto object = backend_->Compile(key_, source);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_THAT(backend_->Load(key_, source, *object),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("tailor_entry")));
}

TEST_F(CpuBackendTest, GarbageObjectIsAnErrorNotACrash) {
  EXPECT_FALSE(
      backend_->Load(key_, AxpySource(64), "definitely not an ELF object")
          .ok());
}

TEST_F(CpuBackendTest, SupportsOnlyItsOwnBackendAndArch) {
  TAILOR_EXPECT_OK(backend_->Supports(key_));
  SpecKey other = key_;
  other.backend = BackendKind::kCuda;
  EXPECT_THAT(backend_->Supports(other),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("key is for another backend")));
  other = key_;
  other.SetArch("aarch64-neoverse-v2");
  EXPECT_THAT(backend_->Supports(other),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("not for aarch64-neoverse-v2")));
}

}  // namespace
}  // namespace tailor::internal::cpu
