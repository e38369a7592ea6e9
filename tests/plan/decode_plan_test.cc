#include "plan/decode_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "test_util.h"

namespace tailor::plan {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

DecodePlanParams Params(int32_t heads, int32_t workers, int32_t tile,
                        int32_t page, int32_t item_cost) {
  return {.num_kv_heads = heads,
          .num_workers = workers,
          .tile_tokens = tile,
          .page_size = page,
          .item_cost_tokens = item_cost};
}

// Every invariant a plan must satisfy for `lens` and `params`.
void ExpectValidPlan(const DecodePlan& plan, const std::vector<int32_t>& lens,
                     const DecodePlanParams& params) {
  ASSERT_EQ(plan.batch(), static_cast<int32_t>(lens.size()));
  const auto items = plan.items();
  const auto begin = plan.worker_begin();
  ASSERT_EQ(begin.size(), static_cast<size_t>(params.num_workers) + 1);
  EXPECT_EQ(begin.front(), 0);
  EXPECT_EQ(begin.back(), static_cast<int32_t>(items.size()));
  EXPECT_TRUE(std::is_sorted(begin.begin(), begin.end()));
  ASSERT_EQ(plan.first_items().size(), static_cast<size_t>(params.num_workers));
  for (int32_t w = 0; w < params.num_workers; ++w) {
    if (begin[w] < begin[w + 1]) {
      EXPECT_EQ(plan.first_items()[w], items[begin[w]]) << "worker " << w;
    }
  }
  // The head group the plan took: the requested one or 1.
  const int32_t g = plan.params().head_group;
  EXPECT_TRUE(g == params.head_group || g == 1);
  if (g > 1 && !params.head_group_always) {
    EXPECT_EQ(plan.num_partials(), 0);  // groups split nothing
  }
  EXPECT_LE(
      static_cast<int64_t>(items.size()),
      MaxDecodeItems(lens.size(), params.num_kv_heads, params.num_workers, g));
  EXPECT_LE(plan.num_partials(), MaxDecodePartials(params.num_workers, g));
  // Pieces of each pair: in order, back to back, covering [0, len).
  std::map<std::pair<int32_t, int32_t>, std::vector<DecodeWorkItem>> pairs;
  for (const DecodeWorkItem& item : items) {
    pairs[{item.seq, item.kv_head}].push_back(item);
  }
  ASSERT_EQ(pairs.size(), lens.size() * params.num_kv_heads);
  std::vector<bool> slot_used(plan.num_partials(), false);
  int32_t split = 0;
  for (const auto& [key, pieces] : pairs) {
    SCOPED_TRACE(absl::StrCat("seq ", key.first, " head ", key.second));
    const int32_t len = lens[key.first];
    int32_t next = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const DecodeWorkItem& it = pieces[i];
      EXPECT_EQ(it.kv_begin, next);
      EXPECT_EQ(it.kv_begin % params.tile_tokens, 0);
      EXPECT_TRUE(it.kv_end > it.kv_begin || len == 0);
      EXPECT_EQ(it.seq_len, len);
      next = it.kv_end;
      if (pieces.size() == 1) {
        EXPECT_EQ(it.partial, -1);
        EXPECT_EQ(it.first_partial, -1);
        EXPECT_EQ(it.pieces, 1);
      } else {
        EXPECT_EQ(it.pieces, static_cast<int32_t>(pieces.size()));
        EXPECT_EQ(it.partial, it.first_partial + static_cast<int32_t>(i));
        ASSERT_GE(it.partial, 0);
        ASSERT_LT(it.partial, plan.num_partials());
        EXPECT_FALSE(slot_used[it.partial]);
        slot_used[it.partial] = true;
      }
    }
    EXPECT_EQ(next, len);
    split += pieces.size() > 1;
  }
  EXPECT_EQ(static_cast<int32_t>(plan.merge_groups().size()), split);
  for (const DecodeMergeGroup& g : plan.merge_groups()) {
    const auto& pieces = pairs[{g.seq, g.kv_head}];
    EXPECT_EQ(g.pieces, static_cast<int32_t>(pieces.size()));
    EXPECT_EQ(g.first_partial, pieces.front().first_partial);
  }
  // The pieces of a pair sit on distinct, consecutive workers.
  std::vector<int32_t> worker_of(items.size());
  for (int32_t w = 0; w < params.num_workers; ++w) {
    for (int32_t i = begin[w]; i < begin[w + 1]; ++i) worker_of[i] = w;
  }
  for (size_t i = g; i < items.size(); ++i) {
    if (items[i].seq == items[i - g].seq &&
        items[i].kv_head == items[i - g].kv_head) {
      EXPECT_GT(worker_of[i], worker_of[i - g]) << "item " << i;
    }
  }
  // Cluster merges (the kernel's contract): piece i of a split pair on the
  // worker of piece 0 plus i, all of them in one cluster.
  if (plan.cluster_merges()) {
    const int32_t cluster = params.cluster_workers;
    ASSERT_GT(cluster, 0);
    for (const auto& [key, pieces] : pairs) {
      if (pieces.size() < 2) continue;
      std::vector<int32_t> workers;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].seq == key.first && items[i].kv_head == key.second) {
          workers.push_back(worker_of[i]);
        }
      }
      for (size_t i = 0; i < workers.size(); ++i) {
        EXPECT_EQ(workers[i], workers[0] + static_cast<int32_t>(i));
      }
      EXPECT_EQ(workers.front() / cluster, workers.back() / cluster)
          << "seq " << key.first << " head " << key.second;
    }
  }
  // Head groups: items come in runs of g on one worker, heads h0 .. h0 + g
  // - 1 (h0 a multiple of g) of one sequence over one token range.
  ASSERT_EQ(items.size() % g, 0u);
  for (int32_t w = 0; w < params.num_workers; ++w) {
    EXPECT_EQ(begin[w] % g, 0) << "worker " << w;
  }
  for (size_t i = 0; i < items.size(); i += g) {
    EXPECT_EQ(items[i].kv_head % g, 0) << "item " << i;
    for (int32_t h = 1; h < g; ++h) {
      const DecodeWorkItem& a = items[i];
      const DecodeWorkItem& b = items[i + h];
      EXPECT_EQ(b.seq, a.seq) << "item " << i + h;
      EXPECT_EQ(b.kv_head, a.kv_head + h) << "item " << i + h;
      EXPECT_EQ(b.kv_begin, a.kv_begin) << "item " << i + h;
      EXPECT_EQ(b.kv_end, a.kv_end) << "item " << i + h;
      EXPECT_EQ(b.pieces, a.pieces) << "item " << i + h;
      EXPECT_EQ(worker_of[i + h], worker_of[i]) << "item " << i + h;
    }
  }
}

TEST(DecodePlanTest, HeaderExample) {
  DecodePlan plan;
  const std::vector<int32_t> lens = {64, 0, 16};
  TAILOR_ASSERT_OK(BuildDecodePlan(lens, Params(1, 4, 16, 16, 0), &plan));
  EXPECT_THAT(plan.items(),
              ElementsAre(DecodeWorkItem{0, 0, 0, 32, 64, 0, 0, 2},
                          DecodeWorkItem{0, 0, 32, 64, 64, 1, 0, 2},
                          DecodeWorkItem{1, 0, 0, 0, 0, -1, -1, 1},
                          DecodeWorkItem{2, 0, 0, 16, 16, -1, -1, 1}));
  EXPECT_THAT(plan.worker_begin(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(plan.merge_groups(), ElementsAre(DecodeMergeGroup{0, 0, 0, 2}));
  EXPECT_EQ(plan.num_partials(), 2);
  EXPECT_EQ(plan.stats().max_worker_cost, 32);
  ExpectValidPlan(plan, lens, Params(1, 4, 16, 16, 0));
}

// Two KV heads in groups of two, 4 workers, tiles and pages of 16, no item
// cost. Lengths {64, 64, 64, 64}: one head an item, the best cut gives each
// worker two whole pairs (cost 128); the groups cost the same whole, so the
// plan takes them: worker b runs sequence b's heads 0 and 1 over the same
// tokens. Lengths {64, 16}: whole groups would cost 128 against 48 (the
// pairs split over the workers), so the plan keeps one head an item.
TEST(DecodePlanTest, HeadGroupsOnlyWholeAndNoCostlier) {
  DecodePlan plan;
  DecodePlanParams params = Params(2, 4, 16, 16, 0);
  params.head_group = 2;
  const std::vector<int32_t> even = {64, 64, 64, 64};
  TAILOR_ASSERT_OK(BuildDecodePlan(even, params, &plan));
  ExpectValidPlan(plan, even, params);
  EXPECT_EQ(plan.params().head_group, 2);
  EXPECT_THAT(plan.items(),
              ElementsAre(DecodeWorkItem{0, 0, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{0, 1, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{1, 0, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{1, 1, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{2, 0, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{2, 1, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{3, 0, 0, 64, 64, -1, -1, 1},
                          DecodeWorkItem{3, 1, 0, 64, 64, -1, -1, 1}));
  EXPECT_THAT(plan.worker_begin(), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(plan.stats().max_worker_cost, 128);
  const std::vector<int32_t> uneven = {64, 16};
  TAILOR_ASSERT_OK(BuildDecodePlan(uneven, params, &plan));
  ExpectValidPlan(plan, uneven, params);
  EXPECT_EQ(plan.params().head_group, 1);
  EXPECT_EQ(plan.stats().max_worker_cost, 48);
  // B = 1 on the H100 grid: groups would put 4 heads' 4096 tokens in one
  // item; the plan splits the pairs one head an item.
  params = Params(4, 264, 64, 16, 16);
  params.head_group = 4;
  TAILOR_ASSERT_OK(BuildDecodePlan({4096}, params, &plan));
  EXPECT_EQ(plan.params().head_group, 1);
  EXPECT_EQ(plan.stats().split_pairs, 4);
  // Always (tests, A/B runs): groups whatever they cost, split if need be.
  params.head_group_always = true;
  TAILOR_ASSERT_OK(BuildDecodePlan({4096}, params, &plan));
  ExpectValidPlan(plan, {4096}, params);
  EXPECT_EQ(plan.params().head_group, 4);
  EXPECT_EQ(plan.stats().split_pairs, 4);
}

TEST(DecodePlanTest, RandomBatchesAreValid) {
  std::mt19937_64 rng(TestSeed());
  DecodePlan plan;  // reused: rebuilds must not leak state
  for (int trial = 0; trial < 300; ++trial) {
    DecodePlanParams params =
        Params(1 + rng() % 9, 1 + rng() % 200, 1 << (rng() % 8), 1 + rng() % 64,
               rng() % 64);
    // Every other trial groups heads: a random divisor of num_kv_heads.
    if (trial % 2 == 1) {
      do {
        params.head_group = 1 + rng() % params.num_kv_heads;
      } while (params.num_kv_heads % params.head_group != 0);
      params.head_group_always = trial % 4 == 3;
    }
    std::vector<int32_t> lens(rng() % 40);
    for (int32_t& n : lens) {
      n = rng() % 4 == 0 ? 0
                         : static_cast<int32_t>(rng() % (1 + rng() % 20000));
    }
    SCOPED_TRACE(absl::StrCat("trial ", trial, " ", plan.ToString()));
    TAILOR_ASSERT_OK(BuildDecodePlan(lens, params, &plan));
    ExpectValidPlan(plan, lens, params);
  }
}

// The busiest worker carries at most the mean plus a tile, a page of
// rounding and the item costs of its pieces.
void ExpectBalanced(const std::vector<int32_t>& lens,
                    const DecodePlanParams& params) {
  DecodePlan plan;
  TAILOR_ASSERT_OK(BuildDecodePlan(lens, params, &plan));
  ExpectValidPlan(plan, lens, params);
  const DecodePlanStats s = plan.stats();
  SCOPED_TRACE(plan.ToString());
  // One head an item: the bound above; whole head groups may cost 1/32 more.
  const double bound = s.mean_worker_cost + params.tile_tokens +
                       params.page_size + 3 * params.item_cost_tokens;
  EXPECT_LE(s.max_worker_cost,
            plan.params().head_group > 1 ? bound * 33 / 32 : bound);
}

TEST(DecodePlanTest, BalancesTheAnchorShapes) {
  // The H100 grid (132 SMs): Llama (8 KV heads) and Qwen3 (4 KV heads), and
  // both with heads in groups of 4 where they are whole and cheap enough.
  for (auto [heads, group] : {std::pair{8, 1}, {4, 1}, {8, 4}, {4, 4}}) {
    SCOPED_TRACE(absl::StrCat(heads, " heads, groups of ", group));
    DecodePlanParams params = Params(heads, 132, 64, 16, 16);
    params.head_group = group;
    ExpectBalanced({4096}, params);
    ExpectBalanced({32768}, params);
    ExpectBalanced(std::vector<int32_t>(8, 32768), params);
    ExpectBalanced(std::vector<int32_t>(32, 1024), params);
    ExpectBalanced(std::vector<int32_t>(256, 2048), params);
    std::mt19937 rng(7);
    std::vector<int32_t> ragged(64), long_short(128);
    for (int32_t& n : ragged) n = 1 + rng() % 8192;
    long_short[0] = 16384;
    for (size_t i = 1; i < long_short.size(); ++i) {
      long_short[i] = 1 + rng() % 256;
    }
    ExpectBalanced(ragged, params);
    ExpectBalanced(long_short, params);
  }
}

// One sequence, 8 KV heads, 132 workers: 4096 tiles, 31.03 a worker, so
// some stream-cut worker gets 32 tiles; 16 whole workers a head (32 tiles
// each) cost the same and leave 4 workers idle.
TEST(DecodePlanTest, OneLongSequenceSpreadsOverTheWorkers) {
  DecodePlan plan;
  TAILOR_ASSERT_OK(BuildDecodePlan({32768}, Params(8, 132, 64, 16, 16), &plan));
  const DecodePlanStats s = plan.stats();
  EXPECT_EQ(s.busy_workers, 128);
  EXPECT_EQ(s.split_pairs, 8);
  EXPECT_EQ(s.max_worker_cost, 16 + 32 * 64);
  EXPECT_EQ(s.tokens, 8 * 32768);
  // Lengths that do not fit whole workers as well take every worker.
  TAILOR_ASSERT_OK(
      BuildDecodePlan({32768 + 64 * 66}, Params(8, 132, 64, 16, 16), &plan));
  EXPECT_EQ(plan.stats().busy_workers, 132);
}

// B = 1, L = 4096, 8 KV heads on 132 workers: a stream cut gives 4 workers
// the end of one head and the start of the next (136 items), and those run
// two items' fixed costs. Whole workers: 16 per head, 4 tiles each, one item
// per worker, a lower busiest-worker cost; 4 workers idle.
TEST(DecodePlanTest, FewPairsGetWholeWorkersWhenThatIsCheaper) {
  DecodePlan plan;
  const DecodePlanParams params = Params(8, 132, 64, 16, 16);
  TAILOR_ASSERT_OK(BuildDecodePlan({4096}, params, &plan));
  ExpectValidPlan(plan, {4096}, params);
  const DecodePlanStats s = plan.stats();
  EXPECT_EQ(s.items, 128);
  EXPECT_EQ(s.busy_workers, 128);
  EXPECT_EQ(s.max_worker_cost, 16 + 256);
  for (size_t w = 0; w + 1 < plan.worker_begin().size(); ++w) {
    EXPECT_LE(plan.worker_begin()[w + 1] - plan.worker_begin()[w], 1);
  }
  // With the CUDA backend's item cost (128 tokens) both cuts' busiest
  // workers cost 128 + 256: the tie goes to whole workers, 16 pieces a head
  // (the stream cut's 16 or 17 cost its 17-piece merges a second round
  // trip).
  const DecodePlanParams cuda_params = Params(8, 132, 64, 16, 128);
  TAILOR_ASSERT_OK(BuildDecodePlan({4096}, cuda_params, &plan));
  ExpectValidPlan(plan, {4096}, cuda_params);
  EXPECT_EQ(plan.stats().items, 128);
  EXPECT_EQ(plan.stats().max_worker_cost, 128 + 256);
  for (const DecodeMergeGroup& group : plan.merge_groups()) {
    EXPECT_EQ(group.pieces, 16);
  }
  // More pairs than workers: always the stream cut.
  TAILOR_ASSERT_OK(BuildDecodePlan(std::vector<int32_t>(20, 4096),
                                   Params(8, 132, 64, 16, 16), &plan));
  EXPECT_EQ(plan.stats().busy_workers, 132);
}

// Qwen3 heads, B = 128, L = 1024 on 264 workers (the CUDA backend's item
// cost): the stream cut costs 2368 at most and splits 224 pairs; two whole
// pairs a worker cost 2304, so nothing is split or merged.
TEST(DecodePlanTest, ManySimilarPairsStayWhole) {
  DecodePlan plan;
  const DecodePlanParams params = Params(4, 264, 64, 16, 128);
  const std::vector<int32_t> lens(128, 1024);
  TAILOR_ASSERT_OK(BuildDecodePlan(lens, params, &plan));
  ExpectValidPlan(plan, lens, params);
  const DecodePlanStats s = plan.stats();
  EXPECT_EQ(s.items, 512);
  EXPECT_EQ(s.split_pairs, 0);
  EXPECT_EQ(s.busy_workers, 256);
  EXPECT_EQ(s.max_worker_cost, 2 * (128 + 1024));
  // Ragged lengths do not fit whole pairs under the stream cut's cost.
  std::vector<int32_t> ragged(64);
  std::mt19937 rng(7);
  for (int32_t& n : ragged) n = 1 + rng() % 8192;
  TAILOR_ASSERT_OK(BuildDecodePlan(ragged, params, &plan));
  ExpectValidPlan(plan, ragged, params);
  EXPECT_GT(plan.stats().split_pairs, 0);
}

// A launch of 264 workers (two CTAs an SM) that cuts a small batch over the
// first 132: the rest get no items, and the cut is the one 132 workers get.
TEST(DecodePlanTest, CutWorkersLeaveTheRestIdle) {
  DecodePlanParams narrow = Params(4, 264, 64, 16, 16);
  narrow.cut_workers = 132;
  const DecodePlanParams full = Params(4, 132, 64, 16, 16);
  for (const std::vector<int32_t>& lens :
       {std::vector<int32_t>{32768}, std::vector<int32_t>{4096},
        std::vector<int32_t>(32, 1024), std::vector<int32_t>{577, 0, 1, 17}}) {
    SCOPED_TRACE(absl::StrCat("B=", lens.size(), " L0=", lens[0]));
    DecodePlan plan, reference;
    TAILOR_ASSERT_OK(BuildDecodePlan(lens, narrow, &plan));
    ExpectValidPlan(plan, lens, narrow);
    TAILOR_ASSERT_OK(BuildDecodePlan(lens, full, &reference));
    EXPECT_THAT(plan.items(), ElementsAreArray(reference.items()));
    for (int32_t w = 132; w <= 264; ++w) {
      EXPECT_EQ(plan.worker_begin()[w],
                static_cast<int32_t>(plan.items().size()));
    }
    EXPECT_EQ(plan.stats().max_worker_cost, reference.stats().max_worker_cost);
    EXPECT_EQ(plan.stats().mean_worker_cost,
              reference.stats().mean_worker_cost);
  }
  narrow.cut_workers = 265;
  DecodePlan plan;
  EXPECT_THAT(BuildDecodePlan({1}, narrow, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.cut_workers: must be in [0, 264], got 265"));
}

// Clusters of 16 on 112 workers (the H100's 7 co-resident clusters of 16):
// B = 1 with Qwen3's 4 KV heads takes 16 pieces a head, head h on cluster h
// (the stream cut's busiest worker costs less, but not half as much); a
// unit that does not fit what is left of a cluster starts the next; with
// few heads the stream cut costs under half and is taken, flagged.
TEST(DecodePlanTest, ClustersHoldWholePairs) {
  DecodePlan plan;
  DecodePlanParams params = Params(4, 112, 64, 16, 128);
  params.cluster_workers = 16;
  TAILOR_ASSERT_OK(BuildDecodePlan({4096}, params, &plan));
  ExpectValidPlan(plan, {4096}, params);
  EXPECT_TRUE(plan.cluster_merges());
  ASSERT_EQ(plan.merge_groups().size(), 4u);
  for (const DecodeMergeGroup& group : plan.merge_groups()) {
    EXPECT_EQ(group.pieces, 16);
  }
  EXPECT_EQ(plan.first_items()[16 * 3 + 15].kv_head, 3);
  EXPECT_EQ(plan.stats().max_worker_cost, 128 + 256);
  // 3 heads of 10 tiles on clusters of 8: 5 pieces each, at workers 0-4,
  // 8-12 and 16-20 (5-9 would straddle two clusters).
  params = Params(3, 32, 64, 16, 128);
  params.cluster_workers = 8;
  TAILOR_ASSERT_OK(BuildDecodePlan({640}, params, &plan));
  ExpectValidPlan(plan, {640}, params);
  EXPECT_TRUE(plan.cluster_merges());
  EXPECT_EQ(plan.first_items()[8].kv_head, 1);
  EXPECT_EQ(plan.first_items()[16].kv_head, 2);
  EXPECT_EQ(plan.worker_begin()[6], plan.worker_begin()[8]);  // 5..7 idle
  // 2 heads: 16 pieces of 2048 tokens against the stream cut's 56 pieces of
  // ~600: the stream cut, whose pieces may skip a worker.
  params = Params(2, 112, 64, 16, 128);
  params.cluster_workers = 16;
  TAILOR_ASSERT_OK(BuildDecodePlan({32768}, params, &plan));
  ExpectValidPlan(plan, {32768}, params);
  EXPECT_FALSE(plan.cluster_merges());
  EXPECT_GT(plan.stats().split_pairs, 0);
  // Nothing split: nothing to merge anywhere.
  TAILOR_ASSERT_OK(BuildDecodePlan({0, 17, 64}, params, &plan));
  EXPECT_TRUE(plan.cluster_merges());
  // Random small batches keep the contract.
  std::mt19937 rng(TestSeed());
  for (int trial = 0; trial < 200; ++trial) {
    params = Params(1 + rng() % 8, 16 * (1 + rng() % 8), 64, 16, 128);
    params.cluster_workers = rng() % 2 ? 8 : 16;
    std::vector<int32_t> lens(1 + rng() % 3);
    for (int32_t& n : lens) n = rng() % 3 == 0 ? rng() % 100 : rng() % 40000;
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    TAILOR_ASSERT_OK(BuildDecodePlan(lens, params, &plan));
    ExpectValidPlan(plan, lens, params);
  }
  params = Params(4, 112, 64, 16, 128);
  params.cluster_workers = 3;
  EXPECT_THAT(BuildDecodePlan({1}, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.cluster_workers: must be 0 or in [2, 16] and "
                       "divide num_workers (112), got 3"));
  params.cluster_workers = 32;
  EXPECT_THAT(BuildDecodePlan({1}, params, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.cluster_workers: must be 0 or in [2, 16] and "
                       "divide num_workers (112), got 32"));
}

TEST(DecodePlanTest, ShortSequencesStayWhole) {
  DecodePlan plan;
  const std::vector<int32_t> lens(1000, 10);
  TAILOR_ASSERT_OK(BuildDecodePlan(lens, Params(2, 16, 64, 16, 16), &plan));
  // Cuts round to tiles: a 10-token pair is never split.
  EXPECT_EQ(plan.stats().split_pairs, 0);
  EXPECT_EQ(plan.stats().busy_workers, 16);
}

TEST(DecodePlanTest, EmptyBatch) {
  DecodePlan plan;
  TAILOR_ASSERT_OK(BuildDecodePlan({}, Params(2, 4, 16, 16, 0), &plan));
  EXPECT_TRUE(plan.items().empty());
  EXPECT_THAT(plan.worker_begin(), ElementsAre(0, 0, 0, 0, 0));
  EXPECT_EQ(plan.batch(), 0);
}

TEST(DecodePlanTest, ReserveMakesBuildsAllocationFree) {
  DecodePlan plan;
  const DecodePlanParams params = Params(8, 132, 64, 16, 16);
  TAILOR_ASSERT_OK(plan.Reserve(256, params));
  const size_t reserved = plan.CapacityBytes();
  std::mt19937 rng(TestSeed());
  for (int step = 0; step < 20; ++step) {
    std::vector<int32_t> lens(1 + rng() % 256);
    for (int32_t& n : lens) n = static_cast<int32_t>(rng() % 40000);
    TAILOR_ASSERT_OK(BuildDecodePlan(lens, params, &plan));
    EXPECT_EQ(plan.CapacityBytes(), reserved);
  }
}

TEST(DecodePlanTest, RejectsBadArguments) {
  DecodePlan plan;
  EXPECT_THAT(BuildDecodePlan({1}, Params(0, 4, 16, 16, 0), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.num_kv_heads: must be in [1, 1024], got 0"));
  EXPECT_THAT(BuildDecodePlan({1}, Params(1, 0, 16, 16, 0), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.num_workers: must be in [1, 65536], got 0"));
  EXPECT_THAT(BuildDecodePlan({1}, Params(1, 4, 0, 16, 0), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.tile_tokens: must be in [1, 4096], got 0"));
  EXPECT_THAT(BuildDecodePlan({1}, Params(1, 4, 16, 5000, 0), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.page_size: must be in [1, 4096], got 5000"));
  EXPECT_THAT(BuildDecodePlan({1}, Params(1, 4, 16, 16, -1), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.item_cost_tokens: must be in [0, 1048576], got "
                       "-1"));
  EXPECT_THAT(BuildDecodePlan({3, -2}, Params(1, 4, 16, 16, 0), &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "seq_lens[1]: must be in [0, 1073741824], got -2"));
  DecodePlanParams grouped = Params(4, 4, 16, 16, 0);
  grouped.head_group = 3;
  EXPECT_THAT(BuildDecodePlan({1}, grouped, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.head_group: must divide num_kv_heads (4), got "
                       "3"));
  grouped.head_group = 0;
  EXPECT_THAT(BuildDecodePlan({1}, grouped, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "params.head_group: must divide num_kv_heads (4), got "
                       "0"));
  EXPECT_EQ(plan.batch(), 0);  // left empty
  EXPECT_THAT(plan.Reserve(-1, Params(1, 4, 16, 16, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "max_batch: must be in [0, 1048576], got -1"));
}

}  // namespace
}  // namespace tailor::plan
