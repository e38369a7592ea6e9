// ops/attention/workspace.h — the decode kernels' device block: what a
// tailor::attention::DecodeWorkspace reserves on a device (and a ragged
// workspace beside its tiles, for the q_len = 1 rows of its steps).
//
// A DecodeWorkspace is a ragged workspace that runs decode rows only
// (DecodeWorkspaceImpl, ragged_workspace.h). On host-memory backends it
// keeps the plan's own vectors and partial buffers, which only grow; on
// device-memory backends one block of device memory, reserved once (or
// bound to caller memory), cut into 256-byte aligned buffers:
//   items         [max_items] plan::DecodeWorkItem (the uploaded plan)
//   worker_begin  [max_workers + 1] i32, then the launch flags: one
//                 i32 after the plan's last worker_begin entry
//                 (DecodePlanConfig::launch_flags)
//   first_items   [max_workers] plan::DecodeWorkItem
//   partial_out   [max_partials, group, D] f32
//   partial_lse   [max_partials, group] f32
//   scratch       the backend's DecodeKernels::ScratchBytes
// A plan fits when each of its bounds fits the reserved ones; one that
// does not fails with FailedPrecondition instead of allocating.
#ifndef TAILOR_OPS_ATTENTION_WORKSPACE_H_
#define TAILOR_OPS_ATTENTION_WORKSPACE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "ops/attention/kernels.h"
#include "plan/decode_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// What a plan needs, or what a device workspace was reserved for.
struct DecodeCapacity {
  int64_t batch = 0;          // sequences (the batch bucket): picks the config
  int64_t items = 0;          // plan::MaxDecodeItems
  int64_t workers = 0;        // grid of the decode launch
  int64_t partials = 0;       // plan::MaxDecodePartials(workers)
  int64_t partial_row = 0;    // group * D: f32 per slot and query head
  int64_t group = 0;          // query heads per slot
  int64_t scratch_bytes = 0;  // the backend's scratch
};

struct DecodeDeviceBuffers {
  Device device;
  std::shared_ptr<void> owned;  // ReserveDecodeWorkspace's block; null when
                                // bound to caller memory
  char* base = nullptr;
  int64_t bytes = 0;
  DecodeCapacity capacity;
  // Byte offsets from `base`.
  int64_t items = 0, worker_begin = 0, first_items = 0, partial_out = 0,
          partial_lse = 0, scratch = 0;

  void* at(int64_t offset) const { return base + offset; }
};

// The layout of a block for `capacity` (base null, bytes = the total).
DecodeDeviceBuffers DecodeLayoutFor(const DecodeCapacity& capacity);

// OkStatus when a plan needing `need` fits `buffers`; FailedPrecondition
// naming the first bound it exceeds, e.g. "ws: reserved for 1024 work
// items, this plan needs 2048; call attention::ReserveDecodeWorkspace with
// a larger max_batch".
absl::Status CheckDecodeFits(const DecodeDeviceBuffers& buffers,
                             const DecodeCapacity& need);

// The planner's parameters for `shape` cut as `config` says.
plan::DecodePlanParams DecodePlanParamsFor(const DecodeShape& shape,
                                           const DecodePlanConfig& config);

// The capacity plans of `batch` sequences for `shape` need with `config`.
DecodeCapacity DecodeCapacityFor(const DecodeShape& shape, int64_t batch,
                                 const DecodePlanConfig& config,
                                 int64_t scratch_bytes);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_WORKSPACE_H_
