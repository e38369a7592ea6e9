#include "plan/ragged_partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

#include "plan/attention_plan.h"
#include "plan/decode_plan.h"
#include "test_util.h"

namespace tailor::plan {
namespace {

using ::tailor::testing::TestSeed;
using ::testing::ElementsAre;

AttentionPlanParams TileParams(int32_t hq, int32_t hkv, int32_t workers) {
  return {.num_qo_heads = hq,
          .num_kv_heads = hkv,
          .head_pack = 1,
          .tile_rows = 16,
          .kv_block = 16,
          .num_workers = workers,
          .causal = true,
          .item_cost = 16,
          .masked_block_extra = 4,
          .skip_decode_rows = true};
}

DecodePlanParams DecodeParams(int32_t hkv, int32_t workers) {
  return {.num_kv_heads = hkv,
          .num_workers = workers,
          .tile_tokens = 64,
          .page_size = 16,
          .item_cost_tokens = 32};
}

// The whole partition of one step: tiles, the decode rows and their plan,
// renumbered, checked row by row and token by token.
struct Partition {
  AttentionPlan tiles;
  std::vector<int32_t> seqs, seq_kv_lens;
  DecodePlan decode;
  std::vector<DecodeWorkItem> items, first_items;
};

void BuildPartition(const std::vector<int32_t>& q_lens,
                    const std::vector<int32_t>& kv_lens, int32_t hq,
                    int32_t hkv, int32_t workers, Partition& p) {
  TAILOR_ASSERT_OK(BuildAttentionPlan(q_lens, kv_lens,
                                      TileParams(hq, hkv, workers), &p.tiles));
  CollectDecodeRows(q_lens, kv_lens, &p.seqs, &p.seq_kv_lens);
  TAILOR_ASSERT_OK(
      BuildDecodePlan(p.seq_kv_lens, DecodeParams(hkv, workers), &p.decode));
  RenumberDecodeItems(p.decode, p.seqs, &p.items, &p.first_items);
}

// Every query row (token, head) of the step is computed exactly once: by a
// tile when q_len != 1, else by the decode items of its (b, KV head), which
// cover [0, kv_len) exactly once and read row q_begin[b].
void ExpectEveryRowOnce(const Partition& p, const std::vector<int32_t>& q_lens,
                        const std::vector<int32_t>& kv_lens, int32_t hq,
                        int32_t hkv) {
  const int32_t batch = static_cast<int32_t>(q_lens.size());
  std::vector<int64_t> tile_rows(batch, 0);
  for (const AttentionWorkItem& item : p.tiles.items()) {
    if (item.partial < 0) tile_rows[item.seq] += item.rows;
  }
  for (const AttentionMergeGroup& group : p.tiles.merge_groups()) {
    tile_rows[group.seq] += group.rows;  // a split tile's rows, once
  }
  std::map<std::pair<int32_t, int32_t>, int64_t> decode_tokens;
  for (const DecodeWorkItem& item : p.items) {
    ASSERT_GE(item.seq, 0);
    ASSERT_LT(item.seq, batch);
    EXPECT_EQ(q_lens[item.seq], kDecodeRowQueryLen) << "seq " << item.seq;
    EXPECT_EQ(item.seq_len, kv_lens[item.seq]);
    EXPECT_EQ(p.tiles.q_begin()[item.seq] + 1, p.tiles.q_begin()[item.seq + 1]);
    decode_tokens[{item.seq, item.kv_head}] += item.kv_end - item.kv_begin;
  }
  int32_t decode_seqs = 0;
  for (int32_t b = 0; b < batch; ++b) {
    SCOPED_TRACE(::testing::Message() << "seq " << b);
    if (q_lens[b] != kDecodeRowQueryLen) {
      EXPECT_EQ(tile_rows[b], int64_t{q_lens[b]} * hq);
      continue;
    }
    ++decode_seqs;
    EXPECT_EQ(tile_rows[b], 0);
    for (int32_t h = 0; h < hkv; ++h) {
      EXPECT_EQ(decode_tokens[std::make_pair(b, h)], kv_lens[b])
          << "kv head " << h;
    }
  }
  EXPECT_EQ(p.tiles.stats().skipped_seqs, decode_seqs);
  EXPECT_EQ(static_cast<int32_t>(p.seqs.size()), decode_seqs);
  // Busy workers' first items are their first items, renumbered.
  const auto begin = p.decode.worker_begin();
  ASSERT_EQ(p.first_items.size() + 1, begin.size());
  for (size_t w = 0; w + 1 < begin.size(); ++w) {
    if (begin[w] < begin[w + 1]) {
      EXPECT_EQ(p.first_items[w], p.items[begin[w]]);
    }
  }
}

TEST(RaggedPartitionTest, HeaderExample) {
  Partition p;
  BuildPartition({4, 1, 0, 1}, {9, 30, 5, 7}, 2, 1, 3, p);
  EXPECT_THAT(p.seqs, ElementsAre(1, 3));
  EXPECT_THAT(p.seq_kv_lens, ElementsAre(30, 7));
  for (const AttentionWorkItem& item : p.tiles.items()) EXPECT_EQ(item.seq, 0);
  ExpectEveryRowOnce(p, {4, 1, 0, 1}, {9, 30, 5, 7}, 2, 1);
}

TEST(RaggedPartitionTest, DecodeOnlyStepHasNoTiles) {
  const std::vector<int32_t> q(37, 1);
  std::vector<int32_t> kv(37);
  for (int32_t b = 0; b < 37; ++b) kv[b] = 1 + 577 * b % 4099;
  Partition p;
  BuildPartition(q, kv, 32, 8, 16, p);
  EXPECT_EQ(p.tiles.stats().tiles, 0);
  EXPECT_TRUE(p.tiles.items().empty());
  ExpectEveryRowOnce(p, q, kv, 32, 8);
}

TEST(RaggedPartitionTest, StepWithoutDecodeRowsHasAnEmptyDecodePlan) {
  Partition p;
  BuildPartition({0, 2, 17, 0}, {0, 2, 577, 3}, 4, 4, 5, p);
  EXPECT_TRUE(p.seqs.empty());
  EXPECT_TRUE(p.items.empty());
  ExpectEveryRowOnce(p, {0, 2, 17, 0}, {0, 2, 577, 3}, 4, 4);
}

// Decode rows anywhere (first, last, between prefill chunks, beside q_len
// 0 and speculative q_len 2..8), one long KV among short ones, KV 1.
TEST(RaggedPartitionTest, RandomStepsComputeEveryRowOnce) {
  std::mt19937_64 rng(TestSeed());
  for (int trial = 0; trial < 80; ++trial) {
    const int32_t hkv = 1 << (rng() % 3);
    const int32_t hq = hkv << (rng() % 4);
    const int32_t workers = 1 + rng() % 40;
    const int32_t batch = rng() % 24;
    std::vector<int32_t> q(batch), kv(batch);
    for (int32_t b = 0; b < batch; ++b) {
      kv[b] = rng() % 8 == 0 ? 16384 + rng() % 100 : 1 + rng() % 700;
      switch (rng() % 4) {
        case 0:
          q[b] = 0;
          break;
        case 1:
          q[b] = std::min<int32_t>(kv[b], 2 + rng() % 7);
          break;
        case 2:
          q[b] = 1 + rng() % std::min<int32_t>(kv[b], 300);
          break;
        default:
          q[b] = 1;
      }
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    Partition p;
    BuildPartition(q, kv, hq, hkv, workers, p);
    ExpectEveryRowOnce(p, q, kv, hq, hkv);
  }
}

}  // namespace
}  // namespace tailor::plan
