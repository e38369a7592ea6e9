// NVRTC compile tests of generated kernels (no GPU needed, so they run in
// CI): a fixture that compiles a key's source with ptxas -v, and the
// numbers read back from its log (registers, spill bytes).
#ifndef TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_
#define TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/engine.h"
#include "core/spec_key.h"

namespace tailor::cuda::testing {

// Skips without NVRTC; Compile(key[, arch]) builds `key`'s source from
// kGenerate for `arch` (sm_90a by default) with a nonce (defeating NVRTC's
// cache, so ptxas reports).
template <tailor::internal::KernelGeneratorFn kGenerate>
class NvrtcReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<NvrtcCompiler> compiler =
        NvrtcCompiler::Create({.extra_flags = {"--ptxas-options=-v"}});
    if (!compiler.ok()) {
      ASSERT_EQ(compiler.status().code(), absl::StatusCode::kUnavailable)
          << compiler.status();
      GTEST_SKIP() << "NVRTC not installed: " << compiler.status();
    }
    compiler_.emplace(*std::move(compiler));
  }

  absl::StatusOr<NvrtcCompiler::Output> Compile(
      const tailor::internal::SpecKey& key,
      const std::string& arch = "sm_90a") {
    absl::StatusOr<tailor::internal::KernelSource> source = kGenerate(key);
    if (!source.ok()) return source.status();
    source->code += absl::StrCat(
        "constexpr long long tailor_test_nonce = ",
        std::chrono::system_clock::now().time_since_epoch().count(), ";\n");
    return compiler_->Compile(*source, arch, /*want_ptx=*/true);
  }

  std::optional<NvrtcCompiler> compiler_;
};

// The first number `pattern`'s group captures in a ptxas log; -1 if none.
inline int LogNumber(const std::string& log, const std::string& pattern) {
  std::smatch match;
  if (!std::regex_search(log, match, std::regex(pattern))) return -1;
  return std::stoi(match[1].str());
}

}  // namespace tailor::cuda::testing

#endif  // TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_
