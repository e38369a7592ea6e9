// ops/attention/ragged_workspace.h — what a tailor::attention::RaggedWorkspace
// holds.
//
// The ragged fronts (ragged.cc) fill and read this struct. Two storages:
//   - host (host-memory backends): the plan's own vectors plus the partial
//     buffers below, which only grow.
//   - device (device-memory backends): one block of device memory reserved
//     once (or bound to caller memory) and cut into 256-byte aligned
//     buffers:
//       items          [max_items] plan::AttentionWorkItem
//       worker_begin   [workers + 1] i32
//       merge_groups   [max_partials] plan::AttentionMergeGroup
//       num_merges     [1] i32: the plan's merge groups (graph replays read
//                      it on the device)
//       partial_out    [max_partials, tile_rows, D] f32
//       partial_lse    [max_partials, tile_rows] f32
//       scratch        the backend's RaggedKernels::ScratchBytes
//     and, when the step's q_len = 1 rows run on the decode kernel
//     (RaggedPlanConfig::decode_rows; ragged_decode.h):
//       q_rows         [max_batch + 1] i32: the plan's q_indptr
//       seq_lens       [max_batch] i32: the plan's KV lengths
//       decode         the decode rows' block (workspace.h) for plans of up
//                      to max_batch decode sequences
//     A plan that does not fit fails with FailedPrecondition.
//     A DecodeWorkspace's block (DecodeRowsLayoutFor) is the decode block
//     alone: its steps are all decode rows, with the caller's q / out rows
//     and seq_lens.
#ifndef TAILOR_OPS_ATTENTION_RAGGED_WORKSPACE_H_
#define TAILOR_OPS_ATTENTION_RAGGED_WORKSPACE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ops/attention/kernels.h"
#include "ops/attention/ragged_kernels.h"
#include "ops/attention/workspace.h"
#include "plan/attention_plan.h"
#include "plan/decode_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// What a plan needs, or what a device workspace was reserved for.
struct RaggedCapacity {
  int64_t batch = 0;
  int64_t tiles = 0;        // query tiles (plan::AttentionTileCount bound)
  int64_t items = 0;        // plan::MaxAttentionItems
  int64_t workers = 0;      // grid of the launch
  int64_t partials = 0;     // plan::MaxAttentionPartials
  int64_t partial_row = 0;  // tile_rows * D: f32 per slot
  int64_t tile_rows = 0;
  int64_t scratch_bytes = 0;
  // The decode rows' block; batch 0: the rows run as query tiles.
  DecodeCapacity decode;
};

struct RaggedDeviceBuffers {
  Device device;
  std::shared_ptr<void> owned;  // ReserveRaggedWorkspace's block; null when
                                // bound to caller memory
  char* base = nullptr;
  int64_t bytes = 0;
  RaggedCapacity capacity;
  // Byte offsets from `base`.
  int64_t items = 0, worker_begin = 0, merge_groups = 0, num_merges = 0,
          partial_out = 0, partial_lse = 0, scratch = 0;
  // Decode rows (capacity.decode.batch > 0): byte offsets, and the decode
  // block's layout with offsets from its own start (`decode`).
  int64_t q_rows = 0, seq_lens = 0, decode = 0;
  DecodeDeviceBuffers decode_layout;  // bytes 0: no decode block
  void* at(int64_t offset) const { return base + offset; }
  bool has_decode_block() const { return decode_layout.bytes > 0; }
  // The decode block, its base and device set.
  DecodeDeviceBuffers DecodeBuffers() const {
    DecodeDeviceBuffers d = decode_layout;
    d.device = device;
    d.base = base + decode;
    return d;
  }
};

RaggedDeviceBuffers RaggedLayoutFor(const RaggedCapacity& capacity);
// The block of a workspace that runs decode rows only (a DecodeWorkspace):
// the decode block of `decode` at offset 0, no tiles.
RaggedDeviceBuffers DecodeRowsLayoutFor(const DecodeCapacity& decode);

// The capacity of plans of at most `batch` sequences and `tokens` query
// tokens for `shape` cut as `config` says.
RaggedCapacity RaggedCapacityFor(const RaggedShape& shape,
                                 const RaggedPlanConfig& config, int64_t batch,
                                 int64_t tokens, int64_t scratch_bytes);

// Places `buffers` (a layout) in new device memory of `runtime`, owned by
// it; ResourceExhausted when the device is out of memory.
absl::Status AllocateDeviceBlock(Runtime& runtime,
                                 RaggedDeviceBuffers& buffers);

// Places `buffers` (a layout) in the caller's `memory` of `bytes` on
// `runtime`'s device. InvalidArgument for a null, misaligned or short
// block, the short one naming `bytes_function` (what sized it, e.g.
// "RaggedWorkspaceBytes").
absl::Status PlaceInCallerMemory(Runtime& runtime, void* memory, int64_t bytes,
                                 absl::string_view bytes_function,
                                 RaggedDeviceBuffers& buffers);

// OkStatus when `need` fits `buffers`; FailedPrecondition naming the first
// bound it exceeds.
absl::Status CheckRaggedFits(const RaggedDeviceBuffers& buffers,
                             const RaggedCapacity& need);

// The q_len = 1 rows of the last plan on the decode kernel (ragged_decode.h).
struct RaggedDecodeRows {
  DecodeShape shape;
  std::vector<int32_t> seqs;     // [decode sequences] b of each, ascending
  std::vector<int32_t> kv_lens;  // [decode sequences] kv_lens[b] of each
  plan::DecodePlan plan;         // over kv_lens: item.seq indexes seqs
  // The plan's items and first items with item.seq = b (what is uploaded).
  std::vector<plan::DecodeWorkItem> items;
  std::vector<plan::DecodeWorkItem> first_items;
  int32_t launch_flags = 0;  // uploaded after worker_begin (workspace.h)
  // Host-memory backends (a DecodeWorkspace's rows): partial results of
  // split pairs, which only grow.
  std::vector<float> partial_out;  // [>= partials * group * D]
  std::vector<float> partial_lse;  // [>= partials * group]
};

struct RaggedWorkspaceImpl {
  // ---- the last plan (valid when `planned`) --------------------------------
  bool planned = false;
  RaggedShape shape;
  RaggedPlanConfig config;
  plan::AttentionPlan plan;
  // The plan's merge-group count, uploaded from here (stable memory for the
  // asynchronous copy).
  int32_t num_merges = 0;
  // config.decode_rows: the plan's q_len = 1 rows run here, not as tiles.
  RaggedDecodeRows decode;
  // Whether a RunRagged launched the tiles' / the decode rows' kernels on
  // the current device storage: until then an empty part is launched too,
  // so that its kernels are loaded before any graph capture.
  bool tiles_launched = false;
  bool decode_launched = false;

  // ---- host scratch ---------------------------------------------------------
  std::vector<int32_t> q_lens;   // [B] from q_indptr
  std::vector<int32_t> kv_lens;  // [B] (FlashInfer's adapter fills it)
  std::vector<float> partial_out;
  std::vector<float> partial_lse;

  // ---- device storage (device-memory backends) ------------------------------
  std::optional<RaggedDeviceBuffers> device;
  int64_t last_num_pages = 0;     // for the text of device errors
  int64_t last_max_pages = 0;     // block_table's last dim
  bool last_page_indptr = false;  // FlashInfer's pages (kv_indices)

  void Invalidate() { planned = false; }
};

// The impl of `ws`; FailedPrecondition for a moved-from workspace.
absl::StatusOr<RaggedWorkspaceImpl*> ImplOf(attention::RaggedWorkspace& ws);

// A decode step is the ragged step whose every sequence has q_len = 1, all
// of it decode rows (ops/attention/ragged_decode.h): a DecodeWorkspace is a
// ragged workspace that plans and runs only those. Of `ragged` it uses
// `planned`, `shape` (num_qo_heads), `decode` (the plan; host partials),
// `device` (DecodeRowsLayoutFor: the decode block alone) and the last
// run's page counts for the text of device errors.
struct DecodeWorkspaceImpl {
  RaggedWorkspaceImpl ragged;

  void Invalidate() { ragged.Invalidate(); }
};

// The impl of `ws`; FailedPrecondition for a moved-from workspace.
absl::StatusOr<DecodeWorkspaceImpl*> ImplOf(attention::DecodeWorkspace& ws);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_WORKSPACE_H_
