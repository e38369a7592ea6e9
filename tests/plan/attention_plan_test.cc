#include "plan/attention_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "plan/ragged_partition.h"
#include "test_util.h"

namespace tailor::plan {
namespace {

using ::tailor::testing::StatusIs;
using ::tailor::testing::TestSeed;
using ::testing::HasSubstr;

AttentionPlanParams Params(int32_t hq, int32_t hkv, int32_t pack, int32_t rows,
                           int32_t block, int32_t workers, bool causal,
                           int32_t window = -1) {
  return {.num_qo_heads = hq,
          .num_kv_heads = hkv,
          .head_pack = pack,
          .tile_rows = rows,
          .kv_block = block,
          .num_workers = workers,
          .causal = causal,
          .window_left = window,
          .item_cost = block,
          .masked_block_extra = block / 4};
}

// Whether query token t (of q_len over kv_len) may attend position j.
bool Allowed(const AttentionPlanParams& p, int64_t q_len, int64_t kv_len,
             int64_t t, int64_t j) {
  if (j < 0 || j >= kv_len) return false;
  if (!p.causal) return true;
  const int64_t pos = kv_len - q_len + t;
  if (j > pos) return false;
  return p.window_left < 0 || j >= pos - p.window_left;
}

// Tokens of a tile's rows that belong to the sequence.
std::pair<int64_t, int64_t> TokenRange(const AttentionPlanParams& p,
                                       const AttentionWorkItem& item) {
  return {item.row_begin / p.head_pack,
          (item.row_begin + item.rows - 1) / p.head_pack + 1};
}

// Every invariant of a plan (see attention_plan.h), checked by brute force.
void ExpectValidPlan(const AttentionPlan& plan,
                     const std::vector<int32_t>& q_lens,
                     const std::vector<int32_t>& kv_lens,
                     const AttentionPlanParams& p) {
  const auto items = plan.items();
  const auto begin = plan.worker_begin();
  ASSERT_EQ(begin.size(), static_cast<size_t>(p.num_workers) + 1);
  EXPECT_EQ(begin.front(), 0);
  EXPECT_EQ(begin.back(), static_cast<int32_t>(items.size()));
  EXPECT_TRUE(std::is_sorted(begin.begin(), begin.end()));
  const int64_t tiles = AttentionTileCount(q_lens, p);
  EXPECT_EQ(plan.stats().tiles, tiles);
  EXPECT_LE(static_cast<int64_t>(items.size()), MaxAttentionItems(tiles, p));
  EXPECT_LE(plan.num_partials(), MaxAttentionPartials(tiles, p));
  // Pieces of each tile, by (seq, q_head, row_begin).
  std::map<std::tuple<int32_t, int32_t, int32_t>,
           std::vector<AttentionWorkItem>>
      by_tile;
  std::vector<int> slot_uses(plan.num_partials(), 0);
  for (const AttentionWorkItem& item : items) {
    by_tile[{item.seq, item.q_head, item.row_begin}].push_back(item);
    if (item.partial >= 0) {
      ASSERT_LT(item.partial, plan.num_partials());
      ++slot_uses[item.partial];
    }
  }
  for (int uses : slot_uses) EXPECT_EQ(uses, 1);
  int64_t rows_seen = 0;
  for (auto& [key, pieces] : by_tile) {
    std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) {
      return a.kv_begin < b.kv_begin;
    });
    const AttentionWorkItem& first = pieces.front();
    const int32_t b = first.seq;
    SCOPED_TRACE(::testing::Message() << "seq " << b << " head " << first.q_head
                                      << " row " << first.row_begin);
    ASSERT_LT(b, static_cast<int32_t>(q_lens.size()));
    EXPECT_FALSE(p.skip_decode_rows && q_lens[b] == kDecodeRowQueryLen);
    EXPECT_EQ(first.q_len, q_lens[b]);
    EXPECT_EQ(first.kv_len, kv_lens[b]);
    EXPECT_EQ(first.row_begin % p.tile_rows, 0);
    EXPECT_EQ(first.q_head % p.head_pack, 0);
    EXPECT_EQ(first.rows,
              std::min<int32_t>(p.tile_rows,
                                q_lens[b] * p.head_pack - first.row_begin));
    EXPECT_EQ(first.q_token, plan.q_begin()[b] + first.row_begin / p.head_pack);
    EXPECT_EQ((first.tile_class & kAttentionTailRows) != 0,
              first.rows < p.tile_rows);
    rows_seen += first.rows;
    // Pieces: consecutive, block aligned, one merge group iff split.
    if (pieces.size() == 1) {
      EXPECT_EQ(first.partial, -1);
      EXPECT_EQ(first.merge, -1);
    } else {
      ASSERT_GE(first.merge, 0);
      const AttentionMergeGroup& g = plan.merge_groups()[first.merge];
      EXPECT_EQ(g.pieces, static_cast<int32_t>(pieces.size()));
      EXPECT_EQ(g.rows, first.rows);
      EXPECT_EQ(g.q_token, first.q_token);
      for (size_t i = 0; i < pieces.size(); ++i) {
        EXPECT_EQ(pieces[i].merge, first.merge);
        EXPECT_GE(pieces[i].partial, g.first_partial);
        EXPECT_LT(pieces[i].partial, g.first_partial + g.pieces);
        EXPECT_GT(pieces[i].kv_end, pieces[i].kv_begin);
        if (i > 0) {
          EXPECT_EQ(pieces[i].kv_begin, pieces[i - 1].kv_end);
        }
      }
    }
    for (const AttentionWorkItem& item : pieces) {
      EXPECT_EQ(item.kv_begin % p.kv_block, 0);
    }
    const int64_t lo = first.kv_begin, hi = pieces.back().kv_end;
    // The range holds every position a row attends, and nothing past the
    // last one.
    const auto [t0, t1] = TokenRange(p, first);
    int64_t max_allowed = -1, min_allowed = kv_lens[b];
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t j = 0; j < kv_lens[b]; ++j) {
        if (!Allowed(p, q_lens[b], kv_lens[b], t, j)) continue;
        max_allowed = std::max(max_allowed, j);
        min_allowed = std::min(min_allowed, j);
      }
    }
    EXPECT_EQ(hi, std::max(max_allowed + 1, lo));
    if (max_allowed >= 0) {
      EXPECT_LE(lo, min_allowed);
      EXPECT_GT(lo + p.kv_block, min_allowed);
    }
    // A block not marked masked holds only positions every row attends.
    for (const AttentionWorkItem& item : pieces) {
      const int32_t blocks = item.Blocks(p.kv_block);
      EXPECT_LE(item.masked_below, item.masked_from);
      EXPECT_LE(item.masked_from, blocks);
      for (int32_t k = 0; k < blocks; ++k) {
        const bool marked = k < item.masked_below || k >= item.masked_from;
        bool needed = false;
        const int64_t start = item.kv_begin + int64_t{k} * p.kv_block;
        for (int64_t t = t0; t < t1 && !needed; ++t) {
          for (int64_t j = start; j < start + p.kv_block; ++j) {
            if (!Allowed(p, q_lens[b], kv_lens[b], t, j)) {
              needed = true;
              break;
            }
          }
        }
        EXPECT_EQ(marked, needed)
            << "block " << k << " of piece at " << item.kv_begin;
      }
    }
  }
  int64_t useful = 0;
  for (int32_t q : q_lens) {
    if (p.skip_decode_rows && q == kDecodeRowQueryLen) continue;
    useful += int64_t{q} * p.num_qo_heads;
  }
  EXPECT_EQ(rows_seen, useful);
  EXPECT_EQ(plan.stats().useful_rows, useful);
}

TEST(AttentionPlanTest, HeaderExample) {
  const AttentionPlanParams p = Params(1, 1, 1, 4, 4, 2, /*causal=*/true);
  AttentionPlan plan;
  TAILOR_ASSERT_OK(BuildAttentionPlan({6}, {8}, p, &plan));
  ASSERT_EQ(plan.items().size(), 2u);
  // Longest first: tile 0 (two masked blocks) on worker 0, tile 1 on 1.
  ASSERT_EQ(plan.worker_begin()[1], 1);
  const AttentionWorkItem& t0 = plan.items()[0];
  const AttentionWorkItem& t1 = plan.items()[1];
  EXPECT_EQ(t1.row_begin, 4);
  EXPECT_EQ(t1.rows, 2);
  EXPECT_EQ(t1.kv_end, 8);
  EXPECT_EQ(t1.masked_from, 1);
  EXPECT_EQ(t1.tile_class, kAttentionTailRows | kAttentionMaskedBlocks);
  EXPECT_EQ(t0.row_begin, 0);
  EXPECT_EQ(t0.kv_end, 6);
  EXPECT_EQ(t0.masked_from, 0);
  EXPECT_EQ(t0.tile_class, kAttentionMaskedBlocks);
  ExpectValidPlan(plan, {6}, {8}, p);
}

TEST(AttentionPlanTest, AwkwardLengthsInOneBatch) {
  // 0, 1, tile - 1, tile, tile + 1, 17, 577 query tokens over prefixes.
  const std::vector<int32_t> q = {0, 1, 31, 32, 33, 17, 577, 5};
  const std::vector<int32_t> kv = {0, 9, 31, 100, 33, 600, 577, 5};
  for (bool causal : {false, true}) {
    for (int32_t pack : {1, 4}) {
      const AttentionPlanParams p = Params(8, 2, pack, 128, 64, 7, causal);
      AttentionPlan plan;
      TAILOR_ASSERT_OK(BuildAttentionPlan(q, kv, p, &plan));
      ExpectValidPlan(plan, q, kv, p);
    }
  }
}

TEST(AttentionPlanTest, DecodeRowsPackTheGroupIntoOneTile) {
  // Qwen3 heads: group 8; 4 decode rows and one speculative row of 4.
  const AttentionPlanParams p = Params(32, 4, 8, 128, 128, 132, true);
  AttentionPlan plan;
  TAILOR_ASSERT_OK(
      BuildAttentionPlan({1, 1, 1, 1, 4}, {100, 5000, 1, 70, 300}, p, &plan));
  EXPECT_EQ(plan.stats().tiles, 5 * 4);  // one tile per (sequence, KV head)
  for (const AttentionWorkItem& item : plan.items()) {
    EXPECT_EQ(item.rows, item.q_len * 8);
  }
  ExpectValidPlan(plan, {1, 1, 1, 1, 4}, {100, 5000, 1, 70, 300}, p);
}

TEST(AttentionPlanTest, OneLongTileSplitsAndMerges) {
  // B = 1 decode over 32k: 4 tiles (one per KV head) on 132 workers.
  const AttentionPlanParams p = Params(32, 4, 8, 128, 128, 132, true);
  AttentionPlan plan;
  TAILOR_ASSERT_OK(BuildAttentionPlan({1}, {32768}, p, &plan));
  EXPECT_EQ(plan.stats().split_tiles, 4);
  EXPECT_EQ(plan.merge_groups().size(), 4u);
  EXPECT_GT(plan.stats().busy_workers, 32);
  ExpectValidPlan(plan, {1}, {32768}, p);
}

TEST(AttentionPlanTest, SlidingWindowMasksTheLeftEdge) {
  const AttentionPlanParams p = Params(4, 4, 1, 64, 32, 5, true, 100);
  const std::vector<int32_t> q = {300, 7, 1}, kv = {500, 1000, 64};
  AttentionPlan plan;
  TAILOR_ASSERT_OK(BuildAttentionPlan(q, kv, p, &plan));
  bool below = false;
  for (const AttentionWorkItem& item : plan.items()) {
    below |= item.masked_below > 0;
  }
  EXPECT_TRUE(below);
  ExpectValidPlan(plan, q, kv, p);
}

TEST(AttentionPlanTest, RandomStepsKeepEveryInvariant) {
  std::mt19937_64 rng(TestSeed());
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t hkv = 1 << (rng() % 3);
    const int32_t group = 1 << (rng() % 4);
    const int32_t pack = 1 << (rng() % (1 + __builtin_ctz(group)));
    const int32_t rows = 16 << (rng() % 3);
    const int32_t block = 16 << (rng() % 3);
    const bool causal = rng() % 3 != 0;
    const int32_t window = causal && rng() % 3 == 0 ? rng() % 200 : -1;
    const int32_t workers = 1 + rng() % 40;
    AttentionPlanParams p = Params(hkv * group, hkv, std::min(pack, rows), rows,
                                   block, workers, causal, window);
    p.skip_decode_rows = rng() % 2 == 0;
    const int32_t batch = rng() % 6;
    std::vector<int32_t> q(batch), kv(batch);
    for (int32_t b = 0; b < batch; ++b) {
      kv[b] = rng() % 400;
      q[b] = causal ? (kv[b] == 0 ? 0 : rng() % (kv[b] + 1)) : rng() % 300;
      if (kv[b] > 0 && rng() % 3 == 0) q[b] = 1;  // decode rows
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    AttentionPlan plan;
    TAILOR_ASSERT_OK(BuildAttentionPlan(q, kv, p, &plan));
    ExpectValidPlan(plan, q, kv, p);
    // LPT: the busiest worker costs at most the mean plus one item.
    int64_t max_item = 0;
    for (const AttentionWorkItem& item : plan.items()) {
      const int64_t blocks = item.Blocks(block);
      max_item = std::max(max_item, p.item_cost + blocks * (block + block / 4));
    }
    EXPECT_LE(plan.stats().max_worker_cost,
              plan.stats().mean_worker_cost + max_item + 1);
  }
}

TEST(AttentionPlanTest, ReservedPlansDoNotGrow) {
  const AttentionPlanParams p = Params(32, 8, 4, 128, 128, 132, true);
  AttentionPlan plan;
  const std::vector<int32_t> q_big(64, 2048), kv_big(64, 4096);
  TAILOR_ASSERT_OK(plan.Reserve(64, AttentionTileCount(q_big, p), p));
  const size_t bytes = plan.CapacityBytes();
  std::mt19937_64 rng(TestSeed());
  for (int step = 0; step < 20; ++step) {
    std::vector<int32_t> q(1 + rng() % 64), kv(q.size());
    for (size_t b = 0; b < q.size(); ++b) {
      q[b] = rng() % 2049;
      kv[b] = q[b] + rng() % 2048;
    }
    TAILOR_ASSERT_OK(BuildAttentionPlan(q, kv, p, &plan));
  }
  TAILOR_ASSERT_OK(BuildAttentionPlan(q_big, kv_big, p, &plan));
  EXPECT_EQ(plan.CapacityBytes(), bytes);
}

TEST(AttentionPlanTest, RejectsBadLengthsByName) {
  const AttentionPlanParams p = Params(8, 2, 4, 128, 128, 4, true);
  AttentionPlan plan;
  EXPECT_THAT(BuildAttentionPlan({1, 5}, {3, 4}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("q_lens[1]: 5 exceeds kv_lens[1] = 4")));
  EXPECT_EQ(plan.batch(), 0);
  EXPECT_THAT(BuildAttentionPlan({1}, {3, 4}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kv_lens: has 2 entries, q_lens has 1")));
  EXPECT_THAT(BuildAttentionPlan({-1}, {3}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("q_lens[0]: -1 is outside [0, ")));
  EXPECT_THAT(BuildAttentionPlan({0}, {-2}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kv_lens[0]: -2 is outside [0, ")));
}

TEST(AttentionPlanTest, RejectsBadParamsByName) {
  AttentionPlan plan;
  AttentionPlanParams p = Params(8, 3, 1, 128, 128, 4, true);
  EXPECT_THAT(BuildAttentionPlan({1}, {1}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.num_qo_heads: 8 is not a multiple of "
                                 "num_kv_heads 3")));
  p = Params(8, 2, 3, 128, 128, 4, true);
  EXPECT_THAT(BuildAttentionPlan({1}, {1}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.head_pack: 3 must be a power of two "
                                 "dividing the group 4 and tile_rows 128")));
  p = Params(8, 2, 1, 128, 128, 4, false, 10);
  EXPECT_THAT(BuildAttentionPlan({1}, {1}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.window_left: a sliding window needs "
                                 "causal attention")));
  p = Params(8, 2, 1, 128, 0, 4, false);
  EXPECT_THAT(
      BuildAttentionPlan({1}, {1}, p, &plan),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("params.kv_block: must be in [1, 4096], got 0")));
  p = Params(8, 2, 1, 128, 128, 0, false);
  EXPECT_THAT(BuildAttentionPlan({1}, {1}, p, &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params.num_workers: must be in [1, 65536]")));
}

}  // namespace
}  // namespace tailor::plan
