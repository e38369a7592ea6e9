// templates/cuda/moe_route.cuh — the MoE inspector on the device: topk_ids
// -> counts, offsets, permutation, inverse and the piecewise work list, in
// three launches on the caller's stream, no host sync.
//
//   MoeRouteCount      grid = segments of kMoeRouteSegment assignments:
//                      checks ids (bad ones are dropped and recorded with
//                      atomicMin, so the lowest position wins), counts each
//                      segment's assignments per local expert into
//                      histogram[e, segment]
//   MoeRoutePlan       one block: counts = row sums, offsets = their
//                      exclusive scan, histogram[e, s] -> the first row of
//                      segment s's assignments to e; the work list: core
//                      tiles expert by expert, then tails by class and, in
//                      a class, by expert (the host planner's order);
//                      permutation[R..T*k) = -1
//   MoeRouteScatter    grid = segments: each assignment's rank among the
//                      equal experts before it (warp __match_any_sync, then
//                      a per-expert running count across warps and rounds),
//                      so row = base + rank is the host's stable order
//
// Bit-identical to the host Route (src/ops/moe_route.cc) and planner
// (plan::BuildPiecewisePlan): rows ordered by expert, then by assignment.
// Params: MoeRouteParams (templates/cuda/moe_params.h).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe_params.h"

namespace tailor::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;

TAILOR_DEVICE unsigned LaneMaskLt() {
  unsigned mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

TAILOR_DEVICE unsigned long long ErrorRecord(int position, int value) {
  return (static_cast<unsigned long long>(position) << 32) |
         static_cast<unsigned>(value);
}

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
    if (kRecord) atomicMin(&p.header->bad_id, ErrorRecord(i, id));
    return -1;
  }
  if (p.expert_map == nullptr) return id;
  const int local = p.expert_map[id];
  if (local < -1 || local >= p.experts) {
    if (kRecord) atomicMin(&p.header->bad_map_entry, ErrorRecord(id, local));
    return -1;
  }
  return local;
}

// Exclusive prefix sum of one int per thread over the whole block (at most
// 32 warps); `total` gets the sum. Every thread of the block must call it.
TAILOR_DEVICE int BlockExclusiveSum(int value, int (&warp_sums)[33],
                                    int& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  int inclusive = value;
  for (int d = 1; d < 32; d *= 2) {
    const int other = __shfl_up_sync(kFullWarp, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int sum = lane < warps ? warp_sums[lane] : 0;
    int scan = sum;
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(kFullWarp, scan, d);
      if (lane >= d) scan += other;
    }
    warp_sums[lane] = scan - sum;
    if (lane == 31) warp_sums[32] = scan;
  }
  __syncthreads();
  const int result = warp_sums[warp] + inclusive - value;
  total = warp_sums[32];
  __syncthreads();  // warp_sums may be reused after this
  return result;
}

// =============================================================================
// MoeRouteCount: one block per segment, histogram[e, segment].
// =============================================================================
struct MoeRouteCount {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kMoeRouteCountThreads;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic shared memory: one int per local expert.
  static void Run(const Params& p) {
    extern __shared__ int segment_counts[];  // [experts]
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      segment_counts[e] = 0;
    }
    __syncthreads();
    const int valid = ValidAssignments(p);
    const int begin = blockIdx.x * kMoeRouteSegment;
    const int end = Min(begin + kMoeRouteSegment, p.assignments);
    for (int i = begin + threadIdx.x; i < end; i += kThreads) {
      const int e = LocalExpert<true>(p, i, valid);
      if (e >= 0) atomicAdd(&segment_counts[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      p.histogram[static_cast<long long>(e) * p.segments + blockIdx.x] =
          segment_counts[e];
    }
  }
};

// =============================================================================
// MoeRoutePlan: one block; counts, offsets, segment bases and the work list.
// =============================================================================
struct MoeRoutePlan {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kMoeRoutePlanThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kClasses = kMoeMaxTileRows + 1;  // class values 1..64

  struct Shared {
    int warp_sums[33];
    int class_count[kClasses];
    int class_base[kClasses];
    int running[kClasses];
    int warp_class[kWarps][kClasses];
  };

  // ---- counts[e] and the in-expert prefix over segments ---------------------
  static void CountsAndSegmentPrefix(const Params& p) {
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      int* row = p.histogram + static_cast<long long>(e) * p.segments;
      int sum = 0;
      for (int s = 0; s < p.segments; ++s) {
        const int count = row[s];
        row[s] = sum;
        sum += count;
      }
      p.counts[e] = sum;
    }
    __syncthreads();
  }

  // ---- offsets, absolute segment bases, core tiles; returns the core count --
  static int OffsetsAndCore(const Params& p, Shared& sh, int& total_rows) {
    // Each thread owns a contiguous run of experts, so one scan orders them.
    const int per_thread = CeilDiv(p.experts, kThreads);
    const int e0 = Min(static_cast<int>(threadIdx.x) * per_thread, p.experts);
    const int e1 = Min(e0 + per_thread, p.experts);
    int rows = 0, core = 0;
    for (int e = e0; e < e1; ++e) {
      rows += p.counts[e];
      core += p.counts[e] / p.tile_rows;
    }
    int total_core = 0;
    int row = BlockExclusiveSum(rows, sh.warp_sums, total_rows);
    int tile = BlockExclusiveSum(core, sh.warp_sums, total_core);
    for (int e = e0; e < e1; ++e) {
      const int count = p.counts[e];
      p.offsets[e] = row;
      int* bases = p.histogram + static_cast<long long>(e) * p.segments;
      for (int s = 0; s < p.segments; ++s) bases[s] += row;
      for (int j = 0; j < count / p.tile_rows; ++j) {
        p.work[tile + j] =
            MoeWorkItem{row + j * p.tile_rows, p.tile_rows, e, 0};
      }
      tile += count / p.tile_rows;
      row += count;
    }
    if (threadIdx.x == 0) p.offsets[p.experts] = total_rows;
    __syncthreads();
    return total_core;
  }

  // ---- tails: by class, then by expert; returns the tail count -------------
  static int Tails(const Params& p, Shared& sh, int total_core) {
    for (int i = threadIdx.x; i < kClasses; i += kThreads) {
      sh.class_count[i] = 0;
      sh.running[i] = 0;
    }
    for (int i = threadIdx.x; i < kWarps * kClasses; i += kThreads) {
      sh.warp_class[i / kClasses][i % kClasses] = 0;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      const int rest = p.counts[e] % p.tile_rows;
      if (rest != 0) atomicAdd(&sh.class_count[p.tail_classes[rest]], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int sum = 0;
      for (int c = 0; c < kClasses; ++c) {
        sh.class_base[c] = sum;
        sum += sh.class_count[c];
      }
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int first = 0; first < p.experts; first += kThreads) {
      const int e = first + threadIdx.x;
      const int rest = e < p.experts ? p.counts[e] % p.tile_rows : 0;
      const int key = rest != 0 ? p.tail_classes[rest] : -1;
      const unsigned peers = __match_any_sync(kFullWarp, key);
      const int leader = __ffs(peers) - 1;
      const bool lead = lane == leader && key >= 0;
      if (lead) sh.warp_class[warp][key] = __popc(peers);
      __syncthreads();
      int base = 0;
      if (lead) {
        base = sh.running[key];
        for (int w = 0; w < warp; ++w) base += sh.warp_class[w][key];
      }
      base = __shfl_sync(kFullWarp, base, leader);
      __syncthreads();
      if (lead) {
        atomicAdd(&sh.running[key], __popc(peers));
        sh.warp_class[warp][key] = 0;
      }
      __syncthreads();
      if (key >= 0) {
        const int rank = base + __popc(peers & LaneMaskLt());
        const int full = p.counts[e] / p.tile_rows * p.tile_rows;
        p.work[total_core + sh.class_base[key] + rank] =
            MoeWorkItem{p.offsets[e] + full, rest, e, key};
      }
    }
    return sh.class_base[kClasses - 1] + sh.class_count[kClasses - 1];
  }

  static void Run(const Params& p) {
    __shared__ Shared sh;
    CountsAndSegmentPrefix(p);
    int total_rows = 0;
    const int total_core = OffsetsAndCore(p, sh, total_rows);
    const int total_tails = Tails(p, sh, total_core);
    if (threadIdx.x == 0) {
      p.header->num_work = total_core + total_tails;
      p.header->num_core = total_core;
      p.header->num_rows = total_rows;
    }
    for (int i = total_rows + threadIdx.x; i < p.assignments; i += kThreads) {
      p.permutation[i] = -1;
    }
  }
};

// =============================================================================
// MoeRouteScatter: one block per segment; stable rows of its assignments.
// =============================================================================
template <int kWarps>
struct MoeRouteScatter {
  static_assert(kWarps == 1 || kWarps == 2 || kWarps == 4 || kWarps == 8,
                "a segment must split into whole rounds of the block");
  using Params = MoeRouteParams;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRounds = kMoeRouteSegment / kThreads;

  // Dynamic shared memory: (1 + kWarps) ints per local expert.
  static void Run(const Params& p) {
    extern __shared__ int scatter_smem[];
    int* running = scatter_smem;                // [E] next row per expert
    int* warp_count = scatter_smem + p.experts;  // [kWarps, E]
    for (int e = threadIdx.x; e < p.experts; e += kThreads) {
      running[e] =
          p.histogram[static_cast<long long>(e) * p.segments + blockIdx.x];
      for (int w = 0; w < kWarps; ++w) warp_count[w * p.experts + e] = 0;
    }
    __syncthreads();
    const int valid = ValidAssignments(p);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int round = 0; round < kRounds; ++round) {
      const int i = blockIdx.x * kMoeRouteSegment + round * kThreads +
                    static_cast<int>(threadIdx.x);
      const int e = i < p.assignments ? LocalExpert<false>(p, i, valid) : -2;
      const unsigned peers = __match_any_sync(kFullWarp, e);
      const int leader = __ffs(peers) - 1;
      const bool lead = lane == leader && e >= 0;
      if (lead) warp_count[warp * p.experts + e] = __popc(peers);
      __syncthreads();
      int base = 0;
      if (lead) {
        base = running[e];
        for (int w = 0; w < warp; ++w) base += warp_count[w * p.experts + e];
      }
      base = __shfl_sync(kFullWarp, base, leader);
      __syncthreads();
      if (lead) {
        atomicAdd(&running[e], __popc(peers));
        warp_count[warp * p.experts + e] = 0;
      }
      __syncthreads();
      if (e >= 0) {
        const int row = base + __popc(peers & LaneMaskLt());
        p.permutation[row] = i;
        p.inverse[i] = row;
      } else if (e == -1) {
        p.inverse[i] = -1;
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_ROUTE_CUH_
