// templates/cuda/tma_copy_test.cuh — ragged copy through one host-encoded
// "ragged" TMA descriptor per tensor (no device patching), the alternative
// to tma_patch_test.cuh. The bounds check comes from the coordinates: see
// TmaCopyTestParams in tma_test_params.h for the rank-4 map and why row r of
// a segment lands at (s + r) * row_bytes while r >= n is out of bounds.
//
// Template parameters (SpecKey: dtypes[0] -> element bytes, dims[0] = kCols,
// tile.m = kTileRows):
//   kElementBytes  2 (bf16/f16) or 4 (f32)
//   kCols          row length in elements; one box covers a whole row
//   kTileRows      rows per CTA tile (box rows)
// Launch: grid {num_items}, block {kTmaTestThreads}, dynamic shared memory
// TmaTestSharedBytes(kTileBytes).
//
// Trade-off against patching: no patch and no slot memory, but rank-4 maps
// (one more level of TMA address generation) and row indices limited to
// 2^30 rows per segment and 2^31 - 2^16 rows in all.
#ifndef TAILOR_TEMPLATES_CUDA_TMA_COPY_TEST_CUH_
#define TAILOR_TEMPLATES_CUDA_TMA_COPY_TEST_CUH_

#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tensor_map.h"
#include "runtime/cuda/tma.cuh"
#include "templates/cuda/tma_test_common.cuh"
#include "templates/cuda/tma_test_params.h"

namespace tailor::cuda {

// Coordinates of row `row` of a segment that starts at row `first_row` and has
// `rows` rows, in a ragged rank-4 map (see TmaCopyTestParams).
TAILOR_DEVICE void RaggedCoords(long long first_row, int rows, int row,
                                int (&coords)[4]) {
  coords[0] = 0;
  coords[1] = static_cast<int>(kRaggedBillion - rows + row);
  coords[2] = static_cast<int>(first_row + rows);
  coords[3] = static_cast<int>(kRaggedBillion);
}

template <int kElementBytes, int kCols, int kTileRows>
TAILOR_DEVICE void TmaCopyTest(const TmaCopyTestParams& params) {
  constexpr int kRowBytes = kCols * kElementBytes;
  constexpr int kTileBytes = kTileRows * kRowBytes;
  static_assert(kElementBytes == 1 || kElementBytes == 2 ||
                    kElementBytes == 4 || kElementBytes == 8,
                "TMA element size is 1, 2, 4 or 8 bytes");
  static_assert(kRowBytes % 16 == 0,
                "box row bytes must be a multiple of 16 (TMA rule)");
  static_assert(kCols >= 1 && kCols <= 256,
                "one box covers the row: box dims are <= 256");
  static_assert(kTileRows >= 1 && kTileRows <= 256, "box dims are <= 256");

  __shared__ Mbarrier tile_full;
  unsigned char* tile = TmaTestTile();  // [kTileRows][kCols] elements
  const TmaTestWorkItem item = params.items[blockIdx.x];
  const int tile_row = item.tile * kTileRows;

  if (threadIdx.x == 0) {
    tile_full.Init(1);
    FenceMbarrierInit();
  }
  __syncthreads();

  // ---- TMA load of rows [tile_row, tile_row + kTileRows) of the segment -----
  if (threadIdx.x == 0) {
    int coords[4];
    RaggedCoords(item.in_row, item.rows, tile_row, coords);
    tile_full.ArriveExpectTx(kTileBytes);
    TmaLoad<4>(tile, &params.in_map, coords, &tile_full);
  }
  tile_full.Wait(0);

  // ---- debug copy of the tile as loaded -------------------------------------
  if (params.loaded != nullptr) {
    CopyTileOut(static_cast<unsigned char*>(params.loaded) +
                    static_cast<long long>(blockIdx.x) * kTileBytes,
                tile, kTileBytes);
  }

  // ---- TMA store to the segment's rows in `out` -----------------------------
  if (threadIdx.x == 0) {
    // The tile came in through the async proxy and was observed through the
    // mbarrier; order that before the async-proxy read of the store (cheap).
    FenceSharedToAsyncProxy();
    int coords[4];
    RaggedCoords(item.out_row, item.rows, tile_row, coords);
    TmaStore<4>(&params.out_map, tile, coords);
    BulkCommitGroup();
    BulkWaitGroup<0>();
  }
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TMA_COPY_TEST_CUH_
