// backends/cuda/moe/heuristics.h — the MoE family's launch rules on the CUDA
// backend: which tile, kernel variant, raster order, cache policy and grid a
// step gets. Pure host functions of the step's shape and the device's size
// (SMs, L2), deterministic, pinned by tests/backends/cuda/moe/
// heuristics_test.cc.
//
// The shapes that host and device must agree on (stages, shared memory,
// the split-K schedule, cluster units) are not here: they are layout, in
// templates/cuda/moe/params.h. Each rule below says what it decides and
// why; the measurements behind it are in bench/results/
// moe_hopper_design.txt under the heading named.
#ifndef TAILOR_BACKENDS_CUDA_MOE_HEURISTICS_H_
#define TAILOR_BACKENDS_CUDA_MOE_HEURISTICS_H_

#include <cstdint>

#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

// ---- tiles and kernel variants ----------------------------------------------

// Plan tile rows on Hopper: 128 (both consumers share each W tile, halving
// its reads per row) once the average expert has kMoeRowsFor128 rows (T * k
// / E) or more; below that, where every item is a small tail, the swap-AB
// tiles (MoeSwapTileRows) when `swap_ab` and no expert gets more than 32
// rows, else 64. Without the Hopper kernel: 64, the portable kernel's CTA.
// Heading: "Tile rows".
inline constexpr int64_t kMoeRowsFor128 = 32;
int32_t MoeDefaultTileRows(bool hopper, bool swap_ab, int64_t assignments,
                           int64_t experts, int64_t max_expert_rows);

// The swap-AB tiles: 8 rows (one wgmma n8 column block) for steps whose
// experts get at most 8 rows, else 32. Two tiles, not 8/16/24/32: the MMA
// hides under the W stream at any N <= 32, so more would only cost compiles.
inline constexpr int32_t kMoeSwapSmallTile = 8;
inline constexpr int32_t kMoeSwapLargeTile = kMoeSm90SwapMaxRows;
int32_t MoeSwapTileRows(int64_t max_expert_rows);

// Whether a Hopper launch of plan tiles of `tile_rows` runs swap-AB (W rows
// as wgmma's M, the tokens as its N): tiles of at most 32 rows, `enabled`.
bool HopperSwapAB(bool enabled, int64_t tile_rows);

// The cluster size of a Hopper launch whose CTA tile has `cta_rows` rows:
// `forced` (2 or 4, a developer override; 1 otherwise) on the 128-row
// kernel, else 1. The cost model takes no clusters. Heading: "Clusters".
int HopperClusterFor(int forced, int cta_rows);

// Whether the ping-pong kernel (templates/cuda/moe/sm90/kernel_pingpong.cuh)
// can run a Hopper launch: 128-row CTA tiles, no swap-AB, no clusters. The
// cost model never picks it (the H200 table has it slower than the
// cooperative kernel at every compute-bound step); moe.consumers=pingpong
// forces it. Heading: "Ping-pong consumers".
bool MoeSm90PingPongFits(int cta_rows, bool swap_ab, int cluster);

// ---- raster order and schedule ----------------------------------------------

// The raster group bounds of a step (params expert_groups, kMoeGroups*):
// forward while the average expert has half a CTA tile to two tiles of rows
// (an expert whose tiles straddle a fixed bound reads its W tile again a
// group later); back from two tiles up where one expert's W is at least
// twice the L2; else fixed. Heading: "Raster group bounds".
int MoeSm90ExpertGroups(int64_t assignments, int64_t experts, int cta_rows,
                        int64_t expert_w_bytes, int64_t l2_bytes);

// Whether a step streams W with an L2 evict-first policy (params
// w_evict_first): every expert's rows fit one plan tile (`rows` <=
// `tile_rows`: no W tile is read twice) and the active experts' W (min(E,
// R) of `expert_w_bytes`) fits in the L2, so the stream leaves the L2's
// other lines in place. Longer streams lose by it. Heading: "W evict-first".
bool MoeSm90EvictFirstW(int64_t rows, int64_t tile_rows, int64_t experts,
                        int64_t expert_w_bytes, int64_t l2_bytes);

// Whether a step's launches overlap their predecessors (programmatic
// dependent launch): steps of at most one route segment of rows (T * k),
// the decode sizes, whose five kernels are latency-bound. Heading:
// "Programmatic dependent launch".
bool MoeOverlapsPredecessor(int64_t step_rows);

// Whether the Hopper GEMM pulls the W of its first kMoeSm90PrefetchWKBlocks
// K blocks into the L2 before its predecessor ends (params
// prefetch_w_kblocks): overlapped steps whose active experts' W fits in the
// L2 (MoeSm90EvictFirstW). 6 blocks x 32 KiB a CTA stay within half an
// H100's L2 over 132 CTAs. Heading: "Early W prefetch".
inline constexpr int kMoeSm90PrefetchWKBlocks = 6;
bool MoeSm90PrefetchWEarly(int64_t rows, int64_t tile_rows, int64_t experts,
                           int64_t expert_w_bytes, int64_t l2_bytes);

// Whether a launch runs its tiles in waves that start together (params
// wave_sync): the 128-row kernel without swap-AB at K of
// kMoeSm90WaveSyncKBlocks blocks or more, where tiles that share A or W walk
// K side by side and meet in the L2; on shorter tiles the wait at each wave
// costs more than that saves. Heading: "Wave sync".
inline constexpr int kMoeSm90WaveSyncKBlocks = 96;
bool MoeSm90WaveSync(int cta_rows, bool swap_ab, int64_t k);

// ---- grids ------------------------------------------------------------------

// CTAs of a launch of at most `max_tiles` plan tiles on `sms` SMs: enough
// for the most units any tile count up to max_tiles can make
// (MoeSm90ScheduleOf), at most one an SM. A swap-AB step that may have
// kMoeSm90SwapSplitMaxRest tiles or more gets a CTA per tile: CTAs without
// a unit would still start, set up their ring and count themselves out.
int MoeSm90Ctas(int64_t max_tiles, int64_t k, int sms, bool split_k,
                bool swap_ab = false);

// CTAs of a launch of at most `max_items` items with clusters of `cluster`
// CTAs, at most `max_clusters` of which are resident at once (the occupancy
// query's count; Hopper's SMs come in pairs within a GPC, so sms / 2
// clusters of 2 always are).
int MoeSm90ClusterCtas(int64_t max_items, int n_tiles, int cluster,
                       int max_clusters);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_MOE_HEURISTICS_H_
