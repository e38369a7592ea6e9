// The Hopper grouped GEMM's launch-shape model (templates/cuda/moe_params.h):
// N tiles, the split-K choice and the split area of the route scratch. Pure
// host code: the same constexpr functions size the launches and the device
// loops, so they are pinned here without a GPU.
#include <gtest/gtest.h>

#include "templates/cuda/moe_params.h"

namespace tailor::cuda {
namespace {

constexpr int kH100Sms = 132;

TEST(MoeSm90LaunchShapes, NTilesCoverTheOutputColumns) {
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/false, 4096), 16);  // 256 columns a tile
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/true, 4096), 16);   // 128 outputs a tile
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/false, 257), 2);
  EXPECT_EQ(MoeSm90NTiles(/*gated=*/true, 2), 1);
}

TEST(MoeSm90LaunchShapes, SplitsKOnlyWhenTilesFillAtMostHalfTheSms) {
  // Mixtral T=1 down: 2 items x 16 N tiles, K = 14336 (224 K blocks).
  EXPECT_EQ(MoeSm90Splits(32, 14336, kH100Sms), 4);
  // DeepSeek-V3 T=1 gate_up: 8 x 16 = 128 tiles: no split.
  EXPECT_EQ(MoeSm90Splits(128, 7168, kH100Sms), 1);
  EXPECT_EQ(MoeSm90Splits(67, 7168, kH100Sms), 1);
  EXPECT_EQ(MoeSm90Splits(66, 7168, kH100Sms), 2);
  // Capped at kMoeSm90MaxSplits, and at 8 K blocks per split.
  EXPECT_EQ(MoeSm90Splits(1, 1 << 20, kH100Sms), kMoeSm90MaxSplits);
  EXPECT_EQ(MoeSm90Splits(8, 7168, kH100Sms), 8);   // 112 blocks: 14 by K
  EXPECT_EQ(MoeSm90Splits(8, 2048, kH100Sms), 4);   // 32 blocks
  EXPECT_EQ(MoeSm90Splits(64, 768, kH100Sms), 1);   // 12 blocks: one split
  EXPECT_EQ(MoeSm90Splits(8, 1000, kH100Sms), 2);   // 16 blocks
}

TEST(MoeSm90LaunchShapes, SplitsNeverNeedMoreSlotsThanSms) {
  for (long long tiles = 1; tiles <= 2 * kH100Sms; ++tiles) {
    for (long long k : {64LL, 1000LL, 4096LL, 14336LL, 1LL << 20}) {
      const int splits = MoeSm90Splits(tiles, k, kH100Sms);
      ASSERT_GE(splits, 1);
      if (splits > 1) {
        EXPECT_LE(tiles * splits, kH100Sms) << tiles << " tiles, K " << k;
        EXPECT_GE((k + kMoeSm90KTile - 1) / kMoeSm90KTile / splits,
                  kMoeSm90MinSplitKBlocks);
      }
    }
  }
  EXPECT_EQ(MoeSm90Splits(0, 4096, kH100Sms), 1);
}

TEST(MoeSm90LaunchShapes, SplitAreaHoldsArrivalsThenAlignedSlots) {
  // Two arrival counters per slot, padded to 256 bytes, then one f32 slot
  // (2 consumers x 128 threads x 128 accumulators) per SM.
  EXPECT_EQ(MoeSm90SplitArrivalBytes(kH100Sms), 1280);
  EXPECT_EQ(MoeSm90SplitArrivalBytes(1), 256);
  EXPECT_EQ(MoeSm90SplitScratchBytes(kH100Sms),
            1280 + kH100Sms * 2LL * 128 * 128 * 4);
}

}  // namespace
}  // namespace tailor::cuda
