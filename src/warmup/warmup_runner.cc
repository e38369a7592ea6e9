#include "warmup/warmup_runner.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace tailor::internal {
namespace {

struct OpRow {
  std::string op;
  int variants = 0;
  int on_disk = 0;
  int compiled = 0;
  int not_saved = 0;
  int failed = 0;
  double compile_seconds = 0;
  double max_compile_seconds = 0;

  // Every result lands in exactly one of on_disk, compiled and failed, and
  // in not_saved when its entry is not on disk at the end (compiled but not
  // written, or found or written but gone by the end): the table's not_saved
  // and failed add up to the problems listed.
  void Add(const WarmupResult& r) {
    ++variants;
    if (!r.status.ok()) {
      ++failed;
      return;
    }
    if (!r.precompile.persisted.ok()) ++not_saved;
    if (r.precompile.was_on_disk) {
      ++on_disk;
      return;
    }
    ++compiled;
    compile_seconds += r.precompile.compile_seconds;
    max_compile_seconds =
        std::max(max_compile_seconds, r.precompile.compile_seconds);
  }
};

std::string RowLine(const OpRow& row) {
  return absl::StrFormat("%-20s %8d %8d %9d %10d %7d %10.2f %8.0f\n", row.op,
                         row.variants, row.on_disk, row.compiled, row.not_saved,
                         row.failed, row.compile_seconds,
                         row.max_compile_seconds * 1e3);
}

}  // namespace

std::string FormatProgress(const WarmupProgress& p) {
  int width = static_cast<int>(absl::StrCat(p.total).size());
  int percent = p.total == 0 ? 100 : p.done * 100 / p.total;
  std::string line =
      absl::StrFormat("[%*d/%d] %3d%%  elapsed %.1f s", width, p.done, p.total,
                      percent, p.elapsed_seconds);
  if (p.done < p.total)
    absl::StrAppendFormat(&line, "  ETA %.1f s", p.eta_seconds);
  return line;
}

std::vector<WarmupResult> PrecompileAll(
    KernelCache& cache, absl::Span<const KernelJob> jobs, int parallel,
    absl::FunctionRef<void(const WarmupProgress&)> on_progress) {
  std::vector<WarmupResult> results(jobs.size());
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  absl::Mutex progress_mu;
  int done = 0;
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      WarmupResult& result = results[i];
      result.key = jobs[i].key;
      absl::StatusOr<KernelCache::PrecompileResult> precompiled =
          cache.Precompile(jobs[i].key, jobs[i].generate);
      if (precompiled.ok()) {
        result.precompile = *std::move(precompiled);
      } else {
        result.status = precompiled.status();
      }
      absl::MutexLock lock(&progress_mu);
      ++done;
      double elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      on_progress({.done = done,
                   .total = static_cast<int>(jobs.size()),
                   .elapsed_seconds = elapsed,
                   .eta_seconds = elapsed / done *
                                  static_cast<double>(jobs.size() - done)});
    }
  };
  const int threads =
      std::clamp(parallel, 1, std::max(1, static_cast<int>(jobs.size())));
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  return results;
}

namespace {

// Why an entry found or written during the warm-up is gone at its end.
std::string WhyGone(const KernelCache& cache, uint64_t evictions,
                    const absl::Status& on_disk) {
  const std::string& dir = cache.disk()->dir();
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::StrCat("the cache directory ", dir,
                        " was removed during the warm-up");
  }
  std::string gone = absl::StrCat(
      "gone from the disk cache by the end of the "
      "warm-up (",
      on_disk.message(), "): ");
  if (evictions > 0) {
    return absl::StrCat(gone, "evicted by the cache's size limit (", evictions,
                        " entries were evicted during the warm-up; "
                        "TAILOR_CACHE_MAX_SIZE is too small for this "
                        "profile)");
  }
  return absl::StrCat(gone,
                      "removed by another process (this one evicted nothing)");
}

}  // namespace

void RecheckOnDisk(KernelCache& cache, absl::Span<const KernelJob> jobs,
                   uint64_t evictions, std::vector<WarmupResult>& results) {
  if (!cache.disk().has_value()) return;
  for (size_t i = 0; i < results.size() && i < jobs.size(); ++i) {
    WarmupResult& r = results[i];
    if (!r.status.ok() || !r.precompile.persisted.ok()) continue;
    absl::Status on_disk = cache.CheckOnDisk(jobs[i].key, jobs[i].generate);
    if (on_disk.ok()) continue;
    r.precompile.persisted =
        absl::FailedPreconditionError(WhyGone(cache, evictions, on_disk));
  }
}

WarmupSummary SummarizeWarmup(absl::Span<const WarmupResult> results,
                              double wall_seconds) {
  std::vector<OpRow> rows;
  OpRow total{.op = "total"};
  WarmupSummary summary;
  for (const WarmupResult& r : results) {
    std::string op(GetOpInfo(r.key.op).name);
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const OpRow& row) { return row.op == op; });
    if (it == rows.end()) it = rows.insert(rows.end(), OpRow{.op = op});
    it->Add(r);
    total.Add(r);
    if (!r.status.ok()) {
      summary.problems.push_back(absl::StrCat("failed     ", r.key.ToString(),
                                              ": ", r.status.message()));
    } else if (!r.precompile.persisted.ok()) {
      summary.problems.push_back(
          absl::StrCat("not saved  ", r.key.ToString(), ": ",
                       r.precompile.persisted.message()));
    } else {
      ++summary.ready;
    }
  }
  summary.table = absl::StrFormat("%-20s %8s %8s %9s %10s %7s %10s %8s\n", "op",
                                  "variants", "on disk", "compiled",
                                  "not saved", "failed", "compile s", "max ms");
  for (const OpRow& row : rows) summary.table += RowLine(row);
  total.op = absl::StrFormat("total (wall %.2f s)", wall_seconds);
  summary.table += RowLine(total);
  return summary;
}

std::string FormatCompileTimes(absl::Span<const WarmupResult> results) {
  std::string out;
  for (const WarmupResult& r : results) {
    if (!r.status.ok()) {
      absl::StrAppendFormat(&out, "%10s %10s  %s\n", "failed", "",
                            r.key.ToString());
    } else if (r.precompile.was_on_disk) {
      absl::StrAppendFormat(&out, "%10s %10s  %s\n", "on disk", "",
                            r.key.ToString());
    } else {
      absl::StrAppendFormat(
          &out, "%7.1f ms %7.1f ms  %s\n", r.precompile.compile_seconds * 1e3,
          r.precompile.compile_cpu_seconds * 1e3, r.key.ToString());
    }
  }
  return out;
}

}  // namespace tailor::internal
