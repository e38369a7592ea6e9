// Fuzzes plan::BuildPiecewisePlan: any tile, any tail policy, any extents.
// A rejected input must be InvalidArgument and leave the plan empty; an
// accepted one is checked item by item against the contract of
// piecewise_plan.h (every row of every group in exactly one work item, core
// tiles first, tails by class, variants partitioning the work list, the
// accounting), against a fresh plan (buffer reuse must not leak state), and
// a Reserve()d plan must not grow while building it.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "fuzz_input.h"
#include "plan/piecewise_plan.h"

namespace tailor::plan {
namespace {

using fuzz::FuzzInput;

BucketPolicy TailPolicy(FuzzInput& in) {
  switch (in.InRange(0, 3)) {
    case 0:
      return BucketPolicy::Exact();
    case 1:
      return BucketPolicy::NextPowerOfTwo();
    case 2:
      return BucketPolicy::MultipleOf(in.InRange(1, 70)).value();
    default: {
      std::vector<int64_t> sizes(in.InRange(1, 6));
      int64_t next = in.InRange(1, 4);
      for (int64_t& s : sizes) {
        s = next;
        next += in.InRange(1, 24);
      }
      return BucketPolicy::List(sizes).value();
    }
  }
}

bool ParamsValid(const PlanParams& p) {
  if (p.tile_rows < 1 || p.tile_rows > kMaxTileRows) return false;
  return p.tile_rows == 1 || p.tail_policy.Bucket(p.tile_rows - 1).ok();
}

bool ExtentsValid(const std::vector<int64_t>& extents) {
  int64_t total = 0;
  for (int64_t n : extents) {
    if (n < 0 || n > kMaxPlanRows) return false;
    total += n;
  }
  return total <= kMaxPlanRows;
}

int32_t TailClass(int64_t tail_rows, const PlanParams& p) {
  return static_cast<int32_t>(
      std::min(p.tail_policy.Bucket(tail_rows).value(), p.tile_rows));
}

void CheckEmpty(const PiecewisePlan& plan) {
  FUZZ_CHECK(plan.offsets().empty() && plan.work().empty() &&
             plan.variants().empty() && plan.num_groups() == 0)
      << plan.ToString();
}

// Every item of `plan` against the definition.
void CheckPlan(const PiecewisePlan& plan, const std::vector<int64_t>& extents,
               const PlanParams& p) {
  const int64_t tile = p.tile_rows;
  const int32_t groups = static_cast<int32_t>(extents.size());
  FUZZ_CHECK(plan.tile_rows() == tile);
  FUZZ_CHECK(plan.num_groups() == groups);
  const std::vector<int32_t>& offsets = plan.offsets();
  FUZZ_CHECK(offsets.size() == extents.size() + 1 && offsets[0] == 0);
  int64_t useful = 0;
  for (int32_t g = 0; g < groups; ++g) {
    FUZZ_CHECK(offsets[g + 1] - offsets[g] == extents[g]) << "group " << g;
    useful += extents[g];
  }
  // Walk the work list: core tiles in (group, tile) order, then tails by
  // (class, group); count what each group got.
  std::vector<int64_t> core_seen(groups, 0), tail_seen(groups, 0);
  absl::Span<const WorkItem> work = plan.work();
  const int32_t num_core = plan.core_range().size();
  int64_t executed = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(work.size()); ++i) {
    const WorkItem& item = work[i];
    FUZZ_CHECK(item.group >= 0 && item.group < groups) << "item " << i;
    const int64_t n = extents[item.group];
    const int64_t tail = n % tile;
    if (i < num_core) {
      FUZZ_CHECK(item.rows == tile && item.tail_class == 0) << "item " << i;
      FUZZ_CHECK(item.row_begin ==
                 offsets[item.group] + core_seen[item.group] * tile)
          << "item " << i;
      ++core_seen[item.group];
      executed += tile;
      if (i > 0) FUZZ_CHECK(work[i - 1].group <= item.group);
    } else {
      FUZZ_CHECK(item.rows == tail && tail > 0) << "item " << i;
      FUZZ_CHECK(item.row_begin == offsets[item.group + 1] - tail);
      FUZZ_CHECK(item.tail_class == TailClass(tail, p))
          << "item " << i << " class " << item.tail_class;
      FUZZ_CHECK(item.tail_class >= item.rows && item.tail_class <= tile);
      ++tail_seen[item.group];
      executed += item.tail_class;
      if (i > num_core) {
        const WorkItem& prev = work[i - 1];
        FUZZ_CHECK(
            prev.tail_class < item.tail_class ||
            (prev.tail_class == item.tail_class && prev.group < item.group))
            << "item " << i;
      }
    }
  }
  for (int32_t g = 0; g < groups; ++g) {
    FUZZ_CHECK(core_seen[g] == extents[g] / tile) << "group " << g;
    FUZZ_CHECK(tail_seen[g] == (extents[g] % tile != 0 ? 1 : 0));
  }
  // Variants: contiguous, non-empty, core first, classes ascending.
  int32_t position = 0;
  int32_t last_class = -1;
  for (const VariantRange& v : plan.variants()) {
    FUZZ_CHECK(v.begin == position && v.end > v.begin) << plan.ToString();
    FUZZ_CHECK(v.tail_class > last_class) << plan.ToString();
    for (int32_t i = v.begin; i < v.end; ++i)
      FUZZ_CHECK(work[i].tail_class == v.tail_class);
    last_class = v.tail_class;
    position = v.end;
  }
  FUZZ_CHECK(position == static_cast<int32_t>(work.size()));
  const PlanAccounting& a = plan.accounting();
  FUZZ_CHECK(a.useful_rows == useful && a.executed_rows == executed &&
             a.num_variants == static_cast<int32_t>(plan.variants().size()))
      << DescribeAccounting(a);
  FUZZ_CHECK(a.executed_rows >= a.useful_rows);
  FUZZ_CHECK(a.wasted_fraction >= 0 && a.wasted_fraction < 1);
}

void CheckBaselines(const std::vector<int64_t>& extents, int64_t block,
                    int64_t useful) {
  absl::StatusOr<PlanAccounting> pow2 = PadToPowerOfTwoAccounting(extents);
  FUZZ_CHECK(pow2.ok() && pow2->useful_rows == useful &&
             pow2->executed_rows >= useful)
      << pow2.status();
  absl::StatusOr<PlanAccounting> padded = PadToBlockAccounting(extents, block);
  FUZZ_CHECK(padded.ok() && padded->useful_rows == useful &&
             padded->executed_rows >= useful &&
             padded->executed_rows % block == 0)
      << padded.status();
}

}  // namespace
}  // namespace tailor::plan

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::plan;
  tailor::fuzz::FuzzInput in(data, size);
  PlanParams params{.tile_rows = in.OneIn(8) ? in.EdgeValue() : in.Size(48),
                    .tail_policy = TailPolicy(in)};
  std::vector<int64_t> extents(in.InRange(0, 96));
  for (int64_t& n : extents)
    n = in.OneIn(16) ? in.EdgeValue() : in.InRange(0, 3 * 48);
  const bool valid = ParamsValid(params) && ExtentsValid(extents);
  if (valid) {
    // A valid plan of billions of work items is fine but too slow to check.
    int64_t items = 0;
    for (int64_t n : extents) items += n / params.tile_rows + 1;
    if (items > (1 << 18)) return 0;
  }

  // One plan reused across inputs (as a server does) and a fresh one.
  static PiecewisePlan* reused = new PiecewisePlan();
  absl::Status status = BuildPiecewisePlan(extents, params, reused);
  absl::StatusOr<PiecewisePlan> fresh = BuildPiecewisePlan(extents, params);
  FUZZ_CHECK(status.ok() == valid && fresh.ok() == valid)
      << status << " / " << fresh.status() << " tile " << params.tile_rows
      << " " << params.tail_policy.ToString();
  if (!valid) {
    FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument &&
               !status.message().empty())
        << status;
    CheckEmpty(*reused);
    return 0;
  }
  CheckPlan(*reused, extents, params);
  FUZZ_CHECK(reused->ToString() == fresh->ToString());
  FUZZ_CHECK(std::equal(reused->work().begin(), reused->work().end(),
                        fresh->work().begin(), fresh->work().end()));
  CheckBaselines(extents, params.tile_rows, reused->accounting().useful_rows);

  // Reserve() for exactly this input: building it allocates nothing.
  PiecewisePlan reserved;
  absl::Status reserve =
      reserved.Reserve(static_cast<int64_t>(extents.size()),
                       reused->accounting().useful_rows, params);
  FUZZ_CHECK(reserve.ok()) << reserve;
  const size_t capacity = reserved.CapacityBytes();
  FUZZ_CHECK(BuildPiecewisePlan(extents, params, &reserved).ok());
  FUZZ_CHECK(reserved.CapacityBytes() == capacity)
      << capacity << " -> " << reserved.CapacityBytes() << " "
      << reserved.ToString();
  return 0;
}
