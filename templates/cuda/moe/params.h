// templates/cuda/moe/params.h — params and launch shapes of the MoE CUDA
// kernels, the one definition that the host glue (src/backends/cuda/moe/
// kernels.cc) fills and the templates (route.cuh, pack.cuh,
// grouped_gemm_sm80.cuh, sm90/, combine.cuh) read. The launch rules that
// pick the values of the policy fields live on the host
// (src/backends/cuda/moe/heuristics.h).
//
// Contract: plain C++ that compiles both as host code (g++) and as device
// code (NVRTC, -default-device): no CUDA keywords, no standard headers.
//
// What CUDA shares with HIP (the work list, the route header, the params of
// Route, Pack, Combine and the portable GEMM) is in
// templates/common/moe/params.h; this file brings those names into
// tailor::cuda and adds the CUDA kernels' own.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_MOE_PARAMS_H_

#include "runtime/cuda/tensor_map.h"
#include "templates/common/moe/params.h"

namespace tailor::cuda {

// The names of templates/common/moe/params.h, in this backend's namespace.
using ::tailor::gpu::kMoeCombineThreads;
using ::tailor::gpu::kMoeEpilogueNone;
using ::tailor::gpu::kMoeEpilogueSiluAndMul;
using ::tailor::gpu::kMoeMaxTileRows;
using ::tailor::gpu::kMoeNoError;
using ::tailor::gpu::kMoePackThreads;
using ::tailor::gpu::kMoePackVectorsPerBlock;
using ::tailor::gpu::kMoePackVectorsPerThread;
using ::tailor::gpu::kMoeRouteCountPlan;
using ::tailor::gpu::kMoeRouteCountThreads;
using ::tailor::gpu::kMoeRouteFused;
using ::tailor::gpu::kMoeRouteHeaderBytes;
using ::tailor::gpu::kMoeRouteScatter;
using ::tailor::gpu::kMoeRouteSegment;
using ::tailor::gpu::kMoeRuntimeDim;
using ::tailor::gpu::MoeCombineParams;
using ::tailor::gpu::MoeGroupedGemmParams;
using ::tailor::gpu::MoePackParams;
using ::tailor::gpu::MoeRouteHeader;
using ::tailor::gpu::MoeRouteParams;
using ::tailor::gpu::MoeRowVectorBytes;
using ::tailor::gpu::MoeWorkItem;

// The Hopper grouped GEMM (moe/sm90/kernel.cuh): A and W are read by
// TMA through two maps encoded once (descriptor pool), 128-byte swizzle:
//   a_map  2D {K, reserved rows of A}, box {64, MoeSm90ARows(tile rows)}
//   w_map  2D {K, E * N} (the experts' weights as one matrix), box {64, 64}
//   c_map  2D {output columns, reserved rows of C}, box {64, 64}: full tiles
//          leave by TMA stores when the kernel's kTmaStore is set (unused
//          otherwise)
// The row extents are the buffers' (a workspace's reserved T * k), not the
// step's: rows past the step's R are never stored, and a tail reads them
// only into rows it does not store.
struct MoeGroupedGemmSm90Params {
  TensorMap a_map;
  TensorMap w_map;
  TensorMap c_map;
  void* c;                  // [R, N] or [R, N / 2]
  const MoeWorkItem* work;  // [max_work]
  MoeRouteHeader* header;   // num_work; the dynamic scheduler's counters
  int dynamic_schedule;     // 1: CTAs take tiles in order from a counter
  // Raster group bounds (TileOf, kMoeGroups*): fixed groups of kGroupItems
  // items, or groups whose bounds move to expert starts, forward or back,
  // so that an expert's M tiles of a W tile run in the same wave; the host
  // picks them per step.
  int expert_groups;
  // Split-K (split_k set; MoeSm90ScheduleOf picks which tiles and S): split
  // s of split tile i (the i-th tile past the whole ones) computes K blocks
  // [s KB / S, (s + 1) KB / S), writes its f32 partial to slot i S + s of
  // `partials` and arrives on split_arrivals[2 i + consumer]; the last split
  // to arrive adds the others' partials and stores the tile. Both live in
  // the route scratch (MoeSm90SplitScratchBytes); arrivals are 0 between
  // launches.
  int split_k;
  float* partials;      // [split tiles * S][2][kMoeSm90SplitSlotFloats / 2]
  int* split_arrivals;  // [2 * tiles]
  // 1: W's copies carry an L2 evict-first policy (set only for launches
  // without clusters).
  int w_evict_first;
  // 1: static schedule in waves that start together; it takes precedence
  // over dynamic_schedule.
  int wave_sync;
  // > 0: the launch overlaps its predecessor (programmatic dependent launch),
  // and each CTA pulls the W of its first tile's first prefetch_w_kblocks K
  // blocks into the L2 while the predecessor finishes. max_work bounds the
  // work list it reads then.
  int prefetch_w_kblocks;
  int max_work;
};

// ---- launch shapes: the one definition of the constants that the host
// (grid, block, shared memory) and the templates (tiles) must agree on ------

// Route: the scatter warps for E local experts (its shared memory is
// (1 + warps) * E ints).
inline constexpr long long kMoeScatterSharedBudget = 96 * 1024;
constexpr int MoeScatterWarps(long long experts) {
  return (1 + 8) * 4 * experts <= kMoeScatterSharedBudget   ? 8
         : (1 + 4) * 4 * experts <= kMoeScatterSharedBudget ? 4
         : (1 + 2) * 4 * experts <= kMoeScatterSharedBudget ? 2
                                                            : 1;
}
// The most local experts the scatter's shared memory holds (with 1 warp).
inline constexpr long long kMoeMaxDeviceExperts = kMoeScatterSharedBudget / 8;

// Grouped GEMM. The tensor-core kernel takes bf16 with 16-byte aligned rows
// (K % 8 == 0); the SIMT kernel takes the rest (f32, unaligned bf16).
constexpr bool MoeGemmUsesMma(bool bf16, long long k) {
  return bf16 && k % 8 == 0;
}
inline constexpr int kMoeMmaThreads = 128;
inline constexpr int kMoeMmaWRows = 128;  // W rows per CTA tile
inline constexpr int kMoeMmaKTile = 64;   // K per stage: 128-byte rows
inline constexpr int kMoeMmaStages = 4;
inline constexpr int kMoeSimtThreads = 256;
inline constexpr int kMoeSimtWRows = 64;
// Rows one CTA tile of the portable kernels computes: the tile rows rounded
// up to the m16 fragment, at most 64 (a 128-row plan tile runs as two).
inline constexpr int kMoePortableMaxRows = 64;
constexpr int MoeGemmCtaRows(int tile_rows) {
  return tile_rows >= kMoePortableMaxRows ? kMoePortableMaxRows
                                          : (tile_rows + 15) / 16 * 16;
}
// Output columns one CTA tile writes (gated: half its W rows).
constexpr int MoeGemmOutPerCta(bool mma, bool gated) {
  return (mma ? kMoeMmaWRows : kMoeSimtWRows) / (gated ? 2 : 1);
}
constexpr int MoeGemmNTiles(bool mma, bool gated, long long n) {
  const long long out = gated ? n / 2 : n;
  const int per_cta = MoeGemmOutPerCta(mma, gated);
  return static_cast<int>((out + per_cta - 1) / per_cta);
}

constexpr int MoeMmaSharedBytes(int tile_rows) {
  return kMoeMmaStages * (MoeGemmCtaRows(tile_rows) + kMoeMmaWRows) *
         kMoeMmaKTile * 2;
}

// The Hopper kernel: a producer warpgroup and two consumer warpgroups; CTA
// tile (one plan tile of up to 64 or 128 rows) x 256 W rows x 64 K. With
// 128 rows each consumer computes 64 rows x all 256 W rows (m64n256k16);
// with 64 rows each computes all 64 rows x its 128 W rows (m64n128k16).
inline constexpr int kMoeSm90Threads = 384;
inline constexpr int kMoeSm90MaxRows = 128;
inline constexpr int kMoeSm90WRows = 256;
inline constexpr int kMoeSm90KTile = 64;
inline constexpr int kMoeSm90BoxRows = 64;  // W boxes {64, 64}
constexpr int MoeSm90CtaRows(int tile_rows) {
  return tile_rows <= 64 ? 64 : 128;
}
// Swap-AB (plan tiles of at most 32 rows: decode steps): the W tile is
// wgmma's M and the tile's tokens its N, rounded up to 8, 16 or 32, so a
// 1-token item computes 8 columns instead of 64 rows. Each consumer computes
// its 128 W rows (2 x m64nNk16) x all N tokens.
inline constexpr int kMoeSm90SwapMaxRows = 32;
constexpr int MoeSm90SwapTokens(int tile_rows) {
  return tile_rows <= 8 ? 8 : tile_rows <= 16 ? 16 : 32;
}
// Rows of the A box (TMA) and of a stage's A tile: the swap kernel's tokens,
// else the CTA rows.
constexpr int MoeSm90ARows(int tile_rows, bool swap_ab) {
  return swap_ab ? MoeSm90SwapTokens(tile_rows) : MoeSm90CtaRows(tile_rows);
}
// Ping-pong consumers (moe/sm90/kernel_pingpong.cuh) each own one half of
// a 128-row plan tile: the A box and a stage's A tile are that half.
inline constexpr int kMoeSm90PingPongARows = 64;
constexpr int MoeSm90StageBytes(int a_rows) {
  return (a_rows + kMoeSm90WRows) * kMoeSm90KTile * 2;
}
// The TMA-store epilogue stages each consumer's output through two 64 x 64
// bf16 boxes (8 KiB each, 128-byte swizzle): 32 KiB for both consumers.
inline constexpr int kMoeSm90StoreBoxBytes = 64 * 64 * 2;
constexpr int MoeSm90StoreBytes(bool tma_store) {
  return tma_store ? 2 * 2 * kMoeSm90StoreBoxBytes : 0;
}
// As many stages as fit beside the store boxes: swap-AB (at most 32 A
// rows), 6 x at most 36 KiB; 64 rows, 5 x 40 KiB (4 with the store boxes);
// 128 rows, 4 x 48 KiB.
constexpr int MoeSm90Stages(int a_rows, bool tma_store) {
  return a_rows <= kMoeSm90SwapMaxRows ? 6
         : a_rows <= 64                ? (tma_store ? 4 : 5)
                                       : 4;
}
// Stages, store boxes, 1 KiB for the ring's barriers and counters, 1 KiB of
// alignment slack (stages must start 1024-byte aligned for the swizzle).
constexpr int MoeSm90SharedBytes(int a_rows, bool tma_store) {
  return MoeSm90Stages(a_rows, tma_store) * MoeSm90StageBytes(a_rows) +
         MoeSm90StoreBytes(tma_store) + 2048;
}
static_assert(MoeSm90SharedBytes(kMoeSm90SwapMaxRows, false) <= 227 * 1024 &&
                  MoeSm90SharedBytes(128, true) <= 227 * 1024 &&
                  MoeSm90SharedBytes(64, true) <= 227 * 1024 &&
                  MoeSm90SharedBytes(64, false) <= 227 * 1024,
              "a Hopper CTA has at most 227 KiB of dynamic shared memory");
constexpr int MoeSm90NTiles(bool gated, long long n) {
  const long long out = gated ? n / 2 : n;
  const int per_cta = kMoeSm90WRows / (gated ? 2 : 1);
  return static_cast<int>((out + per_cta - 1) / per_cta);
}

// Split-K over the last, partial wave. A launch of `grid` CTAs over `tiles`
// plan tiles runs tiles / grid whole waves, then rest = tiles % grid tiles
// that keep rest CTAs busy for a whole tile's time while the others idle.
// When rest <= grid / 2, each of those tiles is cut along K into S =
// min(grid / rest, kMoeSm90MaxSplits, K blocks / MoeSm90MinSplitKBlocks)
// units that different CTAs run side by side; each writes an f32 partial to
// a slot of the route scratch and the tile's last unit to arrive adds them
// up. A decode step (tiles <= grid / 2) is the case with no whole wave;
// swap-AB launches split only below kMoeSm90SwapSplitMaxRest tiles (one
// CTA's ring streams a fraction of the copy rate, so that many CTAs pull it
// unsplit). rest x S <= grid <= SMs: the route scratch holds one partial
// slot per SM. Host and device (from the device plan's tile count) compute
// it with this function.
inline constexpr int kMoeSm90MaxSplits = 8;
inline constexpr int kMoeSm90MinSplitKBlocks = 8;
// The swap-AB kernel's partials are at most 32 floats a thread, so it splits
// down to 4 K blocks a unit.
inline constexpr int kMoeSm90SwapMinSplitKBlocks = 4;
constexpr int MoeSm90MinSplitKBlocks(bool swap_ab) {
  return swap_ab ? kMoeSm90SwapMinSplitKBlocks : kMoeSm90MinSplitKBlocks;
}
inline constexpr int kMoeSm90SwapSplitMaxRest = 40;
// One (tile, split)'s f32 partial: 2 consumers x 128 threads x at most 128
// accumulators.
inline constexpr long long kMoeSm90SplitSlotFloats = 2 * 128 * 128;
struct MoeSm90Schedule {
  int whole;   // plan tiles [0, whole) run as one unit each
  int splits;  // plan tiles [whole, tiles) run as `splits` units each
  int units;   // whole + (tiles - whole) * splits
};
constexpr MoeSm90Schedule MoeSm90ScheduleOf(int tiles, int grid, int k_blocks,
                                            bool split_k,
                                            bool swap_ab = false) {
  const int rest = grid > 0 ? tiles % grid : 0;
  const bool few =
      2 * rest <= grid && (!swap_ab || rest < kMoeSm90SwapSplitMaxRest);
  int splits = 1;
  if (split_k && rest > 0 && few) {
    splits = grid / rest;
    splits = splits < kMoeSm90MaxSplits ? splits : kMoeSm90MaxSplits;
    const int by_k = k_blocks / MoeSm90MinSplitKBlocks(swap_ab);
    splits = splits < by_k ? splits : by_k;
  }
  if (splits <= 1) return {tiles, 1, tiles};
  return {tiles - rest, splits, tiles - rest + rest * splits};
}

// Raster group bounds of the Hopper grouped GEMM (params expert_groups,
// TileOf in tile_raster.cuh). Tiles run group by group, N tile by N tile
// within a group of work items, so a group's items share each W tile in the
// L2 while it is read. An expert whose items straddle two groups has its W
// read once per group; the bounds can move to expert starts:
//   fixed    groups of kGroupItems (8) items;
//   forward  each bound moves forward to the next expert start (at most
//            kGroupItems - 1 items on): groups of 1 to 15 items;
//   back     each bound moves back to the start of the expert it cuts (at
//            most kGroupItems - 1 items back): groups of 1 to 15 items,
//            most of them at most 8.
// An expert longer than kGroupItems items fills whole groups anyway: its
// bounds stay. The host picks them per step.
inline constexpr int kMoeGroupsFixed = 0;
inline constexpr int kMoeGroupsForward = 1;
inline constexpr int kMoeGroupsBack = 2;

// Wave sync (params wave_sync): a producer waits at most this long for the
// wave before its tile's. The order, not the results, depends on the wait,
// so a CTA that is not yet resident (another kernel holds its SM) costs the
// others at most that per wave.
inline constexpr long long kMoeSm90WaveWaitNs = 50000;

// Clusters of the 128-row kernel (no split-K) take cluster units: a unit
// is MoeSm90ClusterItems(c) consecutive items (of one raster group) x
// MoeSm90ClusterNs(c) consecutive N tiles, one plan tile per CTA. 2: two
// items of one N tile (sharing W when they share an expert); 4: two items
// x two N tiles (each item's A shared by its two CTAs, each W tile by the
// two items' CTAs as with 2).
constexpr int MoeSm90ClusterNs(int cluster) { return cluster == 4 ? 2 : 1; }
constexpr int MoeSm90ClusterItems(int cluster) {
  return cluster / MoeSm90ClusterNs(cluster);
}
// Units of `items` work items of `n_tiles` N tiles each.
constexpr long long MoeSm90ClusterUnits(long long items, int n_tiles,
                                        int cluster) {
  const long long ns = MoeSm90ClusterNs(cluster);
  const long long columns = items * ((n_tiles + ns - 1) / ns);
  const long long per_unit = MoeSm90ClusterItems(cluster);
  return (columns + per_unit - 1) / per_unit;
}
// Split-K area of the route scratch (after its header): arrivals [2 slots]
// (zeroed with the header), padded to 256 bytes, then the partial slots.
constexpr long long MoeSm90SplitArrivalBytes(int slots) {
  return (2LL * slots * 4 + 255) / 256 * 256;
}
constexpr long long MoeSm90SplitScratchBytes(int slots) {
  return MoeSm90SplitArrivalBytes(slots) + slots * kMoeSm90SplitSlotFloats * 4;
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_PARAMS_H_
