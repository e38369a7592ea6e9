// The device layout of a ragged workspace with and without the decode rows'
// block (ops/attention/ragged_workspace.h): every buffer 256-byte aligned,
// none overlapping, the decode block's own buffers inside it; a plan with
// more decode sequences than reserved is refused by name.
#include "ops/attention/ragged_workspace.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "ops/device_layout.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

RaggedCapacity TilesCapacity() {
  const RaggedShape shape = {.dtype = DType::kBF16,
                             .head_dim = 128,
                             .num_qo_heads = 32,
                             .num_kv_heads = 8,
                             .page_size = 16};
  const RaggedPlanConfig config = {.head_pack = 4,
                                   .tile_rows = 128,
                                   .kv_block = 128,
                                   .num_workers = 132,
                                   .item_cost = 128,
                                   .masked_block_extra = 32};
  return RaggedCapacityFor(shape, config, /*batch=*/37, /*tokens=*/577,
                           /*scratch_bytes=*/24);
}

DecodeCapacity DecodeRowsCapacity(int64_t batch) {
  const DecodeShape shape = {.dtype = DType::kBF16,
                             .head_dim = 128,
                             .group = 4,
                             .page_size = 16,
                             .num_kv_heads = 8};
  const DecodePlanConfig config = {.num_workers = 264,
                                   .tile_tokens = 64,
                                   .item_cost_tokens = 64,
                                   .head_group = 4};
  return DecodeCapacityFor(shape, batch, config, /*scratch_bytes=*/4136);
}

// [offset, offset + bytes) of every buffer, sorted; checks alignment and
// that none overlaps the next or runs past `total`.
void ExpectDisjoint(std::vector<std::pair<int64_t, int64_t>> buffers,
                    int64_t total) {
  std::sort(buffers.begin(), buffers.end());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto [offset, bytes] = buffers[i];
    EXPECT_EQ(offset % kDeviceBufferAlignment, 0) << "buffer " << i;
    const int64_t end = offset + bytes;
    EXPECT_LE(end, i + 1 < buffers.size() ? buffers[i + 1].first : total)
        << "buffer " << i;
  }
}

TEST(RaggedWorkspaceLayoutTest, NoDecodeBlockWithoutDecodeRows) {
  const RaggedDeviceBuffers b = RaggedLayoutFor(TilesCapacity());
  EXPECT_EQ(b.q_rows, 0);
  EXPECT_EQ(b.seq_lens, 0);
  EXPECT_EQ(b.decode, 0);
  EXPECT_EQ(b.decode_layout.bytes, 0);
  EXPECT_GT(b.bytes, b.scratch);
}

TEST(RaggedWorkspaceLayoutTest, DecodeBlockFollowsTheTilesBuffers) {
  RaggedCapacity c = TilesCapacity();
  c.decode = DecodeRowsCapacity(37);
  const RaggedDeviceBuffers b = RaggedLayoutFor(c);
  const DecodeDeviceBuffers& d = b.decode_layout;
  ExpectDisjoint({{b.items, 64 * c.items},
                  {b.worker_begin, 4 * (c.workers + 1)},
                  {b.merge_groups, 32 * c.partials},
                  {b.num_merges, 4},
                  {b.partial_out, 4 * c.partials * c.partial_row},
                  {b.partial_lse, 4 * c.partials * c.tile_rows},
                  {b.scratch, c.scratch_bytes},
                  {b.q_rows, 4 * (c.decode.batch + 1)},
                  {b.seq_lens, 4 * c.decode.batch},
                  {b.decode, d.bytes}},
                 b.bytes);
  // The decode block's buffers, from its own start, stay inside it.
  ExpectDisjoint({{d.items, 32 * c.decode.items},
                  {d.worker_begin, 4 * (c.decode.workers + 2)},
                  {d.first_items, 32 * c.decode.workers},
                  {d.partial_out, 4 * c.decode.partials * c.decode.partial_row},
                  {d.partial_lse, 4 * c.decode.partials * c.decode.group},
                  {d.scratch, c.decode.scratch_bytes}},
                 d.bytes);
  RaggedDeviceBuffers placed = b;
  placed.base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  EXPECT_EQ(placed.DecodeBuffers().base, placed.base + b.decode);
  EXPECT_EQ(placed.DecodeBuffers().capacity.batch, 37);
}

TEST(RaggedWorkspaceLayoutTest, MoreDecodeSequencesThanReservedAreRefused) {
  RaggedCapacity reserved = TilesCapacity();
  reserved.decode = DecodeRowsCapacity(37);
  const RaggedDeviceBuffers b = RaggedLayoutFor(reserved);
  RaggedCapacity need = reserved;
  TAILOR_EXPECT_OK(CheckRaggedFits(b, need));
  need.decode = DecodeRowsCapacity(38);
  EXPECT_THAT(CheckRaggedFits(b, need),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "ws: reserved for 37 decode sequences, this plan needs "
                       "38; call attention::ReserveRaggedWorkspace with larger "
                       "limits"));
}

}  // namespace
}  // namespace tailor::internal
