// ops/moe/device_workspace.h — a moe::Workspace's buffers on a device
// backend.
//
// One block of device memory, reserved once (ReserveWorkspace: the backend's
// AllocateDevice, owned by the Workspace) or borrowed (BindWorkspace: caller
// memory), cut into 256-byte aligned buffers sized for a MoeCapacity:
//
//   counts       [E] i32          offsets      [E + 1] i32
//   permutation  [A] i32          inverse      [A] i32       (A = T * k)
//   work         [max_work] plan::WorkItem, max_work = floor(A / tile) +
//                min(E, A)
//   scratch      the backend's route scratch (MoeKernels::RouteScratchBytes)
//   rows_h       [A, H] activations (Experts: packed input, then gemm2 out)
//   rows_i       [A, I] activations (Experts: silu_and_mul of gemm1)
//
// A step fits when each of its buffers fits the reserved one; a step that
// does not fit fails with FailedPrecondition instead of allocating.
//
// FP8 Experts (bf16 activations, block mode) keep their e4m3 rows and 1 x 128
// scales in rows_h and rows_i, which hold them with room to spare
// (A * X + X / 128 * S * 4 <= 2 * A * X bytes): see MoeFp8DeviceRows.
// Per-channel mode adds no buffer either: its bf16 intermediate rows share
// rows_h with the e4m3 input where they fit (MoePerTokenFp8Rows).
#ifndef TAILOR_OPS_MOE_DEVICE_WORKSPACE_H_
#define TAILOR_OPS_MOE_DEVICE_WORKSPACE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "plan/piecewise_plan.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// What a step needs, or what a Workspace was reserved for.
struct MoeCapacity {
  int64_t assignments = 0;    // A = T * k
  int64_t experts = 0;        // E (local)
  int64_t hidden = 0;         // H (0: routing only)
  int64_t intermediate = 0;   // I (0: routing only)
  int64_t element_bytes = 0;  // of the activation dtype (0: routing only)
  int64_t tile_rows = 1;      // core tile of the plan
  int64_t scratch_bytes = 0;  // route scratch
};

// Work items a plan of `assignments` rows over `experts` groups can have:
// floor(A / tile_rows) core tiles plus at most one tail per non-empty group.
int64_t MaxWorkItems(int64_t assignments, int64_t experts, int64_t tile_rows);

struct MoeDeviceBuffers {
  Device device;
  std::shared_ptr<void> owned;  // ReserveWorkspace's block; null when bound
  char* base = nullptr;
  int64_t bytes = 0;  // of the block in use
  MoeCapacity capacity;
  int64_t max_work = 0;
  // Byte offsets from `base`.
  int64_t counts = 0, offsets = 0, permutation = 0, inverse = 0, work = 0,
          scratch = 0, rows_h = 0, rows_i = 0;

  int32_t* i32(int64_t offset) const {
    return reinterpret_cast<int32_t*>(base + offset);
  }
  plan::WorkItem* work_items() const {
    return reinterpret_cast<plan::WorkItem*>(base + work);
  }
  void* at(int64_t offset) const { return base + offset; }
};

// The FP8 intermediates of a block-mode Experts step, cut from the bf16 row
// buffers of a workspace reserved for H and I (`hidden`, `intermediate`, both
// multiples of 128) at capacity A = capacity.assignments rows:
//   rows_h  a         e4m3 [A, H]            the quantizing Pack's output
//           a_scales  f32  [H / 128, S]      its 1 x 128 scales (K-block major)
//           (then the down GEMM's bf16 [A, H] output over both: a is dead)
//   rows_i  h         e4m3 [A, I]            gate|up's quantized silu_and_mul
//           h_scales  f32  [I / 128, S]
// S = A rounded up to 4 (16-byte TMA rows). Every step on the workspace gets
// the same pointers and strides, so the GEMMs' tensor maps are encoded once.
struct MoeFp8DeviceRows {
  uint8_t* a = nullptr;
  float* a_scales = nullptr;
  uint8_t* h = nullptr;
  float* h_scales = nullptr;
  int64_t rows = 0;        // A: the rows the maps describe
  int64_t scale_rows = 0;  // S
};
MoeFp8DeviceRows Fp8DeviceRowsOf(const MoeDeviceBuffers& buffers,
                                 int64_t hidden, int64_t intermediate);

// The intermediates of a per-channel Experts step (per-token activation
// scales): the bf16 silu_and_mul of the gate|up GEMM is quantized by a
// separate per-token Pack (a row's scale needs the amax of all I columns),
// so it lives beside its e4m3 copy, in the buffers bf16 steps reserve:
//   a, a_scales   e4m3 [A, H] + f32 [S] per-token scales     at rows_h
//   gate_up       bf16 [A, I] right after them (16-byte aligned) in rows_h
//   h, h_scales   e4m3 [A, I] + f32 [S]                      at rows_i
//   (then the down GEMM's bf16 [A, H] output at rows_h: a and gate_up dead)
// That needs A * H + 4 * S + 2 * A * I <= rows_h's bytes: on a bf16
// workspace reserved for this H (H and I multiples of 128), exactly
// H > 2 * I (DeepSeek-V3 7168 > 2 * 2048, Qwen3-30B-A3B 2048 > 2 * 768; not
// Mixtral-8x7B, 4096 < 2 * 14336). FailedPrecondition naming that rule and
// the numbers otherwise, computed from the reservation alone, so Experts
// checks it before Route writes anything. A = the reserved T * k.
struct MoePerTokenFp8Rows {
  uint8_t* a = nullptr;
  float* a_scales = nullptr;  // [S]
  void* gate_up = nullptr;    // bf16 [A, I]
  uint8_t* h = nullptr;
  float* h_scales = nullptr;  // [S]
  int64_t rows = 0;           // A
};
absl::StatusOr<MoePerTokenFp8Rows> PerTokenFp8RowsOf(
    const MoeDeviceBuffers& buffers, int64_t hidden, int64_t intermediate);

// The layout of a block for `capacity` (base null, bytes = the total).
MoeDeviceBuffers LayoutFor(const MoeCapacity& capacity);

// OkStatus when a step needing `need` fits `buffers`; FailedPrecondition
// naming the first limit it exceeds otherwise, e.g. "ws: reserved for
// T * k <= 64 assignments, this step has 128; call moe::ReserveWorkspace
// with larger limits".
absl::Status CheckFits(const MoeDeviceBuffers& buffers,
                       const MoeCapacity& need);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_DEVICE_WORKSPACE_H_
