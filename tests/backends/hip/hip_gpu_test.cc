// HIP runtime tests: need an AMD Instinct GPU (gfx90a / gfx94x) and ROCm.
// Every test skips with a message where there is none (CI, this machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/hip/hip_backend.h"
#include "backends/hip/moe_kernels.h"
#include "templates/hip/moe_params.h"
#include "test_util.h"

namespace tailor::hip {
namespace {

using tailor::internal::Kernel;
using tailor::internal::KernelSource;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

// The device backend, or a skip naming why there is none.
#define TAILOR_HIP_BACKEND_OR_SKIP(var)                                 \
  absl::StatusOr<std::unique_ptr<HipBackend>> var##_or =                \
      HipBackend::Create({});                                           \
  if (!var##_or.ok()) {                                                 \
    ASSERT_EQ(var##_or.status().code(), absl::StatusCode::kUnavailable) \
        << var##_or.status();                                           \
    GTEST_SKIP() << "no AMD GPU here: " << var##_or.status();           \
  }                                                                     \
  HipBackend& var = **var##_or

// Pack gathers rows by the permutation: compile, load, launch, read back.
TEST(HipGpuTest, PackGathersRowsOnTheDevice) {
  TAILOR_HIP_BACKEND_OR_SKIP(backend);
  constexpr int kTokens = 3, kH = 64;
  SpecKey key;
  key.op = OpKind::kMoePack;
  key.backend = BackendKind::kHip;
  key.SetArch(backend.arch());
  key.dtypes = {DType::kF32};
  key.dims = {kH};
  absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::string> binary = backend.Compile(key, *source);
  ASSERT_TRUE(binary.ok()) << binary.status();
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      backend.Load(key, *source, *binary);
  ASSERT_TRUE(kernel.ok()) << kernel.status();

  std::vector<float> hidden(kTokens * kH);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = static_cast<float>(i);
  const std::vector<int> permutation = {2, 0, 1};  // topk 1
  auto d_hidden = backend.AllocateDevice(hidden.size() * 4);
  auto d_perm = backend.AllocateDevice(permutation.size() * 4);
  auto d_a = backend.AllocateDevice(hidden.size() * 4);
  ASSERT_TRUE(d_hidden.ok() && d_perm.ok() && d_a.ok());
  TAILOR_ASSERT_OK(backend.CopyToDevice(d_hidden->get(), hidden.data(),
                                        hidden.size() * 4, nullptr));
  TAILOR_ASSERT_OK(backend.CopyToDevice(d_perm->get(), permutation.data(),
                                        permutation.size() * 4, nullptr));
  tailor::cuda::MoePackParams p = {
      .hidden = d_hidden->get(),
      .permutation = static_cast<const int*>(d_perm->get()),
      .a = d_a->get(),
      .rows = kTokens,
      .tokens = kTokens,
      .topk = 1};
  LaunchConfig config;
  config.grid = {.x = kTokens, .y = 1};
  config.block = {.x = tailor::cuda::kMoePackThreads};
  TAILOR_ASSERT_OK(backend.Launch(**kernel, config, &p, sizeof(p)));
  std::vector<float> a(hidden.size());
  TAILOR_ASSERT_OK(
      backend.CopyToHost(a.data(), d_a->get(), a.size() * 4, nullptr));
  for (int r = 0; r < kTokens; ++r) {
    EXPECT_EQ(std::memcmp(&a[r * kH], &hidden[permutation[r] * kH], kH * 4), 0)
        << "row " << r;
  }
}

}  // namespace
}  // namespace tailor::hip
