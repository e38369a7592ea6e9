// bench/plan_bench.cc — host cost of planning one MoE step.
//
// One step routes 4096 tokens to top-8 of 256 experts: 32768 rows, drawn as
// a multinomial over the experts (uniform random routing, fixed seed). Each
// iteration rebuilds one PiecewisePlan from per-expert counts, reusing the
// plan's buffers as a server does, so the time is the planner's cost per
// step ("ns per plan"). Counters report the plan's shape and waste next to
// vLLM's pad-to-block baseline at the same tile.
//
// Run: plan_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "plan/bucket_policy.h"
#include "plan/piecewise_plan.h"

namespace tailor::plan {
namespace {

constexpr int64_t kTokens = 4096;
constexpr int64_t kExperts = 256;
constexpr int64_t kTopK = 8;
constexpr int64_t kRows = kTokens * kTopK;
// Distinct routings cycled through, so that no two consecutive steps see the
// same counts.
constexpr int kRoutings = 64;
constexpr uint64_t kSeed = 20240917;

// [kRoutings][kExperts] per-expert row counts, each summing to kRows.
const std::vector<std::vector<int64_t>>& Routings() {
  static const auto* routings = [] {
    auto* all = new std::vector<std::vector<int64_t>>;
    std::mt19937_64 rng(kSeed);
    std::uniform_int_distribution<int64_t> expert(0, kExperts - 1);
    for (int r = 0; r < kRoutings; ++r) {
      std::vector<int64_t> counts(kExperts, 0);
      for (int64_t row = 0; row < kRows; ++row) ++counts[expert(rng)];
      all->push_back(std::move(counts));
    }
    return all;
  }();
  return *routings;
}

// Benchmark argument 1 selects the tail policy.
BucketPolicy TailPolicy(int64_t which) {
  switch (which) {
    case 0:
      return BucketPolicy::NextPowerOfTwo();
    case 1:
      return *BucketPolicy::MultipleOf(8);
    default:
      return BucketPolicy::Exact();
  }
}

void BM_BuildPiecewisePlan(benchmark::State& state) {
  const PlanParams params{.tile_rows = state.range(0),
                          .tail_policy = TailPolicy(state.range(1))};
  const std::vector<std::vector<int64_t>>& routings = Routings();
  PiecewisePlan plan;
  if (!plan.Reserve(kExperts, kRows, params).ok()) {
    state.SkipWithError("Reserve failed");
    return;
  }
  size_t step = 0;
  for (auto _ : state) {
    absl::Status status =
        BuildPiecewisePlan(routings[step++ % kRoutings], params, &plan);
    benchmark::DoNotOptimize(status);
    benchmark::DoNotOptimize(plan.work().data());
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  // Shape and waste, averaged over the routings (outside the timed loop).
  double items = 0, variants = 0, wasted = 0, block_wasted = 0;
  for (const std::vector<int64_t>& counts : routings) {
    if (!BuildPiecewisePlan(counts, params, &plan).ok()) return;
    items += plan.work().size();
    variants += plan.accounting().num_variants;
    wasted += plan.accounting().wasted_fraction;
    block_wasted +=
        PadToBlockAccounting(counts, params.tile_rows)->wasted_fraction;
  }
  state.counters["items"] = items / kRoutings;
  state.counters["variants"] = variants / kRoutings;
  state.counters["wasted_pct"] = 100 * wasted / kRoutings;
  state.counters["pad_block_wasted_pct"] = 100 * block_wasted / kRoutings;
  state.SetLabel(params.tail_policy.ToString());
}
BENCHMARK(BM_BuildPiecewisePlan)
    ->ArgsProduct({{16, 64, 128}, {0, 1, 2}})
    ->ArgNames({"tile", "policy"});

}  // namespace
}  // namespace tailor::plan

BENCHMARK_MAIN();
