// The device workspace's layout (ops/moe/device_workspace.h), host only:
// every capacity keeps the bf16 path's sizes; per-channel FP8 Experts'
// intermediates (bf16 gate|up rows, their e4m3 copy and per-token scales)
// are placed inside them without overlapping what a launch reads while
// another writes, and a shape whose hidden rows cannot hold them fails
// with the rule and its numbers.
#include "ops/moe/device_workspace.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/piecewise_plan.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

MoeCapacity Capacity(int64_t assignments, int64_t hidden, int64_t intermediate,
                     int64_t element_bytes = 2) {
  return {.assignments = assignments,
          .experts = 8,
          .hidden = hidden,
          .intermediate = intermediate,
          .element_bytes = element_bytes,
          .tile_rows = 16,
          .scratch_bytes = 1024};
}

int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// A layout placed at a fake base: only addresses are compared.
MoeDeviceBuffers Placed(const MoeCapacity& c) {
  MoeDeviceBuffers b = LayoutFor(c);
  b.base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  return b;
}

intptr_t Offset(const MoeDeviceBuffers& b, const void* p) {
  return static_cast<const char*>(p) - b.base;
}

// The routing buffers, then [A, H] and [A, I] rows, each 256-aligned, and
// nothing after them: what a bf16 step needs, for every shape (per-channel
// FP8 included: it reserves nothing more).
TEST(MoeDeviceWorkspaceTest, SizesAreTheBf16Rows) {
  // DeepSeek-V3, Qwen3-30B-A3B, Mixtral-8x7B, a small shape, f32 rows.
  struct Shape {
    int64_t hidden, intermediate, element_bytes;
  };
  for (const Shape& s :
       {Shape{7168, 2048, 2}, Shape{2048, 768, 2}, Shape{4096, 14336, 2},
        Shape{256, 128, 2}, Shape{256, 128, 4}}) {
    for (const int64_t rows : {1, 7, 4096}) {
      SCOPED_TRACE(::testing::Message()
                   << s.hidden << ", " << s.intermediate << " x"
                   << s.element_bytes << ", A=" << rows);
      const MoeCapacity c =
          Capacity(rows, s.hidden, s.intermediate, s.element_bytes);
      const MoeDeviceBuffers b = LayoutFor(c);
      int64_t end = 0;
      for (const int64_t bytes :
           {int64_t{4 * 8}, int64_t{4 * 9}, 4 * rows, 4 * rows,
            int64_t{sizeof(plan::WorkItem)} * MaxWorkItems(rows, 8, 16),
            int64_t{1024}}) {
        end += Aligned(bytes);
      }
      EXPECT_EQ(b.rows_h, end);
      EXPECT_EQ(b.rows_i, end + Aligned(rows * s.hidden * s.element_bytes));
      EXPECT_EQ(b.bytes,
                b.rows_i + Aligned(rows * s.intermediate * s.element_bytes));
    }
  }
}

// No launch reads a buffer another part of it writes: Pack writes a (read
// by gate|up), gate|up writes gate_up (read by the second Pack), that Pack
// writes h (read by the down GEMM, which writes rows_h whole).
TEST(MoeDeviceWorkspaceTest, PerTokenRowsDoNotOverlapTheirReaders) {
  struct Case {
    int64_t rows, hidden, intermediate, element_bytes;
  };
  // DeepSeek-V3, H = 2I + 128 at A = 1, 4 and 17, f32 rows (the bf16 step
  // they admit: H 768, I 256).
  for (const Case& c :
       {Case{4096, 7168, 2048, 2}, Case{4, 384, 128, 2}, Case{1, 384, 128, 2},
        Case{17, 384, 128, 4}, Case{17, 640, 256, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.rows << " x " << c.hidden << ", " << c.intermediate
                 << " x" << c.element_bytes);
    const MoeDeviceBuffers b =
        Placed(Capacity(c.rows, c.hidden, c.intermediate, c.element_bytes));
    // The largest bf16 step the reservation admits.
    const int64_t h = c.hidden * c.element_bytes / 2;
    const int64_t i = c.intermediate * c.element_bytes / 2;
    absl::StatusOr<MoePerTokenFp8Rows> p = PerTokenFp8RowsOf(b, h, i);
    TAILOR_ASSERT_OK(p.status());
    const int64_t scales = 4 * ((c.rows + 3) / 4 * 4);
    const intptr_t gate_up = Offset(b, p->gate_up);
    const intptr_t rows_h_end = b.rows_h + c.rows * c.hidden * c.element_bytes;
    const intptr_t rows_i_end =
        b.rows_i + c.rows * c.intermediate * c.element_bytes;
    EXPECT_EQ(Offset(b, p->a), b.rows_h);
    EXPECT_EQ(Offset(b, p->a_scales), b.rows_h + c.rows * h);
    // gate|up reads a and its scales, writes gate_up right after them.
    EXPECT_EQ(gate_up, Offset(b, p->a_scales) + scales);
    EXPECT_LE(gate_up + 2 * c.rows * i, rows_h_end);
    // The second Pack writes h outside rows_h (the down GEMM's output).
    EXPECT_EQ(Offset(b, p->h), b.rows_i);
    EXPECT_EQ(Offset(b, p->h_scales), b.rows_i + c.rows * i);
    EXPECT_LE(Offset(b, p->h_scales) + scales, rows_i_end);
    EXPECT_EQ(p->rows, c.rows);
    // TMA and vector loads: 16-byte aligned starts.
    for (const intptr_t at :
         {gate_up, Offset(b, p->a_scales), Offset(b, p->h_scales)}) {
      EXPECT_EQ(at % 16, 0) << at;
    }
  }
}

// H <= 2I (Mixtral-8x7B; H = 2I exactly): the bf16 rows do not fit the
// hidden rows and nothing else is reserved for them.
TEST(MoeDeviceWorkspaceTest, PerTokenRowsWithoutRoomNameTheRule) {
  EXPECT_THAT(
      PerTokenFp8RowsOf(Placed(Capacity(64, 4096, 14336)), 4096, 14336)
          .status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "quant.mode: per-channel FP8 Experts on a device keeps its "
               "bf16 gate|up rows in the workspace's hidden rows after the "
               "e4m3 input, which needs H > 2 * I on a workspace reserved "
               "for this H (A * H + 4 * S + 2 * A * I <= the hidden rows' "
               "bytes); got H=4096, I=14336, A=64, S=64: 2097408 > 524288 "
               "bytes (block and per-tensor mode run this shape)"));
  EXPECT_THAT(
      PerTokenFp8RowsOf(Placed(Capacity(17, 256, 128)), 256, 128).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "quant.mode: per-channel FP8 Experts on a device keeps its "
               "bf16 gate|up rows in the workspace's hidden rows after the "
               "e4m3 input, which needs H > 2 * I on a workspace reserved "
               "for this H (A * H + 4 * S + 2 * A * I <= the hidden rows' "
               "bytes); got H=256, I=128, A=17, S=20: 8784 > 8704 bytes "
               "(block and per-tensor mode run this shape)"));
}

}  // namespace
}  // namespace tailor::internal
