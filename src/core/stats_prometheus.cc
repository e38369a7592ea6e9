// StatsToPrometheus: the Prometheus text exposition (format 0.0.4) of one
// or more runtimes' snapshots. Each family is written once (HELP, TYPE),
// followed by its samples for every runtime, labelled runtime="<name>"
// when the name is not empty.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "tailor/stats.h"

namespace tailor {
namespace {

using Labels = std::vector<std::pair<absl::string_view, std::string>>;

std::string EscapeLabel(absl::string_view value) {
  return absl::StrReplaceAll(value,
                             {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

// {runtime="cpu",op="moe.pack"} (runtime first, omitted when empty); "" for
// no labels at all.
std::string LabelText(absl::string_view runtime, const Labels& labels) {
  std::string out;
  auto add = [&](absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", name, "=\"",
                    EscapeLabel(value), "\"");
  };
  if (!runtime.empty()) add("runtime", runtime);
  for (const auto& [name, value] : labels) add(name, value);
  if (!out.empty()) out += "}";
  return out;
}

class Writer {
 public:
  explicit Writer(const std::vector<NamedStats>& runtimes)
      : runtimes_(runtimes) {}

  // A family whose samples come from `samples(stats, emit)`, which calls
  // emit(labels, value) once per sample of one runtime.
  template <typename Value>
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help,
              const std::function<void(
                  const StatsSnapshot&,
                  const std::function<void(const Labels&, Value)>&)>& samples) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                    type, "\n");
    for (const NamedStats& r : runtimes_) {
      samples(r.stats, [&](const Labels& labels, Value value) {
        absl::StrAppend(&out_, name, LabelText(r.runtime, labels), " ", value,
                        "\n");
      });
    }
  }

  // A family with one unlabelled sample per runtime.
  void Scalar(absl::string_view name, absl::string_view type,
              absl::string_view help,
              const std::function<uint64_t(const StatsSnapshot&)>& get) {
    Family<uint64_t>(name, type, help, [&](const StatsSnapshot& s, auto emit) {
      emit({}, get(s));
    });
  }

  void Histogram(
      absl::string_view name, absl::string_view help,
      const std::function<const HistogramSnapshot&(const StatsSnapshot&)>&
          get) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name,
                    " histogram\n");
    for (const NamedStats& r : runtimes_) {
      const HistogramSnapshot& h = get(r.stats);
      uint64_t cumulative = 0;
      for (size_t i = 0; i < h.counts.size(); ++i) {
        cumulative += h.counts[i];
        std::string le = i < h.upper_bounds.size()
                             ? absl::StrFormat("%g", h.upper_bounds[i])
                             : "+Inf";
        absl::StrAppend(&out_, name, "_bucket",
                        LabelText(r.runtime, {{"le", le}}), " ", cumulative,
                        "\n");
      }
      absl::StrAppend(&out_, name, "_sum", LabelText(r.runtime, {}), " ",
                      absl::StrFormat("%.9g", h.sum), "\n");
      absl::StrAppend(&out_, name, "_count", LabelText(r.runtime, {}), " ",
                      h.count, "\n");
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  const std::vector<NamedStats>& runtimes_;
  std::string out_;
};

using Emit = std::function<void(const Labels&, uint64_t)>;

void WriteKernelCache(Writer& w) {
  w.Scalar("tailor_kernel_lookups_total", "counter",
           "Kernel cache lookups (= hits + misses).",
           [](const StatsSnapshot& s) { return s.lookups; });
  w.Family<uint64_t>("tailor_kernel_hits_total", "counter",
                     "Lookups served by a cache tier (memory, disk).",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       emit({{"tier", "memory"}}, s.memory_hits);
                       emit({{"tier", "disk"}}, s.disk_hits);
                     });
  w.Scalar("tailor_kernel_misses_total", "counter",
           "Lookups found in no tier (compiled, or failed).",
           [](const StatsSnapshot& s) { return s.misses; });
  w.Scalar("tailor_kernel_fallback_launches_total", "counter",
           "Launches of a generic kernel while the specialized one compiles "
           "(background JIT).",
           [](const StatsSnapshot& s) { return s.fallback_launches; });
  w.Scalar("tailor_kernel_pending_compiles", "gauge",
           "Background resolves (disk or compile) queued or running.",
           [](const StatsSnapshot& s) { return s.pending_compiles; });
  w.Scalar("tailor_kernel_background_compile_failures_total", "counter",
           "Background compiles that failed (the generic kernel serves).",
           [](const StatsSnapshot& s) {
             return s.background_compile_failures;
           });
  w.Scalar("tailor_kernel_single_flight_waits_total", "counter",
           "Lookups that waited for another thread's compile of the key.",
           [](const StatsSnapshot& s) { return s.single_flight_waits; });
  w.Scalar("tailor_kernel_compiles_total", "counter", "Kernels compiled.",
           [](const StatsSnapshot& s) { return s.compiles; });
  w.Scalar("tailor_kernel_compile_failures_total", "counter",
           "Compiles that failed.",
           [](const StatsSnapshot& s) { return s.compile_failures; });
  w.Family<uint64_t>("tailor_kernel_evictions_total", "counter",
                     "Kernels evicted from a cache tier.",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       emit({{"tier", "memory"}}, s.memory_evictions);
                       emit({{"tier", "disk"}}, s.disk_evictions);
                     });
  w.Scalar("tailor_disk_corrupt_entries_total", "counter",
           "Disk entries rejected as corrupt (recompiled, replaced).",
           [](const StatsSnapshot& s) { return s.corrupt_entries; });
  w.Scalar("tailor_disk_stale_entries_total", "counter",
           "Disk entries of another version, compiler or source (replaced).",
           [](const StatsSnapshot& s) { return s.stale_entries; });
  w.Scalar("tailor_disk_write_failures_total", "counter",
           "Disk entries that could not be written.",
           [](const StatsSnapshot& s) { return s.disk_write_failures; });
}

void WriteOps(Writer& w) {
  w.Family<uint64_t>("tailor_launches_total", "counter",
                     "Kernel launches per op.",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       for (const auto& [op, n] : s.launches_per_op) {
                         emit({{"op", op}}, n);
                       }
                     });
  w.Family<uint64_t>("tailor_kernel_specializations", "gauge",
                     "Distinct kernel variants (keys) seen per op.",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       for (const auto& [op, n] : s.specializations_per_op) {
                         emit({{"op", op}}, n);
                       }
                     });
  w.Family<uint64_t>("tailor_backend_events_total", "counter",
                     "Counters of the runtime's backend by name "
                     "(e.g. cuda.descriptor_encodes).",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       for (const auto& [name, n] : s.backend_counters) {
                         emit({{"counter", name}}, n);
                       }
                     });
  w.Family<uint64_t>(
      "tailor_plan_rows_total", "counter",
      "Rows of host-made piecewise plans: useful, and executed including "
      "tail padding (wasted = executed - useful).",
      [](const StatsSnapshot& s, const Emit& emit) {
        emit({{"kind", "useful"}}, s.plan_useful_rows);
        emit({{"kind", "executed"}}, s.plan_executed_rows);
      });
  w.Family<int64_t>("tailor_workspace_bytes", "gauge",
                    "Bytes held by the MoE workspaces reserved or bound.",
                    [](const StatsSnapshot& s, const auto& emit) {
                      emit({}, s.workspace_bytes);
                    });
  w.Family<uint64_t>("tailor_tuning_override", "gauge",
                     "Active tuning overrides (Runtime::Options::tuning), "
                     "one sample of value 1 each.",
                     [](const StatsSnapshot& s, const Emit& emit) {
                       for (const auto& [key, value] : s.tuning) {
                         emit({{"key", key}, {"value", value}}, 1);
                       }
                     });
}

}  // namespace

std::string StatsToPrometheus(const std::vector<NamedStats>& runtimes) {
  Writer w(runtimes);
  WriteKernelCache(w);
  WriteOps(w);
  w.Histogram("tailor_compile_seconds", "Kernel compile time in seconds.",
              [](const StatsSnapshot& s) -> const HistogramSnapshot& {
                return s.compile_seconds;
              });
  w.Histogram("tailor_disk_load_seconds",
              "Disk cache entry load time in seconds.",
              [](const StatsSnapshot& s) -> const HistogramSnapshot& {
                return s.disk_load_seconds;
              });
  std::string out = w.Take();
  absl::StrAppend(&out,
                  "# HELP tailor_build_info tailor's version (value 1).\n"
                  "# TYPE tailor_build_info gauge\n"
                  "tailor_build_info{version=\"" TAILOR_VERSION_STRING
                  "\"} 1\n");
  return out;
}

}  // namespace tailor
