// The device workspace's layout (ops/moe/device_workspace.h), host only:
// the per-channel FP8 Experts intermediates (bf16 gate|up rows, their e4m3
// copy and per-token scales) are placed without overlapping what a launch
// reads while another writes, and the extra e4m3 buffer is reserved only
// for shapes whose row buffers cannot hold them (bf16 and block-mode sizes
// unchanged otherwise).
#include "ops/moe/device_workspace.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

TEST(MoeDeviceWorkspaceTest, RowsWithRoomReserveNoExtraBuffer) {
  // DeepSeek-V3 (H 7168, I 2048) and Qwen3-30B-A3B (H 2048, I 768): the bf16
  // gate|up rows fit in the hidden rows after the packed input.
  for (const auto& [h, i] : {std::pair{7168, 2048}, std::pair{2048, 768}}) {
    for (const int64_t rows : {1, 7, 4096}) {
      const MoeDeviceBuffers b = LayoutFor(Capacity(rows, h, i));
      EXPECT_EQ(b.rows_q_bytes, 0) << h << " " << rows;
      EXPECT_EQ(b.bytes, b.rows_i + Aligned(rows * i * 2));
    }
  }
  // Routing only: nothing for rows.
  EXPECT_EQ(LayoutFor(Capacity(64, 0, 0)).rows_q_bytes, 0);
}

TEST(MoeDeviceWorkspaceTest, NarrowHiddenRowsReserveTheE4m3Intermediate) {
  // Mixtral-8x7B (H 4096, I 14336) and H 256, I 128 (2I + 4 > H).
  for (const auto& [h, i] : {std::pair{4096, 14336}, std::pair{256, 128}}) {
    for (const int64_t rows : {1, 7, 4096}) {
      const MoeDeviceBuffers b = LayoutFor(Capacity(rows, h, i));
      const int64_t scale_rows = (rows + 3) / 4 * 4;
      EXPECT_EQ(b.rows_q_bytes, rows * i + 4 * scale_rows) << h << " " << rows;
      EXPECT_EQ(b.rows_q, b.rows_i + Aligned(rows * i * 2));
      EXPECT_EQ(b.bytes, b.rows_q + Aligned(b.rows_q_bytes));
    }
  }
}

// Whichever placement, no launch reads a buffer another part of it writes:
// Pack writes a (read by gate|up), gate|up writes gate_up (read by the
// second Pack), that Pack writes h (read by the down GEMM, which writes
// rows_h whole).
TEST(MoeDeviceWorkspaceTest, PerTokenRowsDoNotOverlapTheirReaders) {
  struct Case {
    int64_t rows, hidden, intermediate, element_bytes;
    bool gate_up_in_rows_h;
  };
  for (const Case& c :
       {Case{4096, 7168, 2048, 2, true}, Case{4, 512, 128, 2, true},
        Case{1, 512, 128, 2, true}, Case{4096, 4096, 14336, 2, false},
        Case{17, 256, 128, 2, false}, Case{17, 256, 128, 4, false}}) {
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
    const intptr_t a_end = Offset(b, p->a_scales) + scales;
    const intptr_t gate_up = Offset(b, p->gate_up);
    const intptr_t gate_up_end = gate_up + 2 * c.rows * i;
    const intptr_t h_at = Offset(b, p->h);
    const intptr_t h_end = Offset(b, p->h_scales) + scales;
    EXPECT_EQ(Offset(b, p->a), b.rows_h);
    EXPECT_EQ(Offset(b, p->a_scales), b.rows_h + c.rows * h);
    EXPECT_EQ(Offset(b, p->h_scales), h_at + c.rows * i);
    EXPECT_EQ(p->rows, c.rows);
    const intptr_t rows_h_end = b.rows_h + c.rows * c.hidden * c.element_bytes;
    // a before gate_up (gate|up reads one, writes the other).
    EXPECT_LE(a_end, gate_up);
    // gate_up and h apart (the second Pack), h outside rows_h (the down
    // GEMM's output), each inside its buffer.
    EXPECT_TRUE(gate_up_end <= h_at || h_end <= gate_up);
    EXPECT_GE(h_at, rows_h_end);
    if (c.gate_up_in_rows_h) {
      EXPECT_LE(gate_up_end, rows_h_end);
      EXPECT_EQ(h_at, b.rows_i);
      EXPECT_LE(h_end, b.rows_i + c.rows * c.intermediate * c.element_bytes);
    } else {
      EXPECT_EQ(gate_up, b.rows_i);
      EXPECT_EQ(h_at, b.rows_q);
      EXPECT_LE(h_end, b.rows_q + b.rows_q_bytes);
    }
    // TMA and vector loads: 16-byte aligned starts.
    for (const intptr_t at : {gate_up, h_at, Offset(b, p->h_scales)}) {
      EXPECT_EQ(at % 16, 0);
    }
  }
}

TEST(MoeDeviceWorkspaceTest, PerTokenRowsWithoutRoomFail) {
  MoeDeviceBuffers b = Placed(Capacity(64, 256, 128));
  ASSERT_GT(b.rows_q_bytes, 0);
  b.rows_q_bytes = 0;  // as a layout that never reserved it
  EXPECT_THAT(PerTokenFp8RowsOf(b, 256, 128).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "ws: reserved without room for per-channel FP8 "
                       "intermediates of I = 128; call moe::ReserveWorkspace "
                       "with this step's limits"));
}

}  // namespace
}  // namespace tailor::internal
