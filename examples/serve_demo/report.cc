#include "report.h"

#include <cstdio>
#include <map>

namespace serve_demo {
namespace {

double Waste(int64_t useful, int64_t executed) {
  return executed == 0 ? 0.0
                       : 100.0 * (1.0 - static_cast<double>(useful) / executed);
}

uint64_t Get(const std::map<std::string, uint64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

tailor::StatsSnapshot Delta(const tailor::StatsSnapshot& after,
                            const tailor::StatsSnapshot& before) {
  tailor::StatsSnapshot d = after;
  d.lookups -= before.lookups;
  d.memory_hits -= before.memory_hits;
  d.disk_hits -= before.disk_hits;
  d.misses -= before.misses;
  d.compiles -= before.compiles;
  d.launches -= before.launches;
  for (auto& [op, n] : d.specializations_per_op)
    n -= Get(before.specializations_per_op, op);
  return d;
}

void PrintProgress(const ShapeReport& r, int total_steps) {
  if (r.steps % 8 != 0 && r.steps != total_steps) return;
  std::printf("  %-16s step %3d/%d  %6lld tokens  %7.0f tok/s\n",
              r.shape.name.c_str(), r.steps, total_steps,
              static_cast<long long>(r.tokens),
              r.seconds > 0 ? r.tokens / r.seconds : 0.0);
  std::fflush(stdout);
}

void PrintTable(const std::vector<ShapeReport>& reports,
                const tailor::StatsSnapshot& total,
                const std::string& cache_dir) {
  std::printf(
      "\n%-16s %5s %7s %7s %8s %8s | %6s %6s %6s %6s | %-17s | %s\n",
      "shape (E,k,H,I)", "steps", "tokens", "wall s", "tok/s", "ms/step",
      "memhit", "disk", "miss", "compil", "new kernels p/g/c",
      "wasted rows: core+tail  pow2  block16  block64 | rel err");
  for (const ShapeReport& r : reports) {
    const auto& spec = r.stats.specializations_per_op;
    std::printf(
        "%-16s %5d %7lld %7.2f %8.0f %8.3f | %6llu %6llu %6llu %6llu | "
        "%4llu/%3llu/%3llu      |"
        "              %6.1f%% %5.1f%% %7.1f%% %7.1f%% | %.1e\n",
        r.shape.name.c_str(), r.steps, static_cast<long long>(r.tokens),
        r.seconds, r.seconds > 0 ? r.tokens / r.seconds : 0.0,
        r.steps > 0 ? 1e3 * r.seconds / r.steps : 0.0,
        static_cast<unsigned long long>(r.stats.memory_hits),
        static_cast<unsigned long long>(r.stats.disk_hits),
        static_cast<unsigned long long>(r.stats.misses),
        static_cast<unsigned long long>(r.stats.compiles),
        static_cast<unsigned long long>(Get(spec, "moe.pack")),
        static_cast<unsigned long long>(Get(spec, "moe.grouped_gemm")),
        static_cast<unsigned long long>(Get(spec, "moe.combine")),
        Waste(r.useful_rows, r.core_tail_rows),
        Waste(r.useful_rows, r.pow2_rows), Waste(r.useful_rows, r.block16_rows),
        Waste(r.useful_rows, r.block64_rows), r.max_rel_error);
  }
  if (!reports.empty()) {
    std::printf("\nbackend device: %s; plan tile rows: %lld",
                reports[0].device.c_str(),
                static_cast<long long>(reports[0].tile_rows));
  }
  std::printf("\nshapes: %s", "");
  for (const ShapeReport& r : reports) {
    std::printf("%s = E%d k%d H%d I%d;  ", r.shape.name.c_str(),
                r.shape.experts, r.shape.topk, r.shape.hidden,
                r.shape.intermediate);
  }
  std::printf(
      "\nnew kernels = pack / grouped_gemm / combine variants this shape added "
      "(same dims share kernels)\nwasted rows = 1 - useful/executed rows of "
      "the grouped GEMMs' plans (pow2 tail classes; a GPU computes a tail in "
      "whole MMA blocks but stores only its rows)\nwall s = time inside "
      "Experts until its work is done (GPU: the step's device time plus its "
      "launches), first-use compiles included; ms/step = wall s / steps\n");
  std::printf(
      "rel err = max over checked steps of ||out - ref|| / ||ref|| against "
      "fp64 (bf16 data)\n");
  if (total.compiles == 0) {
    std::printf(
        "\ncompiles this run: 0 -- every kernel came from the disk cache "
        "(%s)\n",
        cache_dir.c_str());
  } else {
    std::printf(
        "\ncompiles this run: %llu (%.2f s) -- run `make demo` again: it "
        "compiles nothing\n",
        static_cast<unsigned long long>(total.compiles),
        total.compile_seconds.sum);
  }
}

}  // namespace serve_demo
