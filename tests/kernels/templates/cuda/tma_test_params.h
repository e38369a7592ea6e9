// templates/cuda/tma_test_params.h — params of the TMA ragged-copy test
// kernels (tma_patch_test.cuh, tma_copy_test.cuh), shared by host and device.
//
// Contract: plain C++ (host g++ and device NVRTC), no CUDA keywords, no
// standard headers. The host fills these structs and passes the params
// struct as the kernel's one argument (core/backend.h kernel ABI).
//
// The problem both kernels solve: `in` holds ragged segments back to back,
// [sum(rows), kCols]; copy every segment to its own place in `out`, one CTA
// per (segment, row tile of kTileRows rows), through shared memory with a TMA
// load and a TMA store, letting the TMA bounds check mask each segment's
// tail. `loaded` receives every tile exactly as it landed in shared memory
// (rows past the segment included: they must be zero), so a test can see the
// load's zero fill separately from the store's drop.
#ifndef TAILOR_TEMPLATES_CUDA_TMA_TEST_PARAMS_H_
#define TAILOR_TEMPLATES_CUDA_TMA_TEST_PARAMS_H_

#include "runtime/cuda/tensor_map.h"

namespace tailor::cuda {

// One CTA's work: rows [tile * kTileRows, (tile + 1) * kTileRows) of a
// segment, clipped by the TMA to the segment's `rows`.
struct TmaTestWorkItem {
  long long in_row = 0;   // first row of the segment in `in`
  long long out_row = 0;  // first row of the segment in `out`
  int rows = 0;           // rows in the segment, >= 1
  int tile = 0;           // row tile within the segment, >= 0
};

// Slots per (CTA, tensor) ring in tma_patch_test.
inline constexpr int kTmaTestSlotRing = 2;

// Variant bits (SpecKey::variant) of tma_patch_test.
// Also patch the row stride (the template is encoded with a wrong one).
inline constexpr unsigned kTmaPatchReplaceStride = 1u << 0;
// Patch only, `repeat` times per CTA, no copy (bench/cuda_dispatch_bench).
inline constexpr unsigned kTmaPatchOnly = 1u << 1;

// tma_patch_test: one template map per tensor, patched per CTA.
struct TmaPatchTestParams {
  // [rows, kCols] 2D maps, box {kCols, kTileRows}; any base/rows (patched).
  TensorMap in_template;
  TensorMap out_template;
  // [gridDim.x * 2 * kTmaTestSlotRing] 128-byte aligned: CTA b owns rings
  // 2b (in) and 2b + 1 (out) of kTmaTestSlotRing slots each.
  TensorMap* slots = nullptr;
  const TmaTestWorkItem* items = nullptr;  // [num_items]
  const void* in = nullptr;                // [sum(rows), kCols]
  void* out = nullptr;                     // [out_rows, kCols]
  void* loaded = nullptr;  // [num_items, kTileRows, kCols]; may be null
  int num_items = 0;       // >= gridDim.x; CTA b takes b, b + gridDim.x, ...
  int repeat = 1;          // kTmaPatchOnly: patches per CTA
};

// tma_copy_test: one "ragged" map per tensor, encoded once on the host, no
// patching. Rank 4, innermost first (after Triton's ragged TMA):
//   dims    {kCols, 2^30, 2^31 - 2^16, 2^31 - 2^16}
//   strides {row_bytes, row_bytes, 2^34 * element_bytes - row_bytes}
//   box     {kCols, kTileRows, 1, 1}
// Row r of a segment at row `s` with `n` rows is read at coordinates
//   {0, 2^30 - n + r, s + n, 2^30}
// whose byte offset is, modulo 2^64, (s + r) * row_bytes; the bounds check
// of dim 1 (< 2^30) is r < n, so the segment's tail is masked.
inline constexpr long long kRaggedBillion = 1ll << 30;
inline constexpr long long kRaggedMaxExtent = 0x7fff0000ll;

struct TmaCopyTestParams {
  TensorMap in_map;
  TensorMap out_map;
  const TmaTestWorkItem* items = nullptr;  // [num_items]
  void* loaded = nullptr;  // [num_items, kTileRows, kCols]; may be null
  int num_items = 0;       // == gridDim.x
};

// Dynamic shared memory both kernels need for a tile of `tile_bytes`: the
// tile is aligned up to 128 bytes inside the dynamic buffer.
inline constexpr unsigned TmaTestSharedBytes(unsigned tile_bytes) {
  return tile_bytes + 128;
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_TMA_TEST_PARAMS_H_
