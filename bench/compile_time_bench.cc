// bench/compile_time_bench — cold compile time of every kernel variant a
// serving profile needs: CPU backend (Clang + LLVM in process), and CUDA
// (NVRTC for sm_90a and sm_80 by default, offline: no GPU needed; the keys
// warm-up lists for that arch).
//
// Each variant is compiled `repetitions` times from scratch (the backends
// cache nothing between compiles; NVRTC gets a unique source each time). For
// each variant it prints the minimum and median wall time and the CPU time
// of the compiling thread, which is what to compare on a machine shared with
// other work; for the CPU backend also how the fastest compile's CPU time
// splits into the compiler's phases (clang frontend, IR pipeline,
// codegen; backends/cpu/clang_compiler.h). Targets: <= 100 ms CPU,
// <= 200 ms NVRTC per variant.
//
// For NVRTC also the registers and spill bytes of each variant (ptxas -v on
// one more, untimed compile): zero spills is part of the target.
//
// Usage: compile_time_bench [--profile FILE.json] [--repetitions N]
//                           [--filter SUBSTRING] [--nvrtc-only | --cpu-only]
//                           [--arch sm_XY] [--nvrtc-flag FLAG]...
//                           [--dump-dir DIR]
//
// --dump-dir DIR writes each CUDA variant's generated source and PTX to
// DIR/<n>.cu and DIR/<n>.ptx (ptxas -v DIR/<n>.ptx times the PTX step alone).
// --nvrtc-flag appends FLAG to NVRTC's flags (repeatable), e.g.
// --nvrtc-flag -time=/tmp/phases.csv for NVRTC's per-phase times.
//
// Built without the CPU JIT (scripts/gpu-bundle's build), it times NVRTC
// only: the NVRTC target is <= 200 ms on the GPU machine's CPU.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#ifdef TAILOR_BENCH_CPU
#include "api/internals.h"
#include "backends/cpu/clang_compiler.h"
#endif
#include "core/backend.h"
#include "core/engine.h"
#include "tailor/runtime.h"
#include "warmup/kernel_catalog.h"
#include "warmup/profile.h"
#ifdef TAILOR_BENCH_NVRTC
#include "backends/cuda/nvrtc_compiler.h"
#endif

namespace {

using tailor::internal::KernelSource;
using tailor::internal::SpecKey;

#ifdef TAILOR_BENCH_CPU
using CompilePhaseTimes = tailor::internal::cpu::CompilePhaseTimes;
#else
struct CompilePhaseTimes {  // the CPU backend's phases; zero without it
  double frontend_ms = 0, optimize_ms = 0, codegen_ms = 0;
};
#endif

struct Sample {
  double wall_ms;
  double cpu_ms;
  CompilePhaseTimes phases;  // CPU backend only
};

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Times `compile` (returns the binary's size, or -1 on failure).
// `compile(r, phases)` returns the binary's size and may fill `phases`.
template <typename Compile>
std::vector<Sample> Measure(int repetitions, Compile compile, long* bytes) {
  std::vector<Sample> samples;
  for (int r = 0; r < repetitions; ++r) {
    CompilePhaseTimes phases;
    auto start = std::chrono::steady_clock::now();
    double cpu_start = ThreadCpuMs();
    *bytes = compile(r, &phases);
    samples.push_back({std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start)
                           .count(),
                       ThreadCpuMs() - cpu_start, phases});
    if (*bytes < 0) break;
  }
  return samples;
}

// Prints one row (with the phases of the fastest sample when `phases`, and
// `extra`, preformatted columns, before the name); returns the minimum CPU
// ms.
double Report(const std::string& name, std::vector<Sample> samples, long bytes,
              bool phases, const std::string& extra = "") {
  if (bytes < 0) {
    std::printf("%-90s FAILED\n", name.c_str());
    return 0;
  }
  auto by_cpu = [](const Sample& a, const Sample& b) {
    return a.cpu_ms < b.cpu_ms;
  };
  std::sort(samples.begin(), samples.end(), by_cpu);
  double min_cpu = samples.front().cpu_ms,
         med_cpu = samples[samples.size() / 2].cpu_ms;
  const CompilePhaseTimes fastest = samples.front().phases;
  std::sort(
      samples.begin(), samples.end(),
      [](const Sample& a, const Sample& b) { return a.wall_ms < b.wall_ms; });
  std::printf("%8.1f %8.1f %8.1f %8.1f %8ld", min_cpu, med_cpu,
              samples.front().wall_ms, samples[samples.size() / 2].wall_ms,
              bytes);
  if (phases) {
    std::printf(" %6.1f %6.1f %6.1f", fastest.frontend_ms, fastest.optimize_ms,
                fastest.codegen_ms);
  }
  std::printf("%s  %s\n", extra.c_str(), name.c_str());
  return min_cpu;
}

void Header(const char* what, bool phases, const char* extra = "") {
  std::printf("\n%s\n%8s %8s %8s %8s %8s", what, "cpu min", "cpu med",
              "wall min", "wall med", "bytes");
  if (phases) std::printf(" %6s %6s %6s", "fe", "opt", "cg");
  std::printf("%s  %s\n", extra, "variant (ms)");
}

#ifdef TAILOR_BENCH_NVRTC
// " regs  spill" columns from ptxas -v's report in an NVRTC log ("Used 168
// registers", "N bytes spill stores", "N bytes spill loads"); "?" where the
// log lacks them.
std::string PtxasColumns(const std::string& log) {
  auto number = [&](const char* pattern) -> std::string {
    std::smatch match;
    if (!std::regex_search(log, match, std::regex(pattern))) return "?";
    return match[1].str();
  };
  return absl::StrFormat(
      " %5s %9s", number(R"(Used (\d+) registers)"),
      absl::StrCat(number(R"((\d+) bytes spill stores)"), "/",
                   number(R"((\d+) bytes spill loads)")));
}
#endif

#ifdef TAILOR_BENCH_CPU
int BenchCpu(const std::string& profile_path, int repetitions,
             const std::string& filter) {
  std::ifstream in(profile_path);
  std::stringstream text;
  text << in.rdbuf();
  auto profile = tailor::internal::ParseProfile(text.str());
  if (!profile.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(profile.status().message()).c_str());
    return 1;
  }
  tailor::Runtime::Options options;
  options.backend = tailor::BackendKind::kCpu;
  options.disable_disk_cache = true;
  options.cpu_threads = 1;
  options.log_level = "error";
  auto runtime = tailor::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", runtime.status().ToString().c_str());
    return 1;
  }
  tailor::internal::Engine& engine = tailor::internal::EngineOf(**runtime);
  auto kernels = tailor::internal::KernelsForProfile(engine.target(), *profile,
                                                     engine.tuning());
  if (!kernels.ok()) return 1;
  Header(absl::StrCat("CPU backend (", (*runtime)->arch(), "), profile ",
                      profile->name, ", ", repetitions,
                      " cold compiles each; fe/opt/cg: phases of the fastest")
             .c_str(),
         /*phases=*/true);
  double total = 0, worst = 0;
  int over = 0, count = 0;
  for (const tailor::internal::KernelJob& job : kernels->jobs) {
    std::string name = job.key.ToString();
    if (!filter.empty() && !absl::StrContains(name, filter)) continue;
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    long bytes = -1;
    // The backend's compiler itself, for its phase times (what
    // Backend::Compile runs).
    std::vector<Sample> samples = Measure(
        repetitions,
        [&](int, CompilePhaseTimes* phases) -> long {
          auto binary = tailor::internal::cpu::CompileToObject(
              source->code, tailor::internal::cpu::GetHostTarget(), phases);
          return binary.ok() ? static_cast<long>(binary->size()) : -1;
        },
        &bytes);
    double cpu = Report(name, samples, bytes, /*phases=*/true);
    total += cpu;
    worst = std::max(worst, cpu);
    over += cpu > 100;
    ++count;
  }
  std::printf(
      "CPU: %d variants, sum of min CPU %.0f ms, worst %.1f ms, %d "
      "over the 100 ms target\n",
      count, total, worst, over);
  return 0;
}
#endif

#ifdef TAILOR_BENCH_NVRTC
// Every CUDA kernel the profile needs on `arch`, as warm-up lists them
// (keys only: no device), compiled offline with NVRTC.
struct NvrtcBenchOptions {
  std::string filter;
  std::vector<std::string> flags;
  std::string dump_dir;  // empty: no dump
};

int BenchNvrtc(const std::string& profile_path, const std::string& arch,
               int repetitions, const NvrtcBenchOptions& options) {
  const std::string& filter = options.filter;
  std::ifstream in(profile_path);
  std::stringstream text;
  text << in.rdbuf();
  auto profile = tailor::internal::ParseProfile(text.str());
  if (!profile.ok()) return 1;
  auto kernels = tailor::internal::KernelsForProfile(
      {.backend = tailor::BackendKind::kCuda, .arch = arch}, *profile,
      /*tuning=*/{});
  if (!kernels.ok()) {
    std::fprintf(stderr, "%s\n", kernels.status().ToString().c_str());
    return 1;
  }
  auto compiler =
      tailor::cuda::NvrtcCompiler::Create({.extra_flags = options.flags});
  std::vector<std::string> verbose_flags = options.flags;
  verbose_flags.push_back("--ptxas-options=-v");
  auto verbose =  // one untimed compile per variant, for ptxas -v's report
      tailor::cuda::NvrtcCompiler::Create({.extra_flags = verbose_flags});
  if (!compiler.ok() || !verbose.ok()) {
    std::printf(
        "\nNVRTC: skipped (%s)\n",
        std::string((compiler.ok() ? verbose : compiler).status().message())
            .c_str());
    return 0;
  }
  Header(absl::StrCat("NVRTC for ", arch, " (offline), profile ", profile->name,
                      ", ", repetitions,
                      " cold compiles each; unique source per compile; "
                      "regs and spill bytes (stores/loads) from ptxas -v")
             .c_str(),
         /*phases=*/false, "  regs     spill");
  int nonce = 0;
  double worst = 0, total = 0;
  int over = 0, count = 0;
  for (const tailor::internal::KernelJob& job : kernels->jobs) {
    const std::string name = job.key.ToString();
    if (!filter.empty() && !absl::StrContains(name, filter)) continue;
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    if (!source.ok()) {
      std::printf("%s: %s\n", name.c_str(),
                  std::string(source.status().message()).c_str());
      continue;
    }
    if (!options.dump_dir.empty()) {
      std::ofstream(absl::StrCat(options.dump_dir, "/", count, ".cu"))
          << "// " << name << "\n"
          << source->code;
      auto out = compiler->Compile(*source, arch, /*want_ptx=*/true);
      if (out.ok()) {
        std::ofstream(absl::StrCat(options.dump_dir, "/", count, ".ptx"))
            << out->ptx;
      }
    }
    auto compile = [&](int, CompilePhaseTimes*) -> long {
      KernelSource unique = *source;
      unique.code = absl::StrCat(source->code, "constexpr int tailor_nonce_",
                                 nonce++, " = 0;\n");
      auto out = compiler->Compile(unique, arch);
      if (!out.ok()) {
        std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
        return -1;
      }
      return static_cast<long>(out->cubin.size());
    };
    if (count == 0) compile(0, nullptr);  // the first NVRTC call pays a setup
    long bytes = -1;
    std::vector<Sample> samples = Measure(repetitions, compile, &bytes);
    KernelSource unique = *source;  // unique: NVRTC may cache a repeat
    unique.code = absl::StrCat(source->code, "constexpr int tailor_nonce_",
                               nonce++, " = 0;\n");
    absl::StatusOr<tailor::cuda::NvrtcCompiler::Output> report =
        verbose->Compile(unique, arch);
    const double cpu =
        Report(name, samples, bytes, /*phases=*/false,
               PtxasColumns(report.ok() ? report->log : std::string()));
    worst = std::max(worst, cpu);
    total += cpu;
    over += cpu > 200;
    ++count;
  }
  std::printf(
      "NVRTC %s: %d variants, sum of min CPU %.0f ms, worst %.1f ms, %d over "
      "the 200 ms target\n",
      arch.c_str(), count, total, worst, over);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string profile =
      std::string(TAILOR_SOURCE_DIR) + "/tools/profiles/qwen3-30b-a3b.json";
  std::string filter;
  int repetitions = 5;
  bool cpu = true, nvrtc = true;
  std::vector<std::string> archs = {"sm_90a", "sm_80"};
#ifdef TAILOR_BENCH_NVRTC
  NvrtcBenchOptions nvrtc_options;
#endif
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--profile" && i + 1 < argc)
      profile = argv[++i];
    else if (arg == "--repetitions" && i + 1 < argc)
      repetitions = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--filter" && i + 1 < argc)
      filter = argv[++i];
#ifdef TAILOR_BENCH_NVRTC
    else if (arg == "--nvrtc-flag" && i + 1 < argc)
      nvrtc_options.flags.push_back(argv[++i]);
    else if (arg == "--dump-dir" && i + 1 < argc)
      nvrtc_options.dump_dir = argv[++i];
#endif
    else if (arg == "--cpu-only")
      nvrtc = false;
    else if (arg == "--nvrtc-only")
      cpu = false;
    else if (arg == "--arch" && i + 1 < argc)
      archs = {argv[++i]};
    else {
      std::fprintf(stderr,
                   "usage: compile_time_bench [--profile FILE] [--repetitions "
                   "N] [--filter S] [--cpu-only | --nvrtc-only] [--arch "
                   "sm_XY] [--nvrtc-flag FLAG]... [--dump-dir DIR]\n");
      return 2;
    }
  }
#ifdef TAILOR_BENCH_CPU
  if (cpu && BenchCpu(profile, repetitions, filter) != 0) return 1;
#else
  if (cpu) std::printf("\nCPU backend: not built (no CPU JIT)\n");
#endif
#ifdef TAILOR_BENCH_NVRTC
  for (const std::string& arch : archs) {
    nvrtc_options.filter = filter;
    if (nvrtc && BenchNvrtc(profile, arch, repetitions, nvrtc_options) != 0) {
      return 1;
    }
  }
#else
  if (nvrtc) std::printf("\nNVRTC: not built (no CUDA toolkit headers)\n");
#endif
  return 0;
}
