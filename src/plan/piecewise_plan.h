// plan/piecewise_plan.h — split ragged extents into core tiles and tail pieces.
//
// Ragged work arrives as one extent n_g per group g (an MoE expert's row
// count, a sequence's length). With tile size T, group g becomes
//
//   floor(n_g / T) core tiles   T rows each, run by one unmasked kernel variant
//   at most one tail piece      n_g mod T rows, run by the variant of its
//                               *tail class*: tail_policy.Bucket(n_g mod T),
//                               clamped to T
//
// so the kernels a plan needs are "core" plus one per distinct tail class,
// and no raw extent ever reaches a kernel key.
//
// Groups are laid out back to back: group g owns the global rows
// [offsets[g], offsets[g+1]). The work list holds every core tile first
// (group by group, tile by tile), then every tail ordered by tail class (and
// by group within a class), so each kernel variant runs one contiguous range.
//
// Plan/run split: BuildPiecewisePlan() refills a caller-owned PiecewisePlan,
// reusing its buffers. Once they have grown to the largest input seen (or
// after Reserve()), planning a step allocates nothing. A plan caches the
// tail class of every tail size for its params, so keep one plan per
// PlanParams: a change of params costs one Bucket() call per tile row.
//
// The file also gives the padding baselines tailor is measured against,
// as accounting only: pad every group to a power of two (the pad-and-mask
// approach of power-of-two layout algebras) and pad every group to a
// multiple of a block (vLLM's moe_align_block_size).
//
// Example (T = 16, exact tails):
//   PlanParams params{.tile_rows = 16, .tail_policy = BucketPolicy::Exact()};
//   PiecewisePlan plan;
//   int64_t extents[] = {0, 1, 5, 16, 17};
//   TAILOR_RETURN_IF_ERROR(BuildPiecewisePlan(extents, params, &plan));
//   // plan.offsets() == {0, 0, 1, 6, 22, 39}
//   // plan.work():  {row_begin, rows, group, tail_class}
//   //   core:    {6, 16, 3, 0}, {22, 16, 4, 0}
//   //   tail 1:  {0, 1, 1, 1}, {38, 1, 4, 1}
//   //   tail 5:  {1, 5, 2, 5}
//   // plan.variants(): {0,[0,2)} {1,[2,4)} {5,[4,5)}
//   // accounting: useful 39, executed 39, wasted 0, variants 3
//   // baselines: pad to pow2 executes 1+8+16+32 = 57 rows in 4 variants,
//   //            pad to block 16 executes 16+16+16+32 = 80 rows
#ifndef TAILOR_PLAN_PIECEWISE_PLAN_H_
#define TAILOR_PLAN_PIECEWISE_PLAN_H_

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "plan/bucket_policy.h"

namespace tailor::plan {

// Largest tile a plan accepts.
inline constexpr int64_t kMaxTileRows = int64_t{1} << 20;
// Most groups (extents) a plan accepts; a group index is an int32.
inline constexpr int64_t kMaxPlanGroups = int64_t{1} << 24;
// Most rows (sum of extents) a plan accepts: every row index, offset and
// work-list position is an int32, the width device code indexes rows with.
inline constexpr int64_t kMaxPlanRows = std::numeric_limits<int32_t>::max();

// How to cut extents into tiles. An aggregate: build it with designated
// initializers. Rules (ValidatePlanParams):
//   tile_rows    in [1, kMaxTileRows]
//   tail_policy  must map every tail size 1..tile_rows-1 (a list policy must
//                reach tile_rows - 1). Its bucket is clamped to tile_rows:
//                a tail is padded at most to one full tile, so e.g. pow2 with
//                tile_rows 48 gives a 40-row tail the class 48, not 64.
struct PlanParams {
  int64_t tile_rows = 0;
  BucketPolicy tail_policy;  // exact unless set
};

absl::Status ValidatePlanParams(const PlanParams& params);

// The tail class of a tail of `tail_rows` rows (1 <= tail_rows < tile_rows):
// min(tail_policy.Bucket(tail_rows), tile_rows).
absl::StatusOr<int32_t> TailClassOf(int64_t tail_rows,
                                    const PlanParams& params);

// One unit of work: a core tile or a tail piece of one group. A POD of four
// int32 (16 bytes), copied as is into device buffers.
struct WorkItem {
  int32_t row_begin;   // global first row: offsets[group] + tile * tile_rows
  int32_t rows;        // useful rows: tile_rows (core) or [1, tile_rows) (tail)
  int32_t group;       // [0, num_groups)
  int32_t tail_class;  // 0 (core) or the tail's class, in [rows, tile_rows]

  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};
static_assert(sizeof(WorkItem) == 16);
static_assert(std::is_trivially_copyable_v<WorkItem> &&
              std::is_standard_layout_v<WorkItem>);

// The work items one kernel variant runs: work[begin, end).
struct VariantRange {
  int32_t tail_class;  // 0: the core variant; else the tail class
  int32_t begin;
  int32_t end;

  int32_t size() const { return end - begin; }
  friend bool operator==(const VariantRange&, const VariantRange&) = default;
};

// What a plan costs, comparable across plans and baselines.
struct PlanAccounting {
  int64_t useful_rows = 0;     // sum of extents
  int64_t executed_rows = 0;   // rows the kernels compute, padding included
  double wasted_fraction = 0;  // 1 - useful / executed; 0 when executed == 0
  int32_t num_variants = 0;    // distinct kernel variants launched

  friend bool operator==(const PlanAccounting&,
                         const PlanAccounting&) = default;
};

// "useful=39 executed=64 wasted=39.06% variants=3", for logs and tables.
std::string DescribeAccounting(const PlanAccounting& accounting);

// The result of BuildPiecewisePlan(). Default-constructed it is an empty
// plan; keep one per call site and rebuild it every step.
class PiecewisePlan {
 public:
  PiecewisePlan() = default;

  int64_t tile_rows() const { return tile_rows_; }
  int32_t num_groups() const {
    return offsets_.empty() ? 0 : static_cast<int32_t>(offsets_.size() - 1);
  }
  // [num_groups + 1] exclusive prefix sum of the extents ({0} for no groups;
  // {} before the first successful build).
  const std::vector<int32_t>& offsets() const { return offsets_; }
  // [num_core + num_tail] core tiles first, then tails by class. A view
  // into the plan's buffer, valid until the next build.
  absl::Span<const WorkItem> work() const { return {work_.data(), num_work_}; }
  // [num_variants] the non-empty ranges, core first (when it has tiles),
  // then tail classes ascending. They partition work().
  const std::vector<VariantRange>& variants() const { return variants_; }
  // The core tiles: {0, 0, num_core}, possibly empty.
  VariantRange core_range() const { return {0, 0, num_core_}; }
  // The tail ranges of variants(), by class ascending.
  absl::Span<const VariantRange> tail_ranges() const;
  const PlanAccounting& accounting() const { return accounting_; }

  // Grows every buffer for inputs of up to `max_groups` groups and
  // `max_total_rows` rows planned with `params`, so that building such
  // plans never allocates. InvalidArgument when an argument breaks the
  // limits above. Memory: 16 bytes per work item (at most
  // max_total_rows / tile_rows + max_groups items) plus 8 bytes per tile row.
  absl::Status Reserve(int64_t max_groups, int64_t max_total_rows,
                       const PlanParams& params);

  // Bytes of buffer capacity held, scratch included. Stays constant across
  // rebuilds that fit, which is what "allocation-free" means here.
  size_t CapacityBytes() const;

  // "tile_rows=16 groups=5 core[0,2) tail1[2,4) tail5[4,5) useful=39 ..."
  std::string ToString() const;

 private:
  friend absl::Status BuildPiecewisePlan(absl::Span<const int64_t> extents,
                                         const PlanParams& params,
                                         PiecewisePlan* plan);
  void Clear();
  // The steps of BuildPiecewisePlan(); see the .cc.
  absl::Status PrepareTailTable(const PlanParams& params);
  void ClassifyGroups(absl::Span<const int64_t> extents);
  void LayOutVariants();
  void PlaceWork();
  void Account(int64_t useful_rows);

  int64_t tile_rows_ = 0;
  int32_t num_core_ = 0;
  std::vector<int32_t> offsets_;  // [num_groups + 1]
  // [>= num_work_]; the first num_work_ items are the plan. The buffer only
  // grows, so that a build never spends time zeroing items it overwrites.
  std::vector<WorkItem> work_;
  size_t num_work_ = 0;
  std::vector<VariantRange> variants_;  // [num_variants]
  PlanAccounting accounting_;

  // Planner scratch, kept to avoid allocating per step.
  std::vector<int32_t> tail_rows_of_group_;  // [num_groups], 0: no tail
  std::vector<int32_t> class_cursor_;  // [tile_rows + 1], zero between builds
  std::vector<int32_t> tail_classes_;  // [distinct tail classes], ascending
  // Tail class by tail size for the params of the last build, recomputed
  // only when they change (table_tile_rows_ == 0: none yet).
  int64_t table_tile_rows_ = 0;
  BucketPolicy table_policy_;
  std::vector<int32_t> tail_class_of_size_;  // [tile_rows], [0] = 0
};

// Plans `extents` ([num_groups], rows per group) into `*plan`, reusing its
// buffers. Rules: params valid (ValidatePlanParams); at most kMaxPlanGroups
// extents; each extent >= 0; their sum <= kMaxPlanRows. On error the plan
// is left empty. Empty groups contribute no work.
absl::Status BuildPiecewisePlan(absl::Span<const int64_t> extents,
                                const PlanParams& params, PiecewisePlan* plan);

// The same, into a fresh plan (allocates; for tests and one-off use).
absl::StatusOr<PiecewisePlan> BuildPiecewisePlan(
    absl::Span<const int64_t> extents, const PlanParams& params);

// Baseline: every non-empty group padded to the next power of two (an
// empty group stays 0 rows). num_variants = distinct padded sizes. Same
// extent rules as BuildPiecewisePlan().
absl::StatusOr<PlanAccounting> PadToPowerOfTwoAccounting(
    absl::Span<const int64_t> extents);

// Baseline: vLLM's moe_align_block_size. Every group padded up to a
// multiple of `block` (block in [1, kMaxTileRows]); an empty group stays 0
// rows, as in vLLM's kernel (csrc/moe/moe_align_sum_kernels.cu pads each
// count with CEILDIV(count, block_size) * block_size, and the GEMM's blocks
// past num_tokens_post_pad exit early). num_variants = 1 (one kernel), or 0
// when no rows are executed. Same extent rules as BuildPiecewisePlan().
absl::StatusOr<PlanAccounting> PadToBlockAccounting(
    absl::Span<const int64_t> extents, int64_t block);

}  // namespace tailor::plan

#endif  // TAILOR_PLAN_PIECEWISE_PLAN_H_
