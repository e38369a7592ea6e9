#include "ops/moe/device_workspace.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ops/device_layout.h"

namespace tailor::internal {
namespace {

absl::Status TooSmall(absl::string_view what, int64_t reserved,
                      int64_t needed) {
  return absl::FailedPreconditionError(absl::StrCat(
      "ws: reserved for ", what, " <= ", reserved, ", this step needs ", needed,
      "; call moe::ReserveWorkspace with larger limits"));
}

}  // namespace

int64_t MaxWorkItems(int64_t assignments, int64_t experts, int64_t tile_rows) {
  return assignments / tile_rows + std::min(experts, assignments);
}

namespace {

// Bytes of a per-channel step's e4m3 input and per-token scales at the
// start of rows_h: A * H (a multiple of 128 for H a multiple of 128) and
// f32 [S], S = A rounded up to 4, so what follows starts 16-byte aligned.
int64_t PackedInputBytes(int64_t rows, int64_t hidden) {
  return rows * hidden + 4 * ((rows + 3) / 4 * 4);
}

}  // namespace

MoeDeviceBuffers LayoutFor(const MoeCapacity& c) {
  MoeDeviceBuffers b;
  b.capacity = c;
  b.max_work = MaxWorkItems(c.assignments, c.experts, c.tile_rows);
  int64_t end = 0;
  b.counts = PlaceDeviceBuffer(4 * c.experts, end);
  b.offsets = PlaceDeviceBuffer(4 * (c.experts + 1), end);
  b.permutation = PlaceDeviceBuffer(4 * c.assignments, end);
  b.inverse = PlaceDeviceBuffer(4 * c.assignments, end);
  b.work = PlaceDeviceBuffer(int64_t{sizeof(plan::WorkItem)} * b.max_work, end);
  b.scratch = PlaceDeviceBuffer(c.scratch_bytes, end);
  b.rows_h = PlaceDeviceBuffer(c.assignments * c.hidden * c.element_bytes, end);
  b.rows_i =
      PlaceDeviceBuffer(c.assignments * c.intermediate * c.element_bytes, end);
  b.bytes = end;
  return b;
}

MoeFp8DeviceRows Fp8DeviceRowsOf(const MoeDeviceBuffers& b, int64_t hidden,
                                 int64_t intermediate) {
  const int64_t rows = b.capacity.assignments;
  // The scales follow the e4m3 rows: A * H and A * I are multiples of 128
  // bytes, so they start 16-byte aligned as TMA wants.
  char* h_base = static_cast<char*>(b.at(b.rows_h));
  char* i_base = static_cast<char*>(b.at(b.rows_i));
  return {.a = reinterpret_cast<uint8_t*>(h_base),
          .a_scales = reinterpret_cast<float*>(h_base + rows * hidden),
          .h = reinterpret_cast<uint8_t*>(i_base),
          .h_scales = reinterpret_cast<float*>(i_base + rows * intermediate),
          .rows = rows,
          .scale_rows = (rows + 3) / 4 * 4};
}

absl::StatusOr<MoePerTokenFp8Rows> PerTokenFp8RowsOf(const MoeDeviceBuffers& b,
                                                     int64_t hidden,
                                                     int64_t intermediate) {
  const int64_t rows = b.capacity.assignments;
  const int64_t rows_h_bytes =
      rows * b.capacity.hidden * b.capacity.element_bytes;
  const int64_t needed =
      PackedInputBytes(rows, hidden) + 2 * rows * intermediate;
  if (needed > rows_h_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "quant.mode: per-channel FP8 Experts on a device keeps its bf16 "
        "gate|up rows in the workspace's hidden rows after the e4m3 input, "
        "which needs H > 2 * I on a workspace reserved for this H (A * H + 4 "
        "* S + 2 * A * I <= the hidden rows' bytes); got H=",
        hidden, ", I=", intermediate, ", A=", rows, ", S=", (rows + 3) / 4 * 4,
        ": ", needed, " > ", rows_h_bytes,
        " bytes (block and per-tensor mode run this shape)"));
  }
  char* h_base = static_cast<char*>(b.at(b.rows_h));
  char* i_base = static_cast<char*>(b.at(b.rows_i));
  return MoePerTokenFp8Rows{
      .a = reinterpret_cast<uint8_t*>(h_base),
      .a_scales = reinterpret_cast<float*>(h_base + rows * hidden),
      .gate_up = h_base + PackedInputBytes(rows, hidden),
      .h = reinterpret_cast<uint8_t*>(i_base),
      .h_scales = reinterpret_cast<float*>(i_base + rows * intermediate),
      .rows = rows};
}

absl::Status CheckFits(const MoeDeviceBuffers& buffers,
                       const MoeCapacity& need) {
  const MoeCapacity& have = buffers.capacity;
  if (need.assignments > have.assignments) {
    return TooSmall("T * k assignments", have.assignments, need.assignments);
  }
  if (need.experts > have.experts) {
    return TooSmall("local experts E", have.experts, need.experts);
  }
  if (need.hidden * need.element_bytes > have.hidden * have.element_bytes) {
    return TooSmall("hidden row bytes H * element",
                    have.hidden * have.element_bytes,
                    need.hidden * need.element_bytes);
  }
  if (need.intermediate * need.element_bytes >
      have.intermediate * have.element_bytes) {
    return TooSmall("intermediate row bytes I * element",
                    have.intermediate * have.element_bytes,
                    need.intermediate * need.element_bytes);
  }
  const int64_t work =
      MaxWorkItems(need.assignments, need.experts, need.tile_rows);
  if (work > buffers.max_work) {
    return TooSmall(
        "plan work items (tile_rows >= " + std::to_string(have.tile_rows) + ")",
        buffers.max_work, work);
  }
  if (need.scratch_bytes > have.scratch_bytes) {
    return TooSmall("route scratch bytes", have.scratch_bytes,
                    need.scratch_bytes);
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
