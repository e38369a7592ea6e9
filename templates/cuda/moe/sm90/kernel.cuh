// templates/cuda/moe/sm90/kernel.cuh — the Hopper grouped GEMM: persistent,
// warp-specialized, TMA + mbarrier ring + wgmma, over the device Route's
// work list (core tiles and every tail in one launch).
//
// C[r, :] = epilogue(A[r, :] · W[e]ᵀ) for the rows r of each work item of
// expert e, as grouped_gemm_sm80.cuh, for bf16 with K % 8 == 0 on sm_90a.
//
// The kernel composes four parts (CUTLASS's kernel / collective split):
//   sm90/shape.cuh           the variant's constants and preconditions
//   sm90/scheduler.cuh       which unit each CTA runs next; split-K; clusters
//   sm90/mainloop_bf16.cuh   a stage's boxes, their TMA copies, the wgmma
//   sm90/epilogue.cuh        accumulators -> C
// and owns the schedule of its 384 threads:
//   warpgroup 0     producer: one thread walks the tile schedule and, per K
//                   block, waits for a free stage, arms its full barrier
//                   with the stage's bytes and has the mainloop fill it;
//                   registers lowered to kProducerRegisters (setmaxnreg)
//   warpgroups      consumers, f32 accumulators in registers raised to
//   1 and 2         kConsumerRegisters; each keeps one wgmma group in flight
//                   and releases a stage once the MMAs that read it are
//                   done. (A consumer whose rows are all past a tail's end
//                   computes them anyway: a branch around wgmma makes ptxas
//                   serialize every wgmma, C7518.)
// The stage ring (runtime/cuda/pipeline.cuh's protocol) holds kStages
// stages; each fill carries the unit's MoeSm90TileMessage. With clusters any
// CTA's stage may be written by every producer of the cluster, so each
// CTA's empty barriers count the consumer groups of all its CTAs (each
// group releases to all), and rank 0's producer mails each next unit to the
// other ranks (PeerMailbox).
//
// A ping-pong consumer schedule, or one for another mainloop, is another
// kernel file over the same parts.
//
// Params: MoeGroupedGemmSm90Params (templates/cuda/moe/params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/moe/params.h"
#include "templates/cuda/moe/sm90/epilogue.cuh"
#include "templates/cuda/moe/sm90/mainloop_bf16.cuh"
#include "templates/cuda/moe/sm90/scheduler.cuh"
#include "templates/cuda/moe/sm90/shape.cuh"

namespace tailor::cuda {

template <int kN, int kK, int kTileRows, int kEpilogue, int kTmaStore,
          int kCluster = 1, int kSwapAB = 0>
struct MoeGroupedGemmSm90 {
  using Shape =
      MoeSm90Shape<kN, kK, kTileRows, kEpilogue, kTmaStore, kCluster, kSwapAB>;
  using Scheduler = MoeSm90TileScheduler<Shape>;
  using Mainloop = MoeSm90MainloopBf16<Shape>;
  using Epilogue = MoeSm90Epilogue<Shape>;
  using Unit = typename Scheduler::Unit;
  using ClusterTile = typename Scheduler::ClusterTile;
  using ClusterCopies = typename Mainloop::ClusterCopies;
  using TileMessage = MoeSm90TileMessage;
  using Ring = PipelineRing<Shape::kStages, TileMessage>;

  // ---- the entry's contract (runtime/cuda/entry.cuh) ------------------------
  using Params = MoeGroupedGemmSm90Params;
  static constexpr int kThreads = kMoeSm90Threads;
  static constexpr int kMinBlocksPerSm = 1;  // register cap for setmaxnreg
  static constexpr bool kWaitsForPrerequisites = true;  // after the prologue

  static constexpr bool kClustered = Shape::kClustered;
  static constexpr int kStages = Shape::kStages;
  static constexpr int kKBlocks = Shape::kKBlocks;
  static constexpr unsigned kStageBytes = Shape::kStageBytes;
  static constexpr int kAccumulators = Shape::kAccumulators;
  // A cluster producer looks up every rank's tile of a unit (CopiesOf) with
  // its ring state live: at 40 registers that spilled, at 56 it does not;
  // the consumers' 224 keep the CTA in the register file (128 x 56 +
  // 256 x 224 <= 65536).
  static constexpr int kProducerRegisters = kClustered ? 56 : 40;
  static constexpr int kConsumerRegisters = kClustered ? 224 : 232;

  static_assert(kStages * kStageBytes + Epilogue::kSharedBytes + sizeof(Ring) +
                        sizeof(PeerMailbox) + 1024 <=
                    MoeSm90SharedBytes(Shape::kARows, kTmaStore),
                "shared memory layout");

  // ---- producer -------------------------------------------------------------
  // Before the predecessor ends (params prefetch_w_kblocks): pulls the W of
  // this CTA's first tile, its first K blocks, into the L2, so the first
  // fills after the wait hit it. W never changes; the work list was planned
  // by a route that ended before the predecessor began, but nothing relies
  // on that: num_work is clamped to the list's capacity and the items only
  // pick tensor-map coordinates, which the TMA unit bounds-checks.
  static void PrefetchFirstW(const Params& p) {
    const int num_work =
        Min(Max(LoadRelaxed(&p.header->num_work), 0), p.max_work);
    const MoeSm90Schedule schedule = Scheduler::ScheduleOf(p, num_work);
    const int t = Scheduler::FirstTile();
    if (t >= schedule.units) return;
    const Unit u = Scheduler::UnitOf(schedule, t);
    const TileCoord coord = Scheduler::CoordOf(p, num_work, u);
    const int expert = p.work[coord.item].group;
    const int k_end = Min(u.k_end, u.k_begin + p.prefetch_w_kblocks);
    Mainloop::PrefetchW(p, expert, coord.n_tile, u.k_begin, k_end);
  }

  // Fills the ring unit by unit; each fill carries its unit and coordinate
  // as the message (the consumers read the first one's); Close ends the
  // stream.
  static void Produce(const Params& p, unsigned char* stages, Ring& ring,
                      int num_work, const MoeSm90Schedule& schedule) {
    PipelineCursor c;
    const unsigned long long w_policy = Mainloop::WPolicy();
    int t = Scheduler::FirstTile();
    while (t < schedule.units) {
      Scheduler::WaitForWave(p, t);
      const Unit u = Scheduler::UnitOf(schedule, t);
      const TileCoord coord = Scheduler::CoordOf(p, num_work, u);
      const MoeWorkItem item = p.work[coord.item];
      int next = 0;
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        // Asked one fill early: the counter's latency hides behind the wait.
        if (kb == u.k_end - 1) next = Scheduler::NextTile(p, t);
        WaitEmpty(ring, c);
        ArmFull(ring, c, kStageBytes, TileMessage{t, coord.item, coord.n_tile});
        Mainloop::Load(p, stages + c.stage * kStageBytes, &ring.full[c.stage],
                       kb, item, coord.n_tile, w_policy);
        c.Advance(kStages);
      }
      Scheduler::CountIssued(p);
      t = next;
    }
    Close(ring, c);
    Scheduler::ResetSchedule(p);
  }

  // What a cluster CTA's producer needs to fill its stages for one cluster
  // unit: its tile (the consumers' message), its work item (the boxes'
  // coordinates) and the copies' multicast.
  struct ClusterFill {
    ClusterTile tile;
    MoeWorkItem item;
    ClusterCopies copies;
  };
  static ClusterFill ClusterFillOf(const Params& p, int num_work, int v,
                                   unsigned rank) {
    ClusterFill f;
    f.copies = Scheduler::template CopiesOf<Mainloop>(p, num_work, v, rank,
                                                      f.tile, f.item);
    return f;
  }

  // A cluster CTA's producer: CTA `rank` fills its stages for its tile of
  // each cluster unit, its copies shared as CopiesOf says, and names the
  // tile in the fills' message, so the consumers skip its lookup (a chain of
  // work-list reads that held them at every unit: "Clustered fills",
  // bench/results/moe_hopper_design.txt). Rank 0 takes the next unit one K
  // block in and mails it to the other ranks; the counter's and the
  // mailbox's latency hide behind the ring.
  static void ProduceClustered(const Params& p, unsigned char* stages,
                               Ring& ring, PeerMailbox& mailbox, int num_work) {
    constexpr int kNextAt = kKBlocks > 1 ? 1 : 0;  // K block
    const unsigned rank = ClusterCtaRank();
    const int units = Scheduler::ClusterUnits(num_work);
    PipelineCursor c;
    unsigned mail = 0;  // units mailed (rank 0) or received (the others)
    int v = Scheduler::FirstTile();
    ClusterFill fill;
    if (v < units) fill = ClusterFillOf(p, num_work, v, rank);
    while (v < units) {
      if (rank == 0) Scheduler::WaitForWave(p, v);
      int next = units;
      for (int kb = 0; kb < kKBlocks; ++kb) {
        if (kb == kNextAt) {
          if (rank == 0) {
            next = Scheduler::NextTile(p, v);
            mailbox.Send(mail++, kCluster - 1, next);
          } else {
            next = mailbox.Receive(mail++);
          }
        }
        WaitEmpty(ring, c);
        ArmFull(ring, c, kStageBytes,
                TileMessage{v, fill.tile.coord.item, fill.tile.coord.n_tile,
                            fill.tile.store});
        Mainloop::LoadClustered(p, stages + c.stage * kStageBytes,
                                &ring.full[c.stage], kb, fill.item,
                                fill.tile.coord.n_tile, fill.copies);
        c.Advance(kStages);
      }
      if (rank == 0) Scheduler::CountIssued(p);
      v = next;
      if (v < units) fill = ClusterFillOf(p, num_work, v, rank);
    }
    Close(ring, c);
    if (rank == 0) Scheduler::ResetSchedule(p);
  }

  // ---- consumers ------------------------------------------------------------
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
    unsigned char* boxes = Epilogue::Boxes(store_boxes, consumer);
    unsigned boxes_done = 0;
    PipelineCursor c;
    float acc[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
    for (;;) {
      WaitFull(ring, c);  // the unit's first fill names the unit
      const TileMessage m = Message(ring, c);
      // Every thread has read the message before the leader can release the
      // stage to the producer, who writes the next one there.
      NamedBarrierSync<128>(1 + consumer);
      if (m.unit == kPipelineClosed) break;
      // With clusters the unit is a cluster unit (whole tiles); a repeated
      // tile is not stored.
      const Unit u = kClustered ? Scheduler::WholeUnit(m.unit)
                                : Scheduler::UnitOf(schedule, m.unit);
      const TileCoord coord = {m.item, m.n_tile};
      // Read now, needed after the K loop: its latency hides behind the MMAs.
      const MoeWorkItem item = p.work[coord.item];
      PipelineCursor previous;
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        const bool first = kb == u.k_begin;
        if (!first) WaitFull(ring, c);
        Mainloop::Mma(stages + c.stage * kStageBytes, consumer, !first, acc);
        WgmmaWait<1>();  // the previous K block's MMAs are done
        if (!first) ReleaseStage(ring, previous, rank);
        previous = c;
        c.Advance(kStages);
      }
      WgmmaWait<0>();
      ReleaseStage(ring, previous, rank);
      if (!m.store) continue;
      // Split-K: only the tile's last split to finish stores it.
      if (u.split_tile >= 0 && !Scheduler::ReduceSplits(p, u, consumer, acc)) {
        continue;
      }
      const int rows = item.tail_class == 0 ? kTileRows : item.rows;
      Epilogue::StoreTile(p, item, rows, coord.n_tile, consumer, acc, boxes,
                          boxes_done);
    }
    Epilogue::Drain(leader);
  }

  // ---- the CTA --------------------------------------------------------------
  static void Run(const Params& p) {
    extern __shared__ __align__(1024) unsigned char sm90_smem[];
    // Stages 1024-byte aligned (128-byte swizzle atoms), then the store
    // boxes (whole KiBs, so aligned too), then the ring.
    unsigned char* stages = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(sm90_smem) + 1023) & ~1023ull);
    unsigned char* store_boxes = stages + kStages * kStageBytes;
    auto* ring = reinterpret_cast<Ring*>(store_boxes + Epilogue::kSharedBytes);
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
    const MoeSm90Schedule schedule = Scheduler::ScheduleOf(p, num_work);
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

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_CUH_
