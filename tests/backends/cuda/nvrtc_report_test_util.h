// NVRTC compile tests of generated kernels (no GPU needed, so they run in
// CI): a fixture that compiles a key's source with ptxas -v, the numbers
// read back from its log (registers, spill bytes), and a kernel's code size
// from the cubin (a short launch fetches its code from memory once other
// kernels ran: bench/results/attention_prefill_h200.txt, "The decode
// kernel's cold cost is instruction fetch").
#ifndef TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_
#define TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_

#include <elf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
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

// Bytes of SASS in `cubin`: the sizes of its ".text.*" sections (the
// kernel and any function it calls out of line; a 64-bit little-endian ELF,
// as NVRTC writes it), or -1 when it is not such an ELF. Bounds-checked.
inline long long CubinCodeBytes(const std::string& cubin) {
  auto read = [&](uint64_t at, auto& out) {
    if (at > cubin.size() || sizeof(out) > cubin.size() - at) return false;
    std::memcpy(&out, cubin.data() + at, sizeof(out));
    return true;
  };
  Elf64_Ehdr elf;
  if (!read(0, elf) || std::memcmp(elf.e_ident, ELFMAG, SELFMAG) != 0 ||
      elf.e_ident[EI_CLASS] != ELFCLASS64 ||
      elf.e_ident[EI_DATA] != ELFDATA2LSB ||
      elf.e_shentsize != sizeof(Elf64_Shdr) || elf.e_shstrndx >= elf.e_shnum) {
    return -1;
  }
  auto section = [&](uint64_t i, Elf64_Shdr& out) {
    return read(elf.e_shoff + i * sizeof(Elf64_Shdr), out);
  };
  Elf64_Shdr names;
  if (!section(elf.e_shstrndx, names)) return -1;
  static constexpr char kText[] = ".text.";
  long long total = 0;
  for (uint64_t i = 0; i < elf.e_shnum; ++i) {
    Elf64_Shdr s;
    char prefix[sizeof(kText) - 1];
    if (!section(i, s)) return -1;
    if (read(names.sh_offset + s.sh_name, prefix) &&
        std::memcmp(prefix, kText, sizeof(prefix)) == 0) {
      total += static_cast<long long>(s.sh_size);
    }
  }
  return total;
}

}  // namespace tailor::cuda::testing

#endif  // TAILOR_TESTS_BACKENDS_CUDA_NVRTC_REPORT_TEST_UTIL_H_
