// plan/piecewise_plan.cc — see piecewise_plan.h.
//
// BuildPiecewisePlan() is a counting sort of the tails by class, in passes
// over the groups, that writes only into the plan's own buffers:
//   0. PrepareTailTable  tail class of every tail size (only when the params
//                        change; the only step that can fail)
//   1. ClassifyGroups    offsets, tail size per group, histogram of classes
//   2. LayOutVariants    one range per variant; histogram -> write cursors
//   3. PlaceWork         core tiles in group order, tails at their cursors
//   4. Account           useful / executed rows, waste, variant count
// A group costs one 32-bit modulo and a table load; no pass allocates once
// the buffers are warm.
#include "plan/piecewise_plan.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tailor/status.h"

namespace tailor::plan {
namespace {

// Checks the extent rules of BuildPiecewisePlan() and returns the sum.
absl::StatusOr<int64_t> ValidateExtents(absl::Span<const int64_t> extents) {
  if (static_cast<int64_t>(extents.size()) > kMaxPlanGroups) {
    return absl::InvalidArgumentError(
        absl::StrCat("extents: must hold at most ", kMaxPlanGroups,
                     " groups, got ", extents.size()));
  }
  int64_t total = 0;  // <= kMaxPlanGroups * kMaxPlanRows: cannot overflow
  for (size_t i = 0; i < extents.size(); ++i) {
    const int64_t n = extents[i];
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("extents[", i, "]: must be >= 0, got ", n));
    }
    if (n > kMaxPlanRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("extents[", i, "]: must be <= ", kMaxPlanRows,
                       " (row indices are int32), got ", n));
    }
    total += n;
  }
  if (total > kMaxPlanRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("extents: sum must be <= ", kMaxPlanRows,
                     " (row indices are int32), got ", total));
  }
  return total;
}

PlanAccounting MakeAccounting(int64_t useful_rows, int64_t executed_rows,
                              int32_t num_variants) {
  PlanAccounting accounting;
  accounting.useful_rows = useful_rows;
  accounting.executed_rows = executed_rows;
  accounting.wasted_fraction =
      executed_rows == 0 ? 0.0
                         : 1.0 - static_cast<double>(useful_rows) /
                                     static_cast<double>(executed_rows);
  accounting.num_variants = num_variants;
  return accounting;
}

// TailClassOf() without the range check on tail_rows.
absl::StatusOr<int32_t> ClampedTailClass(int64_t tail_rows,
                                         const PlanParams& params) {
  TAILOR_ASSIGN_OR_RETURN(int64_t bucket, params.tail_policy.Bucket(tail_rows));
  return static_cast<int32_t>(std::min(bucket, params.tile_rows));
}

}  // namespace

absl::Status ValidatePlanParams(const PlanParams& params) {
  if (params.tile_rows < 1 || params.tile_rows > kMaxTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("params.tile_rows: must be in [1, ", kMaxTileRows,
                     "], got ", params.tile_rows));
  }
  // Bucket() is monotone, so mapping the largest tail maps them all.
  if (params.tile_rows > 1) {
    absl::StatusOr<int64_t> bucket =
        params.tail_policy.Bucket(params.tile_rows - 1);
    if (!bucket.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "params.tail_policy: ", params.tail_policy.ToString(),
          " must map every tail size up to tile_rows - 1 = ",
          params.tile_rows - 1, " (", bucket.status().message(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> TailClassOf(int64_t tail_rows,
                                    const PlanParams& params) {
  TAILOR_RETURN_IF_ERROR(ValidatePlanParams(params));
  if (tail_rows < 1 || tail_rows >= params.tile_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tail_rows: must be in [1, tile_rows - 1 = ", params.tile_rows - 1,
        "], got ", tail_rows));
  }
  return ClampedTailClass(tail_rows, params);
}

std::string DescribeAccounting(const PlanAccounting& accounting) {
  return absl::StrFormat("useful=%d executed=%d wasted=%.2f%% variants=%d",
                         accounting.useful_rows, accounting.executed_rows,
                         100.0 * accounting.wasted_fraction,
                         accounting.num_variants);
}

// ---------------------------------------------------------------------------
// PiecewisePlan
// ---------------------------------------------------------------------------

absl::Span<const VariantRange> PiecewisePlan::tail_ranges() const {
  absl::Span<const VariantRange> all = variants_;
  return num_core_ > 0 ? all.subspan(1) : all;
}

absl::Status PiecewisePlan::Reserve(int64_t max_groups, int64_t max_total_rows,
                                    const PlanParams& params) {
  if (max_groups < 0 || max_groups > kMaxPlanGroups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_groups: must be in [0, ", kMaxPlanGroups, "], got ", max_groups));
  }
  if (max_total_rows < 0 || max_total_rows > kMaxPlanRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_total_rows: must be in [0, ", kMaxPlanRows, "], got ",
                     max_total_rows));
  }
  TAILOR_RETURN_IF_ERROR(PrepareTailTable(params));
  // Each core tile holds tile_rows rows; each group has at most one tail,
  // and a tail holds at least one row.
  const int64_t max_tails = std::min(max_groups, max_total_rows);
  const int64_t max_classes = std::min(max_tails, params.tile_rows);
  offsets_.reserve(max_groups + 1);
  work_.reserve(max_total_rows / params.tile_rows + max_tails);
  variants_.reserve(1 + max_classes);
  tail_rows_of_group_.reserve(max_groups);
  tail_classes_.reserve(max_classes);
  return absl::OkStatus();
}

size_t PiecewisePlan::CapacityBytes() const {
  return offsets_.capacity() * sizeof(int32_t) +
         work_.capacity() * sizeof(WorkItem) +
         variants_.capacity() * sizeof(VariantRange) +
         tail_rows_of_group_.capacity() * sizeof(int32_t) +
         class_cursor_.capacity() * sizeof(int32_t) +
         tail_classes_.capacity() * sizeof(int32_t) +
         tail_class_of_size_.capacity() * sizeof(int32_t);
}

std::string PiecewisePlan::ToString() const {
  std::string out =
      absl::StrCat("tile_rows=", tile_rows_, " groups=", num_groups());
  for (const VariantRange& range : variants_) {
    if (range.tail_class == 0) {
      absl::StrAppend(&out, " core");
    } else {
      absl::StrAppend(&out, " tail", range.tail_class);
    }
    absl::StrAppend(&out, "[", range.begin, ",", range.end, ")");
  }
  absl::StrAppend(&out, " ", DescribeAccounting(accounting_));
  return out;
}

void PiecewisePlan::Clear() {
  tile_rows_ = 0;
  num_core_ = 0;
  offsets_.clear();
  num_work_ = 0;
  variants_.clear();
  accounting_ = PlanAccounting{};
  tail_rows_of_group_.clear();
  tail_classes_.clear();
  // class_cursor_ is all zero between builds (PlaceWork restores it); the
  // tail table stays valid for its params.
}

// Step 0: tail_class_of_size_ for `params`, validating them, unless the
// table already holds them.
absl::Status PiecewisePlan::PrepareTailTable(const PlanParams& params) {
  if (table_tile_rows_ != 0 && params.tile_rows == table_tile_rows_ &&
      params.tail_policy == table_policy_) {
    return absl::OkStatus();
  }
  TAILOR_RETURN_IF_ERROR(ValidatePlanParams(params));
  table_tile_rows_ = 0;  // no table while it is rebuilt
  tail_class_of_size_.resize(params.tile_rows);
  tail_class_of_size_[0] = 0;
  for (int64_t tail_rows = 1; tail_rows < params.tile_rows; ++tail_rows) {
    TAILOR_ASSIGN_OR_RETURN(tail_class_of_size_[tail_rows],
                            ClampedTailClass(tail_rows, params));
  }
  class_cursor_.resize(params.tile_rows + 1, 0);  // stays all zero
  table_policy_ = params.tail_policy;
  table_tile_rows_ = params.tile_rows;
  return absl::OkStatus();
}

// Step 1: offsets [G + 1], the tail size of every group, the number of core
// tiles, each tail class's count in class_cursor_, and the distinct classes
// in ascending order.
void PiecewisePlan::ClassifyGroups(absl::Span<const int64_t> extents) {
  // Extents fit int32 and tiles are <= 2^20: 32-bit division is exact.
  const uint32_t tile = static_cast<uint32_t>(tile_rows_);
  offsets_.resize(extents.size() + 1);
  tail_rows_of_group_.resize(extents.size());
  uint32_t row = 0;
  uint32_t core_rows = 0;
  offsets_[0] = 0;
  for (size_t g = 0; g < extents.size(); ++g) {
    const uint32_t rows = static_cast<uint32_t>(extents[g]);
    const uint32_t tail_rows = rows % tile;
    row += rows;  // <= kMaxPlanRows
    core_rows += rows - tail_rows;
    offsets_[g + 1] = static_cast<int32_t>(row);
    tail_rows_of_group_[g] = static_cast<int32_t>(tail_rows);
    if (tail_rows != 0) {
      const int32_t tail_class = tail_class_of_size_[tail_rows];
      if (class_cursor_[tail_class]++ == 0) {
        tail_classes_.push_back(tail_class);
      }
    }
  }
  num_core_ = static_cast<int32_t>(core_rows / tile);
  std::sort(tail_classes_.begin(), tail_classes_.end());
}

// Step 2: one range per variant. Turns each class's count into the work
// position of its first tail, and sizes the work list.
void PiecewisePlan::LayOutVariants() {
  if (num_core_ > 0) variants_.push_back({0, 0, num_core_});
  int32_t position = num_core_;
  for (int32_t tail_class : tail_classes_) {
    const int32_t count = class_cursor_[tail_class];
    variants_.push_back({tail_class, position, position + count});
    class_cursor_[tail_class] = position;
    position += count;
  }
  num_work_ = static_cast<size_t>(position);
  if (work_.size() < num_work_) work_.resize(num_work_);
}

// Step 3: core tiles group by group, each tail at its class's cursor.
void PiecewisePlan::PlaceWork() {
  const int32_t tile = static_cast<int32_t>(tile_rows_);
  const int32_t num_groups = this->num_groups();
  int32_t core_position = 0;
  for (int32_t group = 0; group < num_groups; ++group) {
    const int32_t tail_rows = tail_rows_of_group_[group];
    const int32_t core_end = offsets_[group + 1] - tail_rows;
    int32_t row = offsets_[group];
    // core_end - row is a multiple of tile, so row + tile never overflows.
    for (; row < core_end; row += tile) {
      work_[core_position++] = {row, tile, group, 0};
    }
    if (tail_rows != 0) {
      const int32_t tail_class = tail_class_of_size_[tail_rows];
      work_[class_cursor_[tail_class]++] = {row, tail_rows, group, tail_class};
    }
  }
  for (int32_t tail_class : tail_classes_) class_cursor_[tail_class] = 0;
}

// Step 4: what the plan costs.
void PiecewisePlan::Account(int64_t useful_rows) {
  int64_t executed_rows = int64_t{num_core_} * tile_rows_;
  for (const VariantRange& range : tail_ranges()) {
    executed_rows += int64_t{range.tail_class} * range.size();
  }
  accounting_ = MakeAccounting(useful_rows, executed_rows,
                               static_cast<int32_t>(variants_.size()));
}

absl::Status BuildPiecewisePlan(absl::Span<const int64_t> extents,
                                const PlanParams& params, PiecewisePlan* plan) {
  if (plan == nullptr) {
    return absl::InvalidArgumentError("plan: must not be null");
  }
  plan->Clear();
  TAILOR_RETURN_IF_ERROR(plan->PrepareTailTable(params));
  TAILOR_ASSIGN_OR_RETURN(int64_t useful_rows, ValidateExtents(extents));
  plan->tile_rows_ = params.tile_rows;
  plan->ClassifyGroups(extents);
  plan->LayOutVariants();
  plan->PlaceWork();
  plan->Account(useful_rows);
  return absl::OkStatus();
}

absl::StatusOr<PiecewisePlan> BuildPiecewisePlan(
    absl::Span<const int64_t> extents, const PlanParams& params) {
  PiecewisePlan plan;
  TAILOR_RETURN_IF_ERROR(BuildPiecewisePlan(extents, params, &plan));
  return plan;
}

// ---------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------

absl::StatusOr<PlanAccounting> PadToPowerOfTwoAccounting(
    absl::Span<const int64_t> extents) {
  TAILOR_ASSIGN_OR_RETURN(int64_t useful_rows, ValidateExtents(extents));
  int64_t executed_rows = 0;
  uint64_t sizes_seen = 0;  // bit k set: some group padded to 2^k (k <= 31)
  for (int64_t n : extents) {
    if (n == 0) continue;
    const uint64_t padded = std::bit_ceil(static_cast<uint64_t>(n));
    executed_rows += static_cast<int64_t>(padded);
    sizes_seen |= padded;
  }
  return MakeAccounting(useful_rows, executed_rows, std::popcount(sizes_seen));
}

absl::StatusOr<PlanAccounting> PadToBlockAccounting(
    absl::Span<const int64_t> extents, int64_t block) {
  if (block < 1 || block > kMaxTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("block: must be in [1, ", kMaxTileRows, "], got ", block));
  }
  TAILOR_ASSIGN_OR_RETURN(int64_t useful_rows, ValidateExtents(extents));
  int64_t executed_rows = 0;
  for (int64_t n : extents) {
    executed_rows += (n + block - 1) / block * block;
  }
  return MakeAccounting(useful_rows, executed_rows, executed_rows > 0 ? 1 : 0);
}

}  // namespace tailor::plan
