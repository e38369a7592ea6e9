// warmup/warmup_runner.h — precompile (or check) a list of kernels into the
// disk cache in parallel, and say truthfully what happened.
//
// PrecompileAll runs KernelCache::Precompile for every job on `parallel`
// threads (the cache's compile_threads bounds how many compile at once) and
// reports progress after each job. Each result says whether the kernel was
// already on disk, compiled and written, compiled but NOT written (with the
// write error), or not built at all (with the compile error).
// SummarizeWarmup turns results into the table tailor-warmup prints and the
// list of problems that make it exit non-zero.
//
// Example:
//   std::vector<WarmupResult> results = PrecompileAll(
//       engine.cache(), jobs, /*parallel=*/2, [](const WarmupProgress& p) {
//         std::fprintf(stderr, "\r%s", FormatProgress(p).c_str());
//       });
//   WarmupSummary summary = SummarizeWarmup(results, wall_seconds);
//   std::printf("%s", summary.table.c_str());
//   return summary.problems.empty() ? 0 : 1;
#ifndef TAILOR_WARMUP_WARMUP_RUNNER_H_
#define TAILOR_WARMUP_WARMUP_RUNNER_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/kernel_cache.h"
#include "warmup/kernel_catalog.h"

namespace tailor::internal {

struct WarmupProgress {
  int done = 0;
  int total = 0;
  double elapsed_seconds = 0;
  double eta_seconds = 0;  // from the mean time per finished job
};

// "[ 7/14]  50%  elapsed 1.2 s  ETA 1.2 s"
std::string FormatProgress(const WarmupProgress& progress);

struct WarmupResult {
  SpecKey key;
  // Not OK: there is no kernel (the compile failed, or the backend cannot
  // build the key). Then `precompile` is meaningless.
  absl::Status status;
  KernelCache::PrecompileResult precompile;
};

// Precompiles every job on `parallel` (>= 1) threads; results in job order.
// `on_progress` is called after every job, one call at a time.
std::vector<WarmupResult> PrecompileAll(
    KernelCache& cache, absl::Span<const KernelJob> jobs, int parallel,
    absl::FunctionRef<void(const WarmupProgress&)> on_progress);

// Looks at the disk again for every kernel PrecompileAll found or persisted
// and marks the ones that are gone as not persisted, saying why: the cache
// directory was removed, the size limit evicted them (`evictions`, the
// entries this process evicted during the warm-up, is nonzero), or another
// process removed them. So the summary reports only what a server will
// really find. `results` are PrecompileAll's for `jobs`.
void RecheckOnDisk(KernelCache& cache, absl::Span<const KernelJob> jobs,
                   uint64_t evictions, std::vector<WarmupResult>& results);

struct WarmupSummary {
  // Per op: variants, on disk (found there), compiled, not saved (not on
  // disk at the end, whichever way it got there), failed, timings.
  std::string table;
  int ready = 0;  // kernels whose entry is on disk now
  // One line per kernel that is not on disk now: "not saved  KEY: reason"
  // or "failed     KEY: reason". Empty when the warm-up is complete.
  std::vector<std::string> problems;
};

WarmupSummary SummarizeWarmup(absl::Span<const WarmupResult> results,
                              double wall_seconds);

// One line per job: its compile time (ms, wall and CPU), or "on disk".
std::string FormatCompileTimes(absl::Span<const WarmupResult> results);

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_WARMUP_RUNNER_H_
