// ops/attention/ragged_decode.h — a ragged step's q_len = 1 rows on the
// paged-decode kernels (RaggedPlanConfig::decode_rows).
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
// decode kernel reads block_table row b, the planned KV length seq_lens[b]
// and q / out / lse row q_rows[b] (the step's q_indptr, uploaded with the
// plan). Speculative rows (q_len 2..8) stay in query tiles: the decode
// kernels attend one query token per sequence (no causal mask among rows).
//
// Graphs: a workspace that routes decode rows launches the decode kernel on
// every RunRagged (an empty plan when the step has none) with the workers of
// its reservation, and the tile kernels with theirs, so one captured graph
// replays any partition of its workspace.
#ifndef TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_
#define TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_

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

// Grows the host buffers of `rows` for the decode plans of `capacity`
// (RaggedDecodeCapacity of `shape`; nothing for batch 0).
absl::Status ReserveRaggedDecodeRows(Runtime& runtime, const RaggedShape& shape,
                                     const DecodeCapacity& capacity,
                                     RaggedDecodeRows& rows);

// Fresh decode scratch (merge counters, error words) in `buffers`.
absl::Status InitRaggedDecodeScratch(Runtime& runtime,
                                     const RaggedDeviceBuffers& buffers,
                                     void* stream);

// The decode plan of the q_len = 1 sequences of `w.plan` (built with
// skip_decode_rows), uploaded with the step's q_indptr and KV lengths.
// FailedPrecondition when it does not fit the reservation.
absl::Status PlanRaggedDecodeRows(Runtime& runtime, const RaggedShape& shape,
                                  RaggedWorkspaceImpl& w, void* stream);

// Launches the decode kernel over the decode plan of `w` (validated args).
absl::Status RunRaggedDecodeRows(Runtime& runtime,
                                 const attention::RunRaggedArgs& args,
                                 RaggedWorkspaceImpl& w);

// Reads and clears the decode kernel's error record; waits for `stream`.
absl::StatusOr<DecodeErrors> TakeRaggedDecodeErrors(Runtime& runtime,
                                                    RaggedWorkspaceImpl& w,
                                                    void* stream);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_DECODE_H_
