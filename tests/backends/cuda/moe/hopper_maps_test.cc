// The Hopper grouped GEMM's tensor maps over a workspace's reserved rows
// (backends/cuda/moe/kernels.h, EncodeHopperGemmMaps) and the bounded
// descriptor pool: a server's steps of every T reuse the maps of the first,
// and the pool never holds more than its bound. Host code with a counting
// fake encoder: no GPU, no driver.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "backends/cuda/moe/heuristics.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/tma/descriptor_pool.h"

namespace tailor::cuda {
namespace {

using tailor::internal::GroupedGemmLaunch;

constexpr int kHopper = 90;
constexpr size_t kBound = 16;

// Qwen3-30B-A3B's experts on a workspace reserved for 10,000 tokens.
constexpr int64_t kMaxTokens = 10000, kTopk = 8, kExperts = 128;
constexpr int64_t kHidden = 2048, kIntermediate = 768;
constexpr int64_t kReservedRows = kMaxTokens * kTopk;

// Device addresses of the workspace's row buffers and the weights (never
// dereferenced: the fake encoder only reads the spec).
const void* const kRowsH = reinterpret_cast<const void*>(0x7f0000000000);
const void* const kRowsI = reinterpret_cast<const void*>(0x7f1000000000);
const void* const kW13 = reinterpret_cast<const void*>(0x7f2000000000);
const void* const kW2 = reinterpret_cast<const void*>(0x7f3000000000);

// Counts its calls; "encodes" the address, the rows and the box rows.
TensorMapEncoder CountingEncoder(int* calls) {
  return [calls](const TensorMapSpec& spec, TensorMapBytes* out) {
    ++*calls;
    const uint64_t fields[3] = {spec.global_address, spec.global_dims[1],
                                spec.box_dims[1]};
    std::memcpy(out->bytes, fields, sizeof(fields));
    return absl::OkStatus();
  };
}

// The fields CountingEncoder put into `map`: address, rows, box rows.
std::vector<uint64_t> Fields(const TensorMap& map) {
  uint64_t fields[3];
  std::memcpy(fields, &map, sizeof(fields));
  return {fields[0], fields[1], fields[2]};
}

// moe::Experts' two GEMMs of a step of `tokens` tokens on the workspace,
// with the plan tile the cost model picks (or `tile_rows`), as the op front
// describes them: rows T * k, row capacity the reservation.
std::vector<GroupedGemmLaunch> ExpertsStep(int64_t tokens,
                                           int64_t tile_rows = 0) {
  const int64_t rows = tokens * kTopk;
  if (tile_rows == 0) {
    tile_rows = MoeDefaultTileRows(/*hopper=*/true, /*swap_ab=*/true, rows,
                                   kExperts, /*max_expert_rows=*/tokens);
  }
  GroupedGemmLaunch gate_up = {.dtype = DType::kBF16,
                               .n = 2 * kIntermediate,
                               .k = kHidden,
                               .tile_rows = tile_rows,
                               .epilogue = moe::Epilogue::kSiluAndMul,
                               .a = kRowsH,
                               .w = kW13,
                               .c = const_cast<void*>(kRowsI),
                               .rows = rows,
                               .row_capacity = kReservedRows,
                               .experts = kExperts};
  GroupedGemmLaunch down = gate_up;
  down.n = kHidden;
  down.k = kIntermediate;
  down.epilogue = moe::Epilogue::kNone;
  down.a = kRowsI;
  down.w = kW2;
  down.c = const_cast<void*>(kRowsH);
  return {gate_up, down};
}

// Encodes one step's maps as the Hopper launch does.
void RunStep(DescriptorPool& pool, const std::vector<GroupedGemmLaunch>& step) {
  for (const GroupedGemmLaunch& l : step) {
    const bool swap = HopperSwapAB(true, l.tile_rows);
    const int a_rows = MoeSm90ARows(static_cast<int>(l.tile_rows), swap);
    absl::StatusOr<HopperGemmMaps> maps =
        EncodeHopperGemmMaps(pool, l, a_rows, /*tma_store=*/!swap);
    ASSERT_TRUE(maps.ok()) << maps.status();
  }
}

std::vector<int64_t> ShuffledTokens(uint32_t seed) {
  std::vector<int64_t> tokens(kMaxTokens);
  std::iota(tokens.begin(), tokens.end(), 1);
  std::mt19937 rng(seed);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  return tokens;
}

// One plan tile (a fixed routing policy): the first step encodes A, W and C
// of both GEMMs; 9,999 more steps of other T encode nothing.
TEST(HopperGemmMapsTest, TenThousandDistinctStepsEncodeOnlyTheFirst) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  int calls = 0;
  DescriptorPool pool(kHopper, CountingEncoder(&calls), kBound);
  const std::vector<int64_t> tokens = ShuffledTokens(seed);
  RunStep(pool, ExpertsStep(tokens[0], /*tile_rows=*/128));
  EXPECT_EQ(calls, 6);  // per GEMM: A, W, C (full 128-row tiles: TMA stores)
  for (size_t i = 1; i < tokens.size(); ++i) {
    RunStep(pool, ExpertsStep(tokens[i], /*tile_rows=*/128));
    ASSERT_EQ(calls, 6) << "step " << i << ", T = " << tokens[i];
    ASSERT_LE(pool.size(), kBound);
  }
  EXPECT_EQ(pool.counters().encodes, 6u);
  EXPECT_EQ(pool.counters().evictions, 0u);
}

// The cost model's tiles (8 and 32 swap-AB, 64, 128 rows by T): each tile
// size's A boxes are encoded the first time a step takes it, and the
// 10,000 steps after those four need no encode at all.
TEST(HopperGemmMapsTest, TheCostModelsTilesEncodeOncePerTile) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  int calls = 0;
  DescriptorPool pool(kHopper, CountingEncoder(&calls), kBound);
  // T = 1 (8-row tiles), 16 (32), 256 (64: 16 rows an expert), 4096 (128).
  for (int64_t t : {1, 16, 256, 4096}) RunStep(pool, ExpertsStep(t));
  const int warm = calls;
  EXPECT_LE(pool.size(), kBound);
  for (int64_t t : ShuffledTokens(seed)) {
    RunStep(pool, ExpertsStep(t));
    ASSERT_EQ(calls, warm) << "T = " << t;
    ASSERT_LE(pool.size(), kBound);
  }
  // 4 tiles x 2 GEMMs x A and the 2 weights. C (the same map for the 64-
  // and 128-row tiles; swap-AB stores from registers) is {64, 64} boxes
  // over one row buffer, as the other GEMM's A of the 64-row tile: shared.
  EXPECT_EQ(warm, 4 * 2 + 2);
}

// What the maps used to span: the step's own rows. Every new T then cost
// an encode on the launch path; the bound keeps the pool from growing with
// them, evicting the least recently used instead.
TEST(HopperGemmMapsTest, StepSizedMapsStayBoundedByEviction) {
  int calls = 0;
  DescriptorPool pool(kHopper, CountingEncoder(&calls), kBound);
  for (int64_t t = 1; t <= 1000; ++t) {
    std::vector<GroupedGemmLaunch> step = ExpertsStep(t, /*tile_rows=*/128);
    for (GroupedGemmLaunch& l : step) l.row_capacity = 0;
    RunStep(pool, step);
    ASSERT_LE(pool.size(), kBound);
  }
  EXPECT_GT(calls, 1000);  // A and C of both GEMMs, nearly every step
  EXPECT_GT(pool.counters().evictions, 0u);
}

// The maps span the reservation, not the step; A's box follows the tile.
// Without a capacity (a caller's tensors of exactly R rows) they span R. A
// misaligned C stays on the register stores, its map zero.
TEST(HopperGemmMapsTest, MapsSpanTheReservedRows) {
  int calls = 0;
  DescriptorPool pool(kHopper, CountingEncoder(&calls), kBound);
  GroupedGemmLaunch l = ExpertsStep(/*tokens=*/3, /*tile_rows=*/64)[0];
  absl::StatusOr<HopperGemmMaps> maps =
      EncodeHopperGemmMaps(pool, l, /*a_rows=*/64, /*tma_store=*/true);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint64_t rows_h = reinterpret_cast<uint64_t>(kRowsH);
  const uint64_t rows_i = reinterpret_cast<uint64_t>(kRowsI);
  const uint64_t w13 = reinterpret_cast<uint64_t>(kW13);
  EXPECT_EQ(Fields(maps->a),
            (std::vector<uint64_t>{rows_h, kReservedRows, 64}));
  EXPECT_EQ(Fields(maps->w),
            (std::vector<uint64_t>{w13, kExperts * 2 * kIntermediate, 64}));
  EXPECT_EQ(Fields(maps->c),
            (std::vector<uint64_t>{rows_i, kReservedRows, 64}));
  EXPECT_TRUE(maps->tma_store);

  l.row_capacity = 0;
  maps = EncodeHopperGemmMaps(pool, l, /*a_rows=*/32, /*tma_store=*/true);
  ASSERT_TRUE(maps.ok());
  EXPECT_EQ(Fields(maps->a), (std::vector<uint64_t>{rows_h, 3 * kTopk, 32}));
  EXPECT_EQ(Fields(maps->c), (std::vector<uint64_t>{rows_i, 3 * kTopk, 64}));

  l.c = static_cast<char*>(const_cast<void*>(kRowsI)) + 2;
  maps = EncodeHopperGemmMaps(pool, l, 64, /*tma_store=*/true);
  ASSERT_TRUE(maps.ok());
  EXPECT_FALSE(maps->tma_store);
  const TensorMap zero = {};
  EXPECT_EQ(std::memcmp(&maps->c, &zero, sizeof(zero)), 0);
  maps = EncodeHopperGemmMaps(pool, ExpertsStep(3, 64)[0], 64,
                              /*tma_store=*/false);
  ASSERT_TRUE(maps.ok());
  EXPECT_FALSE(maps->tma_store);
}

}  // namespace
}  // namespace tailor::cuda
