// templates/cuda/moe/sm90/kernel_pingpong.cuh — the Hopper grouped GEMM
// with ping-pong consumers: each consumer warpgroup owns a whole warpgroup
// tile, and the two take turns at the tensor cores, so one's epilogue (and
// its TMA stores) overlaps the other's mainloop (CUTLASS's
// KernelTmaWarpSpecializedPingpong). Same math and output as kernel.cuh's
// cooperative schedule, for 128-row plan tiles without clusters, swap-AB or
// split-K.
//
// Tiles. A plan tile (item, N tile) of up to 128 rows is two warpgroup
// tiles: rows [64 h, +64) x its 256 W rows (m64n256k16), consumer h taking
// half h. Half 1 of a tail of at most 64 rows is computed, not stored, as
// the cooperative kernel's second consumer computes it. The W tile is read
// once per half; the two halves run back to back, so the second read hits
// the L2.
//
// Schedule: the tile scheduler's (scheduler.cuh: dynamic or static order,
// wave sync; p.split_k is not read, the host clears it). The producer fills
// the ring with half 0 of a plan tile (its K blocks), then half 1, then the
// next tile, each fill carrying the tile's MoeSm90TileMessage; Close ends
// the stream where a half 0 would start. Each stage is read by one
// warpgroup (the ring counts one group): consumer h reads the first stage's
// message and the stages of its halves, and steps its cursor over the
// other's.
//
// Turns (runtime/cuda/warpgroup_turns.cuh, named barriers kTurnBarrier,
// +1), strictly alternating, consumer 0 first: in its turn a consumer waits
// for its half's first stage and issues the half's MMAs, then passes the
// turn, waits for them, releases its last stage and stores. Taking the turn
// before the first WaitFull keeps the ring's parities sound: the other
// consumer has then waited for every stage before this half, so a stage
// this consumer waits for is at most one round ahead of its last completed
// fill. The consumer that reads Close sets the CTA's `closed` flag and
// passes the turn; the other, woken, finds the flag and stops too, so every
// pass meets a wait.
//
// Named barriers: 1 + h, consumer h's own (epilogue.cuh); kTurnBarrier and
// kTurnBarrier + 1, the turns.
//
// Params: MoeGroupedGemmSm90Params (templates/cuda/moe/params.h); the host
// encodes a_map with 64-row boxes (kMoeSm90PingPongARows).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_PINGPONG_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_PINGPONG_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/warpgroup_turns.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/moe/params.h"
#include "templates/cuda/moe/sm90/epilogue.cuh"
#include "templates/cuda/moe/sm90/mainloop_bf16.cuh"
#include "templates/cuda/moe/sm90/scheduler.cuh"
#include "templates/cuda/moe/sm90/shape.cuh"
#include "templates/cuda/moe/tile_raster.cuh"

namespace tailor::cuda {

// The cooperative 128-row shape with a stage of one warpgroup tile:
// kMoeSm90PingPongARows (64) A rows + 256 W rows x 64 K (40 KiB). The
// mainloop and the epilogue read these names; consumer h's accumulators are
// the cooperative consumer h's (rows [64 h, +64) of the plan tile x all 256
// W rows).
template <int kN, int kK, int kTileRows, int kEpilogue, int kTmaStore>
struct MoeSm90PingPongShape
    : MoeSm90Shape<kN, kK, kTileRows, kEpilogue, kTmaStore> {
  static_assert(kTileRows > 64,
                "ping-pong consumers take the two halves of a 128-row tile");
  static constexpr int kARows = kMoeSm90PingPongARows;
  static constexpr unsigned kABytes = kARows * kMoeSm90KTile * 2;
  static constexpr unsigned kStageBytes = MoeSm90StageBytes(kARows);
  static constexpr int kStages = MoeSm90Stages(kARows, kTmaStore);
};

template <int kN, int kK, int kTileRows, int kEpilogue, int kTmaStore>
struct MoeGroupedGemmSm90PingPong {
  using Shape = MoeSm90PingPongShape<kN, kK, kTileRows, kEpilogue, kTmaStore>;
  using Scheduler = MoeSm90TileScheduler<Shape>;
  using Mainloop = MoeSm90MainloopBf16<Shape>;
  using Epilogue = MoeSm90Epilogue<Shape>;
  using TileMessage = MoeSm90TileMessage;
  using Ring = PipelineRing<Shape::kStages, TileMessage>;
  static constexpr int kTurnBarrier = 3;  // after the consumers' 1 and 2
  using Turns = WarpgroupTurns<kTurnBarrier>;

  // ---- the entry's contract (runtime/cuda/entry.cuh) ------------------------
  using Params = MoeGroupedGemmSm90Params;
  static constexpr int kThreads = kMoeSm90Threads;
  static constexpr int kMinBlocksPerSm = 1;  // register cap for setmaxnreg
  static constexpr bool kWaitsForPrerequisites = true;  // after the prologue

  static constexpr int kStages = Shape::kStages;
  static constexpr int kKBlocks = Shape::kKBlocks;
  static constexpr int kNTiles = Shape::kNTiles;
  static constexpr int kARows = Shape::kARows;
  static constexpr unsigned kStageBytes = Shape::kStageBytes;
  static constexpr int kAccumulators = Shape::kAccumulators;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;

  static_assert(Shape::kSplitRows && kAccumulators == 128,
                "a warpgroup tile is 64 rows x 256 W rows (m64n256k16)");
  static_assert(kStages * kStageBytes + Epilogue::kSharedBytes + sizeof(Ring) +
                        sizeof(int) + 1024 <=
                    MoeSm90SharedBytes(kARows, kTmaStore),
                "shared memory layout");

  // ---- schedule -------------------------------------------------------------
  static int PlanTiles(int num_work) { return num_work * kNTiles; }
  static TileCoord CoordOf(const Params& p, int num_work, int t) {
    return TileOf(t, p.work, num_work, kNTiles, p.expert_groups);
  }

  // ---- producer -------------------------------------------------------------
  // Before the predecessor ends: the W of this CTA's first tile, its first
  // p.prefetch_w_kblocks K blocks, into the L2 (kernel.cuh's PrefetchFirstW:
  // num_work clamped, the items only pick TMA coordinates).
  static void PrefetchFirstW(const Params& p) {
    const int num_work =
        Min(Max(LoadRelaxed(&p.header->num_work), 0), p.max_work);
    const int t = Scheduler::FirstTile();
    if (t >= PlanTiles(num_work)) return;
    const TileCoord coord = CoordOf(p, num_work, t);
    const int expert = p.work[coord.item].group;
    Mainloop::PrefetchW(p, expert, coord.n_tile, 0,
                        Min(kKBlocks, p.prefetch_w_kblocks));
  }

  // Fills the ring tile by tile, half 0's K blocks then half 1's, each fill
  // naming the tile; Close ends the stream.
  static void Produce(const Params& p, unsigned char* stages, Ring& ring,
                      int num_work) {
    PipelineCursor c;
    const unsigned long long w_policy = Mainloop::WPolicy();
    int t = Scheduler::FirstTile();
    while (t < PlanTiles(num_work)) {
      Scheduler::WaitForWave(p, t);
      const TileCoord coord = CoordOf(p, num_work, t);
      const TileMessage message = {t, coord.item, coord.n_tile};
      MoeWorkItem half = p.work[coord.item];
      int next = 0;
#pragma unroll 1
      for (int h = 0; h < 2; ++h, half.row_begin += kARows) {
#pragma unroll 1
        for (int kb = 0; kb < kKBlocks; ++kb) {
          // Asked one fill early: the counter's latency hides behind the wait.
          if (h == 1 && kb == kKBlocks - 1) next = Scheduler::NextTile(p, t);
          WaitEmpty(ring, c);
          ArmFull(ring, c, kStageBytes, message);
          Mainloop::Load(p, stages + c.stage * kStageBytes, &ring.full[c.stage],
                         kb, half, coord.n_tile, w_policy);
          c.Advance(kStages);
        }
      }
      Scheduler::CountIssued(p);
      t = next;
    }
    Close(ring, c);
    Scheduler::ResetSchedule(p);
  }

  // ---- consumers ------------------------------------------------------------
  // Steps a cursor over one half's stages (the other consumer's).
  static void SkipHalf(PipelineCursor& c) {
#pragma unroll 1
    for (int kb = 0; kb < kKBlocks; ++kb) c.Advance(kStages);
  }

  // In consumer h's turn, its half's first stage full: the half's MMAs;
  // the turn passes on once they are issued, and the stages go back as
  // their MMAs complete.
  static void MmaHalf(unsigned char* stages, Ring& ring, PipelineCursor& c,
                      int h, float (&acc)[kAccumulators]) {
    const bool leader = threadIdx.x % 128 == 0;
    PipelineCursor previous;
#pragma unroll 1
    for (int kb = 0; kb < kKBlocks; ++kb) {
      if (kb > 0) WaitFull(ring, c);
      // The stage holds this half's 64 A rows: consumer 0's offset.
      Mainloop::Mma(stages + c.stage * kStageBytes, /*consumer=*/0, kb > 0,
                    acc);
      WgmmaWait<1>();  // the previous K block's MMAs are done
      if (kb > 0 && leader) Release(ring, previous);
      previous = c;
      c.Advance(kStages);
    }
    Turns::Pass(1 - h);
    WgmmaWait<0>();
    if (leader) Release(ring, previous);
  }

  static void Consume(const Params& p, unsigned char* stages,
                      unsigned char* store_boxes, Ring& ring,
                      volatile int* closed, int h) {
    const bool leader = threadIdx.x % 128 == 0;
    unsigned char* boxes = Epilogue::Boxes(store_boxes, h);
    unsigned boxes_done = 0;
    PipelineCursor c;
    float acc[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
    // Consumer 0 takes the first turn; consumer 1's cursor starts past
    // half 0 of the first tile.
    if (h == 1) {
      Turns::Pass(0);
      SkipHalf(c);
    }
    for (;;) {
      Turns::Wait(h);
      if (*closed) break;  // the other consumer read Close
      WaitFull(ring, c);   // the half's first fill names the tile
      const TileMessage m = Message(ring, c);
      // Every thread has read the message before the leader can release the
      // stage to the producer, who writes the next one there.
      NamedBarrierSync<128>(1 + h);
      if (m.unit == kPipelineClosed) {
        if (leader) *closed = 1;
        Turns::Pass(1 - h);  // the other wakes to the flag
        break;
      }
      // Read now, needed after the K loop: its latency hides behind the MMAs.
      const MoeWorkItem item = p.work[m.item];
      MmaHalf(stages, ring, c, h, acc);
      SkipHalf(c);
      const int rows = item.tail_class == 0 ? kTileRows : item.rows;
      Epilogue::StoreTile(p, item, rows, m.n_tile, h, acc, boxes, boxes_done);
    }
    Epilogue::Drain(leader);
  }

  // ---- the CTA --------------------------------------------------------------
  static void Run(const Params& p) {
    extern __shared__ __align__(1024) unsigned char sm90_smem[];
    // Stages 1024-byte aligned (128-byte swizzle atoms), then the store
    // boxes (whole KiBs, so aligned too), then the ring and the flag.
    unsigned char* stages = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(sm90_smem) + 1023) & ~1023ull);
    unsigned char* store_boxes = stages + kStages * kStageBytes;
    auto* ring = reinterpret_cast<Ring*>(store_boxes + Epilogue::kSharedBytes);
    auto* closed = reinterpret_cast<volatile int*>(ring + 1);
    if (threadIdx.x == 0) {
      ring->Init(/*groups=*/1, kStageBytes);  // one reader per stage
      *closed = 0;
      FenceMbarrierInit();
      // The producer's maps, under the predecessor.
      PrefetchTensorMap(&p.a_map);
      PrefetchTensorMap(&p.w_map);
      if (p.prefetch_w_kblocks > 0) PrefetchFirstW(p);
    }
    __syncthreads();
    // The prologue above read only params, W and (as hints) the work list:
    // the predecessor's writes (the work list, A) are visible from here.
    WaitForPrerequisiteGrids();
    AllowDependentLaunch();
    const int num_work = p.header->num_work;
    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
      SetMaxRegistersDecrease<kProducerRegisters>();
      if (threadIdx.x == 0) Produce(p, stages, *ring, num_work);
    } else {
      SetMaxRegistersIncrease<kConsumerRegisters>();
      Consume(p, stages, store_boxes, *ring, closed, warpgroup - 1);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_KERNEL_PINGPONG_CUH_
