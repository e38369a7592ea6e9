// The MoE family's launch rules on the CUDA backend
// (backends/cuda/moe/heuristics.h), as tables of steps: pure host code, no
// GPU. A change to a rule changes a row here, on purpose.
#include "backends/cuda/moe/heuristics.h"

#include <gtest/gtest.h>

#include <vector>

#include "templates/cuda/moe/params.h"

namespace tailor::cuda {
namespace {

constexpr int kH100Sms = 132;

// Tiles, grid, K blocks -> the split-K schedule (templates/cuda/moe/params.h).
MoeSm90Schedule Schedule(int tiles, int grid, int k_blocks) {
  return MoeSm90ScheduleOf(tiles, grid, k_blocks, /*split_k=*/true);
}

// Tile rows: 128 from 32 rows an expert on average (T * k / E), the
// swap-AB tiles where no expert gets more than 32 rows, else 64; 64 off
// Hopper. Shapes: DeepSeek-V3 (E 256, k 8), Qwen3-30B-A3B (E 128, k 8),
// Mixtral-8x7B (E 8, k 2).
TEST(MoeHeuristics, TileRowsByRowsPerExpert) {
  struct Step {
    bool hopper, swap_ab;
    int64_t assignments, experts, max_expert_rows;
    int32_t tile_rows;
  };
  for (const Step& s : std::vector<Step>{
           {true, true, 4096 * 8, 256, 300, 128},  // 128 rows an expert
           {true, true, 32 * 256, 256, 90, 128},   // exactly 32 on average
           {true, true, 32 * 256 - 1, 256, 90, 64},
           {true, true, 1 * 8, 128, 1, 8},     // Qwen3 T=1: swap-AB, 8 rows
           {true, true, 16 * 8, 128, 8, 8},    // no expert past 8 rows
           {true, true, 16 * 8, 128, 9, 32},   // one expert of 9 rows
           {true, true, 16 * 8, 128, 32, 32},  // at most 32 rows
           {true, true, 16 * 8, 128, 33, 64},  // past the swap-AB tile
           {true, false, 1 * 8, 128, 1, 64},   // swap-AB off
           {true, true, 1 * 2, 8, 1, 8},       // Mixtral T=1
           {true, true, 256 * 2, 8, 80, 128},  // Mixtral T=256: 64 an expert
           {false, true, 4096 * 8, 256, 300, 64},  // not Hopper
           {false, true, 1 * 8, 128, 1, 64}}) {
    EXPECT_EQ(MoeDefaultTileRows(s.hopper, s.swap_ab, s.assignments, s.experts,
                                 s.max_expert_rows),
              s.tile_rows)
        << "hopper " << s.hopper << " swap_ab " << s.swap_ab << ", "
        << s.assignments << " assignments, " << s.experts << " experts, "
        << s.max_expert_rows << " rows at most";
  }
}

TEST(MoeHeuristics, SwapABTilesAreEightOrThirtyTwoRows) {
  EXPECT_EQ(MoeSwapTileRows(0), kMoeSwapSmallTile);
  EXPECT_EQ(MoeSwapTileRows(1), 8);
  EXPECT_EQ(MoeSwapTileRows(8), 8);
  EXPECT_EQ(MoeSwapTileRows(9), 32);
  EXPECT_EQ(MoeSwapTileRows(32), kMoeSwapLargeTile);
  // Swap-AB runs the plan tiles of at most 32 rows, when enabled.
  EXPECT_TRUE(HopperSwapAB(true, 1));
  EXPECT_TRUE(HopperSwapAB(true, 32));
  EXPECT_FALSE(HopperSwapAB(true, 33));
  EXPECT_FALSE(HopperSwapAB(true, 64));
  EXPECT_FALSE(HopperSwapAB(false, 8));
}

// Clusters only where forced (the cost model takes none), and only on the
// 128-row kernel.
TEST(MoeHeuristics, ClustersOnlyWhereForcedOnTheLargeTile) {
  EXPECT_EQ(HopperClusterFor(1, 128), 1);
  EXPECT_EQ(HopperClusterFor(2, 128), 2);
  EXPECT_EQ(HopperClusterFor(4, 128), 4);
  EXPECT_EQ(HopperClusterFor(2, 64), 1);
  EXPECT_EQ(HopperClusterFor(4, 64), 1);
}

// Ping-pong consumers: the kernel exists for 128-row CTA tiles without
// swap-AB or clusters. There is no cost-model rule to test: the H200 table
// (moe_hopper_design.txt "Ping-pong consumers") has them slower than the
// cooperative kernel at every compute-bound step, so only moe.consumers=
// pingpong runs them (the golden warm-up rows pin both lists).
TEST(MoeHeuristics, PingPongFitsLargeTilesOnly) {
  EXPECT_TRUE(MoeSm90PingPongFits(128, false, 1));
  EXPECT_FALSE(MoeSm90PingPongFits(64, false, 1));
  EXPECT_FALSE(MoeSm90PingPongFits(128, true, 1));
  EXPECT_FALSE(MoeSm90PingPongFits(128, false, 2));
  EXPECT_FALSE(MoeSm90PingPongFits(128, false, 4));
}

// W evict-first: only steps whose experts are one plan tile each and whose
// active experts' W fits in the L2 (an H100's 50 MiB); the early W prefetch:
// those of them that overlap their predecessors.
TEST(MoeHeuristics, OnlyOneTileExpertsWhoseWeightsFitTheL2EvictW) {
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
TEST(MoeHeuristics, OnlyDecodeSizedStepsOverlapTheirPredecessors) {
  EXPECT_TRUE(MoeOverlapsPredecessor(0));
  EXPECT_TRUE(MoeOverlapsPredecessor(8));     // Qwen3-30B-A3B T=1
  EXPECT_TRUE(MoeOverlapsPredecessor(1024));  // T=128 at k=8
  EXPECT_FALSE(MoeOverlapsPredecessor(1025));
  EXPECT_FALSE(MoeOverlapsPredecessor(32768));  // T=4096 at k=8
}

TEST(MoeHeuristics, CtasCoverTheMostUnitsOfAnyTileCount) {
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
TEST(MoeHeuristics, LongKLaunchesOfTheLargeTileSyncTheirWaves) {
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 7168));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 14336));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 96 * 64));
  EXPECT_TRUE(MoeSm90WaveSync(128, false, 95 * 64 + 1));  // 96 blocks
  EXPECT_FALSE(MoeSm90WaveSync(128, false, 95 * 64));
  EXPECT_FALSE(MoeSm90WaveSync(128, false, 4096));
  EXPECT_FALSE(MoeSm90WaveSync(64, false, 7168));
  EXPECT_FALSE(MoeSm90WaveSync(32, true, 14336));
}

// A cluster per unit, never more than the device runs at once (66 pairs on
// an H100's 132 SMs; 32 clusters of 4 where GPCs of 18 SMs fit 4 each).
TEST(MoeHeuristics, ClusterCtasCoverUnitsUpToTheResidentClusters) {
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
TEST(MoeHeuristics, ExpertGroupsByTilesPerExpertAndWeightBytes) {
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
  for (const Step& s :
       std::vector<Step>{{256 * 2, 8, 128, kMixtralUp, kMoeGroupsForward},
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
