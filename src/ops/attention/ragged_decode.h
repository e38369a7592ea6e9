// ops/attention/ragged_decode.h — the q_len = 1 rows of a ragged step on the
// paged-decode kernels: their plan, its upload, the launch and its errors.
// The one plan/run of decode rows, used by
//   - RunRagged, for the q_len = 1 rows of a mixed step on backends whose
//     RaggedPlanConfig::decode_rows asks for it (CUDA), and
//   - PlanDecode / RunDecode (decode.cc): a decode step is the ragged step
//     whose every sequence has q_len = 1 (q_indptr = 0..B, kv_lens =
//     seq_lens), all of it decode rows, on every backend.
//
// A decode row of one (sequence, KV head) fills `group` rows of a 128-row
// query tile; the decode kernels' small-M tiles (and their split-KV planner)
// serve it instead. So on a backend that asks for it, a ragged workspace's
// plan is a partition of the step:
//   - sequences with q_len = 1, wherever their rows sit in q, get a decode
//     plan (plan::BuildDecodePlan over their KV lengths, with the decode
//     backend's config for the reservation's max_batch);
//   - every other sequence gets query tiles (plan::AttentionPlan with
//     skip_decode_rows).
// The decode items' `seq` is renumbered to the step's sequence b, so the
// decode kernel reads block_table row b, the KV length seq_lens[b] and q /
// out / lse row q_rows[b] (a mixed step uploads its q_indptr and planned
// KV lengths for them; a decode step passes the caller's seq_lens and no
// q_rows: row b). Speculative rows (q_len 2..8) stay in query tiles: the
// decode kernels attend one query token per sequence.
//
// Graphs: a workspace that routes decode rows launches the decode kernel on
// every RunRagged (an empty plan when the step has none) with the workers of
// its reservation, and the tile kernels with theirs, so one captured graph
// replays any partition of its workspace. A decode step launches the decode
// kernel only.
#ifndef TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_
#define TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ops/attention/kernels.h"
#include "ops/attention/ragged_workspace.h"
#include "tailor/ops/attention.h"
#include "tailor/runtime.h"

namespace tailor::internal {

// The decode kernels' shape for `shape`, or nullopt when they cannot take
// its rows (sliding window, or a shape the decode checks refuse).
std::optional<DecodeShape> RaggedDecodeShapeOf(const RaggedShape& shape);

// The decode block a workspace for up to `max_batch` sequences needs when
// `config` routes decode rows and the runtime's decode kernels serve
// `shape`; batch 0 (no block: the rows stay in tiles) otherwise.
DecodeCapacity RaggedDecodeCapacity(Runtime& runtime, const RaggedShape& shape,
                                    const RaggedPlanConfig& config,
                                    int64_t max_batch);

// The capacity of decode plans of up to `batch` sequences of `shape` cut
// by `kernels` for a workspace of that batch bucket.
absl::StatusOr<DecodeCapacity> DecodeRowsCapacity(DecodeKernels& kernels,
                                                  const DecodeShape& shape,
                                                  int64_t batch);

// Grows the host vectors of `rows` (and, for host storage, its partial
// buffers) for the decode plans of `capacity` (nothing for batch 0).
absl::Status ReserveDecodeRows(DecodeKernels& kernels, const DecodeShape& shape,
                               const DecodeCapacity& capacity, bool host,
                               RaggedDecodeRows& rows);

// Fresh decode scratch (merge counters, error words) in `buffers`; nothing
// when they hold no decode block.
absl::Status InitRaggedDecodeScratch(Runtime& runtime,
                                     const RaggedDeviceBuffers& buffers,
                                     void* stream);

// The decode plan of the rows `w.decode.seqs` (the step's b of each, with
// their KV lengths w.decode.kv_lens, for w.decode.shape) into w.decode: on
// a device the plan of the reservation's bucket, checked against the
// reservation (FailedPrecondition) and enqueued on `stream`; on the host
// with its partial buffers grown.
absl::Status PlanDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                            RaggedWorkspaceImpl& w, void* stream);

// The decode rows of a mixed step: the q_len = 1 sequences of `w.plan`
// (built with skip_decode_rows) planned by PlanDecodeRows, then the step's
// q_indptr and KV lengths uploaded for the kernel's q_rows and seq_lens.
absl::Status PlanRaggedDecodeRows(Runtime& runtime, const RaggedShape& shape,
                                  RaggedWorkspaceImpl& w, void* stream);

// Launches the decode kernel once over the decode plan of `w` with `launch`
// (the caller's tensors and seq_lens; its work is set here).
absl::Status RunDecodeRows(Runtime& runtime, DecodeKernels& kernels,
                           DecodeLaunch launch, RaggedWorkspaceImpl& w);

// The decode rows of a mixed step (validated args): q_rows and seq_lens
// from the plan's upload.
absl::Status RunRaggedDecodeRows(Runtime& runtime,
                                 const attention::RunRaggedArgs& args,
                                 RaggedWorkspaceImpl& w);

// Reads and clears the decode kernel's error record; waits for `stream`.
// No errors when `w` holds no decode block.
absl::StatusOr<DecodeErrors> TakeRaggedDecodeErrors(Runtime& runtime,
                                                    RaggedWorkspaceImpl& w,
                                                    void* stream);

// The paged caches of `args` (RunDecodeArgs or RunRaggedArgs: k_cache,
// v_cache [num_pages, page_size, Hkv, D] with any strides of dims 0..2, a
// block table whose last dim is max_pages) into `l` (a DecodeLaunch or
// RaggedLaunch: their fields have the same names).
template <typename Args, typename Launch>
void CopyPagedCacheArgs(const Args& args, Launch& l) {
  l.k_cache = args.k_cache.data;
  l.v_cache = args.v_cache.data;
  for (int i = 0; i < 3; ++i) {
    l.k_strides[i] = args.k_cache.strides[i];
    l.v_strides[i] = args.v_cache.strides[i];
  }
  l.num_pages = args.k_cache.dims[0];
  l.block_table = args.block_table.template as<int32_t>();
  l.block_table_stride = args.block_table.strides[0];
  l.max_pages = args.block_table.dims[args.block_table.rank - 1];
}

// The launch of `args` (attention::RunDecodeArgs or RunRaggedArgs: q, the
// caches, a block table whose last dim is max_pages, out, lse, scale, soft
// cap, stream) for `shape`: row b of q / out / lse, no work, no seq_lens.
template <typename Args>
DecodeLaunch DecodeLaunchOf(const Args& args, const DecodeShape& shape) {
  DecodeLaunch l;
  l.shape = shape;
  l.q = args.q.data;
  l.q_stride_b = args.q.strides[0];
  l.q_stride_h = args.q.strides[1];
  CopyPagedCacheArgs(args, l);
  l.out = args.out.data;
  l.out_stride_b = args.out.strides[0];
  l.out_stride_h = args.out.strides[1];
  if (args.lse.has_value()) {
    l.lse = args.lse->template as<float>();
    l.lse_stride_b = args.lse->strides[0];
  }
  l.sm_scale = args.sm_scale.value_or(
      1.0f / std::sqrt(static_cast<float>(shape.head_dim)));
  l.soft_cap = args.logits_soft_cap;
  l.stream = args.stream;
  return l;
}

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_
