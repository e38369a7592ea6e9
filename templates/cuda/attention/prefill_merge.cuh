// templates/cuda/attention/prefill_merge.cuh — the merge of split query
// tiles of the ragged paged-attention kernels: each merge group's pieces
// wrote normalized f32 rows O_i and log2 lse_i into partial slots
// (prefill_params.h); the tile's rows are
//   M = max_i lse_i,  w_i = 2^(lse_i - M),
//   out = sum_i w_i O_i / sum_i w_i,  lse = (M + log2 sum_i w_i) ln 2
// (every lse_i = -inf: out 0, lse -inf).
//
// Template parameters: kType (the output's 16-bit type), kHeadDim,
// kTileRows (the attention kernel's tile rows: rows of a partial slot; or
// kPrefillRuntimeDim, the generic merge of background JIT, which reads
// params.tile_rows); the head pack comes with the params.
// Launch: any grid (the CTAs stride over the groups, whose count is read on
// the device, so a captured graph replays plans with other counts), block
// {kThreads = 128}, no shared memory. Each thread owns 4 columns of a row.
// sm_80 or newer.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_MERGE_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_MERGE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/prefill_params.h"

namespace tailor::cuda {

template <Half16 kType, int kHeadDim, int kTileRows = kPrefillTileRows>
struct PrefillMergeKernel {
  static_assert(kHeadDim % 4 == 0, "a thread merges 4 columns");
  using Params = PrefillMergeParams;
  static constexpr int kThreads = 128;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kQuads = kHeadDim / 4;

  static TAILOR_DEVICE int TileRowsOf(const Params& p) {
    return kTileRows != kPrefillRuntimeDim ? kTileRows : p.tile_rows;
  }

  static TAILOR_DEVICE void MergeRow(const Params& p,
                                     const PrefillMergeGroup& g, int row,
                                     int quad) {
    const float neg_inf = __int_as_float(0xff800000u);
    const int tile_rows = TileRowsOf(p);
    float max_lse = neg_inf;
    for (int i = 0; i < g.pieces; ++i) {
      const long long slot = g.first_partial + i;
      max_lse = fmaxf(max_lse, p.partial_lse[slot * tile_rows + row]);
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float sum = 0.0f;
    if (max_lse != neg_inf) {
      for (int i = 0; i < g.pieces; ++i) {
        const long long slot = (g.first_partial + i) * tile_rows + row;
        const float w = Exp2(p.partial_lse[slot] - max_lse);
        const float4 o = *reinterpret_cast<const float4*>(
            p.partial_out + slot * kHeadDim + 4 * quad);
        acc.x += w * o.x;
        acc.y += w * o.y;
        acc.z += w * o.z;
        acc.w += w * o.w;
        sum += w;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const long long token = static_cast<long long>(g.q_token) + row / p.pack;
    const int head = g.q_head + row % p.pack;
    unsigned short* out = static_cast<unsigned short*>(p.out) +
                          token * p.out_stride_token +
                          static_cast<long long>(head) * p.out_stride_head;
    const uint2 packed = make_uint2(Pack2<kType>(acc.x * inv, acc.y * inv),
                                    Pack2<kType>(acc.z * inv, acc.w * inv));
    *reinterpret_cast<uint2*>(out + 4 * quad) = packed;
    if (quad == 0 && p.lse != nullptr) {
      p.lse[token * p.lse_stride_token + head] =
          sum > 0.0f ? (max_lse + __log2f(sum)) * 0.69314718055994531f
                     : neg_inf;
    }
  }

  static TAILOR_DEVICE void Run(const Params& p) {
    const int groups = *p.num_groups;
    for (int gi = blockIdx.x; gi < groups; gi += gridDim.x) {
      const PrefillMergeGroup g = p.groups[gi];
      for (int e = threadIdx.x; e < g.rows * kQuads; e += kThreads) {
        MergeRow(p, g, e / kQuads, e % kQuads);
      }
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_MERGE_CUH_
