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

int64_t AlignedBytes(int64_t bytes) {
  return (bytes + kDeviceBufferAlignment - 1) / kDeviceBufferAlignment *
         kDeviceBufferAlignment;
}

// e4m3 [rows, cols] then f32 [S] scales (rows * cols is a multiple of 16
// when cols is a multiple of 128, so the scales start aligned).
int64_t QuantizedRowsBytes(int64_t rows, int64_t cols) {
  return rows * cols + 4 * ((rows + 3) / 4 * 4);
}

// Where a per-channel step's bf16 gate_up output starts in rows_h (after
// the packed input), and whether it fits there.
int64_t GateUpOffsetInRowsH(int64_t rows, int64_t hidden) {
  return AlignedBytes(QuantizedRowsBytes(rows, hidden));
}
bool GateUpFitsInRowsH(int64_t rows_h_bytes, int64_t rows, int64_t hidden,
                       int64_t intermediate) {
  return GateUpOffsetInRowsH(rows, hidden) + 2 * rows * intermediate <=
         rows_h_bytes;
}

// rows_q's bytes for `c`: none when every bf16 step it admits (H * 2 and
// I * 2 up to the reserved row bytes) places gate_up in rows_h.
int64_t RowsQBytes(const MoeCapacity& c) {
  if (c.hidden == 0 || c.intermediate == 0) return 0;
  const int64_t hidden = c.hidden * c.element_bytes / 2;
  const int64_t intermediate = c.intermediate * c.element_bytes / 2;
  const int64_t rows_h_bytes = c.assignments * c.hidden * c.element_bytes;
  if (GateUpFitsInRowsH(rows_h_bytes, c.assignments, hidden, intermediate)) {
    return 0;
  }
  return QuantizedRowsBytes(c.assignments, intermediate);
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
  b.rows_q_bytes = RowsQBytes(c);
  if (b.rows_q_bytes > 0) b.rows_q = PlaceDeviceBuffer(b.rows_q_bytes, end);
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
  char* h_base = static_cast<char*>(b.at(b.rows_h));
  char* i_base = static_cast<char*>(b.at(b.rows_i));
  MoePerTokenFp8Rows out = {
      .a = reinterpret_cast<uint8_t*>(h_base),
      .a_scales = reinterpret_cast<float*>(h_base + rows * hidden),
      .rows = rows};
  char* h_at = nullptr;  // where h and its scales go
  const int64_t rows_h_bytes =
      rows * b.capacity.hidden * b.capacity.element_bytes;
  if (GateUpFitsInRowsH(rows_h_bytes, rows, hidden, intermediate)) {
    out.gate_up = h_base + GateUpOffsetInRowsH(rows, hidden);
    h_at = i_base;
  } else if (b.rows_q_bytes >= QuantizedRowsBytes(rows, intermediate)) {
    out.gate_up = i_base;
    h_at = static_cast<char*>(b.at(b.rows_q));
  } else {
    return absl::FailedPreconditionError(absl::StrCat(
        "ws: reserved without room for per-channel FP8 intermediates of I = ",
        intermediate, "; call moe::ReserveWorkspace with this step's limits"));
  }
  out.h = reinterpret_cast<uint8_t*>(h_at);
  out.h_scales = reinterpret_cast<float*>(h_at + rows * intermediate);
  return out;
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
