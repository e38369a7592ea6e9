// templates/cuda/moe/grouped_gemm_sm90.cuh — the Hopper grouped GEMM:
// persistent, warp-specialized, TMA + mbarrier ring + wgmma, over the device
// Route's work list (core tiles and every tail in one launch).
//
// C[r, :] = epilogue(A[r, :] · W[e]ᵀ) for the rows r of each work item of
// expert e, as moe_grouped_gemm.cuh, for bf16 with K % 8 == 0 on sm_90a.
//
// Per CTA (384 threads), a tile of kCtaRows rows (one plan tile: 64 for
// plan tiles of at most 64 rows, else 128) x 256 W rows:
//   warpgroup 0  producer: one thread walks the tile schedule and, per K
//                block, waits for a free stage, arms its full barrier with
//                the stage's bytes and issues 5 TMA boxes: A rows
//                [row_begin, +kCtaRows) x 64 K and 4 x {64 W rows, 64 K};
//                registers lowered to kProducerRegisters (setmaxnreg)
//   warpgroups   consumers, f32 accumulators in registers raised to
//   1 and 2      kConsumerRegisters; each keeps one wgmma group in flight
//                and releases a stage once the MMAs that read it are done.
//                128 rows: consumer c computes rows [64 c, +64) x all 256 W
//                rows (m64n256k16): both share every W tile, halving its
//                reads per row. 64 rows: consumer c computes the 64 rows x
//                W rows [128 c, +128) (m64n128k16). (A consumer whose rows
//                are all past a tail's end computes them anyway: a branch
//                around wgmma makes ptxas serialize every wgmma, C7518.)
// The stage ring (runtime/cuda/pipeline.cuh's protocol) holds 5 x 40 KiB
// (64 rows; 4 with TMA stores) or 4 x 48 KiB (128 rows).
//
// Swap-AB (kSwapAB, plan tiles of at most 32 rows: decode steps): the A box
// is the tile's tokens rounded up to kARows = 8, 16 or 32 rows, and the W
// boxes become wgmma's M: consumer c computes its two W boxes 2 c, 2 c + 1
// (64 W rows each, m64nNk16 with N = kARows) x all the tokens, so a 1-token
// item costs 8 MMA columns, not 64 rows, and its accumulators (and split-K
// partials) are kARows floats per thread, not 64. Gated, box 2 c holds the
// gate and box 2 c + 1 the up rows of the same 64 outputs (the 64-row
// layout below), so one thread holds both halves of each output. The ring
// holds 6 stages of at most 36 KiB; C leaves by register stores.
//
// Epilogue, per consumer: with kTmaStore (the plan tile is the CTA tile and
// N % 8 == 0), a full tile's output goes through two swizzled 64 x 64 boxes
// in shared memory and leaves by TMA stores in whole lines, overlapped with
// the next tile's MMAs (StoreByTma); tails (and kTmaStore 0) store their
// rows from registers, 4 bytes per thread and column pair (Store).
//
// Tiles t of (item, N tile) pairs, grouped by kGroupItems items as the
// portable kernel, so neighbouring tiles share W (same expert) or A (same
// item). CTA b starts with tile b; its producer then takes the next tile from
// a counter in the route scratch (p.dynamic_schedule; else b + gridDim.x, ...)
// and names it to the consumers in the stage's message. Tiles in flight are
// thus always about one wave of consecutive tiles: with static strides the
// CTAs drifted apart over ~140 waves (DeepSeek-V3, T = 16384) until CTAs
// sharing a W or A tile no longer met in L2 (hit rate ~40 %, DRAM 85 % busy);
// the counter took that GEMM from 18.9 to 14.9 ms. The schedule's units
// (MoeSm90ScheduleOf) are those tiles, except that a last wave filling at
// most half of the grid (swap-AB: and of fewer than 40 tiles) is split along
// K (a decode step is all last wave), its units' partials added by the last
// to arrive. A tail's MMA computes 64-row
// blocks (wgmma's M) but only its rows are stored. Rows past the tail are
// the next expert's A rows (or the TMA's zero fill past A's end): each C row
// depends only on its own A row, so they never leak into stored rows.
//
// W rows of the CTA: plain, W rows [256 n, +256); gated (silu_and_mul),
// output columns [128 n, +128), laid out so that gate and up of one output
// sit in one thread's accumulators: 128 rows, the 128 gate rows then the
// 128 up rows; 64 rows, per consumer its 64 gate rows then their 64 up rows.
//
// Long-K launches of the 128-row kernel (p.wave_sync: MoeSm90WaveSync) run
// the static order in waves that start together instead: tile t on CTA t %
// gridDim.x, whose producer issues wave t / gridDim.x's first copy once all
// producers have issued the wave before (gemm_tiles_issued), so the tiles
// that share A or W tiles walk K side by side and find them in the L2.
//
// Clusters (kCluster = 2 or 4, 128-row tiles, no split-K): a cluster takes
// a cluster unit (MoeSm90ClusterUnits), one plan tile per CTA. 2: two
// consecutive items of one raster group with the same N tile, so almost
// always one expert's W tile; 4: those two items x two neighbouring N tiles
// (ClusterTileOf). CTAs whose tiles need the same box get it by one TMA
// multicast into each of them, issued by one of them (CopiesOf): with 2 the
// pair's W boxes (when the items share an expert), with 4 also each item's
// A box (its two CTAs). L2 then serves a shared box once per cluster
// instead of once per CTA: per CTA and K block 48 KiB without clusters,
// 32 KiB with 2, 24 KiB with 4. On the H100 that no longer pays (every CTA
// of a cluster waits for the slowest): the cost model takes no clusters
// (HopperClusterFor in backends/cuda/moe/kernels.cc has the numbers), and
// $TAILOR_MOE_GEMM_CLUSTER forces them for comparisons. Any CTA's stage may be
// written by every producer of the cluster, so each CTA's empty barriers
// count the consumer groups of all its CTAs (each group releases to all).
// Rank 0's producer takes the units from the same counter as CTA tiles, one
// per cluster, and mails each to the other ranks' producers (PeerMailbox).
// Past the last item or N tile a rank repeats the unit's first, computed
// and not stored.
//
// Steps whose every expert is one plan tile and whose active experts' W fits
// in the L2 (p.w_evict_first: MoeSm90EvictFirstW, e.g. Qwen3-30B-A3B at one
// token) stream W with an L2 evict-first policy, so that it leaves the L2's
// other lines (dirty ones above all) in place.
//
// Params: MoeGroupedGemmSm90Params (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/moe/grouped_gemm_sm80.cuh"  // TileOf
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

template <int kN, int kK, int kTileRows, int kEpilogue, int kTmaStore,
          int kCluster = 1, int kSwapAB = 0>
struct MoeGroupedGemmSm90 {
  static_assert(kN >= 1 && kK >= 1, "N and K must be positive");
  static_assert(kK % 8 == 0, "TMA rows must be 16-byte multiples: K % 8 == 0");
  static_assert(kTileRows >= 1 && kTileRows <= kMoeSm90MaxRows,
                "a plan tile must fit the CTA's 128 rows");
  static_assert(kEpilogue == kMoeEpilogueNone ||
                    kEpilogue == kMoeEpilogueSiluAndMul,
                "unknown epilogue");
  static_assert(kEpilogue != kMoeEpilogueSiluAndMul || kN % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");
  static_assert(kTmaStore == 0 || kTmaStore == 1, "kTmaStore is 0 or 1");
  static_assert(kCluster == 1 ||
                    ((kCluster == 2 || kCluster == 4) && kTileRows > 64),
                "clusters of 2 or 4 share tiles of the 128-row kernel");
  static constexpr bool kClustered = kCluster > 1;
  static_assert(kSwapAB == 0 ||
                    (kSwapAB == 1 && kTileRows <= kMoeSm90SwapMaxRows &&
                     kTmaStore == 0 && kCluster == 1),
                "swap-AB: plan tiles of at most 32 rows, register stores, "
                "no clusters");
  static constexpr bool kSwap = kSwapAB == 1;

  using Params = MoeGroupedGemmSm90Params;
  static constexpr bool kGated = kEpilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kOutN = kGated ? kN / 2 : kN;
  static constexpr int kCtaRows = MoeSm90CtaRows(kTileRows);
  static constexpr bool kSplitRows = kCtaRows == 128;  // else split W rows
  static constexpr int kARows = MoeSm90ARows(kTileRows, kSwap);  // A box
  static constexpr int kThreads = kMoeSm90Threads;
  static constexpr int kMinBlocksPerSm = 1;  // register cap for setmaxnreg
  static constexpr bool kWaitsForPrerequisites = true;  // after the prologue
  static constexpr int kStages = MoeSm90Stages(kARows, kTmaStore);
  static constexpr int kBK = kMoeSm90KTile;
  static constexpr int kKBlocks = (kK + kBK - 1) / kBK;
  static constexpr int kNTiles = MoeSm90NTiles(kGated, kN);
  static constexpr int kBox = kMoeSm90BoxRows;
  static constexpr unsigned kBoxBytes = kBox * kBK * 2;    // 8 KiB
  static constexpr unsigned kABytes = kARows * kBK * 2;  // A box
  static constexpr unsigned kStageBytes = MoeSm90StageBytes(kARows);
  // Per consumer: rows x W rows of its wgmma tile, and its accumulators
  // (64 x 256 / 128, 64 x 128 / 128, or swap-AB 2 x 64 x tokens / 128).
  static constexpr int kConsumerWRows = kSplitRows ? 256 : 128;
  static constexpr int kAccumulators = kSwap ? kARows : kConsumerWRows / 2;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;

  // What the producer tells the consumers with a tile's fills: its unit and
  // (without clusters) its plan tile's coordinate, which the producer looked
  // up to load it. With expert groups that lookup is a chain of dependent
  // reads of the work list; made by the consumers too, it held both
  // warpgroups at the start of every tile (within 1.5 % at the launches the
  // rule groups, up to 5 % with groups forced on: session 31).
  struct TileMessage {
    int unit;  // kPipelineClosed: the stream's end
    int item, n_tile;
  };
  using Ring = PipelineRing<kStages, TileMessage>;

  static_assert(kStageBytes == kABytes + 4 * kBoxBytes,
                "A box + 4 W boxes per stage");
  static_assert(kStages * kStageBytes + MoeSm90StoreBytes(kTmaStore) +
                        sizeof(Ring) + sizeof(PeerMailbox) + 1024 <=
                    MoeSm90SharedBytes(kARows, kTmaStore),
                "shared memory layout");
  // TMA-store epilogue: a full tile's rows fill the CTA (the plan tile is the
  // CTA tile), C rows are 16-byte multiples; each consumer's output is
  // kStoreBoxes boxes of 64 rows x 64 columns.
  static_assert(!kTmaStore || (kTileRows == kCtaRows && kOutN % 8 == 0),
                "TMA stores need plan tiles of the CTA's rows and N % 8 == 0");
  static constexpr int kConsumerOutCols =
      kGated ? kConsumerWRows / 2 : kConsumerWRows;
  static constexpr int kStoreBoxes = kConsumerOutCols / 64;

  // ---- producer
  // --------------------------------------------------------------- Global W
  // row (of the [E * N, K] view) of box q of N tile n_tile.
  static int WBoxRow(int expert, int n_tile, int q) {
    if constexpr (kGated) {
      // 128 rows: gate 0-63, gate 64-127, up 0-63, up 64-127; 64 rows:
      // gate 0-63, up 0-63, gate 64-127, up 64-127.
      const int half = kSplitRows ? q % 2 : q / 2;
      const bool up = kSplitRows ? q >= 2 : q % 2 == 1;
      const int out = n_tile * (kMoeSm90WRows / 2) + half * kBox;
      return expert * kN + (up ? kOutN + out : out);
    } else {
      return expert * kN + n_tile * kMoeSm90WRows + q * kBox;
    }
  }

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

  // Clusters: CTA `rank`'s tile of cluster unit v (MoeSm90ClusterItems x
  // MoeSm90ClusterNs tiles): item rank % items of the unit's column tiles
  // (N tiles taken kClusterNs at a time, in TileOf's raster order), N tile
  // rank / items of the column. Past the last item or N tile a rank repeats
  // the unit's first, computed and not stored.
  static constexpr int kClusterNs = MoeSm90ClusterNs(kCluster);
  static constexpr int kClusterItems = MoeSm90ClusterItems(kCluster);
  static constexpr int kColumnNTiles = (kNTiles + kClusterNs - 1) / kClusterNs;
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

  // The tile after `t`: static (and wave sync), t + gridDim.x; dynamic, the
  // next of a counter shared by the CTAs (past the first wave), so the tiles
  // in flight are always about one wave of consecutive tiles, however the
  // CTAs drift. With clusters the same, over cluster units.
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

  // Wave sync (MoeSm90WaveSync): before the first copy of tile t, wait until
  // the producers have issued every tile of the waves before t's (each
  // counts its tiles in gemm_tiles_issued), for at most kMoeSm90WaveWaitNs.
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

  // Before the predecessor ends (params prefetch_w_kblocks): pulls the W of
  // this CTA's first tile, its first K blocks, into the L2, so the first
  // fills after the wait hit it. W never changes; the work list was planned
  // by a route that ended before the predecessor began, but nothing relies
  // on that: num_work is clamped to the list's capacity and the items only
  // pick tensor-map coordinates, which the TMA unit bounds-checks.
  static void PrefetchFirstW(const Params& p) {
    const int num_work =
        Min(Max(LoadRelaxed(&p.header->num_work), 0), p.max_work);
    const MoeSm90Schedule schedule = ScheduleOf(p, num_work);
    const int t = FirstTile();
    if (t >= schedule.units) return;
    const Unit u = UnitOf(schedule, t);
    const TileCoord coord = CoordOf(p, num_work, u);
    const int expert = p.work[coord.item].group;
    const int k_end = Min(u.k_end, u.k_begin + p.prefetch_w_kblocks);
    for (int kb = u.k_begin; kb < k_end; ++kb) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        TmaPrefetchL2(&p.w_map, {kb * kBK, WBoxRow(expert, coord.n_tile, q)});
      }
    }
  }

  // Fills the ring tile by tile; each fill carries its tile's unit and
  // coordinate as the message (the consumers read the first one's); Close
  // ends the stream.
  static void Produce(const Params& p, unsigned char* stages, Ring& ring,
                      int num_work, const MoeSm90Schedule& schedule) {
    PipelineCursor c;
    const unsigned long long w_policy = L2EvictFirstPolicy();
    int t = FirstTile();
    while (t < schedule.units) {
      WaitForWave(p, t);
      const Unit u = UnitOf(schedule, t);
      const TileCoord coord = CoordOf(p, num_work, u);
      const MoeWorkItem item = p.work[coord.item];
      int next = 0;
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        // Asked one fill early: the counter's latency hides behind the wait.
        if (kb == u.k_end - 1) next = NextTile(p, t);
        WaitEmpty(ring, c);
        ArmFull(ring, c, kStageBytes, TileMessage{t, coord.item, coord.n_tile});
        unsigned char* stage = stages + c.stage * kStageBytes;
        Mbarrier* full = &ring.full[c.stage];
        TmaLoad<2>(stage, &p.a_map, {kb * kBK, item.row_begin}, full);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          unsigned char* box = stage + kABytes + q * kBoxBytes;
          const int coords[2] = {kb * kBK,
                                 WBoxRow(item.group, coord.n_tile, q)};
          if (p.w_evict_first) {
            TmaLoadHinted<2>(box, &p.w_map, coords, full, w_policy);
          } else {
            TmaLoad<2>(box, &p.w_map, coords, full);
          }
        }
        c.Advance(kStages);
      }
      CountIssued(p);
      t = next;
    }
    Close(ring, c);
    ResetSchedule(p);
  }

  // The copies of a cluster unit's stages: slot 0 is the A box, slot 1 + q
  // W box q. CTAs whose tiles need the same box (same A rows, same W rows)
  // get it by one multicast into each of them (`mask`, bit r: rank r),
  // issued by one of them: member j % members of slot j's mask, so the
  // issues spread over the CTAs. Every CTA computes the same masks.
  struct ClusterCopies {
    unsigned short mask[5];
    bool issue[5];  // this CTA issues the slot's copy
  };
  static void SlotKeys(const Params& p, const TileCoord& coord,
                       int (&keys)[5]) {
    const MoeWorkItem item = p.work[coord.item];
    keys[0] = item.row_begin;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      keys[1 + q] = WBoxRow(item.group, coord.n_tile, q);
    }
  }
  static ClusterCopies CopiesOf(const Params& p, int num_work, int v,
                                unsigned rank, int (&mine)[5]) {
    SlotKeys(p, ClusterTileOf(p, num_work, v, rank).coord, mine);
    ClusterCopies copies = {};
#pragma unroll 1
    for (unsigned r = 0; r < kCluster; ++r) {
      int keys[5];
      SlotKeys(p, ClusterTileOf(p, num_work, v, r).coord, keys);
#pragma unroll
      for (int j = 0; j < 5; ++j) {
        if (keys[j] == mine[j]) copies.mask[j] |= 1u << r;
      }
    }
#pragma unroll
    for (int j = 0; j < 5; ++j) {
      unsigned members = copies.mask[j];
      for (int skip = j % __popc(members); skip > 0; --skip) {
        members &= members - 1;  // drop the lowest member
      }
      copies.issue[j] = (__ffs(members) - 1) == static_cast<int>(rank);
    }
    return copies;
  }
  static void CopyBox(void* box, const TensorMap* map, int x, int y,
                      Mbarrier* full, unsigned short mask) {
    if (__popc(mask) == 1) {
      TmaLoad<2>(box, map, {x, y}, full);
    } else {
      TmaLoadMulticast2d(box, map, x, y, full, mask);
    }
  }

  // A cluster CTA's producer: CTA `rank` fills its stages for its tile of
  // each cluster unit, its copies shared as CopiesOf says. Rank 0 schedules
  // and mails each next unit to the other ranks.
  static void ProduceClustered(const Params& p, unsigned char* stages,
                               Ring& ring, PeerMailbox& mailbox, int num_work) {
    const unsigned rank = ClusterCtaRank();
    const int units =
        static_cast<int>(MoeSm90ClusterUnits(num_work, kNTiles, kCluster));
    PipelineCursor c;
    unsigned mail = 0;  // units mailed (rank 0) or received (the others)
    int v = FirstTile();
    while (v < units) {
      if (rank == 0) WaitForWave(p, v);
      int keys[5];  // this CTA's A row and W rows
      const ClusterCopies copies = CopiesOf(p, num_work, v, rank, keys);
      int next = 0;
      for (int kb = 0; kb < kKBlocks; ++kb) {
        if (rank == 0 && kb == kKBlocks - 1) {
          next = NextTile(p, v);
          mailbox.Send(mail++, kCluster - 1, next);
        }
        WaitEmpty(ring, c);
        ArmFull(ring, c, kStageBytes, TileMessage{v, 0, 0});
        unsigned char* stage = stages + c.stage * kStageBytes;
        Mbarrier* full = &ring.full[c.stage];
        const int k = kb * kBK;
        if (copies.issue[0]) {
          CopyBox(stage, &p.a_map, k, keys[0], full, copies.mask[0]);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if (copies.issue[1 + q]) {
            CopyBox(stage + kABytes + q * kBoxBytes, &p.w_map, k, keys[1 + q],
                    full, copies.mask[1 + q]);
          }
        }
        c.Advance(kStages);
      }
      if (rank == 0) CountIssued(p);
      if (rank != 0) next = mailbox.Receive(mail++);
      v = next;
    }
    Close(ring, c);
    if (rank == 0) ResetSchedule(p);
  }

  // ---- consumers
  // --------------------------------------------------------------
  static void StorePair(const Params& p, long long row, int col, float v0,
                        float v1) {
    unsigned short* c = static_cast<unsigned short*>(p.c) + row * kOutN + col;
    if constexpr (kOutN % 2 == 0) {
      if (col < kOutN) *reinterpret_cast<unsigned*>(c) = PackBf16x2(v0, v1);
    } else {
      if (col < kOutN) c[0] = Bf16Bits(v0);
      if (col + 1 < kOutN) c[1] = Bf16Bits(v1);
    }
  }

  // First output column of the consumer's tile.
  static int FirstColumn(int n_tile, int consumer) {
    return kGated
               ? n_tile * (kMoeSm90WRows / 2) + (kSplitRows ? 0 : 64 * consumer)
               : n_tile * kMoeSm90WRows + (kSplitRows ? 0 : 128 * consumer);
  }

  // The consumer's output value pair at accumulator group j (n8 columns
  // 8 j + 2 t, +1 of its output), row half h.
  static unsigned OutputPair(const float (&acc)[kAccumulators], int j, int h) {
    if constexpr (kGated) {
      constexpr int kUp = kConsumerWRows / 16;  // first up group
      const float* gate = &acc[4 * j + 2 * h];
      const float* up = &acc[4 * (j + kUp) + 2 * h];
      return PackBf16x2(Silu(gate[0]) * up[0], Silu(gate[1]) * up[1]);
    } else {
      return PackBf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }

  // Registers -> C, the item's rows only. Accumulator 4 j + 2 h + x holds
  // row 16 warp + g + 8 h, column 8 j + 2 t + x of the consumer's tile.
  static void Store(const Params& p, const MoeWorkItem& item, int rows,
                    int n_tile, int consumer,
                    const float (&acc)[kAccumulators]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    constexpr int kGroups = kConsumerWRows / 8;  // n8 groups
    const int row0 = (kSplitRows ? 64 * consumer : 0) + 16 * warp + g;
    const int col0 = FirstColumn(n_tile, consumer);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= rows) continue;
      const long long c_row = item.row_begin + row;
      if constexpr (kGated) {
#pragma unroll
        for (int j = 0; j < kGroups / 2; ++j) {
          const float* gate = &acc[4 * j + 2 * half];
          const float* up = &acc[4 * (j + kGroups / 2) + 2 * half];
          StorePair(p, c_row, col0 + 8 * j + 2 * t, Silu(gate[0]) * up[0],
                    Silu(gate[1]) * up[1]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          StorePair(p, c_row, col0 + 8 * j + 2 * t, acc[4 * j + 2 * half],
                    acc[4 * j + 2 * half + 1]);
        }
      }
    }
  }

  // Swap-AB: registers -> C, the item's tokens only, one bf16 per store
  // (a decode step's C is a few rows: the weights dominate its bytes).
  // Accumulator half b is W box 2 consumer + b; its accumulator 4 j + 2 h +
  // x holds W row 16 warp + g + 8 h of the box, token 8 j + 2 t + x. Gated,
  // the halves are the gate and up rows of the same 64 output columns.
  static void StoreSwapped(const Params& p, const MoeWorkItem& item, int rows,
                           int n_tile, int consumer,
                           const float (&acc)[kAccumulators]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    constexpr int kHalf = kAccumulators / 2;
    unsigned short* c = static_cast<unsigned short*>(p.c);
    const int col0 = FirstColumn(n_tile, consumer) + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const int token = 8 * (i / 4) + 2 * t + i % 2;
      const int col = col0 + 8 * ((i / 2) % 2);
      if (token >= rows) continue;
      unsigned short* c_row =
          c + static_cast<long long>(item.row_begin + token) * kOutN;
      if constexpr (kGated) {
        if (col < kOutN) {
          c_row[col] = Bf16Bits(Silu(acc[i]) * acc[kHalf + i]);
        }
      } else {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          if (col + 64 * b < kOutN) {
            c_row[col + 64 * b] = Bf16Bits(acc[b * kHalf + i]);
          }
        }
      }
    }
  }

  // A full tile's output through shared memory and TMA stores: box b (64
  // output columns) of the consumer's 64 rows goes to buffer (boxes_done + b)
  // % 2 while the TMA unit stores the box before it from the other buffer,
  // so C leaves in whole 128-byte lines and the consumer returns to its
  // MMAs without waiting for global memory. Each box is one bulk group;
  // waiting until at most one group still reads shared memory frees the
  // buffer about to be written. Box layout: 128-byte swizzle, as the TMA
  // unit expects (16-byte chunk c of row r at chunk c ^ (r % 8)): a warp's
  // 8 rows x 4 threads x 4 bytes hit 32 distinct banks.
  static void StoreByTma(const Params& p, const MoeWorkItem& item, int n_tile,
                         int consumer, const float (&acc)[kAccumulators],
                         unsigned char* boxes, unsigned& boxes_done) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    const bool leader = threadIdx.x % 128 == 0;
    const int barrier = 1 + consumer;  // named barrier of this warpgroup
    const int c_row = item.row_begin + (kSplitRows ? 64 * consumer : 0);
    const int col0 = FirstColumn(n_tile, consumer);
#pragma unroll
    for (int b = 0; b < kStoreBoxes; ++b, ++boxes_done) {
      unsigned char* box = boxes + (boxes_done % 2) * kMoeSm90StoreBoxBytes;
      if (leader) BulkWaitGroupRead<1>();
      NamedBarrierSync<128>(barrier);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * warp + g + 8 * h;  // row % 8 == g
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const unsigned offset = row * 128 + ((jj ^ g) << 4) + 4 * t;
          *reinterpret_cast<unsigned*>(box + offset) =
              OutputPair(acc, 8 * b + jj, h);
        }
      }
      FenceSharedToAsyncProxy();
      NamedBarrierSync<128>(barrier);
      if (leader) {
        TmaStore<2>(&p.c_map, box, {col0 + 64 * b, c_row});
        BulkCommitGroup();
      }
    }
  }

  // Split-K: the consumer's partial of split unit u goes to its slot; the
  // tile's last split to arrive (per consumer) adds the other splits'
  // partials into `acc`, resets the arrival count for the next launch and
  // returns true; the others return false. Slot layout: float4 q of thread i
  // at q * 128 + i, so a warp writes 512 contiguous bytes.
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

  // Swap-AB: the consumer's two W boxes are wgmma's A (M = 64 W rows each),
  // the stage's tokens its B (N = kARows).
  static void MmaSwapped(const unsigned char* stage, int consumer,
                         bool accumulate, float (&acc)[kAccumulators]) {
    using Half = float[kAccumulators / 2];
    Half& lo = reinterpret_cast<Half&>(acc[0]);
    Half& hi = reinterpret_cast<Half&>(acc[kAccumulators / 2]);
    const unsigned char* w_tile = stage + kABytes + consumer * 2 * kBoxBytes;
    const unsigned long long tokens = SwizzledKMajorDescriptor(stage);
    const unsigned long long w0 = SwizzledKMajorDescriptor(w_tile);
    const unsigned long long w1 = SwizzledKMajorDescriptor(w_tile + kBoxBytes);
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      const bool add = accumulate || ks > 0;
      WgmmaM64NSmallK16<kARows>(lo, w0 + 2 * ks, tokens + 2 * ks, add);
      WgmmaM64NSmallK16<kARows>(hi, w1 + 2 * ks, tokens + 2 * ks, add);
    }
    WgmmaCommit();
  }

  // The A rows x W rows MMAs of one K block (the kernel without swap-AB).
  static void MmaRows(const unsigned char* stage, int consumer,
                      bool accumulate, float (&acc)[kAccumulators]) {
    const unsigned char* a_tile =
        stage + (kSplitRows ? consumer * 64 * kBK * 2 : 0);
    const unsigned char* b_tile =
        stage + kABytes + (kSplitRows ? 0 : consumer * 2 * kBoxBytes);
    const unsigned long long a = SwizzledKMajorDescriptor(a_tile);
    const unsigned long long b = SwizzledKMajorDescriptor(b_tile);
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // +32 bytes along K per step: +2 in the address field.
      if constexpr (kSplitRows) {
        WgmmaM64N256K16(acc, a + 2 * ks, b + 2 * ks, accumulate || ks > 0);
      } else {
        WgmmaM64N128K16(acc, a + 2 * ks, b + 2 * ks, accumulate || ks > 0);
      }
    }
    WgmmaCommit();
  }

  // One K block's 4 wgmma k16 steps on the stage at `stage`.
  static void Mma(const unsigned char* stage, int consumer, bool accumulate,
                  float (&acc)[kAccumulators]) {
    if constexpr (kSwap) {
      MmaSwapped(stage, consumer, accumulate, acc);
    } else {
      MmaRows(stage, consumer, accumulate, acc);
    }
  }

  // A consumer group's release of a stage (any thread of the group, after
  // its MMAs on the stage are done): thread r of the group to rank r's ring
  // (its own: Release; a peer's, whose producer may have multicast into it:
  // ReleasePeer).
  static void ReleaseStage(Ring& ring, const PipelineCursor& c, unsigned rank) {
    const unsigned i = threadIdx.x % 128;
    if (i == rank) {
      Release(ring, c);
    } else if (i < kCluster) {
      ReleasePeer(ring, c, i);
    }
  }

  static void Consume(const Params& p, unsigned char* stages,
                      unsigned char* store_boxes, Ring& ring, int num_work,
                      const MoeSm90Schedule& schedule, int consumer) {
    const unsigned rank = kClustered ? ClusterCtaRank() : 0;
    const bool leader = threadIdx.x % 128 == 0;
    unsigned char* boxes = store_boxes + consumer * 2 * kMoeSm90StoreBoxBytes;
    unsigned boxes_done = 0;
    PipelineCursor c;
    float acc[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
    for (;;) {
      WaitFull(ring, c);  // the tile's first fill names the tile
      const TileMessage m = Message(ring, c);
      // Every thread has read the message before the leader can release the
      // stage to the producer, who writes the next one there.
      NamedBarrierSync<128>(1 + consumer);
      if (m.unit == kPipelineClosed) break;
      // With clusters the unit is a cluster unit (whole tiles); a repeated
      // tile is not stored.
      Unit u = {m.unit, -1, 0, 1, 0, kKBlocks};
      TileCoord coord = {m.item, m.n_tile};
      bool store = true;
      if constexpr (kClustered) {
        const ClusterTile tile = ClusterTileOf(p, num_work, m.unit, rank);
        coord = tile.coord;
        store = tile.store;
      } else {
        u = UnitOf(schedule, m.unit);
      }
      // Read now, needed after the K loop: its latency hides behind the MMAs.
      const MoeWorkItem item = p.work[coord.item];
      PipelineCursor previous;
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        const bool first = kb == u.k_begin;
        if (!first) WaitFull(ring, c);
        Mma(stages + c.stage * kStageBytes, consumer, !first, acc);
        WgmmaWait<1>();  // the previous K block's MMAs are done
        if (!first) ReleaseStage(ring, previous, rank);
        previous = c;
        c.Advance(kStages);
      }
      WgmmaWait<0>();
      ReleaseStage(ring, previous, rank);
      if (!store) continue;
      // Split-K: only the tile's last split to finish stores it.
      if (u.split_tile >= 0 && !ReduceSplits(p, u, consumer, acc)) continue;
      const int rows = item.tail_class == 0 ? kTileRows : item.rows;
      if constexpr (kSwap) {
        StoreSwapped(p, item, rows, coord.n_tile, consumer, acc);
      } else if (kTmaStore && item.tail_class == 0) {
        StoreByTma(p, item, coord.n_tile, consumer, acc, boxes, boxes_done);
      } else {
        Store(p, item, rows, coord.n_tile, consumer, acc);
      }
    }
    // The last stores must have read their boxes before the CTA exits.
    if (kTmaStore && leader) BulkWaitGroup<0>();
  }

  static void Run(const Params& p) {
    extern __shared__ __align__(1024) unsigned char sm90_smem[];
    // Stages 1024-byte aligned (128-byte swizzle atoms), then the store
    // boxes (whole KiBs, so aligned too), then the ring.
    unsigned char* stages = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(sm90_smem) + 1023) & ~1023ull);
    unsigned char* store_boxes = stages + kStages * kStageBytes;
    auto* ring =
        reinterpret_cast<Ring*>(store_boxes + MoeSm90StoreBytes(kTmaStore));
    auto* mailbox = reinterpret_cast<PeerMailbox*>(ring + 1);
    if (threadIdx.x == 0) {
      // With clusters each CTA's empty barriers count all its CTAs' consumers.
      ring->Init(/*groups=*/2 * kCluster, kStageBytes);
      if constexpr (kClustered) mailbox->Init(kCluster - 1);
      FenceMbarrierInit();
    }
    if (threadIdx.x == 0) {  // the producer's maps, under the predecessor
      PrefetchTensorMap(&p.a_map);
      PrefetchTensorMap(&p.w_map);
      if constexpr (!kClustered) {
        if (p.prefetch_w_kblocks > 0) PrefetchFirstW(p);
      }
    }
    if constexpr (kClustered) {
      ClusterSync();  // the peer's barriers exist before anyone arrives
    } else {
      __syncthreads();
    }
    // The prologue above read only params, W and (as hints) the work list:
    // the predecessor's writes (the work list, A) are visible from here.
    WaitForPrerequisiteGrids();
    AllowDependentLaunch();
    const int num_work = p.header->num_work;
    const MoeSm90Schedule schedule = ScheduleOf(p, num_work);
    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
      SetMaxRegistersDecrease<kProducerRegisters>();
      if (threadIdx.x == 0) {
        if constexpr (!kClustered) {
          Produce(p, stages, *ring, num_work, schedule);
        } else {
          ProduceClustered(p, stages, *ring, *mailbox, num_work);
        }
      }
    } else {
      SetMaxRegistersIncrease<kConsumerRegisters>();
      Consume(p, stages, store_boxes, *ring, num_work, schedule, warpgroup - 1);
    }
    // A CTA's shared memory must outlive its peer's arrivals and copies.
    if constexpr (kClustered) ClusterSync();
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_GROUPED_GEMM_SM90_CUH_
