// templates/cuda/moe/sm90/scheduler.cuh — the Hopper grouped GEMM's
// persistent tile scheduler: which unit of work each CTA (or cluster) runs
// next, split-K over the last wave, and the cluster units.
//
// Contract: device-only code for NVRTC. MoeSm90TileScheduler<Shape> is
// stateless; its state is the route header's counters (gemm_next_tile,
// gemm_tiles_issued, gemm_ctas_done: 0 between launches, the last CTA out
// resets them) and the split-K arrivals (0 between launches).
//
// Units. Tiles are (item, N tile) pairs in tile_raster.cuh's order. The
// launch's units (MoeSm90ScheduleOf, params.h) are those tiles, except that
// a last wave filling at most half of the grid (swap-AB: and of fewer than
// kMoeSm90SwapSplitMaxRest tiles) is split along K; the split units'
// partials are added by the last to arrive (ReduceSplits).
//
// Order. CTA b starts with unit b; its producer then takes the next unit
// from a counter in the route scratch (p.dynamic_schedule; else b +
// gridDim.x, ...), so the units in flight are always about one wave of
// consecutive tiles however the CTAs drift, and the CTAs that share a W or
// A tile meet in the L2. With p.wave_sync (long K, 128-row tiles) the static
// order runs in waves that start together: a producer issues wave w's first
// copy once all producers have issued wave w - 1 (gemm_tiles_issued), for
// at most kMoeSm90WaveWaitNs, so the wait orders work but never decides a
// result.
//
// Clusters (kCluster 2 or 4, 128-row tiles, no split-K): a cluster takes a
// cluster unit, one plan tile per CTA: 2, two consecutive items of one
// raster group with the same N tile (almost always one expert's W tile);
// 4, those two items x two neighbouring N tiles. Rank 0's producer takes
// the units from the same counter, one per cluster. Past the last item or
// N tile a rank repeats the unit's first, computed and not stored.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_SCHEDULER_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_SCHEDULER_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/params.h"
#include "templates/cuda/moe/tile_raster.cuh"

namespace tailor::cuda {

// What the producer tells the consumers with a unit's fills: the unit and
// its plan tile's coordinate (with clusters: this CTA's tile of the cluster
// unit), which the producer looked up to load it; with expert groups that
// lookup is a chain of dependent reads of the work list, which the
// consumers thus skip.
struct MoeSm90TileMessage {
  int unit;  // kPipelineClosed: the stream's end
  int item, n_tile;
  bool store = true;  // clusters: false for a repeated tile (not stored)
};

// The multicast of one cluster unit's stage: slot j of a stage (the
// mainloop's boxes) goes to the CTAs of Mask(j) (bit r: rank r), issued by
// one of them (Issue(j): this CTA). One word, so that a producer holds the
// next unit's copies beside the current one's in its few registers.
template <int kSlots>
struct MoeSm90ClusterCopies {
  static_assert(kSlots <= 6,
                "a 4-bit mask per slot (clusters of up to 4), then an issue "
                "bit per slot");
  unsigned bits;  // slot j: mask at bits [4 j, 4 j + 4), issue at bit 24 + j
  TAILOR_DEVICE unsigned Mask(int j) const { return (bits >> (4 * j)) & 15u; }
  TAILOR_DEVICE bool Issue(int j) const { return (bits >> (24 + j)) & 1u; }
};

template <typename Shape>
struct MoeSm90TileScheduler {
  using Params = MoeGroupedGemmSm90Params;
  static constexpr int kCluster = Shape::kCluster;
  static constexpr bool kClustered = Shape::kClustered;
  static constexpr bool kSwap = Shape::kSwap;
  static constexpr int kKBlocks = Shape::kKBlocks;
  static constexpr int kNTiles = Shape::kNTiles;
  static constexpr int kClusterNs = Shape::kClusterNs;
  static constexpr int kClusterItems = Shape::kClusterItems;
  static constexpr int kColumnNTiles = Shape::kColumnNTiles;
  static constexpr int kAccumulators = Shape::kAccumulators;

  // ---- units ----------------------------------------------------------------
  // Unit t of the launch (MoeSm90ScheduleOf): plan tile t while t < whole,
  // then split (t - whole) % S of plan tile whole + (t - whole) / S.
  struct Unit {
    int plan_tile;
    int split_tile;  // index among the split tiles; -1: a whole tile
    int split, splits;
    int k_begin, k_end;  // its K blocks
  };
  static Unit UnitOf(const MoeSm90Schedule& s, int t) {
    if (t < s.whole) return {t, -1, 0, 1, 0, kKBlocks};
    const int v = t - s.whole, split = v % s.splits;
    return {s.whole + v / s.splits,
            v / s.splits,
            split,
            s.splits,
            split * kKBlocks / s.splits,
            (split + 1) * kKBlocks / s.splits};
  }
  // A whole-tile unit (clusters: a cluster unit's tile).
  static Unit WholeUnit(int t) { return {t, -1, 0, 1, 0, kKBlocks}; }

  // Clusters: CTA `rank`'s tile of cluster unit v (kClusterItems x
  // kClusterNs tiles): item rank % items of the unit's column tiles (N
  // tiles taken kClusterNs at a time, in TileOf's raster order), N tile
  // rank / items of the column. Past the last item or N tile a rank repeats
  // the unit's first, computed and not stored.
  struct ClusterTile {
    TileCoord coord;
    bool store;
  };
  static ClusterTile ClusterTileOf(const Params& p, int num_work, int v,
                                   unsigned rank) {
    const int columns = num_work * kColumnNTiles;
    int column = kClusterItems * v + static_cast<int>(rank) % kClusterItems;
    const bool item_repeat = column >= columns;
    if (item_repeat) column = kClusterItems * v;
    const TileCoord c =
        TileOf(column, p.work, num_work, kColumnNTiles, p.expert_groups);
    int n_tile = c.n_tile * kClusterNs + static_cast<int>(rank) / kClusterItems;
    const bool n_repeat = n_tile >= kNTiles;
    if (n_repeat) n_tile = c.n_tile * kClusterNs;
    return {{c.item, n_tile}, !item_repeat && !n_repeat};
  }

  // Cluster units of num_work items.
  static int ClusterUnits(int num_work) {
    return static_cast<int>(MoeSm90ClusterUnits(num_work, kNTiles, kCluster));
  }

  // The multicast of cluster unit v's stages for CTA `rank`, whose tile
  // lands in `own` and its work item in `own_item`. CTAs whose tiles need
  // the same box (the mainloop's SlotKeys: what each slot holds) get it by
  // one multicast, issued by member j % members of slot j's mask, so the
  // issues spread over the CTAs. Every CTA computes the same masks.
  template <typename Mainloop>
  static MoeSm90ClusterCopies<Mainloop::kSlots> CopiesOf(
      const Params& p, int num_work, int v, unsigned rank, ClusterTile& own,
      MoeWorkItem& own_item) {
    constexpr int kSlots = Mainloop::kSlots;
    own = ClusterTileOf(p, num_work, v, rank);
    own_item = p.work[own.coord.item];
    int mine[kSlots];
    Mainloop::SlotKeys(own_item, own.coord.n_tile, mine);
    MoeSm90ClusterCopies<kSlots> copies = {0u};
#pragma unroll 1
    for (unsigned r = 0; r < kCluster; ++r) {
      const TileCoord coord = ClusterTileOf(p, num_work, v, r).coord;
      int keys[kSlots];
      Mainloop::SlotKeys(p.work[coord.item], coord.n_tile, keys);
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (keys[j] == mine[j]) copies.bits |= 1u << (4 * j + r);
      }
    }
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      unsigned members = copies.Mask(j);
      for (int skip = j % __popc(members); skip > 0; --skip) {
        members &= members - 1;  // drop the lowest member
      }
      if (__ffs(members) - 1 == static_cast<int>(rank)) {
        copies.bits |= 1u << (24 + j);
      }
    }
    return copies;
  }

  // ---- order ----------------------------------------------------------------
  // The unit after `t`: static (and wave sync), t + workers; dynamic, the
  // next of a counter shared by the CTAs (past the first wave). With
  // clusters the same, over cluster units.
  static int Workers() { return kClustered ? ClusterCountX() : gridDim.x; }
  static int FirstTile() { return kClustered ? ClusterIdX() : blockIdx.x; }

  // The launch's units over num_work items (clusters: whole tiles only, no
  // split-K, in cluster units).
  static MoeSm90Schedule ScheduleOf(const Params& p, int num_work) {
    return MoeSm90ScheduleOf(num_work * kNTiles, gridDim.x, kKBlocks,
                             !kClustered && p.split_k != 0, kSwap);
  }
  // The item and N tile of a unit's plan tile (without clusters).
  static TileCoord CoordOf(const Params& p, int num_work, const Unit& u) {
    return TileOf(u.plan_tile, p.work, num_work, kNTiles, p.expert_groups);
  }
  static int NextTile(const Params& p, int t) {
    if (p.wave_sync || !p.dynamic_schedule) return t + Workers();
    return Workers() + atomicAdd(&p.header->gemm_next_tile, 1);
  }

  // Wave sync: before the first copy of tile t, wait until the producers
  // have issued every tile of the waves before t's (each counts its tiles
  // in gemm_tiles_issued), for at most kMoeSm90WaveWaitNs.
  static void WaitForWave(const Params& p, int t) {
    const int issued = t / Workers() * Workers();
    if (!p.wave_sync || issued == 0) return;
    const unsigned long long start = GlobalTimerNs();
    while (LoadRelaxed(&p.header->gemm_tiles_issued) < issued &&
           GlobalTimerNs() - start < kMoeSm90WaveWaitNs) {
    }
  }
  static void CountIssued(const Params& p) {
    if (p.wave_sync) atomicAdd(&p.header->gemm_tiles_issued, 1);
  }

  // Dynamic schedule and wave sync: the last CTA out resets the counters for
  // the next launch (every CTA took and issued its last tile before it counts
  // itself done).
  static void ResetSchedule(const Params& p) {
    if (!p.dynamic_schedule && !p.wave_sync) return;
    // This thread took the CTA's tiles: its counter reads precede the release.
    if (ArriveAcqRel(&p.header->gemm_ctas_done) == Workers() - 1) {
      p.header->gemm_next_tile = 0;
      p.header->gemm_tiles_issued = 0;
      p.header->gemm_ctas_done = 0;
    }
  }

  // ---- split-K --------------------------------------------------------------
  // The consumer's partial of split unit u goes to its slot; the tile's last
  // split to arrive (per consumer) adds the other splits' partials into
  // `acc`, resets the arrival count for the next launch and returns true;
  // the others return false. Slot layout: float4 q of thread i at q * 128 +
  // i, so a warp writes 512 contiguous bytes.
  static bool ReduceSplits(const Params& p, const Unit& u, int consumer,
                           float (&acc)[kAccumulators]) {
    constexpr int kQuads = kAccumulators / 4;
    constexpr int kConsumerQuads = kMoeSm90SplitSlotFloats / 8;
    const int i = threadIdx.x % 128;
    const int splits = u.splits, split = u.split;
    // This thread's first float4 in split 0's slot; split s is s slots on.
    const float4* base =
        reinterpret_cast<const float4*>(p.partials) +
        (u.split_tile * splits * 2 + consumer) * kConsumerQuads + i;
    float4* mine = const_cast<float4*>(base) + split * 2 * kConsumerQuads;
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      __stcg(&mine[q * 128], make_float4(acc[4 * q], acc[4 * q + 1],
                                         acc[4 * q + 2], acc[4 * q + 3]));
    }
    int* arrivals = &p.split_arrivals[2 * u.split_tile + consumer];
    const bool leader = i == 0;
    NamedBarrierSync<128>(1 + consumer);  // the partial, before the arrival
    const bool last = NamedBarrierOr<128>(
        1 + consumer, leader && ArriveAcqRel(arrivals) == splits - 1);
    if (!last) return false;
#pragma unroll 1
    for (int s = 0; s < splits; ++s) {
      if (s == split) continue;
      const float4* other = base + s * 2 * kConsumerQuads;
#pragma unroll
      for (int q = 0; q < kQuads; ++q) {
        const float4 v = __ldcg(&other[q * 128]);
        acc[4 * q] += v.x;
        acc[4 * q + 1] += v.y;
        acc[4 * q + 2] += v.z;
        acc[4 * q + 3] += v.w;
      }
    }
    if (leader) *arrivals = 0;
    return true;
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_SCHEDULER_CUH_
