// templates/cuda/moe/sm90/epilogue.cuh — the Hopper grouped GEMM's
// epilogue: a consumer's f32 accumulators -> bf16 C rows, with silu_and_mul
// applied when gated.
//
// Contract: device-only code for NVRTC. MoeSm90Epilogue<Shape> stores the
// item's rows only (a tail's rows past its end are computed, not stored).
// Three paths:
//   StoreByTma    with kTmaStore, a core tile: its output goes through two
//                 swizzled 64 x 64 boxes in shared memory (kSharedBytes per
//                 CTA) and leaves by TMA stores in whole lines, overlapped
//                 with the next tile's MMAs
//   Store         tails (and kTmaStore 0): from registers, 4 bytes per
//                 thread and column pair
//   StoreSwapped  swap-AB: from registers, one bf16 per store (a decode
//                 step's C is a few rows: the weights dominate its bytes)
// Accumulator layout (wgmma's): accumulator 4 j + 2 h + x of a consumer
// holds row 16 warp + g + 8 h, column 8 j + 2 t + x of its tile (g = lane /
// 4, t = lane % 4); swap-AB transposes rows and columns.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_EPILOGUE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_EPILOGUE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/tma.cuh"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

template <typename Shape>
struct MoeSm90Epilogue {
  using Params = MoeGroupedGemmSm90Params;
  static constexpr bool kGated = Shape::kGated;
  static constexpr bool kSwap = Shape::kSwap;
  static constexpr bool kSplitRows = Shape::kSplitRows;
  static constexpr int kTmaStore = Shape::kTmaStore;
  static constexpr int kOutN = Shape::kOutN;
  static constexpr int kConsumerWRows = Shape::kConsumerWRows;
  static constexpr int kAccumulators = Shape::kAccumulators;
  static constexpr int kStoreBoxes = Shape::kStoreBoxes;
  // Shared memory of the TMA-store boxes: two per consumer.
  static constexpr int kSharedBytes = MoeSm90StoreBytes(kTmaStore);

  // The consumer's two store boxes within the CTA's `store_boxes`.
  static unsigned char* Boxes(unsigned char* store_boxes, int consumer) {
    return store_boxes + consumer * 2 * kMoeSm90StoreBoxBytes;
  }

  static void StorePair(const Params& p, long long row, int col, float v0,
                        float v1) {
    unsigned short* c = static_cast<unsigned short*>(p.c) + row * kOutN + col;
    if constexpr (kOutN % 2 == 0) {
      if (col < kOutN) *reinterpret_cast<unsigned*>(c) = PackBf16x2(v0, v1);
    } else {
      if (col < kOutN) c[0] = Bf16Bits(v0);
      if (col + 1 < kOutN) c[1] = Bf16Bits(v1);
    }
  }

  // First output column of the consumer's tile.
  static int FirstColumn(int n_tile, int consumer) {
    return kGated
               ? n_tile * (kMoeSm90WRows / 2) + (kSplitRows ? 0 : 64 * consumer)
               : n_tile * kMoeSm90WRows + (kSplitRows ? 0 : 128 * consumer);
  }

  // The consumer's output value pair at accumulator group j (n8 columns
  // 8 j + 2 t, +1 of its output), row half h.
  static unsigned OutputPair(const float (&acc)[kAccumulators], int j, int h) {
    if constexpr (kGated) {
      constexpr int kUp = kConsumerWRows / 16;  // first up group
      const float* gate = &acc[4 * j + 2 * h];
      const float* up = &acc[4 * (j + kUp) + 2 * h];
      return PackBf16x2(Silu(gate[0]) * up[0], Silu(gate[1]) * up[1]);
    } else {
      return PackBf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }

  // Registers -> C, the item's rows only.
  static void Store(const Params& p, const MoeWorkItem& item, int rows,
                    int n_tile, int consumer,
                    const float (&acc)[kAccumulators]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    constexpr int kGroups = kConsumerWRows / 8;  // n8 groups
    const int row0 = (kSplitRows ? 64 * consumer : 0) + 16 * warp + g;
    const int col0 = FirstColumn(n_tile, consumer);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= rows) continue;
      const long long c_row = item.row_begin + row;
      if constexpr (kGated) {
#pragma unroll
        for (int j = 0; j < kGroups / 2; ++j) {
          const float* gate = &acc[4 * j + 2 * half];
          const float* up = &acc[4 * (j + kGroups / 2) + 2 * half];
          StorePair(p, c_row, col0 + 8 * j + 2 * t, Silu(gate[0]) * up[0],
                    Silu(gate[1]) * up[1]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          StorePair(p, c_row, col0 + 8 * j + 2 * t, acc[4 * j + 2 * half],
                    acc[4 * j + 2 * half + 1]);
        }
      }
    }
  }

  // Swap-AB: registers -> C, the item's tokens only. Accumulator half b is
  // W box 2 consumer + b; its accumulator 4 j + 2 h + x holds W row 16 warp
  // + g + 8 h of the box, token 8 j + 2 t + x. Gated, the halves are the
  // gate and up rows of the same 64 output columns.
  static void StoreSwapped(const Params& p, const MoeWorkItem& item, int rows,
                           int n_tile, int consumer,
                           const float (&acc)[kAccumulators]) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    constexpr int kHalf = kAccumulators / 2;
    unsigned short* c = static_cast<unsigned short*>(p.c);
    const int col0 = FirstColumn(n_tile, consumer) + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const int token = 8 * (i / 4) + 2 * t + i % 2;
      const int col = col0 + 8 * ((i / 2) % 2);
      if (token >= rows) continue;
      unsigned short* c_row =
          c + static_cast<long long>(item.row_begin + token) * kOutN;
      if constexpr (kGated) {
        if (col < kOutN) {
          c_row[col] = Bf16Bits(Silu(acc[i]) * acc[kHalf + i]);
        }
      } else {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          if (col + 64 * b < kOutN) {
            c_row[col + 64 * b] = Bf16Bits(acc[b * kHalf + i]);
          }
        }
      }
    }
  }

  // A full tile's output through shared memory and TMA stores: box b (64
  // output columns) of the consumer's 64 rows goes to buffer (boxes_done + b)
  // % 2 while the TMA unit stores the box before it from the other buffer.
  // Each box is one bulk group; waiting until at most one group still reads
  // shared memory frees the buffer about to be written. Box layout: 128-byte
  // swizzle, as the TMA unit expects (16-byte chunk c of row r at chunk c ^
  // (r % 8)): a warp's 8 rows x 4 threads x 4 bytes hit 32 distinct banks.
  static void StoreByTma(const Params& p, const MoeWorkItem& item, int n_tile,
                         int consumer, const float (&acc)[kAccumulators],
                         unsigned char* boxes, unsigned& boxes_done) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int g = lane / 4, t = lane % 4;
    const bool leader = threadIdx.x % 128 == 0;
    const int barrier = 1 + consumer;  // named barrier of this warpgroup
    const int c_row = item.row_begin + (kSplitRows ? 64 * consumer : 0);
    const int col0 = FirstColumn(n_tile, consumer);
#pragma unroll
    for (int b = 0; b < kStoreBoxes; ++b, ++boxes_done) {
      unsigned char* box = boxes + (boxes_done % 2) * kMoeSm90StoreBoxBytes;
      if (leader) BulkWaitGroupRead<1>();
      NamedBarrierSync<128>(barrier);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * warp + g + 8 * h;  // row % 8 == g
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const unsigned offset = row * 128 + ((jj ^ g) << 4) + 4 * t;
          *reinterpret_cast<unsigned*>(box + offset) =
              OutputPair(acc, 8 * b + jj, h);
        }
      }
      FenceSharedToAsyncProxy();
      NamedBarrierSync<128>(barrier);
      if (leader) {
        TmaStore<2>(&p.c_map, box, {col0 + 64 * b, c_row});
        BulkCommitGroup();
      }
    }
  }

  // The item's `rows` of the consumer's tile at N tile n_tile, by the path
  // the variant and the item take.
  static void StoreTile(const Params& p, const MoeWorkItem& item, int rows,
                        int n_tile, int consumer,
                        const float (&acc)[kAccumulators], unsigned char* boxes,
                        unsigned& boxes_done) {
    if constexpr (kSwap) {
      StoreSwapped(p, item, rows, n_tile, consumer, acc);
    } else if (kTmaStore && item.tail_class == 0) {
      StoreByTma(p, item, n_tile, consumer, acc, boxes, boxes_done);
    } else {
      Store(p, item, rows, n_tile, consumer, acc);
    }
  }

  // Before the CTA exits: the last TMA stores have read their boxes.
  static void Drain(bool leader) {
    if (kTmaStore && leader) BulkWaitGroup<0>();
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_EPILOGUE_CUH_
