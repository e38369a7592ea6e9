// The Hopper grouped GEMM's launch-shape model (templates/cuda/moe/params.h):
// N tiles, the split-K choice and the split area of the route scratch. Pure
// host code: the same constexpr functions size the launches and the device
// loops, so they are pinned here without a GPU.
#include <vector>

#include <gtest/gtest.h>

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
  EXPECT_EQ(MoeSm90Ctas(1000, 768, kH100Sms, true, /*swap_ab=*/true),
            kH100Sms);
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

// W evict-first: only steps whose experts are one plan tile each and whose
// active experts' W fits in the L2 (an H100's 50 MiB); the early W prefetch:
// those of them that overlap their predecessors.
TEST(MoeSm90LaunchShapes, OnlyOneTileExpertsWhoseWeightsFitTheL2EvictW) {
  constexpr long long kL2 = 50LL << 20;
  constexpr long long kBf16 = 2;
  // Qwen3-30B-A3B T=1 (8 rows, 8-row swap-AB tiles, 128 experts).
  EXPECT_TRUE(MoeSm90EvictFirstW(8, 8, 128, 1536 * 2048 * kBf16, kL2));
  EXPECT_TRUE(MoeSm90EvictFirstW(8, 8, 128, 2048 * 768 * kBf16, kL2));
  // T=2: 16 rows on 8-row tiles, so an expert may hold two tiles.
  EXPECT_FALSE(MoeSm90EvictFirstW(16, 8, 128, 2048 * 768 * kBf16, kL2));
  // DeepSeek-V3 T=1: 8 experts x 58.7 MB; Mixtral T=1: 2 x 235 MB.
  EXPECT_FALSE(MoeSm90EvictFirstW(8, 8, 256, 4096LL * 7168 * kBf16, kL2));
  EXPECT_FALSE(MoeSm90EvictFirstW(2, 8, 8, 28672LL * 4096 * kBf16, kL2));
  // At most E experts are active, however many rows: 2 x 20 MB fit.
  EXPECT_TRUE(MoeSm90EvictFirstW(8, 8, 2, 20LL << 20, kL2));
  EXPECT_FALSE(MoeSm90EvictFirstW(8, 8, 3, 20LL << 20, kL2));
  // Exactly the L2, and nothing to stream.
  EXPECT_TRUE(MoeSm90EvictFirstW(1, 8, 8, kL2, kL2));
  EXPECT_FALSE(MoeSm90EvictFirstW(0, 8, 8, 1, kL2));
  // The early W prefetch takes the same steps where they overlap their
  // predecessors (decode sizes), and no others.
  EXPECT_TRUE(MoeSm90PrefetchWEarly(8, 8, 128, 1536 * 2048 * kBf16, kL2));
  EXPECT_FALSE(MoeSm90PrefetchWEarly(16, 8, 128, 2048 * 768 * kBf16, kL2));
  EXPECT_TRUE(MoeSm90EvictFirstW(2048, 2048, 1, 1 << 20, kL2));
  EXPECT_FALSE(MoeSm90PrefetchWEarly(2048, 2048, 1, 1 << 20, kL2));
}

// Programmatic dependent launch: decode-sized steps only (one route segment
// of rows), measured slower from 4096 tokens.
TEST(MoeSm90LaunchShapes, OnlyDecodeSizedStepsOverlapTheirPredecessors) {
  EXPECT_TRUE(MoeOverlapsPredecessor(0));
  EXPECT_TRUE(MoeOverlapsPredecessor(8));     // Qwen3-30B-A3B T=1
  EXPECT_TRUE(MoeOverlapsPredecessor(1024));  // T=128 at k=8
  EXPECT_FALSE(MoeOverlapsPredecessor(1025));
  EXPECT_FALSE(MoeOverlapsPredecessor(32768));  // T=4096 at k=8
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

TEST(MoeSm90LaunchShapes, CtasCoverTheMostUnitsOfAnyTileCount) {
  // Few tiles: room for every split; many: one CTA per SM.
  EXPECT_EQ(MoeSm90Ctas(8, 7168, kH100Sms, true), 64);  // 112 blocks: 8
  EXPECT_EQ(MoeSm90Ctas(8, 1024, kH100Sms, true), 16);  // 16 blocks: 2
  EXPECT_EQ(MoeSm90Ctas(8, 768, kH100Sms, true), 8);    // 12 blocks: 1
  EXPECT_EQ(MoeSm90Ctas(8, 7168, kH100Sms, false), 8);
  EXPECT_EQ(MoeSm90Ctas(1000, 7168, kH100Sms, true), kH100Sms);
  for (long long max_tiles = 1; max_tiles <= 300; ++max_tiles) {
    for (long long k : {64LL, 1024LL, 7168LL}) {
      const int ctas = MoeSm90Ctas(max_tiles, k, kH100Sms, true);
      const int k_blocks = static_cast<int>((k + 63) / 64);
      for (long long tiles = 0; tiles <= max_tiles; ++tiles) {
        const MoeSm90Schedule s =
            Schedule(static_cast<int>(tiles), ctas, k_blocks);
        // Units past the grid run in later waves; a split never needs
        // more CTAs than were launched.
        EXPECT_LE((tiles - s.whole) * s.splits, ctas);
      }
    }
  }
}

// Waves start together for the 128-row kernel at K >= 96 K blocks:
// DeepSeek-V3 gate/up (K = 7168) and Mixtral-8x7B down (K = 14336), not
// K = 4096 or 2048, nor the 64-row and swap-AB kernels.
TEST(MoeSm90LaunchShapes, LongKLaunchesOfTheLargeTileSyncTheirWaves) {
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 7168));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 14336));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 96 * 64));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 95 * 64 + 1));  // 96 blocks
  EXPECT_FALSE(MoeSm90WaveSync(128, false, 95 * 64));
  EXPECT_FALSE(MoeSm90WaveSync(128, false, 4096));
  EXPECT_FALSE(MoeSm90WaveSync(64, false, 7168));
  EXPECT_FALSE(MoeSm90WaveSync(32, true, 14336));
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

// A cluster per unit, never more than the device runs at once (66 pairs on
// an H100's 132 SMs; 32 clusters of 4 where GPCs of 18 SMs fit 4 each).
TEST(MoeSm90LaunchShapes, ClusterCtasCoverUnitsUpToTheResidentClusters) {
  EXPECT_EQ(MoeSm90ClusterCtas(1, 1, 2, 66), 2);
  EXPECT_EQ(MoeSm90ClusterCtas(3, 1, 2, 66), 4);
  EXPECT_EQ(MoeSm90ClusterCtas(131, 1, 2, 66), 132);
  EXPECT_EQ(MoeSm90ClusterCtas(100000, 1, 2, 66), 132);
  EXPECT_EQ(MoeSm90ClusterCtas(3, 5, 4, 32), 20);
  EXPECT_EQ(MoeSm90ClusterCtas(100000, 16, 4, 32), 128);
}

// Raster group bounds (the anchors' grid on an H100's 50 MiB L2): forward
// while the average expert has half a CTA tile to two tiles of rows
// (Mixtral-8x7B T=256, DeepSeek-V3 T=4096, Qwen3-30B-A3B T=1024); back from
// two tiles up where one expert's W is at least twice the L2 (Mixtral T=1024
// and up: 235 MB gate/up, 117 MB down); else fixed (Mixtral T=64, DeepSeek-V3
// T=16384 with 59 MB of W an expert, Qwen3 T=4096 with 6 MB).
TEST(MoeSm90LaunchShapes, ExpertGroupsByTilesPerExpertAndWeightBytes) {
  constexpr long long kL2 = 50LL << 20;
  constexpr long long kMixtralUp = 2LL * 14336 * 4096 * 2;
  constexpr long long kMixtralDown = 4096LL * 14336 * 2;
  constexpr long long kDeepSeekUp = 2LL * 2048 * 7168 * 2;
  constexpr long long kQwenUp = 2LL * 768 * 2048 * 2;
  struct Step {
    long long assignments, experts;
    int cta_rows;
    long long expert_w_bytes;
    int groups;
  };
  for (const Step& s : std::vector<Step>{
           {256 * 2, 8, 128, kMixtralUp, kMoeGroupsForward},
           {64 * 2, 8, 64, kMixtralUp, kMoeGroupsFixed},
           {1024 * 2, 8, 128, kMixtralUp, kMoeGroupsBack},
           {16384 * 2, 8, 128, kMixtralDown, kMoeGroupsBack},
           {4096 * 8, 256, 128, kDeepSeekUp, kMoeGroupsForward},
           {16384 * 8, 256, 128, kDeepSeekUp, kMoeGroupsFixed},
           {1024 * 8, 128, 128, kQwenUp, kMoeGroupsForward},
           {4096 * 8, 128, 128, kQwenUp, kMoeGroupsFixed},
           // The bounds: half a tile, two tiles, twice the L2.
           {63, 1, 128, kMixtralUp, kMoeGroupsFixed},
           {64, 1, 128, kMixtralUp, kMoeGroupsForward},
           {255, 1, 128, kMixtralUp, kMoeGroupsForward},
           {256, 1, 128, 2 * kL2, kMoeGroupsBack},
           {256, 1, 128, 2 * kL2 - 1, kMoeGroupsFixed},
           // No experts: nothing to group.
           {1, 0, 128, kMixtralUp, kMoeGroupsFixed}}) {
    EXPECT_EQ(MoeSm90ExpertGroups(s.assignments, s.experts, s.cta_rows,
                                  s.expert_w_bytes, kL2),
              s.groups)
        << s.assignments << " assignments, " << s.experts << " experts, "
        << s.cta_rows << " CTA rows, " << s.expert_w_bytes << " W bytes";
  }
}

}  // namespace
}  // namespace tailor::cuda
