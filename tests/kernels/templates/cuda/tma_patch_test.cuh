// templates/cuda/tma_patch_test.cuh — ragged copy through device-patched TMA
// descriptors (the path tailor's grouped kernels use for tails).
//
// Template parameters (the specialization; SpecKey: dtypes[0] -> element
// bytes, dims[0] = kCols, tile.m = kTileRows, variant = kVariant):
//   kElementBytes  2 (bf16/f16) or 4 (f32); TMA copies bytes, type-agnostic
//   kCols          row length in elements; one box covers a whole row
//   kTileRows      rows per CTA tile (box rows)
//   kVariant       kTmaPatchReplaceStride | kTmaPatchOnly (tma_test_params.h)
// Launch: grid {G} with G <= num_items (CTA b takes items b, b + G, ...),
// block {kTmaTestThreads}, dynamic shared memory TmaTestSharedBytes(
// kTileBytes), slots [G * 2 * kTmaTestSlotRing].
//
// Per work item (segment s, row tile t) of a CTA, its use-th:
//   1. warp 0 patches the in/out templates into slot use % 2 of the CTA's
//      in/out slot rings: base = segment's first row, globalDim[1] =
//      segment rows (and the row stride with kTmaPatchReplaceStride).
//   2. thread 0 acquires both slots, TMA-loads box {0, t * kTileRows} into
//      shared memory (rows past the segment arrive as zeros).
//   3. all threads copy the tile as loaded to `loaded` (debug output).
//   4. thread 0 TMA-stores the tile to the output slot (rows past the
//      segment are dropped) and waits for the store to complete, which frees
//      the slots for reuse two items later (tensormap_patch.cuh, rule R2).
#ifndef TAILOR_TEMPLATES_CUDA_TMA_PATCH_TEST_CUH_
#define TAILOR_TEMPLATES_CUDA_TMA_PATCH_TEST_CUH_

#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tensor_map.h"
#include "runtime/cuda/tensormap_patch.cuh"
#include "runtime/cuda/tma.cuh"
#include "templates/cuda/tma_test_common.cuh"
#include "templates/cuda/tma_test_params.h"

namespace tailor::cuda {

// The windows of `item` in `in` and `out`.
template <int kRowBytes, bool kReplaceStride>
TAILOR_DEVICE void ItemWindows(const TmaPatchTestParams& params,
                               const TmaTestWorkItem& item, RowWindow& in,
                               RowWindow& out) {
  const unsigned long long stride = kReplaceStride ? kRowBytes : 0ull;
  in = {.base = static_cast<const unsigned char*>(params.in) +
                item.in_row * kRowBytes,
        .rows = static_cast<unsigned>(item.rows),
        .row_stride = stride};
  out = {.base =
             static_cast<unsigned char*>(params.out) + item.out_row * kRowBytes,
         .rows = static_cast<unsigned>(item.rows),
         .row_stride = stride};
}

template <int kElementBytes, int kCols, int kTileRows, unsigned kVariant>
TAILOR_DEVICE void TmaPatchTest(const TmaPatchTestParams& params) {
  constexpr int kRowBytes = kCols * kElementBytes;
  constexpr int kTileBytes = kTileRows * kRowBytes;
  constexpr bool kReplaceStride = (kVariant & kTmaPatchReplaceStride) != 0;
  static_assert(kElementBytes == 1 || kElementBytes == 2 ||
                    kElementBytes == 4 || kElementBytes == 8,
                "TMA element size is 1, 2, 4 or 8 bytes");
  static_assert(kRowBytes % 16 == 0,
                "box row bytes must be a multiple of 16 (TMA rule)");
  static_assert(kCols >= 1 && kCols <= 256,
                "one box covers the row: box dims are <= 256");
  static_assert(kTileRows >= 1 && kTileRows <= 256, "box dims are <= 256");

  __shared__ TensorMap staging[2];  // [in, out], 128-byte aligned by type
  __shared__ Mbarrier tile_full;
  unsigned char* tile = TmaTestTile();  // [kTileRows][kCols] elements
  const int warp = threadIdx.x / 32;
  // Ring owners: 2b for `in`, 2b + 1 for `out`; kTmaTestSlotRing slots each.
  const unsigned in_owner = 2 * blockIdx.x, out_owner = in_owner + 1;

  // ---- patch-only variant: measures the patch itself -----------------------
  if constexpr ((kVariant & kTmaPatchOnly) != 0) {
    RowWindow in_window, out_window;
    ItemWindows<kRowBytes, kReplaceStride>(params, params.items[blockIdx.x],
                                           in_window, out_window);
    if (warp == 0) {
      for (int r = 0; r < params.repeat; ++r) {
        PatchRowWindow<1>(
            &staging[r & 1], params.in_template, in_window,
            RotatingSlot<kTmaTestSlotRing>(params.slots, in_owner, r));
      }
    }
    return;
  }

  if (threadIdx.x == 0) {
    tile_full.Init(1);
    FenceMbarrierInit();
  }
  // Items blockIdx.x, blockIdx.x + gridDim.x, ...: one per CTA when the grid
  // covers them, several (rotating through the slot rings) when it does not.
  unsigned use = 0;
  for (int index = blockIdx.x; index < params.num_items;
       index += gridDim.x, ++use) {
    const TmaTestWorkItem item = params.items[index];
    RowWindow in_window, out_window;
    ItemWindows<kRowBytes, kReplaceStride>(params, item, in_window, out_window);
    TensorMap* in_slot =
        RotatingSlot<kTmaTestSlotRing>(params.slots, in_owner, use);
    TensorMap* out_slot =
        RotatingSlot<kTmaTestSlotRing>(params.slots, out_owner, use);

    // ---- 1. patch this use's slots (warp 0). Rule R2 holds: the TMA ops
    //         that used them kTmaTestSlotRing uses ago have completed. ------
    if (warp == 0) {
      PatchRowWindow<1>(&staging[0], params.in_template, in_window, in_slot);
      PatchRowWindow<1>(&staging[1], params.out_template, out_window, out_slot);
    }
    __syncthreads();  // mbarrier init (first use); tile free (later uses)

    // ---- 2. TMA load: box {0, t * kTileRows} of the segment ---------------
    const int tile_row = item.tile * kTileRows;
    if (threadIdx.x == 0) {
      AcquireTensorMap(in_slot);
      AcquireTensorMap(out_slot);
      // The full box, zero-filled rows included.
      tile_full.ArriveExpectTx(kTileBytes);
      TmaLoad<2>(tile, in_slot, {0, tile_row}, &tile_full);
    }
    tile_full.Wait(use & 1);  // one phase per use

    // ---- 3. debug copy of the tile as loaded --------------------------------
    if (params.loaded != nullptr) {
      CopyTileOut(static_cast<unsigned char*>(params.loaded) +
                      static_cast<long long>(index) * kTileBytes,
                  tile, kTileBytes);
    }

    // ---- 4. TMA store through the patched output map ----------------------
    if (threadIdx.x == 0) {
      // The tile came in through the async proxy and was observed through
      // the mbarrier; order that before the store's async-proxy read.
      FenceSharedToAsyncProxy();
      TmaStore<2>(out_slot, tile, {0, tile_row});
      BulkCommitGroup();
      BulkWaitGroup<0>();  // rule R2: the slot and the tile are free after it
    }
    __syncthreads();  // every reader of the tile is done before the next load
  }
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TMA_PATCH_TEST_CUH_
