// backends/gpu/attention_launch.h — what the CUDA and HIP backends share of
// the attention family's launches: the paged caches' fields of every
// kernel's params (decode and ragged, each backend's struct: the field
// names are the same) and the ragged merge's params. Pure host code.
#ifndef TAILOR_BACKENDS_GPU_ATTENTION_LAUNCH_H_
#define TAILOR_BACKENDS_GPU_ATTENTION_LAUNCH_H_

#include "ops/attention/ragged_kernels.h"
#include "templates/cuda/attention/prefill_params.h"

namespace tailor::gpu {

// The K and V caches of `l` (a DecodeLaunch or RaggedLaunch), their page,
// token and head strides and the block table, into kernel params `p`.
template <typename Launch, typename Params>
void CopyPagedCaches(const Launch& l, Params& p) {
  p.k_cache = l.k_cache;
  p.k_stride_page = l.k_strides[0];
  p.k_stride_token = l.k_strides[1];
  p.k_stride_head = l.k_strides[2];
  p.v_cache = l.v_cache;
  p.v_stride_page = l.v_strides[0];
  p.v_stride_token = l.v_strides[1];
  p.v_stride_head = l.v_strides[2];
  p.block_table = l.block_table;
  p.block_table_stride = l.block_table_stride;
  p.max_pages = static_cast<int>(l.max_pages);
  p.num_pages = static_cast<int>(l.num_pages);
}

// The params of a ragged launch's merge (split tiles' partials folded by
// log-sum-exp); `tile_rows`: the rows of the tiles that wrote them.
inline cuda::PrefillMergeParams RaggedMergeParamsOf(
    const internal::RaggedLaunch& l, int tile_rows) {
  return {.groups = reinterpret_cast<const cuda::PrefillMergeGroup*>(
              l.work.merge_groups),
          .num_groups = l.work.num_merge_groups,
          .partial_out = l.work.partial_out,
          .partial_lse = l.work.partial_lse,
          .out = l.out,
          .out_stride_token = l.out_stride_token,
          .out_stride_head = l.out_stride_head,
          .lse = l.lse,
          .lse_stride_token = l.lse_stride_token,
          .pack = l.config.head_pack,
          .tile_rows = tile_rows};
}

}  // namespace tailor::gpu

#endif  // TAILOR_BACKENDS_GPU_ATTENTION_LAUNCH_H_
