// runtime/cuda/tensor_map.h — the 128-byte TMA descriptor as plain data.
//
// Contract: plain C++ that compiles both as host code (g++/clang, included by
// tailor's host side to fill kernel params) and as device code (NVRTC, included
// by runtime/cuda/*.cuh and templates/cuda/*). No CUDA keywords, no standard
// headers (NVRTC has none).
//
// TensorMap has the size and alignment of cuda.h's CUtensorMap (CUDA 13:
// 128 bytes, alignas(128)); host code copies a CUtensorMap made by
// cuTensorMapEncodeTiled into it byte for byte. Its contents are opaque: only
// the driver (encode) and PTX (`tensormap.replace`, runtime/cuda/
// tensormap_patch.cuh) edit it.
//
// Where a TensorMap may live when a TMA instruction uses it (PTX ISA,
// cp.async.bulk.tensor): kernel parameter space (`__grid_constant__`), constant
// or global memory. NOT shared memory: shared copies are only staging buffers
// for tensormap.replace.
//
// Example (host):
//   CUtensorMap encoded;  cuTensorMapEncodeTiled(&encoded, ...);
//   tailor::cuda::TensorMap map;
//   std::memcpy(&map, &encoded, sizeof(map));
//   params.map_in = map;   // a field of the kernel's params struct
#ifndef TAILOR_RUNTIME_CUDA_TENSOR_MAP_H_
#define TAILOR_RUNTIME_CUDA_TENSOR_MAP_H_

namespace tailor::cuda {

inline constexpr int kTensorMapBytes = 128;

struct alignas(128) TensorMap {
  unsigned long long opaque[kTensorMapBytes / 8];
};
static_assert(sizeof(TensorMap) == kTensorMapBytes,
              "TensorMap must be 128 bytes");
static_assert(alignof(TensorMap) == 128, "TensorMap must be 128-byte aligned");

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_TENSOR_MAP_H_
