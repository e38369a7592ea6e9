// templates/hip/moe/route.h — the MoE inspector on AMD GPUs: topk_ids ->
// counts, offsets, permutation, inverse and the piecewise work list, on the
// caller's stream, no host sync. The algorithm, the launches and the
// results are those of the CUDA Route (templates/cuda/moe/route.cuh, which
// documents them); this file is its wave64 form:
//
//   - the scatter's stable rank among equal experts uses MatchAny
//     (runtime/hip/wave.h: ballot rounds; CDNA has no match instruction) and
//     64-bit lane masks where CUDA uses __match_any_sync and 32-bit masks;
//   - block scans run over 64-lane waves (at most 16 per block);
//   - the last count block reads the other blocks' histogram columns with
//     agent-scope loads (they skip the CU's non-coherent vector L1), where
//     CUDA uses ld.global.cg;
//   - the scatter's LDS (1 + waves) ints per expert must fit 64 KiB
//     (HipRouteScatterWaves).
//
//   MoeRouteCountPlanHip  grid = segments of kMoeRouteSegment assignments
//   MoeRouteScatterHip    grid = segments, kWaves waves per block
//   MoeRouteFusedHip      one block routes a single segment
//
// counts, offsets, permutation and inverse are bit-identical to the host
// Route (src/ops/moe/route.cc); the work list holds the host planner's items
// in expert-major order (templates/cuda/moe/params.h).
// Params: tailor::cuda::MoeRouteParams.
#ifndef TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_
#define TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_

#include "runtime/hip/entry.h"
#include "runtime/hip/wave.h"
#include "templates/hip/moe/params.h"

namespace tailor::hip {

using ::tailor::cuda::kMoeRouteSegment;

TAILOR_HIP_DEVICE unsigned long long RouteErrorRecord(int position, int value) {
  return (static_cast<unsigned long long>(position) << 32) |
         static_cast<unsigned>(value);
}

// Assignments of the tokens to route: valid_tokens (clamped to [0, T]) * k.
TAILOR_HIP_DEVICE int ValidAssignments(const MoeRouteParams& p) {
  if (p.valid_tokens == nullptr) return p.assignments;
  const int valid = *p.valid_tokens;
  return (valid < 0 ? 0 : (valid > p.tokens ? p.tokens : valid)) * p.topk;
}

// The local expert of assignment i, or -1 when it is dropped (padding, a
// non-local expert, or bad data, which kRecord records).
template <bool kRecord>
TAILOR_HIP_DEVICE int LocalExpert(const MoeRouteParams& p, int i, int valid) {
  if (i >= valid) return -1;
  const int id = p.topk_ids[i];
  const long long limit = p.expert_map != nullptr ? p.map_size : p.experts;
  if (id < 0 || id >= limit) {
    if (kRecord) atomicMin(&p.header->bad_id, RouteErrorRecord(i, id));
    return -1;
  }
  if (p.expert_map == nullptr) return id;
  const int local = p.expert_map[id];
  if (local < -1 || local >= p.experts) {
    if (kRecord) {
      atomicMin(&p.header->bad_map_entry, RouteErrorRecord(id, local));
    }
    return -1;
  }
  return local;
}

// Exclusive prefix sum of one int per thread over the whole block (at most
// kHipRouteMaxWaves waves); `total` gets the sum. Every thread calls it.
TAILOR_HIP_DEVICE int BlockExclusiveSum(int value,
                                        int (&wave_sums)[kHipRouteMaxWaves + 1],
                                        int& total) {
  const int lane = LaneId(), wave = threadIdx.x / kWaveSize;
  const int waves = blockDim.x / kWaveSize;
  int inclusive = value;
  for (int d = 1; d < kWaveSize; d *= 2) {
    const int other = ShuffleUpInt(inclusive, d);
    if (lane >= d) inclusive += other;
  }
  if (lane == kWaveSize - 1) wave_sums[wave] = inclusive;
  __syncthreads();
  if (wave == 0) {
    const int sum = lane < waves ? wave_sums[lane] : 0;
    int scan = sum;
    for (int d = 1; d < kHipRouteMaxWaves; d *= 2) {
      const int other = ShuffleUpInt(scan, d);
      if (lane >= d) scan += other;
    }
    if (lane < kHipRouteMaxWaves) wave_sums[lane] = scan - sum;
    if (lane == kHipRouteMaxWaves - 1) wave_sums[kHipRouteMaxWaves] = scan;
  }
  __syncthreads();
  const int result = wave_sums[wave] + inclusive - value;
  total = wave_sums[kHipRouteMaxWaves];
  __syncthreads();  // wave_sums may be reused after this
  return result;
}

// ---- count: one segment's assignments per local expert
// ----------------------- Leaves the counts in LDS `segment_counts` [E] and in
// histogram[segment].
TAILOR_HIP_DEVICE void CountSegment(const MoeRouteParams& p, int segment,
                                    int valid, int* segment_counts) {
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
    segment_counts[e] = 0;
  }
  __syncthreads();
  const int begin = segment * kMoeRouteSegment;
  const int end = begin + kMoeRouteSegment < p.assignments
                      ? begin + kMoeRouteSegment
                      : p.assignments;
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
struct MoeRoutePlannerHip {
  // counts[e], and histogram[s, e] -> the assignments to e before segment s.
  static TAILOR_HIP_DEVICE void CountsAndSegmentPrefix(
      const MoeRouteParams& p) {
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
      int* h = p.histogram + e;  // column e, stride E
      const long long stride = p.experts;
      int sum = 0;
      for (int s = 0; s < p.segments; ++s) {
        const int count = LoadFromOtherBlocks(h + s * stride);
        h[s * stride] = sum;
        sum += count;
      }
      p.counts[e] = sum;
    }
    __syncthreads();
  }

  static TAILOR_HIP_DEVICE void Run(const MoeRouteParams& p,
                                    int (&wave_sums)[kHipRouteMaxWaves + 1]) {
    CountsAndSegmentPrefix(p);
    // Each thread owns a contiguous run of experts, so one scan orders them.
    const int threads = static_cast<int>(blockDim.x);
    const int per_thread = (p.experts + threads - 1) / threads;
    const int e0 = min(static_cast<int>(threadIdx.x) * per_thread, p.experts);
    const int e1 = min(e0 + per_thread, p.experts);
    int rows = 0, items = 0;
    for (int e = e0; e < e1; ++e) {
      const int count = p.counts[e];
      rows += count;
      items += count / p.tile_rows + (count % p.tile_rows != 0);
    }
    int total_rows = 0, total_items = 0;
    int row = BlockExclusiveSum(rows, wave_sums, total_rows);
    int item = BlockExclusiveSum(items, wave_sums, total_items);
    for (int e = e0; e < e1; ++e) {
      const int count = p.counts[e], core = count / p.tile_rows;
      const int rest = count % p.tile_rows;
      p.offsets[e] = row;
      for (int s = 0; s < p.segments; ++s) {
        p.histogram[static_cast<long long>(s) * p.experts + e] += row;
      }
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
};

// ---- scatter: stable rows of one segment's assignments
// ------------------------ The block has kWaves waves; `lds` holds (1 + kWaves)
// ints per expert.
template <int kWaves>
TAILOR_HIP_DEVICE void ScatterSegment(const MoeRouteParams& p, int segment,
                                      int valid, int* lds) {
  constexpr int kThreads = kWaveSize * kWaves;
  static_assert(kMoeRouteSegment % kThreads == 0, "whole rounds per segment");
  int* running = lds;                 // [E] next row per expert
  int* wave_count = lds + p.experts;  // [kWaves, E]
  const int* bases = p.histogram + static_cast<long long>(segment) * p.experts;
  for (int e = threadIdx.x; e < p.experts; e += kThreads) {
    running[e] = LoadFromOtherBlocks(bases + e);
    for (int w = 0; w < kWaves; ++w) wave_count[w * p.experts + e] = 0;
  }
  __syncthreads();
  const int lane = LaneId(), wave = threadIdx.x / kWaveSize;
  for (int round = 0; round < kMoeRouteSegment / kThreads; ++round) {
    const int i = segment * kMoeRouteSegment + round * kThreads +
                  static_cast<int>(threadIdx.x);
    const int e = i < p.assignments ? LocalExpert<false>(p, i, valid) : -2;
    const LaneMask peers = MatchAny(e);  // every lane, dropped ones too
    const int leader = LowestLane(peers);
    const bool lead = lane == leader && e >= 0;
    if (lead) wave_count[wave * p.experts + e] = PopCount(peers);
    __syncthreads();
    int base = 0;
    if (lead) {
      base = running[e];
      for (int w = 0; w < wave; ++w) base += wave_count[w * p.experts + e];
    }
    base = ShuffleInt(base, leader);
    __syncthreads();
    if (lead) {
      atomicAdd(&running[e], PopCount(peers));
      wave_count[wave * p.experts + e] = 0;
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

// =============================================================================
// MoeRouteCountPlanHip: grid = segments; the last block to finish plans.
// =============================================================================
struct MoeRouteCountPlanHip {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kHipRouteCountThreads;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic LDS: one int per local expert.
  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    extern __shared__ int count_lds[];
    __shared__ int wave_sums[kHipRouteMaxWaves + 1];
    __shared__ int ticket;
    CountSegment(p, blockIdx.x, ValidAssignments(p), count_lds);
    __threadfence();  // this block's histogram column, before its ticket
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(&p.header->blocks_done, 1);
    __syncthreads();
    if (ticket != static_cast<int>(gridDim.x) - 1) return;
    __threadfence();  // every column is visible to the last block
    MoeRoutePlannerHip::Run(p, wave_sums);
    if (threadIdx.x == 0) p.header->blocks_done = 0;  // for the next route
  }
};

// =============================================================================
// MoeRouteFusedHip: one block routes a single segment (count, plan, scatter).
// =============================================================================
struct MoeRouteFusedHip {
  using Params = MoeRouteParams;
  static constexpr int kThreads = kHipRouteCountThreads;
  static constexpr int kWaves = kThreads / kWaveSize;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic LDS: (1 + kWaves) ints per local expert.
  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    extern __shared__ int fused_lds[];
    __shared__ int wave_sums[kHipRouteMaxWaves + 1];
    const int valid = ValidAssignments(p);
    CountSegment(p, 0, valid, fused_lds);
    __syncthreads();
    MoeRoutePlannerHip::Run(p, wave_sums);
    ScatterSegment<kWaves>(p, 0, valid, fused_lds);
  }
};

// =============================================================================
// MoeRouteScatterHip: one block per segment.
// =============================================================================
template <int kWaves>
struct MoeRouteScatterHip {
  static_assert(kWaves == 1 || kWaves == 2 || kWaves == 4,
                "a segment must split into whole rounds of the block");
  using Params = MoeRouteParams;
  static constexpr int kThreads = kWaveSize * kWaves;
  static constexpr int kMinBlocksPerSm = 1;

  // Dynamic LDS: (1 + kWaves) ints per local expert.
  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    extern __shared__ int scatter_lds[];
    ScatterSegment<kWaves>(p, blockIdx.x, ValidAssignments(p), scatter_lds);
  }
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_MOE_ROUTE_H_
