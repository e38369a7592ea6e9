// templates/cuda/moe/fp8_grouped_gemm_sm90.cuh — the block-scaled e4m3
// Hopper grouped GEMM: persistent, warp-specialized, TMA + mbarrier ring +
// e4m3 wgmma, over the device Route's work list (core tiles and every tail
// in one launch; exact per-expert rows, no padding rows).
//
// C[r, :] = epilogue(dequant(A)[r, :] · dequant(W[e])ᵀ) for the rows r of
// each work item of expert e, with A, W and their scales in the layouts of
// templates/cuda/moe/fp8_params.h (block mode: 1 x 128 activation scales,
// 128 x 128 weight scales; per tensor and per channel: scales applied to the
// accumulators before the epilogue; K % 128 == 0, N % 128 == 0).
//
// The structure is the bf16 kernel's (moe/grouped_gemm_sm90.cuh), whose
// comments say why each choice was made; this kernel keeps its CTA tiles,
// tile order and split-K, and swaps in:
//   mainloop   moe/fp8_mainloop_sm90.cuh: 128-K stages that carry the A
//              tile's scales, e4m3 wgmma, promotion per K block
//   epilogue   moe/fp8_epilogue_sm90.cuh: bf16, silu_and_mul, or
//              silu_and_mul quantized to e4m3 for the down projection
// Per CTA (384 threads): warpgroup 0 the producer (one thread walks the
// schedule and fills the ring), warpgroups 1 and 2 the consumers.
//
// Schedule: tiles t of (item, N tile) pairs in TileOf's raster order; CTA b
// starts with tile b and then takes the next from a counter in the route
// header (p.dynamic_schedule), else b + gridDim.x, ...; the producer names
// each tile to the consumers in the stage's message. A last wave filling at
// most half of the grid is split along K (MoeSm90ScheduleOf); its units'
// partials are added by the last to arrive. When the epilogue exchanges
// maxima between the consumers, both consumers of a CTA arrive as one, so
// the same CTA's two consumers finish a split tile.
//
// kN, kK: the model's N and K, or kMoeRuntimeDim (0) to read params n and k
// (one kernel for every shape). kOrderedWaves: the consumers issue their
// wgmma waves in turns (fp8_mainloop_sm90.cuh), on the 64-row tile, where
// it measured faster; on the 128-row tile it measured even (slower at
// short K), and the swap-AB tiles are not measured with it.
//
// Params: MoeFp8GemmSm90Params (templates/cuda/moe/fp8_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/moe/fp8_epilogue_sm90.cuh"
#include "templates/cuda/moe/fp8_mainloop_sm90.cuh"
#include "templates/cuda/moe/fp8_params.h"
#include "templates/cuda/moe/grouped_gemm_sm80.cuh"  // TileOf

namespace tailor::cuda {

template <int kN, int kK, int kTileRows, int kEpilogue, int kSwapAB = 0,
          int kScaleMode = kMoeFp8BlockScaled,
          bool kOrderedWaves = kSwapAB == 0 && kTileRows <= 64>
struct MoeFp8GroupedGemmSm90 {
  static_assert(kN >= 0 && kK >= 0,
                "N and K are positive, or kMoeRuntimeDim (from the params)");
  static_assert(kK % kMoeFp8Block == 0,
                "block scaling: K is a multiple of 128");
  static_assert(kN % kMoeFp8Block == 0 && (kEpilogue == kMoeEpilogueNone ||
                                           kN % (2 * kMoeFp8Block) == 0),
                "block scaling: N (gated: N / 2) is a multiple of 128");

  using Params = MoeFp8GemmSm90Params;
  using Mainloop =
      MoeFp8MainloopSm90<kTileRows, kSwapAB, kEpilogue != kMoeEpilogueNone,
                         kScaleMode, kOrderedWaves>;
  using Epilogue = MoeFp8EpilogueSm90<Mainloop, kEpilogue>;
  static constexpr bool kGated = Epilogue::kGated;
  static constexpr bool kSwap = Mainloop::kSwap;
  static constexpr int kThreads = kMoeSm90Threads;
  static constexpr int kMinBlocksPerSm = 1;  // register cap for setmaxnreg
  static constexpr bool kWaitsForPrerequisites = true;  // after the prologue
  static constexpr int kStages = Mainloop::kStages;
  static constexpr int kAccumulators = Mainloop::kAccumulators;
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  // Split units of both consumers arrive as one (see the banner).
  static constexpr bool kCtaWideSplits = Epilogue::kExchanges;

  struct TileMessage {
    int unit;  // kPipelineClosed: the stream's end
    int item, n_tile, expert;
    int scale_shift;  // row_begin % kMoeFp8ScaleRowAlign (Mainloop::Tile)
  };
  using Ring = PipelineRing<kStages, TileMessage>;
  static_assert(sizeof(Ring) <= 1024, "the ring fits its KiB");
  static_assert(Epilogue::kExchangeFloats * 4 <= 1024,
                "the exchange fits its KiB");
  static_assert(kStages * Mainloop::kStageBytes + 3072 <=
                    MoeFp8SharedBytes(Mainloop::kARows),
                "shared memory layout");

  static int N(const Params& p) { return kN > 0 ? kN : p.n; }
  static int KBlocks(const Params& p) {
    return (kK > 0 ? kK : p.k) / kMoeFp8Block;
  }
  static int NTiles(const Params& p) { return MoeSm90NTiles(kGated, N(p)); }

  // ---- schedule (the bf16 kernel's, without clusters and wave sync) ---------
  struct Unit {
    int plan_tile;
    int split_tile;  // index among the split tiles; -1: a whole tile
    int split, splits;
    int k_begin, k_end;  // its K blocks
  };
  static Unit UnitOf(const MoeSm90Schedule& s, int t, int k_blocks) {
    if (t < s.whole) return {t, -1, 0, 1, 0, k_blocks};
    const int v = t - s.whole, split = v % s.splits;
    return {s.whole + v / s.splits,
            v / s.splits,
            split,
            s.splits,
            split * k_blocks / s.splits,
            (split + 1) * k_blocks / s.splits};
  }
  static MoeSm90Schedule ScheduleOf(const Params& p, int num_work) {
    return MoeSm90ScheduleOf(num_work * NTiles(p), gridDim.x, KBlocks(p),
                             p.split_k != 0, kSwap);
  }
  static int NextTile(const Params& p, int t) {
    if (!p.dynamic_schedule) return t + gridDim.x;
    return gridDim.x + atomicAdd(&p.header->gemm_next_tile, 1);
  }
  // The last CTA out resets the counters for the next launch.
  static void ResetSchedule(const Params& p) {
    if (!p.dynamic_schedule) return;
    if (ArriveAcqRel(&p.header->gemm_ctas_done) == gridDim.x - 1) {
      p.header->gemm_next_tile = 0;
      p.header->gemm_ctas_done = 0;
    }
  }

  // Checked builds (TAILOR_PIPELINE_CHECKS): a work item this tile cannot
  // run traps, naming it, instead of loading rows of another expert.
  static void CheckItem(const MoeWorkItem& item, int index) {
#if TAILOR_PIPELINE_CHECKS
    const int rows = item.tail_class == 0 ? kTileRows : item.rows;
    if (item.row_begin < 0 || item.group < 0 || rows < 1 ||
        rows > kTileRows || (item.tail_class == 0 && item.rows != kTileRows)) {
      printf("tailor fp8 gemm: work item %d {row_begin %d, rows %d, expert "
             "%d, tail_class %d} does not fit a %d-row tile\n",
             index, item.row_begin, item.rows, item.group, item.tail_class,
             kTileRows);
      __trap();
    }
#endif
  }

  // ---- producer -------------------------------------------------------------
  static void Produce(const Params& p, unsigned char* stages, Ring& ring,
                      int num_work, const MoeSm90Schedule& schedule) {
    PipelineCursor c;
    const int n = N(p), k_blocks = KBlocks(p), n_tiles = NTiles(p);
    int t = blockIdx.x;
    while (t < schedule.units) {
      const Unit u = UnitOf(schedule, t, k_blocks);
      const TileCoord coord =
          TileOf(u.plan_tile, p.work, num_work, n_tiles, p.expert_groups);
      const MoeWorkItem item = p.work[coord.item];
      CheckItem(item, coord.item);
      int next = 0;
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        // Asked one fill early: the counter's latency hides behind the wait.
        if (kb == u.k_end - 1) next = NextTile(p, t);
        WaitEmpty(ring, c);
        ArmFull(ring, c, Mainloop::kTxBytes,
                TileMessage{t, coord.item, coord.n_tile, item.group,
                            item.row_begin % kMoeFp8ScaleRowAlign});
        Mainloop::Load(p, stages + c.stage * Mainloop::kStageBytes,
                       &ring.full[c.stage], kb, item.row_begin, item.group,
                       coord.n_tile, n);
        c.Advance(kStages);
      }
      t = next;
    }
    Close(ring, c);
    ResetSchedule(p);
  }

  // ---- consumers ------------------------------------------------------------
  // Split-K: the consumer's partial of split unit u goes to its slot; the
  // tile's last split to arrive adds the other splits' partials into `acc`,
  // resets the arrival count and returns true; the others return false.
  // Slot layout (the bf16 kernel's): float4 q of thread i at q * 128 + i.
  static bool ReduceSplits(const Params& p, const Unit& u, int consumer,
                           float (&acc)[kAccumulators]) {
    constexpr int kQuads = kAccumulators / 4;
    constexpr int kConsumerQuads = kMoeSm90SplitSlotFloats / 8;
    const int i = threadIdx.x % 128;
    const float4* base =
        reinterpret_cast<const float4*>(p.partials) +
        (u.split_tile * u.splits * 2 + consumer) * kConsumerQuads + i;
    float4* mine = const_cast<float4*>(base) + u.split * 2 * kConsumerQuads;
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      __stcg(&mine[q * 128], make_float4(acc[4 * q], acc[4 * q + 1],
                                         acc[4 * q + 2], acc[4 * q + 3]));
    }
    // One arrival per consumer, or (kCtaWideSplits) per CTA.
    const int slot =
        kCtaWideSplits ? 2 * u.split_tile : 2 * u.split_tile + consumer;
    int* arrivals = &p.split_arrivals[slot];
    const bool arriver = kCtaWideSplits ? threadIdx.x == 128 : i == 0;
    bool last;
    if constexpr (kCtaWideSplits) {
      NamedBarrierSync<256>(kMoeFp8ConsumersBarrier);
      last = NamedBarrierOr<256>(
          kMoeFp8ConsumersBarrier,
          arriver && ArriveAcqRel(arrivals) == u.splits - 1);
    } else {
      NamedBarrierSync<128>(1 + consumer);
      last = NamedBarrierOr<128>(
          1 + consumer, arriver && ArriveAcqRel(arrivals) == u.splits - 1);
    }
    if (!last) return false;
#pragma unroll 1
    for (int s = 0; s < u.splits; ++s) {
      if (s == u.split) continue;
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
    if (arriver) *arrivals = 0;
    return true;
  }

  static void Consume(const Params& p, const unsigned char* stages, Ring& ring,
                      float* exchange, const MoeSm90Schedule& schedule,
                      int consumer) {
    const int n = N(p), k_blocks = KBlocks(p);
    const int out_n = kGated ? n / 2 : n;
    PipelineCursor c;
    float acc[kAccumulators];
    Mainloop::FirstTurn(consumer);
    for (;;) {
      WaitFull(ring, c);  // the tile's first fill names the tile
      const TileMessage m = Message(ring, c);
      // Every thread has read the message before the leader can release the
      // stage to the producer, who writes the next one there.
      NamedBarrierSync<128>(1 + consumer);
      if (m.unit == kPipelineClosed) break;
      const Unit u = UnitOf(schedule, m.unit, k_blocks);
      // Read now, needed after the K loop: its latency hides behind the MMAs.
      const MoeWorkItem item = p.work[m.item];
      const typename Mainloop::Tile tile = {
          u.k_begin, u.k_end, m.expert, m.n_tile, m.scale_shift, n, k_blocks};
      Mainloop::Run(p, stages, ring, c, tile, consumer, acc);
      if (u.split_tile >= 0 && !ReduceSplits(p, u, consumer, acc)) continue;
      const int rows = item.tail_class == 0 ? kTileRows : item.rows;
      if constexpr (!Mainloop::kBlockScaled) {
        Mainloop::ApplyScales(p, m.expert, m.n_tile, item.row_begin, rows,
                              consumer, n, acc);
      }
      Epilogue::Store(p, item, rows, m.n_tile, consumer, out_n, acc, exchange);
    }
    Mainloop::LastTurn(consumer);
  }

  static void Run(const Params& p) {
    extern __shared__ __align__(1024) unsigned char fp8_smem[];
    // Stages 1024-byte aligned (128-byte swizzle atoms), then the ring, then
    // the epilogue's exchange.
    unsigned char* stages = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(fp8_smem) + 1023) & ~1023ull);
    auto* ring =
        reinterpret_cast<Ring*>(stages + kStages * Mainloop::kStageBytes);
    float* exchange =
        reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(ring) + 1024);
    if (threadIdx.x == 0) {
      ring->Init(/*groups=*/2, Mainloop::kTxBytes);
      FenceMbarrierInit();
      PrefetchTensorMap(&p.a_map);
      PrefetchTensorMap(&p.w_map);
      if constexpr (Mainloop::kBlockScaled) PrefetchTensorMap(&p.a_scale_map);
    }
    __syncthreads();
    // The prologue above read only params: the predecessor's writes (the
    // work list, A and its scales) are visible from here.
    WaitForPrerequisiteGrids();
    AllowDependentLaunch();
    const int num_work = p.header->num_work;
    const MoeSm90Schedule schedule = ScheduleOf(p, num_work);
    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
      SetMaxRegistersDecrease<kProducerRegisters>();
      if (threadIdx.x == 0) Produce(p, stages, *ring, num_work, schedule);
    } else {
      SetMaxRegistersIncrease<kConsumerRegisters>();
      Consume(p, stages, *ring, exchange, schedule, warpgroup - 1);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_FP8_GROUPED_GEMM_SM90_CUH_
