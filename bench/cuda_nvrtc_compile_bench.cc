// bench/cuda_nvrtc_compile_bench — how long a cold NVRTC compile of a
// representative Hopper kernel takes, and whether precompiled headers help.
// CPU only: NVRTC needs no GPU.
//
// The kernel is tma_patch_test (TMA load/store, mbarrier, tensormap.replace;
// bf16, 128 cols, 64-row tiles) compiled for sm_90a, as the CUDA backend
// compiles it. Variants:
//   bare              tailor's own runtime headers only (what tailor ships)
//   +cuda/ptx         the same with #include <cuda/ptx> (CCCL) first
//   +cuda/ptx -pch    the same with NVRTC's automatic precompiled headers
//   bare -pch         tailor's headers with -pch
//   +cuda_bf16.h      with #include <cuda_bf16.h> (what a bf16 GEMM epilogue
//                     would pull in), with and without -pch
// Every compile gets a unique source (a trailing nonce declaration), so NVRTC
// caches nothing but the PCH; one untimed warm-up compile absorbs the process's
// first-call cost. "first" is the first timed compile of the variant (it
// creates the PCH); median/min are over the rest.
//
// Usage: cuda_nvrtc_compile_bench [repetitions=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"

namespace {

using tailor::cuda::NvrtcCompiler;
using tailor::internal::KernelSource;

struct Variant {
  const char* name;
  const char* prelude;  // prepended to the generated source
  bool pch;
};

double CompileMs(const NvrtcCompiler& compiler, const KernelSource& source,
                 int nonce) {
  KernelSource unique = source;
  // The nonce goes last: anything before the includes would defeat the PCH.
  unique.code = absl::StrCat(
      source.code, "constexpr int tailor_bench_nonce = ", nonce, ";\n");
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<NvrtcCompiler::Output> out =
      compiler.Compile(unique, "sm_90a");
  auto stop = std::chrono::steady_clock::now();
  if (!out.ok()) {
    std::fprintf(stderr, "compile failed: %s\n",
                 std::string(out.status().message()).c_str());
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(stop - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(2, std::atoi(argv[1])) : 7;
  tailor::internal::SpecKey key;
  key.op = tailor::internal::kTmaPatchTestOp;
  key.dtypes[0] = tailor::DType::kBF16;
  key.dims[0] = 128;
  key.tile.m = 64;
  absl::StatusOr<KernelSource> source =
      tailor::cuda::GenerateCudaTestKernel(key);
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(source.status().message()).c_str());
    return 1;
  }
  const Variant variants[] = {
      {"bare", "", false},
      {"bare -pch", "", true},
      {"+cuda/ptx", "#include <cuda/ptx>\n", false},
      {"+cuda/ptx -pch", "#include <cuda/ptx>\n", true},
      {"+cuda_bf16.h", "#include <cuda_bf16.h>\n", false},
      {"+cuda_bf16.h -pch", "#include <cuda_bf16.h>\n", true},
  };
  int nonce = 0;
  std::printf(
      "NVRTC compile of tma_patch_test (bf16, 128 cols, 64-row tile) for "
      "sm_90a\n");
  std::printf("%-20s %10s %10s %10s  (ms, %d timed compiles each)\n", "variant",
              "first", "median", "min", repetitions);
  for (const Variant& v : variants) {
    absl::StatusOr<NvrtcCompiler> compiler =
        NvrtcCompiler::Create({.precompiled_headers = v.pch});
    if (!compiler.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(compiler.status().message()).c_str());
      return 1;
    }
    if (compiler->toolkit_include_dir().empty() && v.prelude[0] != '\0') {
      std::printf("%-20s (skipped: no CUDA toolkit headers)\n", v.name);
      continue;
    }
    KernelSource with_prelude = *source;
    with_prelude.code = absl::StrCat(v.prelude, source->code);
    if (nonce == 0) {
      CompileMs(*compiler, with_prelude, nonce++);  // process warm-up
    }
    std::vector<double> ms;
    for (int r = 0; r < repetitions; ++r) {
      ms.push_back(CompileMs(*compiler, with_prelude, nonce++));
    }
    const double first = ms.front();
    std::vector<double> rest(ms.begin() + 1, ms.end());
    std::sort(rest.begin(), rest.end());
    std::printf("%-20s %10.1f %10.1f %10.1f\n", v.name, first,
                rest[rest.size() / 2], rest.front());
  }
  return 0;
}
