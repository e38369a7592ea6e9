// templates/cuda/moe/route.cuh — the MoE inspector on the device: topk_ids
// -> counts, offsets, permutation, inverse and the piecewise work list, on
// the caller's stream, no host sync. Two launches (one for steps of at most
// kMoeRouteSegment assignments):
//
//   MoeRouteCountPlan  grid = segments of kMoeRouteSegment assignments:
//                      checks ids (bad ones are dropped and recorded with
//                      atomicMin, so the lowest position wins) and counts
//                      the segment's assignments per local expert into
//                      histogram[segment, e]. The last block to finish
//                      plans: counts, offsets, histogram[s, e] -> the
//                      assignments to e before segment s, the work list
//                      (each expert's core tiles, then its tail) and
//                      permutation[R..T*k) = -1
//   MoeRouteScatter    grid = segments: each assignment's rank among the
//                      equal experts before it (MatchAny within a warp,
//                      then a per-expert running count across warps and
//                      rounds), so row = offsets[e] + histogram[s, e] + rank
//                      is the host's stable order
//   MoeRouteFused      both in one block, for a single segment, with the
//                      counts and bases in shared memory (no histogram)
//
// counts, offsets, permutation and inverse are bit-identical to the host
// Route (src/ops/moe/route.cc); the work list has the host planner's items
// (plan::BuildPiecewisePlan) in expert-major order (templates/common/moe/
// params.h says why). Params: MoeRouteParams.
//
// One source for every vendor: it is written against the lane primitives of
// runtime/cuda/lanes.cuh (32-lane warps), and HIP compiles it unchanged
// through its vendor header with runtime/hip/lanes.h's (64-lane waves):
// templates/hip/moe/route.h. A "warp" below is the vendor's warp or wave.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/lanes.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/common/error_word.h"
#include "templates/common/moe/params.h"

namespace tailor::cuda {

using ::tailor::gpu::ErrorWord;
using ::tailor::gpu::kMoeRouteCountThreads;
using ::tailor::gpu::kMoeRouteScatter;
using ::tailor::gpu::kMoeRouteSegment;
using ::tailor::gpu::MoeRouteParams;
using ::tailor::gpu::MoeWorkItem;

// Assignments of the tokens to route: valid_tokens (clamped to [0, T]) * k.
TAILOR_DEVICE int ValidAssignments(const MoeRouteParams& p) {
  if (p.valid_tokens == nullptr) return p.assignments;
  return Min(Max(*p.valid_tokens, 0), p.tokens) * p.topk;
}

// The local expert of assignment i, or -1 when it is dropped (padding, a
// non-local expert, or bad data, which kRecord records).
template <bool kRecord>
TAILOR_DEVICE int LocalExpert(const MoeRouteParams& p, int i, int valid) {
  if (i >= valid) return -1;
  const int id = p.topk_ids[i];
  const long long limit = p.expert_map != nullptr ? p.map_size : p.experts;
  if (id < 0 || id >= limit) {
    if (kRecord) atomicMin(&p.header->bad_id, ErrorWord(i, id));
    return -1;
  }
  if (p.expert_map == nullptr) return id;
  const int local = p.expert_map[id];
  if (local < -1 || local >= p.experts) {
    if (kRecord) atomicMin(&p.header->bad_map_entry, ErrorWord(id, local));
    return -1;
  }
  return local;
}

// Per-warp partial sums of a block-wide scan, and their total.
using WarpSums = int[kMaxBlockWarps + 1];

// Exclusive prefix sum of one int per thread over the whole block (at most
// kMaxBlockWarps warps); `total` gets the sum. Every thread of the block
// must call it.
TAILOR_DEVICE int BlockExclusiveSum(int value, WarpSums& warp_sums,
                                    int& total) {
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const int warps = blockDim.x / kLanes;
  int inclusive = value;
  for (int d = 1; d < kLanes; d *= 2) {
    const int other = ShuffleUpInt(inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == kLanes - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int sum = lane < warps ? warp_sums[lane] : 0;
    int scan = sum;
    for (int d = 1; d < kMaxBlockWarps; d *= 2) {
      const int other = ShuffleUpInt(scan, d);
      if (lane >= d) scan += other;
    }
    if (lane < kMaxBlockWarps) warp_sums[lane] = scan - sum;
    if (lane == kMaxBlockWarps - 1) warp_sums[kMaxBlockWarps] = scan;
  }
  __syncthreads();
  const int result = warp_sums[warp] + inclusive - value;
  total = warp_sums[kMaxBlockWarps];
  __syncthreads();  // warp_sums may be reused after this
  return result;
}

// ---- count: one segment's assignments per local expert ----------------------
// Leaves the counts in shared `segment_counts` [E] and in histogram[segment].
TAILOR_DEVICE void CountSegment(const MoeRouteParams& p, int segment, int valid,
                                int* segment_counts) {
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
    segment_counts[e] = 0;
  }
  __syncthreads();
  const int begin = segment * kMoeRouteSegment;
  const int end = Min(begin + kMoeRouteSegment, p.assignments);
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int e = LocalExpert<true>(p, i, valid);
    if (e >= 0) atomicAdd(&segment_counts[e], 1);
  }
  __syncthreads();
  int* column = p.histogram + static_cast<long long>(segment) * p.experts;
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
    column[e] = segment_counts[e];
  }
}

// ---- plan: one whole block, once every histogram column is written ----------
struct MoeRoutePlanner {
  // counts[e], and histogram[s, e] -> the assignments to e before segment s.
  static void CountsAndSegmentPrefix(const MoeRouteParams& p) {
    constexpr int kUnroll = 8;  // loads in flight per thread
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
      int* h = p.histogram + e;  // column e, stride E
      const long long stride = p.experts;
      int sum = 0;
      for (int s = 0; s < p.segments; s += kUnroll) {
        int count[kUnroll];  // every load issued before the first is used
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          count[u] = s + u < p.segments
                         ? LoadFromOtherBlocks(h + (s + u) * stride)
                         : 0;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (s + u < p.segments) h[(s + u) * stride] = sum;
          sum += count[u];
        }
      }
      p.counts[e] = sum;
    }
    __syncthreads();
  }

  // The plan from counts[e] (global p.counts, or the fused kernel's shared
  // copy): offsets, the work list, the header and permutation[R..T*k) = -1.
  // first_row(e, row, count) is called once for each expert by the thread
  // that owns it, after that thread's last read of counts[e].
  template <typename FirstRow>
  static void Plan(const MoeRouteParams& p, const int* counts,
                   WarpSums& warp_sums, FirstRow first_row) {
    // Each thread owns a contiguous run of experts, so one scan orders them.
    const int per_thread = CeilDiv(p.experts, static_cast<int>(blockDim.x));
    const int e0 = Min(static_cast<int>(threadIdx.x) * per_thread, p.experts);
    const int e1 = Min(e0 + per_thread, p.experts);
    int rows = 0, items = 0;
    for (int e = e0; e < e1; ++e) {
      const int count = counts[e];
      rows += count;
      items += count / p.tile_rows + (count % p.tile_rows != 0);
    }
    int total_rows = 0, total_items = 0;
    int row = BlockExclusiveSum(rows, warp_sums, total_rows);
    int item = BlockExclusiveSum(items, warp_sums, total_items);
    for (int e = e0; e < e1; ++e) {
      const int count = counts[e], core = count / p.tile_rows;
      const int rest = count % p.tile_rows;
      p.offsets[e] = row;
      first_row(e, row, count);
      for (int j = 0; j < core; ++j) {
        p.work[item + j] =
            MoeWorkItem{row + j * p.tile_rows, p.tile_rows, e, 0};
      }
      if (rest != 0) {
        p.work[item + core] = MoeWorkItem{row + core * p.tile_rows, rest, e,
                                          p.tail_classes[rest]};
      }
      item += core + (rest != 0);
      row += count;
    }
    if (threadIdx.x == 0) {
      p.offsets[p.experts] = total_rows;
      p.header->num_work = total_items;
      p.header->num_rows = total_rows;
    }
    for (int i = total_rows + threadIdx.x; i < p.assignments; i += blockDim.x) {
      p.permutation[i] = -1;
    }
    __syncthreads();
  }

  // Many segments: counts from the histogram, which keeps each segment's
  // assignments before it per expert; MoeRouteScatter adds offsets[e].
  static void Run(const MoeRouteParams& p, WarpSums& warp_sums) {
    CountsAndSegmentPrefix(p);
    Plan(p, p.counts, warp_sums, [](int, int, int) {});
  }
};

// ---- scatter: stable rows of one segment's assignments ----------------------
// The rounds of a block of kWarps warps over segment `segment`:
// expert_of(round, i) is assignment i's local expert (-1 dropped, -2 past the
// step). running [E] holds each expert's next row, warp_count [kWarps, E]
// zeros; both in shared memory, visible to the whole block.
template <int kWarps, typename ExpertOf>
TAILOR_DEVICE void ScatterRounds(const MoeRouteParams& p, int segment,
                                 int* running, int* warp_count,
                                 ExpertOf expert_of) {
  constexpr int kThreads = kLanes * kWarps;
  static_assert(kMoeRouteSegment % kThreads == 0, "whole rounds per segment");
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const int first = segment * kMoeRouteSegment;
#pragma unroll
  for (int round = 0; round < kMoeRouteSegment / kThreads; ++round) {
    if (first + round * kThreads >= p.assignments) break;  // block-uniform
    const int i = first + round * kThreads + static_cast<int>(threadIdx.x);
    const int e = expert_of(round, i);
    const LaneMask peers = MatchAny(e);
    const int leader = LowestLane(peers);
    const bool lead = lane == leader && e >= 0;
    if (lead) warp_count[warp * p.experts + e] = PopCount(peers);
    __syncthreads();
    int base = 0;
    if (lead) {
      base = running[e];
      for (int w = 0; w < warp; ++w) base += warp_count[w * p.experts + e];
    }
    base = ShuffleInt(base, leader);
    __syncthreads();
    if (lead) {
      atomicAdd(&running[e], PopCount(peers));
      warp_count[warp * p.experts + e] = 0;
    }
    __syncthreads();
    if (e >= 0) {
      const int row = base + PopCount(peers & LaneMaskLt());
      p.permutation[row] = i;
      p.inverse[i] = row;
    } else if (e == -1) {
      p.inverse[i] = -1;
    }
  }
}

// One segment of many: each expert's base is its first row (offsets[e])
// plus its assignments in the segments before (the planned histogram).
// `smem` holds (1 + kWarps) ints per expert.
template <int kWarps>
TAILOR_DEVICE void ScatterSegment(const MoeRouteParams& p, int segment,
                                  int valid, int* smem) {
  int* running = smem;                 // [E] next row per expert
  int* warp_count = smem + p.experts;  // [kWarps, E]
  const int* bases = p.histogram + static_cast<long long>(segment) * p.experts;
  for (int e = threadIdx.x; e < p.experts; e += kLanes * kWarps) {
    running[e] =
        LoadFromOtherBlocks(bases + e) + LoadFromOtherBlocks(p.offsets + e);
    for (int w = 0; w < kWarps; ++w) warp_count[w * p.experts + e] = 0;
  }
  __syncthreads();
  ScatterRounds<kWarps>(p, segment, running, warp_count, [&](int, int i) {
    return i < p.assignments ? LocalExpert<false>(p, i, valid) : -2;
  });
}

// =============================================================================
// MoeRouteCountPlan: grid = segments; the last block to finish plans.
// =============================================================================
struct MoeRouteCountPlan {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kMoeRouteCountThreads;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic shared memory: one int per local expert.
  static void Run(const Params& p) {
    extern __shared__ int count_smem[];
    __shared__ WarpSums warp_sums;
    __shared__ int ticket;
    CountSegment(p, blockIdx.x, ValidAssignments(p), count_smem);
    __syncthreads();  // this block's histogram column, before its ticket
    if (threadIdx.x == 0) ticket = ArriveAcqRel(&p.header->blocks_done);
    __syncthreads();  // the last block reads every column after this
    if (ticket != static_cast<int>(gridDim.x) - 1) return;
    MoeRoutePlanner::Run(p, warp_sums);
    if (threadIdx.x == 0) p.header->blocks_done = 0;  // for the next route
  }
};

// =============================================================================
// MoeRouteFused: one block routes a single segment (count, plan, scatter).
// Each thread reads its assignments' ids once, into registers; the counts
// and the scatter's bases stay in shared memory, so the only global reads
// are the ids (and the expert map): a decode step's route is latency.
// =============================================================================
struct MoeRouteFused {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kMoeRouteCountThreads;
  static constexpr int kWarps = kThreads / kLanes;
  static constexpr int kRounds = kMoeRouteSegment / kThreads;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic shared memory: (1 + kWarps) ints per local expert.
  static void Run(const Params& p) {
    extern __shared__ int fused_smem[];
    __shared__ WarpSums warp_sums;
    int* counts = fused_smem;  // [E]: counts, then each expert's next row
    int* warp_count = fused_smem + p.experts;  // [kWarps, E]
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      counts[e] = 0;
      for (int w = 0; w < kWarps; ++w) warp_count[w * p.experts + e] = 0;
    }
    __syncthreads();
    const int valid = ValidAssignments(p);
    int expert[kRounds];  // assignment round * kThreads + threadIdx.x
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int i = r * kThreads + static_cast<int>(threadIdx.x);
      expert[r] = i < p.assignments ? LocalExpert<true>(p, i, valid) : -2;
    }
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (expert[r] >= 0) atomicAdd(&counts[expert[r]], 1);
    }
    __syncthreads();
    MoeRoutePlanner::Plan(p, counts, warp_sums, [&](int e, int row, int count) {
      p.counts[e] = count;
      counts[e] = row;
    });
    ScatterRounds<kWarps>(p, 0, counts, warp_count,
                          [&](int round, int) { return expert[round]; });
  }
};

// =============================================================================
// MoeRouteScatter: one block per segment.
// =============================================================================
template <int kWarps>
struct MoeRouteScatter {
  static_assert(kWarps == 1 || kWarps == 2 || kWarps == 4 || kWarps == 8,
                "a segment must split into whole rounds of the block");
  using Params = MoeRouteParams;
  static constexpr int kThreads = kLanes * kWarps;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic shared memory: (1 + kWarps) ints per local expert.
  static void Run(const Params& p) {
    extern __shared__ int scatter_smem[];
    ScatterSegment<kWarps>(p, blockIdx.x, ValidAssignments(p), scatter_smem);
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_
