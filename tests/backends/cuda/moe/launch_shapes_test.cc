// The Hopper grouped GEMM's launch shapes (templates/cuda/moe/params.h): N
// tiles, the split-K schedule, the split area of the route scratch, cluster
// units. Pure host code: the same constexpr functions size the launches and
// the device loops, so they are pinned here without a GPU. The launch rules
// that pick among them: heuristics_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/moe/heuristics.h"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {
namespace {

constexpr int kH100Sms = 132;

TEST(MoeSm90LaunchShapes, NTilesCoverTheOutputColumns) {
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/false, 4096), 16);  // 256 columns a tile
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/true, 4096), 16);   // 128 outputs a tile
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/false, 257), 2);
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/true, 2), 1);
}

// Tiles, grid, K blocks -> the schedule.
MoeSm90Schedule Schedule(int tiles, int grid, int k_blocks) {
  return MoeSm90ScheduleOf(tiles, grid, k_blocks, /*split_k=*/true);
}

TEST(MoeSm90LaunchShapes, FewTilesSplitKWhenTheyFillAtMostHalfTheGrid) {
  // Mixtral T=1 down: 2 items x 16 N tiles, K = 14336 (224 K blocks).
  MoeSm90Schedule s = Schedule(32, kH100Sms, 224);
  EXPECT_EQ(s.whole, 0);
  EXPECT_EQ(s.splits, 4);
  EXPECT_EQ(s.units, 128);
  // DeepSeek-V3 T=1 gate_up: 8 x 16 = 128 tiles: no split.
  EXPECT_EQ(Schedule(128, kH100Sms, 112).splits, 1);
  EXPECT_EQ(Schedule(67, kH100Sms, 112).splits, 1);
  EXPECT_EQ(Schedule(66, kH100Sms, 112).splits, 2);
  // Capped at kMoeSm90MaxSplits, and at 8 K blocks per split.
  EXPECT_EQ(Schedule(1, kH100Sms, 1 << 14).splits, kMoeSm90MaxSplits);
  EXPECT_EQ(Schedule(8, kH100Sms, 112).splits, 8);  // 14 by K
  EXPECT_EQ(Schedule(8, kH100Sms, 32).splits, 4);
  EXPECT_EQ(Schedule(64, kH100Sms, 12).splits, 1);  // one split of 8 fits
  EXPECT_EQ(Schedule(8, kH100Sms, 16).splits, 2);
  // Off: one unit per tile.
  s = MoeSm90ScheduleOf(32, kH100Sms, 224, /*split_k=*/false);
  EXPECT_EQ(s.whole, 32);
  EXPECT_EQ(s.units, 32);
}

// The swap-AB kernel (small partials) splits down to 4 K blocks a unit, and
// only last waves of fewer than kMoeSm90SwapSplitMaxRest tiles.
TEST(MoeSm90LaunchShapes, SwapABSplitsDownToFourKBlocks) {
  auto swap = [](int tiles, int k_blocks) {
    return MoeSm90ScheduleOf(tiles, kH100Sms, k_blocks, /*split_k=*/true,
                             /*swap_ab=*/true);
  };
  // Mixtral-8x7B T=1 down: 32 tiles of 224 K blocks.
  EXPECT_EQ(swap(32, 224).splits, 4);
  EXPECT_EQ(swap(32, 224).units, 128);
  // 16 tiles of 12 K blocks: 3 (1 without swap: one split of 8 fits).
  EXPECT_EQ(swap(16, 12).splits, 3);
  EXPECT_EQ(Schedule(16, kH100Sms, 12).splits, 1);
  EXPECT_EQ(swap(8, 16).splits, 4);
  EXPECT_EQ(swap(8, 7).splits, 1);
  EXPECT_EQ(swap(67, 112).splits, 1);  // still only a half-grid last wave
  for (int tiles = 1; tiles <= 3 * kH100Sms; ++tiles) {
    for (int k_blocks : {1, 4, 7, 12, 32, 224}) {
      const MoeSm90Schedule s = swap(tiles, k_blocks);
      if (s.splits == 1) continue;
      EXPECT_GE(k_blocks / s.splits, kMoeSm90SwapMinSplitKBlocks);
      EXPECT_LE((tiles - s.whole) * s.splits, kH100Sms);
    }
  }
  EXPECT_EQ(MoeSm90Ctas(32, 14336, kH100Sms, true, /*swap_ab=*/true), 132);
  EXPECT_EQ(MoeSm90Ctas(16, 768, kH100Sms, true, /*swap_ab=*/true), 48);
  EXPECT_EQ(MoeSm90Ctas(16, 768, kH100Sms, true), 16);
}

// A swap-AB last wave of kMoeSm90SwapSplitMaxRest tiles or more pulls the
// copy rate unsplit: Qwen3-30B-A3B T=1 gate/up (48 tiles of 32 K blocks)
// and down (64 of 12), T=16 down (3 waves and 52 tiles of 12).
TEST(MoeSm90LaunchShapes, SwapABLastWavesOfFortyTilesOrMoreStayWhole) {
  auto swap = [](int tiles, int k_blocks) {
    return MoeSm90ScheduleOf(tiles, kH100Sms, k_blocks, /*split_k=*/true,
                             /*swap_ab=*/true);
  };
  EXPECT_EQ(swap(kMoeSm90SwapSplitMaxRest - 1, 224).splits, 3);
  EXPECT_EQ(swap(kMoeSm90SwapSplitMaxRest, 224).splits, 1);
  EXPECT_EQ(swap(48, 32).units, 48);
  EXPECT_EQ(swap(64, 12).units, 64);
  const MoeSm90Schedule s = swap(3 * kH100Sms + 52, 12);
  EXPECT_EQ(s.splits, 1);
  EXPECT_EQ(s.units, 3 * kH100Sms + 52);
  // The kernel without swap-AB keeps the half-grid rule.
  EXPECT_EQ(Schedule(48, kH100Sms, 32).splits, 2);
  // Such steps get a CTA per tile; fewer tiles split within those CTAs.
  EXPECT_EQ(MoeSm90Ctas(48, 2048, kH100Sms, true, /*swap_ab=*/true), 48);
  EXPECT_EQ(MoeSm90Ctas(64, 768, kH100Sms, true, /*swap_ab=*/true), 64);
  EXPECT_EQ(MoeSm90Ctas(1000, 768, kH100Sms, true, /*swap_ab=*/true), kH100Sms);
  for (int max_tiles = kMoeSm90SwapSplitMaxRest; max_tiles <= 300;
       ++max_tiles) {
    const int ctas = MoeSm90Ctas(max_tiles, 2048, kH100Sms, true, true);
    for (int tiles = 0; tiles <= max_tiles; ++tiles) {
      const MoeSm90Schedule s = MoeSm90ScheduleOf(tiles, ctas, 32, true, true);
      EXPECT_LE((tiles - s.whole) * s.splits, ctas);
    }
  }
  EXPECT_EQ(MoeSm90ScheduleOf(20, 48, 32, true, true).splits, 2);
}

TEST(MoeSm90LaunchShapes, APartialLastWaveOfAtMostHalfTheGridIsSplit) {
  // Mixtral T=256 down: ~10 items x 16 N tiles = 160 tiles, 224 K blocks:
  // one whole wave, then the 28 tiles left split 4 ways (112 units).
  MoeSm90Schedule s = Schedule(160, kH100Sms, 224);
  EXPECT_EQ(s.whole, 132);
  EXPECT_EQ(s.splits, 4);
  EXPECT_EQ(s.units, 132 + 28 * 4);
  // 2 whole waves and 66 tiles: split in 2.
  s = Schedule(2 * 132 + 66, kH100Sms, 224);
  EXPECT_EQ(s.whole, 264);
  EXPECT_EQ(s.splits, 2);
  // A last wave of 67 tiles, or none, runs whole.
  EXPECT_EQ(Schedule(132 + 67, kH100Sms, 224).splits, 1);
  EXPECT_EQ(Schedule(3 * 132, kH100Sms, 224).whole, 3 * 132);
  EXPECT_EQ(Schedule(0, kH100Sms, 224).units, 0);
}

TEST(MoeSm90LaunchShapes, SplitTilesNeverNeedMoreSlotsThanTheGrid) {
  for (int grid : {1, 7, 66, kH100Sms}) {
    for (int tiles = 0; tiles <= 3 * grid + 1; ++tiles) {
      for (int k_blocks : {1, 16, 17, 64, 224, 1 << 14}) {
        const MoeSm90Schedule s = Schedule(tiles, grid, k_blocks);
        ASSERT_GE(s.splits, 1);
        ASSERT_EQ(s.units, s.whole + (tiles - s.whole) * s.splits);
        if (s.splits > 1) {
          EXPECT_LE((tiles - s.whole) * s.splits, grid)
              << tiles << " tiles, grid " << grid;
          EXPECT_EQ(s.whole % grid, 0);
          EXPECT_GE(k_blocks / s.splits, kMoeSm90MinSplitKBlocks);
        } else {
          EXPECT_EQ(s.whole, tiles);
        }
      }
    }
  }
}

TEST(MoeSm90LaunchShapes, SplitAreaHoldsArrivalsThenAlignedSlots) {
  // Two arrival counters per slot, padded to 256 bytes, then one f32 slot
  // (2 consumers x 128 threads x 128 accumulators) per SM.
  EXPECT_EQ(MoeSm90SplitArrivalBytes(kH100Sms), 1280);
  EXPECT_EQ(MoeSm90SplitArrivalBytes(1), 256);
  EXPECT_EQ(MoeSm90SplitScratchBytes(kH100Sms),
            1280 + kH100Sms * 2LL * 128 * 128 * 4);
}

// Clusters of 2: a unit is two items of one N tile; of 4, two items x two
// N tiles (an odd item or N tile count leaves a unit half empty).
TEST(MoeSm90LaunchShapes, ClusterUnitsCoverItemsAndNTiles) {
  EXPECT_EQ(MoeSm90ClusterUnits(1, 1, 2), 1);
  EXPECT_EQ(MoeSm90ClusterUnits(3, 5, 2), 8);    // 15 tiles
  EXPECT_EQ(MoeSm90ClusterUnits(4, 16, 4), 16);  // 64 tiles
  EXPECT_EQ(MoeSm90ClusterUnits(3, 5, 4), 5);    // 3 items x 3 N pairs
  EXPECT_EQ(MoeSm90ClusterUnits(1, 1, 4), 1);
  EXPECT_EQ(MoeSm90ClusterUnits(0, 16, 4), 0);
}

}  // namespace
}  // namespace tailor::cuda
