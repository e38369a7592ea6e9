#include "backends/cuda/moe/heuristics.h"

#include <algorithm>
#include <cstdint>

#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

int32_t MoeDefaultTileRows(bool hopper, bool swap_ab, int64_t assignments,
                           int64_t experts, int64_t max_expert_rows) {
  if (!hopper) return 64;
  if (assignments >= kMoeRowsFor128 * experts) return 128;
  if (swap_ab && max_expert_rows <= kMoeSm90SwapMaxRows) {
    return MoeSwapTileRows(max_expert_rows);
  }
  return 64;
}

int32_t MoeSwapTileRows(int64_t max_expert_rows) {
  return max_expert_rows <= kMoeSwapSmallTile ? kMoeSwapSmallTile
                                              : kMoeSwapLargeTile;
}

bool HopperSwapAB(bool enabled, int64_t tile_rows) {
  return enabled && tile_rows <= kMoeSm90SwapMaxRows;
}

int HopperClusterFor(int forced, int cta_rows) {
  return cta_rows == kMoeSm90MaxRows ? forced : 1;
}

bool MoeSm90PingPongFits(int cta_rows, bool swap_ab, int cluster) {
  return cta_rows == kMoeSm90MaxRows && !swap_ab && cluster == 1;
}

int MoeSm90ExpertGroups(int64_t assignments, int64_t experts, int cta_rows,
                        int64_t expert_w_bytes, int64_t l2_bytes) {
  if (experts <= 0 || 2 * assignments < cta_rows * experts) {
    return kMoeGroupsFixed;
  }
  if (assignments < 2 * cta_rows * experts) return kMoeGroupsForward;
  return expert_w_bytes >= 2 * l2_bytes ? kMoeGroupsBack : kMoeGroupsFixed;
}

bool MoeSm90EvictFirstW(int64_t rows, int64_t tile_rows, int64_t experts,
                        int64_t expert_w_bytes, int64_t l2_bytes) {
  const int64_t active = std::min(rows, experts);
  return rows > 0 && rows <= tile_rows && active * expert_w_bytes <= l2_bytes;
}

bool MoeOverlapsPredecessor(int64_t step_rows) {
  return step_rows <= kMoeRouteSegment;
}

bool MoeSm90PrefetchWEarly(int64_t rows, int64_t tile_rows, int64_t experts,
                           int64_t expert_w_bytes, int64_t l2_bytes) {
  return MoeOverlapsPredecessor(rows) &&
         MoeSm90EvictFirstW(rows, tile_rows, experts, expert_w_bytes, l2_bytes);
}

bool MoeSm90WaveSync(int cta_rows, bool swap_ab, int64_t k) {
  return cta_rows == kMoeSm90MaxRows && !swap_ab &&
         (k + kMoeSm90KTile - 1) / kMoeSm90KTile >= kMoeSm90WaveSyncKBlocks;
}

int MoeSm90Ctas(int64_t max_tiles, int64_t k, int sms, bool split_k,
                bool swap_ab) {
  const int64_t k_blocks = (k + kMoeSm90KTile - 1) / kMoeSm90KTile;
  int64_t splits = split_k ? k_blocks / MoeSm90MinSplitKBlocks(swap_ab) : 1;
  // Such a step's units are its tiles (a step with fewer splits them within
  // those CTAs).
  if (swap_ab && max_tiles >= kMoeSm90SwapSplitMaxRest) splits = 1;
  splits = std::clamp<int64_t>(splits, 1, kMoeSm90MaxSplits);
  return static_cast<int>(std::min<int64_t>(max_tiles * splits, sms));
}

int MoeSm90ClusterCtas(int64_t max_items, int n_tiles, int cluster,
                       int max_clusters) {
  const int64_t units = MoeSm90ClusterUnits(max_items, n_tiles, cluster);
  return static_cast<int>(cluster * std::min<int64_t>(units, max_clusters));
}

}  // namespace tailor::cuda
