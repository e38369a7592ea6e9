// tests/plan/piecewise_plan_test.cc — the core-plus-tail planner: hand-worked
// goldens, baselines, bad input, a property sweep over random ragged
// extents, and the steady-state "no allocation" promise.
#include "plan/piecewise_plan.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

// Every heap allocation in this binary is counted, so that the tests can
// assert that a warm rebuild allocates nothing. All the unaligned forms are
// replaced, so that none of them pairs with a sanitizer's own allocator.
// They are kept out of line: inlined, GCC 12 takes the malloc/free pair
// inside them for a new/free mismatch (-Wmismatched-new-delete).
// Not in sanitizer builds: their runtimes define these operators themselves
// (TSan's static runtime defines them too: duplicate symbols).
#ifndef TAILOR_UNDER_SANITIZER
#define TAILOR_COUNT_ALLOCATIONS 1
namespace {
std::atomic<int64_t> g_allocations{0};

void* CountedMalloc(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

#define TAILOR_TEST_NOINLINE __attribute__((noinline))
TAILOR_TEST_NOINLINE void* operator new(std::size_t size) {
  if (void* pointer = CountedMalloc(size)) return pointer;
  throw std::bad_alloc();
}
TAILOR_TEST_NOINLINE void* operator new[](std::size_t size) {
  if (void* pointer = CountedMalloc(size)) return pointer;
  throw std::bad_alloc();
}
TAILOR_TEST_NOINLINE void* operator new(std::size_t size,
                                        const std::nothrow_t&) noexcept {
  return CountedMalloc(size);
}
TAILOR_TEST_NOINLINE void* operator new[](std::size_t size,
                                          const std::nothrow_t&) noexcept {
  return CountedMalloc(size);
}
TAILOR_TEST_NOINLINE void operator delete(void* pointer) noexcept {
  std::free(pointer);
}
TAILOR_TEST_NOINLINE void operator delete[](void* pointer) noexcept {
  std::free(pointer);
}
TAILOR_TEST_NOINLINE void operator delete(void* pointer, std::size_t) noexcept {
  std::free(pointer);
}
TAILOR_TEST_NOINLINE void operator delete[](void* pointer,
                                            std::size_t) noexcept {
  std::free(pointer);
}
TAILOR_TEST_NOINLINE void operator delete(void* pointer,
                                          const std::nothrow_t&) noexcept {
  std::free(pointer);
}
TAILOR_TEST_NOINLINE void operator delete[](void* pointer,
                                            const std::nothrow_t&) noexcept {
  std::free(pointer);
}
#undef TAILOR_TEST_NOINLINE
#else
#define TAILOR_COUNT_ALLOCATIONS 0
namespace {
std::atomic<int64_t> g_allocations{0};  // never counts
}  // namespace
#endif

namespace tailor::plan {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

PlanParams Params(int64_t tile_rows, BucketPolicy policy) {
  return PlanParams{.tile_rows = tile_rows, .tail_policy = std::move(policy)};
}

BucketPolicy MultipleOf(int64_t quantum) {
  return *BucketPolicy::MultipleOf(quantum);  // callers pass quantum >= 1
}

PiecewisePlan BuildOrDie(const std::vector<int64_t>& extents,
                         const PlanParams& params) {
  absl::StatusOr<PiecewisePlan> plan = BuildPiecewisePlan(extents, params);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : PiecewisePlan();
}

// ---------------------------------------------------------------------------
// Reference: a naive planner written from the contract, not the code.
// ---------------------------------------------------------------------------

int32_t ReferenceTailClass(int64_t tail_rows, const PlanParams& params) {
  return static_cast<int32_t>(
      std::min(*params.tail_policy.Bucket(tail_rows), params.tile_rows));
}

std::vector<WorkItem> ReferenceWork(const std::vector<int64_t>& extents,
                                    const PlanParams& params) {
  const int64_t tile = params.tile_rows;
  std::vector<WorkItem> core, tails;
  int64_t row = 0;
  for (size_t g = 0; g < extents.size(); ++g) {
    const int32_t group = static_cast<int32_t>(g);
    int64_t left = extents[g];
    for (; left >= tile; left -= tile, row += tile) {
      core.push_back(
          {static_cast<int32_t>(row), static_cast<int32_t>(tile), group, 0});
    }
    if (left > 0) {
      tails.push_back({static_cast<int32_t>(row), static_cast<int32_t>(left),
                       group, ReferenceTailClass(left, params)});
      row += left;
    }
  }
  std::stable_sort(tails.begin(), tails.end(),
                   [](const WorkItem& a, const WorkItem& b) {
                     return a.tail_class < b.tail_class;
                   });
  core.insert(core.end(), tails.begin(), tails.end());
  return core;
}

PlanAccounting ReferenceAccounting(const std::vector<int64_t>& extents,
                                   const PlanParams& params) {
  const int64_t tile = params.tile_rows;
  int64_t useful = 0, executed = 0;
  bool any_core = false;
  std::set<int32_t> classes;
  for (int64_t n : extents) {
    useful += n;
    executed += n / tile * tile;
    any_core |= n >= tile;
    if (n % tile != 0) {
      const int32_t tail_class = ReferenceTailClass(n % tile, params);
      executed += tail_class;
      classes.insert(tail_class);
    }
  }
  PlanAccounting accounting;
  accounting.useful_rows = useful;
  accounting.executed_rows = executed;
  accounting.wasted_fraction =
      executed == 0 ? 0.0 : 1.0 - static_cast<double>(useful) / executed;
  accounting.num_variants =
      static_cast<int32_t>(classes.size()) + (any_core ? 1 : 0);
  return accounting;
}

// ---------------------------------------------------------------------------
// Structural checks of a built plan.
// ---------------------------------------------------------------------------

void CheckOffsets(const std::vector<int64_t>& extents,
                  const PiecewisePlan& plan) {
  ASSERT_EQ(plan.offsets().size(), extents.size() + 1);
  ASSERT_EQ(plan.num_groups(), static_cast<int32_t>(extents.size()));
  ASSERT_EQ(plan.offsets()[0], 0);
  for (size_t g = 0; g < extents.size(); ++g) {
    ASSERT_EQ(plan.offsets()[g + 1] - int64_t{plan.offsets()[g]}, extents[g])
        << "g=" << g;
  }
}

// Every item in bounds and well-formed; cores before tails.
void CheckItems(const PiecewisePlan& plan) {
  const std::vector<int32_t>& offsets = plan.offsets();
  const int64_t tile = plan.tile_rows();
  bool seen_tail = false;
  for (size_t i = 0; i < plan.work().size(); ++i) {
    const WorkItem& item = plan.work()[i];
    SCOPED_TRACE("work[" + std::to_string(i) + "]");
    ASSERT_GE(item.group, 0);
    ASSERT_LT(item.group, plan.num_groups());
    ASSERT_GE(item.row_begin, offsets[item.group]);
    ASSERT_LE(int64_t{item.row_begin} + item.rows, offsets[item.group + 1]);
    if (item.tail_class == 0) {
      ASSERT_FALSE(seen_tail) << "core tile after a tail";
      ASSERT_EQ(item.rows, tile);
      ASSERT_EQ((item.row_begin - offsets[item.group]) % tile, 0);
    } else {
      seen_tail = true;
      ASSERT_GE(item.rows, 1);
      ASSERT_LT(item.rows, tile);
      ASSERT_GE(item.tail_class, item.rows);
      ASSERT_LE(item.tail_class, tile);
      // The tail is the group's last piece.
      ASSERT_EQ(int64_t{item.row_begin} + item.rows, offsets[item.group + 1]);
    }
  }
}

// Every useful row is covered by exactly one item, of its own group.
void CheckCoverage(const PiecewisePlan& plan) {
  std::vector<WorkItem> by_row(plan.work().begin(), plan.work().end());
  std::sort(by_row.begin(), by_row.end(),
            [](const WorkItem& a, const WorkItem& b) {
              return a.row_begin < b.row_begin;
            });
  int64_t next_row = 0;  // rows [0, next_row) are covered exactly once
  for (const WorkItem& item : by_row) {
    ASSERT_EQ(item.row_begin, next_row) << "gap or overlap";
    next_row += item.rows;
  }
  ASSERT_EQ(next_row, plan.offsets().back());
}

// The variant ranges partition the work list, one class each.
void CheckVariants(const PiecewisePlan& plan) {
  const std::vector<VariantRange>& variants = plan.variants();
  int32_t position = 0;
  int32_t previous_class = -1;
  for (const VariantRange& range : variants) {
    ASSERT_EQ(range.begin, position);
    ASSERT_GT(range.end, range.begin) << "empty variant range";
    ASSERT_GT(range.tail_class, previous_class) << "classes not ascending";
    for (int32_t i = range.begin; i < range.end; ++i) {
      ASSERT_EQ(plan.work()[i].tail_class, range.tail_class) << "i=" << i;
    }
    previous_class = range.tail_class;
    position = range.end;
  }
  ASSERT_EQ(position, static_cast<int32_t>(plan.work().size()));
  const VariantRange core = plan.core_range();
  ASSERT_EQ(core.begin, 0);
  if (core.size() > 0) {
    ASSERT_EQ(variants.front(), core);
  }
  ASSERT_EQ(plan.tail_ranges().size(),
            variants.size() - (core.size() > 0 ? 1 : 0));
}

void CheckPlan(const std::vector<int64_t>& extents, const PlanParams& params,
               const PiecewisePlan& plan) {
  ASSERT_EQ(plan.tile_rows(), params.tile_rows);
  ASSERT_NO_FATAL_FAILURE(CheckOffsets(extents, plan));
  ASSERT_NO_FATAL_FAILURE(CheckItems(plan));
  ASSERT_NO_FATAL_FAILURE(CheckCoverage(plan));
  ASSERT_NO_FATAL_FAILURE(CheckVariants(plan));
  ASSERT_THAT(plan.work(), ElementsAreArray(ReferenceWork(extents, params)));
  const PlanAccounting expected = ReferenceAccounting(extents, params);
  const PlanAccounting& actual = plan.accounting();
  ASSERT_EQ(actual.useful_rows, expected.useful_rows);
  ASSERT_EQ(actual.executed_rows, expected.executed_rows);
  ASSERT_DOUBLE_EQ(actual.wasted_fraction, expected.wasted_fraction);
  ASSERT_EQ(actual.num_variants, expected.num_variants);
  ASSERT_EQ(actual.num_variants, static_cast<int32_t>(plan.variants().size()));
}

// ---------------------------------------------------------------------------
// Goldens, worked by hand.
// ---------------------------------------------------------------------------

TEST(PiecewisePlanTest, GoldenExactTails) {
  const std::vector<int64_t> extents = {0, 1, 5, 16, 17};
  const PlanParams params = Params(16, BucketPolicy::Exact());
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.offsets(), ElementsAre(0, 0, 1, 6, 22, 39));
  EXPECT_THAT(plan.work(), ElementsAre(WorkItem{6, 16, 3, 0},   // core
                                       WorkItem{22, 16, 4, 0},  // core
                                       WorkItem{0, 1, 1, 1},    // tail 1
                                       WorkItem{38, 1, 4, 1},   // tail 1
                                       WorkItem{1, 5, 2, 5}));  // tail 5
  EXPECT_THAT(plan.variants(),
              ElementsAre(VariantRange{0, 0, 2}, VariantRange{1, 2, 4},
                          VariantRange{5, 4, 5}));
  EXPECT_EQ(plan.core_range(), (VariantRange{0, 0, 2}));
  EXPECT_EQ(plan.accounting(), (PlanAccounting{39, 39, 0.0, 3}));
  EXPECT_EQ(plan.ToString(),
            "tile_rows=16 groups=5 core[0,2) tail1[2,4) tail5[4,5) "
            "useful=39 executed=39 wasted=0.00% variants=3");
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenPowerOfTwoTails) {
  const std::vector<int64_t> extents = {0, 1, 5, 16, 17};
  const PlanParams params = Params(16, BucketPolicy::NextPowerOfTwo());
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{6, 16, 3, 0}, WorkItem{22, 16, 4, 0},
                          WorkItem{0, 1, 1, 1}, WorkItem{38, 1, 4, 1},
                          WorkItem{1, 5, 2, 8}));
  EXPECT_THAT(plan.variants(),
              ElementsAre(VariantRange{0, 0, 2}, VariantRange{1, 2, 4},
                          VariantRange{8, 4, 5}));
  // 2 core tiles (32) + tails 1 + 1 + 8.
  EXPECT_EQ(plan.accounting(), (PlanAccounting{39, 42, 1.0 - 39.0 / 42, 3}));
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenTailClassIsClampedToTile) {
  // pow2 of a 40-row tail is 64, but a tail is padded at most to one tile.
  const std::vector<int64_t> extents = {40, 48, 7};
  const PlanParams params = Params(48, BucketPolicy::NextPowerOfTwo());
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.offsets(), ElementsAre(0, 40, 88, 95));
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{40, 48, 1, 0}, WorkItem{88, 7, 2, 8},
                          WorkItem{0, 40, 0, 48}));
  EXPECT_THAT(plan.variants(),
              ElementsAre(VariantRange{0, 0, 1}, VariantRange{8, 1, 2},
                          VariantRange{48, 2, 3}));
  EXPECT_EQ(plan.accounting(), (PlanAccounting{95, 104, 1.0 - 95.0 / 104, 3}));
  EXPECT_EQ(*TailClassOf(40, params), 48);
  EXPECT_EQ(*TailClassOf(7, params), 8);
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenMultipleOfTails) {
  const std::vector<int64_t> extents = {3, 9, 33};
  const PlanParams params = Params(16, MultipleOf(8));
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.offsets(), ElementsAre(0, 3, 12, 45));
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{12, 16, 2, 0}, WorkItem{28, 16, 2, 0},
                          WorkItem{0, 3, 0, 8}, WorkItem{44, 1, 2, 8},
                          WorkItem{3, 9, 1, 16}));
  EXPECT_THAT(plan.variants(),
              ElementsAre(VariantRange{0, 0, 2}, VariantRange{8, 2, 4},
                          VariantRange{16, 4, 5}));
  EXPECT_EQ(plan.accounting(), (PlanAccounting{45, 64, 1.0 - 45.0 / 64, 3}));
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenOnlyTails) {
  const std::vector<int64_t> extents = {3, 3, 5};
  const PlanParams params = Params(16, BucketPolicy::Exact());
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{0, 3, 0, 3}, WorkItem{3, 3, 1, 3},
                          WorkItem{6, 5, 2, 5}));
  EXPECT_EQ(plan.core_range(), (VariantRange{0, 0, 0}));
  EXPECT_THAT(plan.tail_ranges(),
              ElementsAre(VariantRange{3, 0, 2}, VariantRange{5, 2, 3}));
  EXPECT_EQ(plan.accounting().num_variants, 2);
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenTileOfOneRowHasOnlyCore) {
  const std::vector<int64_t> extents = {2, 0, 3};
  const PlanParams params = Params(1, BucketPolicy::NextPowerOfTwo());
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{0, 1, 0, 0}, WorkItem{1, 1, 0, 0},
                          WorkItem{2, 1, 2, 0}, WorkItem{3, 1, 2, 0},
                          WorkItem{4, 1, 2, 0}));
  EXPECT_THAT(plan.variants(), ElementsAre(VariantRange{0, 0, 5}));
  EXPECT_EQ(plan.accounting(), (PlanAccounting{5, 5, 0.0, 1}));
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, GoldenEmptyInputs) {
  const PlanParams params = Params(16, BucketPolicy::NextPowerOfTwo());
  const PiecewisePlan none = BuildOrDie({}, params);
  EXPECT_THAT(none.offsets(), ElementsAre(0));
  EXPECT_THAT(none.work(), IsEmpty());
  EXPECT_THAT(none.variants(), IsEmpty());
  EXPECT_EQ(none.accounting(), (PlanAccounting{0, 0, 0.0, 0}));
  const PiecewisePlan empty_groups = BuildOrDie({0, 0, 0}, params);
  EXPECT_THAT(empty_groups.offsets(), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(empty_groups.work(), IsEmpty());
  EXPECT_EQ(empty_groups.accounting(), (PlanAccounting{0, 0, 0.0, 0}));
  EXPECT_EQ(PiecewisePlan().num_groups(), 0);
}

TEST(PiecewisePlanTest, GoldenListTails) {
  auto list = BucketPolicy::List({2, 4, 16});
  ASSERT_TRUE(list.ok());
  const std::vector<int64_t> extents = {1, 3, 4, 15, 16};
  const PlanParams params = Params(16, *list);
  const PiecewisePlan plan = BuildOrDie(extents, params);
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{23, 16, 4, 0}, WorkItem{0, 1, 0, 2},
                          WorkItem{1, 3, 1, 4}, WorkItem{4, 4, 2, 4},
                          WorkItem{8, 15, 3, 16}));
  // 16 + 2 + 4 + 4 + 16 executed for 39 useful.
  EXPECT_EQ(plan.accounting(), (PlanAccounting{39, 42, 1.0 - 39.0 / 42, 4}));
  CheckPlan(extents, params, plan);
}

TEST(PiecewisePlanTest, ChangingParamsRefreshesTheTailClasses) {
  const std::vector<int64_t> extents = {5, 21};
  PiecewisePlan plan;
  ASSERT_TRUE(
      BuildPiecewisePlan(extents, Params(16, BucketPolicy::Exact()), &plan)
          .ok());
  EXPECT_THAT(plan.tail_ranges(), ElementsAre(VariantRange{5, 1, 3}));
  // Same tile, other policy: 5 -> 8.
  ASSERT_TRUE(BuildPiecewisePlan(
                  extents, Params(16, BucketPolicy::NextPowerOfTwo()), &plan)
                  .ok());
  EXPECT_THAT(plan.tail_ranges(), ElementsAre(VariantRange{8, 1, 3}));
  // Other tile, same policy: 5 -> 8 and 21 -> 32 clamped to 24.
  ASSERT_TRUE(BuildPiecewisePlan(
                  extents, Params(24, BucketPolicy::NextPowerOfTwo()), &plan)
                  .ok());
  EXPECT_THAT(plan.work(),
              ElementsAre(WorkItem{0, 5, 0, 8}, WorkItem{5, 21, 1, 24}));
}

// ---------------------------------------------------------------------------
// Baselines, worked by hand.
// ---------------------------------------------------------------------------

TEST(PlanBaselineTest, PadToPowerOfTwo) {
  // 0 stays 0; 1 -> 1, 5 -> 8, 16 -> 16, 17 -> 32: four distinct sizes.
  EXPECT_EQ(*PadToPowerOfTwoAccounting({{0, 1, 5, 16, 17}}),
            (PlanAccounting{39, 57, 1.0 - 39.0 / 57, 4}));
  EXPECT_EQ(*PadToPowerOfTwoAccounting({{3, 3, 3}}),
            (PlanAccounting{9, 12, 0.25, 1}));
  EXPECT_EQ(*PadToPowerOfTwoAccounting({}), (PlanAccounting{0, 0, 0.0, 0}));
  EXPECT_EQ(*PadToPowerOfTwoAccounting({{0, 0}}),
            (PlanAccounting{0, 0, 0.0, 0}));
  EXPECT_EQ(*PadToPowerOfTwoAccounting({{kInt32Max}}),
            (PlanAccounting{kInt32Max, int64_t{1} << 31,
                            1.0 - kInt32Max / 2147483648.0, 1}));
}

TEST(PlanBaselineTest, PadToBlockMatchesMoeAlignBlockSize) {
  const std::vector<int64_t> extents = {0, 1, 5, 16, 17};
  // 0 -> 0 (as vLLM: CEILDIV(0, 16) * 16), 1 -> 16, 5 -> 16, 16, 17 -> 32.
  const PlanAccounting block16 = *PadToBlockAccounting(extents, 16);
  EXPECT_EQ(block16, (PlanAccounting{39, 80, 0.5125, 1}));
  EXPECT_EQ(DescribeAccounting(block16),
            "useful=39 executed=80 wasted=51.25% variants=1");
  EXPECT_EQ(*PadToBlockAccounting(extents, 4),
            (PlanAccounting{39, 48, 1.0 - 39.0 / 48, 1}));
  EXPECT_EQ(*PadToBlockAccounting(extents, 1), (PlanAccounting{39, 39, 0, 1}));
  EXPECT_EQ(*PadToBlockAccounting({{0, 0}}, 16),
            (PlanAccounting{0, 0, 0.0, 0}));
}

TEST(PlanBaselineTest, PiecewiseNeverExecutesMoreThanPadToBlock) {
  // Core tiles are exact and a tail class is at most a tile, so with the
  // tile equal to the block, piecewise executes at most what padding does.
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t tile = 1 + rng() % 200;
    std::vector<int64_t> extents(rng() % 300);
    for (int64_t& n : extents) n = rng() % (4 * tile);
    for (const BucketPolicy& policy :
         {BucketPolicy::Exact(), BucketPolicy::NextPowerOfTwo()}) {
      const PiecewisePlan plan = BuildOrDie(extents, Params(tile, policy));
      ASSERT_LE(plan.accounting().executed_rows,
                PadToBlockAccounting(extents, tile)->executed_rows);
    }
  }
}

// ---------------------------------------------------------------------------
// Bad input: exact code and message.
// ---------------------------------------------------------------------------

TEST(PiecewisePlanErrorTest, RejectsBadExtents) {
  const PlanParams params = Params(16, BucketPolicy::Exact());
  PiecewisePlan plan;
  EXPECT_THAT(BuildPiecewisePlan({{4, 0, 7, -2}}, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents[3]: must be >= 0, got -2")));
  EXPECT_THAT(BuildPiecewisePlan({{1, kInt32Max + 1}}, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents[1]: must be <= 2147483647 (row "
                                 "indices are int32), got 2147483648")));
  EXPECT_THAT(BuildPiecewisePlan({{kInt32Max, 0, 1}}, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents: sum must be <= 2147483647 (row "
                                 "indices are int32), got 2147483648")));
  const std::vector<int64_t> too_many(kMaxPlanGroups + 1, 0);
  EXPECT_THAT(BuildPiecewisePlan(too_many, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents: must hold at most 16777216 groups, "
                                 "got 16777217")));
  EXPECT_THAT(BuildPiecewisePlan({{1}}, params, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan: must not be null")));
  // The baselines follow the same rules.
  EXPECT_THAT(PadToPowerOfTwoAccounting({{4, -1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents[1]: must be >= 0, got -1")));
  EXPECT_THAT(PadToBlockAccounting({{kInt32Max, 1}}, 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("extents: sum must be <= 2147483647")));
}

TEST(PiecewisePlanErrorTest, RejectsBadParams) {
  EXPECT_THAT(BuildPiecewisePlan({{1}}, Params(0, BucketPolicy::Exact())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.tile_rows: must be in [1, 1048576], "
                                 "got 0")));
  EXPECT_THAT(
      BuildPiecewisePlan({{1}}, Params(kMaxTileRows + 1, BucketPolicy())),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("params.tile_rows: must be in [1, 1048576], got "
                         "1048577")));
  auto short_list = BucketPolicy::List({1, 2, 4, 8});
  ASSERT_TRUE(short_list.ok());
  EXPECT_THAT(
      BuildPiecewisePlan({{1}}, Params(16, *short_list)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("params.tail_policy: list(1,2,4,8) must map every "
                         "tail size up to tile_rows - 1 = 15 (n: must be <= "
                         "the last entry of list(1,2,4,8), got 15)")));
  // A list reaching tile_rows - 1 is enough; with tile 9 the list covers 8.
  EXPECT_TRUE(ValidatePlanParams(Params(9, *short_list)).ok());
  EXPECT_TRUE(ValidatePlanParams(Params(1, *short_list)).ok());
  EXPECT_THAT(PadToBlockAccounting({{1}}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("block: must be in [1, 1048576], got 0")));
}

TEST(PiecewisePlanErrorTest, TailClassOfChecksItsRange) {
  const PlanParams params = Params(16, BucketPolicy::NextPowerOfTwo());
  EXPECT_EQ(*TailClassOf(1, params), 1);
  EXPECT_EQ(*TailClassOf(9, params), 16);
  EXPECT_EQ(*TailClassOf(15, params), 16);
  EXPECT_THAT(TailClassOf(0, params),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tail_rows: must be in [1, tile_rows - 1 = "
                                 "15], got 0")));
  EXPECT_THAT(
      TailClassOf(16, params),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got 16")));
  EXPECT_THAT(TailClassOf(1, Params(-3, BucketPolicy())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.tile_rows: must be in [1, 1048576], "
                                 "got -3")));
}

TEST(PiecewisePlanErrorTest, ReserveChecksItsArguments) {
  const PlanParams params = Params(16, BucketPolicy::Exact());
  PiecewisePlan plan;
  EXPECT_THAT(plan.Reserve(-1, 0, params),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_groups: must be in [0, 16777216], got "
                                 "-1")));
  EXPECT_THAT(plan.Reserve(1, kInt32Max + 1, params),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_total_rows: must be in [0, 2147483647], "
                                 "got 2147483648")));
  EXPECT_THAT(plan.Reserve(1, 1, Params(0, BucketPolicy::Exact())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.tile_rows: must be in [1, 1048576], "
                                 "got 0")));
}

TEST(PiecewisePlanErrorTest, ParamsAreCheckedBeforeExtents) {
  PiecewisePlan plan;
  EXPECT_THAT(BuildPiecewisePlan({{-1}}, Params(0, BucketPolicy()), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.tile_rows")));
}

TEST(PiecewisePlanErrorTest, FailedBuildLeavesAnEmptyReusablePlan) {
  const PlanParams params = Params(16, BucketPolicy::NextPowerOfTwo());
  const std::vector<int64_t> good = {5, 17, 0, 33};
  PiecewisePlan plan;
  ASSERT_TRUE(BuildPiecewisePlan(good, params, &plan).ok());
  ASSERT_FALSE(plan.work().empty());
  EXPECT_FALSE(BuildPiecewisePlan({{5, -1}}, params, &plan).ok());
  EXPECT_THAT(plan.offsets(), IsEmpty());
  EXPECT_THAT(plan.work(), IsEmpty());
  EXPECT_THAT(plan.variants(), IsEmpty());
  EXPECT_EQ(plan.accounting(), PlanAccounting{});
  ASSERT_TRUE(BuildPiecewisePlan(good, params, &plan).ok());
  CheckPlan(good, params, plan);
}

// ---------------------------------------------------------------------------
// Property sweep over random ragged extents.
// ---------------------------------------------------------------------------

std::vector<int64_t> RandomExtents(std::mt19937_64& rng, int64_t tile) {
  static constexpr int64_t kGroupCounts[] = {0, 1, 2, 17, 256, 577, 5000};
  const int64_t num_groups =
      rng() % 2 ? kGroupCounts[rng() % 7] : int64_t(rng() % 5001);
  std::vector<int64_t> extents(num_groups, 0);
  if (num_groups == 0) return extents;
  const int64_t awkward[] = {0,        1,  tile - 1, tile,
                             tile + 1, 17, 577,      2 * tile - 1};
  switch (rng() % 5) {
    case 0:  // uniform, up to three tiles
      for (int64_t& n : extents) n = rng() % (3 * tile + 1);
      break;
    case 1:  // mostly empty groups (idle experts)
      for (int64_t& n : extents) n = rng() % 20 ? 0 : 1 + rng() % (4 * tile);
      break;
    case 2:  // every row in one group
      extents[rng() % num_groups] = rng() % (1000 * tile + 1);
      break;
    case 3:  // the awkward sizes
      for (int64_t& n : extents) n = std::max<int64_t>(0, awkward[rng() % 8]);
      break;
    default: {  // routing: a multinomial of R rows over the groups
      const int64_t rows = rng() % 40000;
      for (int64_t r = 0; r < rows; ++r) ++extents[rng() % num_groups];
      break;
    }
  }
  return extents;
}

BucketPolicy RandomTailPolicy(std::mt19937_64& rng, int64_t tile) {
  switch (rng() % 4) {
    case 0:
      return BucketPolicy::Exact();
    case 1:
      return BucketPolicy::NextPowerOfTwo();
    case 2:
      return MultipleOf(1 + rng() % (2 * tile));
    default: {  // a random increasing list that reaches tile - 1
      std::vector<int64_t> sizes;
      for (int64_t size = 1 + rng() % 4; size < tile - 1;
           size += 1 + rng() % (tile / 4 + 1)) {
        sizes.push_back(size);
      }
      sizes.push_back(std::max<int64_t>(sizes.empty() ? 1 : sizes.back() + 1,
                                        tile - 1 + rng() % 3));
      return *BucketPolicy::List(sizes);
    }
  }
}

TEST(PiecewisePlanPropertyTest, RandomExtentsMatchReference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  static constexpr int64_t kTiles[] = {1, 2, 3, 7, 16, 17, 64, 128, 577, 4096};
  PiecewisePlan reused;  // one plan for every trial, as a server keeps it
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t tile = rng() % 4 ? kTiles[rng() % 10] : 1 + rng() % 300;
    const PlanParams params = Params(tile, RandomTailPolicy(rng, tile));
    const std::vector<int64_t> extents = RandomExtents(rng, tile);
    SCOPED_TRACE("trial=" + std::to_string(trial) +
                 " tile=" + std::to_string(tile) +
                 " policy=" + params.tail_policy.ToString() +
                 " groups=" + std::to_string(extents.size()));
    ASSERT_TRUE(BuildPiecewisePlan(extents, params, &reused).ok());
    ASSERT_NO_FATAL_FAILURE(CheckPlan(extents, params, reused));
  }
}

TEST(PiecewisePlanPropertyTest, HugeExtentsNearTheInt32Limit) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> inputs = {
      {kInt32Max}, {0, kInt32Max, 0}, {kInt32Max - 5, 5}, {1, kInt32Max - 1}};
  for (int i = 0; i < 20; ++i) {  // random splits of about 2^31 rows
    std::vector<int64_t> extents(1 + rng() % 8);
    int64_t left = kInt32Max - rng() % 1000;
    for (size_t g = 0; g + 1 < extents.size(); ++g) {
      extents[g] = rng() % (left + 1);
      left -= extents[g];
    }
    extents.back() = left;
    inputs.push_back(extents);
  }
  // One plan per params, so that each tail table is built once.
  for (int64_t tile : {int64_t{1} << 16, kMaxTileRows, int64_t{999983}}) {
    for (const BucketPolicy& policy :
         {BucketPolicy::Exact(), BucketPolicy::NextPowerOfTwo()}) {
      const PlanParams params = Params(tile, policy);
      SCOPED_TRACE("tile=" + std::to_string(tile) + " " + policy.ToString());
      PiecewisePlan plan;
      for (const std::vector<int64_t>& extents : inputs) {
        ASSERT_TRUE(BuildPiecewisePlan(extents, params, &plan).ok());
        ASSERT_NO_FATAL_FAILURE(CheckPlan(extents, params, plan));
        EXPECT_EQ(plan.offsets().back(),
                  std::accumulate(extents.begin(), extents.end(), int64_t{0}));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Steady state: a warm plan rebuilds without allocating.
// ---------------------------------------------------------------------------

// Builds and returns how many heap allocations the build made.
int64_t CountedBuild(const std::vector<int64_t>& extents,
                     const PlanParams& params, PiecewisePlan* plan) {
  const int64_t before = g_allocations.load();
  const absl::Status status = BuildPiecewisePlan(extents, params, plan);
  const int64_t allocations = g_allocations.load() - before;
  EXPECT_TRUE(status.ok()) << status;
  return allocations;
}

TEST(PiecewisePlanSteadyStateTest, ReservedPlanNeverAllocates) {
  if (!TAILOR_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocations not counted";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int64_t kMaxGroups = 5000, kMaxRows = 60000;
  PiecewisePlan cold;  // shows that the counter sees the planner allocate
  ASSERT_GT(CountedBuild({5, 17}, Params(16, BucketPolicy()), &cold), 0);
  for (int64_t tile : {1, 16, 17, 128}) {
    // A server keeps one plan per params; Reserve() sizes it for them.
    const PlanParams params = Params(tile, RandomTailPolicy(rng, tile));
    SCOPED_TRACE("tile=" + std::to_string(tile) + " " +
                 params.tail_policy.ToString());
    PiecewisePlan plan;
    ASSERT_TRUE(plan.Reserve(kMaxGroups, kMaxRows, params).ok());
    const size_t capacity = plan.CapacityBytes();
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<int64_t> extents = RandomExtents(rng, tile);
      extents.resize(std::min<size_t>(extents.size(), kMaxGroups));
      int64_t budget = kMaxRows;  // trim to the reserved row count
      for (int64_t& n : extents) budget -= (n = std::min(n, budget));
      SCOPED_TRACE("trial=" + std::to_string(trial));
      ASSERT_EQ(CountedBuild(extents, params, &plan), 0);
      ASSERT_EQ(plan.CapacityBytes(), capacity);
      ASSERT_NO_FATAL_FAILURE(CheckPlan(extents, params, plan));
    }
  }
}

TEST(PiecewisePlanSteadyStateTest, WarmPlanRebuildsWithoutAllocating) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t tile = 1 + rng() % 256;
    const PlanParams params = Params(tile, RandomTailPolicy(rng, tile));
    std::vector<int64_t> extents = RandomExtents(rng, tile);
    PiecewisePlan plan;
    ASSERT_TRUE(BuildPiecewisePlan(extents, params, &plan).ok());  // warm up
    const size_t capacity = plan.CapacityBytes();
    const WorkItem* work = plan.work().data();
    for (int step = 0; step < 5; ++step) {
      // Same multiset of extents, new order: same sizes, same classes.
      std::shuffle(extents.begin(), extents.end(), rng);
      ASSERT_EQ(CountedBuild(extents, params, &plan), 0);
      ASSERT_EQ(plan.CapacityBytes(), capacity);
      ASSERT_EQ(plan.work().data(), work);
      ASSERT_NO_FATAL_FAILURE(CheckPlan(extents, params, plan));
    }
    // Fewer groups fit too.
    extents.resize(extents.size() / 2);
    ASSERT_EQ(CountedBuild(extents, params, &plan), 0);
    ASSERT_EQ(plan.CapacityBytes(), capacity);
  }
}

}  // namespace
}  // namespace tailor::plan
