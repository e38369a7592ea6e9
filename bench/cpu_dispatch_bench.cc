// Host overhead of the CPU backend's JIT path (issue: spine).
//
//   WarmDispatch/EmptyKernel   build SpecKey + memory-cache lookup + launch of
//                              an empty kernel over one work item (runs
//                              inline: no worker wake-up). Target < 1 us.
//   WarmDispatch/KeyHash       SpecKey::Hash alone.
//   WarmDispatch/Lookup        Engine::GetKernel on a warm key alone.
//   ColdCompile/Axpy           Clang -> object -> ORC load of a small template.
//   DiskLoad/Axpy              the same kernel read from the disk cache and
//                              loaded by a fresh Runtime (no compile).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <vector>

#include "api/internals.h"
#include "core/engine.h"
#include "kernels/test_op_kinds.h"
#include "kernels/test_ops.h"
#include "tailor/runtime.h"

namespace tailor {
namespace {

std::unique_ptr<Runtime> MakeRuntime(const std::string& dir, bool disk = true) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.cache_dir = dir;
  options.disable_disk_cache = !disk;
  options.log_level = "error";
  return *Runtime::Create(options);
}

std::string BenchDir(const char* name) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "tailor-bench" / name).string();
  std::filesystem::remove_all(dir);
  return dir;
}

void BM_WarmDispatchEmptyKernel(benchmark::State& state) {
  auto runtime = MakeRuntime("", /*disk=*/false);
  if (!internal::LaunchEmpty(*runtime).ok())
    state.SkipWithError("launch failed");
  for (auto _ : state) {
    absl::Status s = internal::LaunchEmpty(*runtime);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_WarmDispatchEmptyKernel);

void BM_WarmDispatchKeyHash(benchmark::State& state) {
  internal::SpecKey key;
  key.op = internal::OpKind::kMoeGroupedGemm;
  key.SetArch("x86_64-znver3");
  key.dims = {768, 2048};
  for (auto _ : state) {
    key.tail_class = static_cast<int32_t>(state.iterations() & 7);
    benchmark::DoNotOptimize(key.Hash());
  }
}
BENCHMARK(BM_WarmDispatchKeyHash);

absl::StatusOr<internal::KernelSource> EmptySource(const internal::SpecKey&) {
  return internal::KernelSource{
      .code =
          "#include \"templates/cpu/test_kernels.h\"\n"
          "TAILOR_CPU_ENTRY((tailor::kernels::EmptyKernel))\n",
      .entry = "tailor_entry"};
}

void BM_WarmDispatchLookup(benchmark::State& state) {
  auto runtime = MakeRuntime("", /*disk=*/false);
  internal::Engine& engine = tailor::internal::EngineOf(*runtime);
  internal::SpecKey key = engine.MakeKey(internal::kTestEmptyOp);
  if (!engine.GetKernel(key, EmptySource).ok())
    state.SkipWithError("compile failed");
  for (auto _ : state)
    benchmark::DoNotOptimize(engine.GetKernel(key, EmptySource));
}
BENCHMARK(BM_WarmDispatchLookup);

void RunAxpy(Runtime& runtime, int block) {
  std::vector<float> x(64, 1.0f), y(64, 1.0f);
  absl::Status s = internal::Axpy(
      runtime, 1.0f, TensorRef::Contiguous(x.data(), DType::kF32, {64}),
      TensorRef::Contiguous(y.data(), DType::kF32, {64}), block);
  if (!s.ok()) std::abort();
}

void BM_ColdCompileAxpy(benchmark::State& state) {
  auto runtime = MakeRuntime("", /*disk=*/false);
  int block = 8;
  for (auto _ : state) {
    block += 8;  // a new specialization each iteration: always a compile
    RunAxpy(*runtime, block);
  }
  state.counters["compiles"] = static_cast<double>(runtime->stats().compiles);
}
BENCHMARK(BM_ColdCompileAxpy)->Unit(benchmark::kMillisecond)->Iterations(20);

void BM_DiskLoadAxpy(benchmark::State& state) {
  std::string dir = BenchDir("diskload");
  RunAxpy(*MakeRuntime(dir), 64);
  uint64_t disk_hits = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto runtime = MakeRuntime(dir);
    state.ResumeTiming();
    RunAxpy(*runtime, 64);
    state.PauseTiming();
    disk_hits += runtime->stats().disk_hits;
    runtime.reset();
    state.ResumeTiming();
  }
  state.counters["disk_hits_per_iter"] =
      static_cast<double>(disk_hits) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_DiskLoadAxpy)->Unit(benchmark::kMicrosecond)->Iterations(50);

}  // namespace
}  // namespace tailor

BENCHMARK_MAIN();
