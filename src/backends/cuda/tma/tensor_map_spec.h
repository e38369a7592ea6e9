// backends/cuda/tma/tensor_map_spec.h — the arguments of one TMA tensor map.
//
// A TensorMapSpec mirrors, field for field, the arguments of the CUDA driver's
// cuTensorMapEncodeTiled (CUDA 13.0 cuda.h). It is a plain aggregate: build it
// with designated initializers, compare it, hash it (it is the key of the
// descriptor pool) and print it. Nothing here needs cuda.h or a GPU: the enums
// below carry the numeric values of the driver's CUtensorMap* enums (the CUDA
// backend static_asserts that they match when cuda.h is present).
//
// Conventions are the driver's, not tailor's TensorRef's:
//   - dimension 0 is the innermost (contiguous) one;
//   - global_dims[i] counts elements (for the packed sub-byte types: individual
//     U4/U6 values, as cuda.h says);
//   - global_strides[i] is the stride of dimension i + 1 in BYTES; dimension 0
//     has no stride (it is contiguous), so a rank-r map uses r - 1 strides;
//   - entries at and past `rank` are not used by the driver. Leave them at
//     their defaults so that equal maps compare (and hash) equal.
//
// Error messages of the checker name the driver's parameter names
// (globalDim, globalStrides, boxDim, elementStrides, ...) so that they can be
// looked up in cuda.h directly.
//
// Example: a bf16 [M=577, K=4096] row-major matrix read in 128x64 boxes with
// the 128-byte swizzle.
//   TensorMapSpec spec{
//       .data_type = TensorMapDataType::kBfloat16,
//       .rank = 2,
//       .global_address = reinterpret_cast<uint64_t>(a_ptr),
//       .global_dims = {4096, 577},          // {K, M}: innermost first
//       .global_strides = {4096 * 2},        // bytes between rows
//       .box_dims = {64, 128},               // 64 bf16 = 128 bytes inner
//       .swizzle = TensorMapSwizzle::k128B,
//   };
#ifndef TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_SPEC_H_
#define TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_SPEC_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace tailor::cuda {

// The driver's maximum tensor map rank (CU_TENSOR_MAP_* tiled mode).
inline constexpr int kTensorMapMaxRank = 5;

// Mirrors CUtensorMapDataType (values are the driver's).
enum class TensorMapDataType : uint32_t {
  kUint8 = 0,
  kUint16 = 1,
  kUint32 = 2,
  kInt32 = 3,
  kUint64 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat32Ftz = 10,
  kTfloat32 = 11,
  kTfloat32Ftz = 12,
  // CUDA 12.8+ packed sub-byte types: '16 x U4' / '16 x U6' groups.
  k16U4Align8B = 13,   // 4-bit values, no gaps in shared memory
  k16U4Align16B = 14,  // 4-bit values, 8-byte gap after each 8 bytes
  k16U6Align16B = 15,  // 6-bit values, 4-byte gap after each 12 bytes
};
inline constexpr uint32_t kTensorMapDataTypeCount = 16;

// Mirrors CUtensorMapInterleave.
enum class TensorMapInterleave : uint32_t { kNone = 0, k16B = 1, k32B = 2 };
inline constexpr uint32_t kTensorMapInterleaveCount = 3;

// Mirrors CUtensorMapSwizzle (the 128B_ATOM_* modes are CUDA 12.8+).
enum class TensorMapSwizzle : uint32_t {
  kNone = 0,
  k32B = 1,                // 16-byte chunks within a 32-byte span
  k64B = 2,                // 16-byte chunks within a 64-byte span
  k128B = 3,               // 16-byte chunks within a 128-byte span
  k128BAtom32B = 4,        // 32-byte chunks within a 128-byte span
  k128BAtom32BFlip8B = 5,  // as above, 8-byte halves swapped on odd rows
  k128BAtom64B = 6,        // 64-byte chunks within a 128-byte span
};
inline constexpr uint32_t kTensorMapSwizzleCount = 7;

// Mirrors CUtensorMapL2promotion.
enum class TensorMapL2Promotion : uint32_t {
  kNone = 0,
  k64B = 1,
  k128B = 2,
  k256B = 3,
};
inline constexpr uint32_t kTensorMapL2PromotionCount = 4;

// Mirrors CUtensorMapFloatOOBfill.
enum class TensorMapOobFill : uint32_t { kNone = 0, kNanRequestZeroFma = 1 };
inline constexpr uint32_t kTensorMapOobFillCount = 2;

// The arguments of cuTensorMapEncodeTiled, minus the output pointer.
struct TensorMapSpec {
  TensorMapDataType data_type = TensorMapDataType::kUint8;   // tensorDataType
  uint32_t rank = 0;                                         // tensorRank
  uint64_t global_address = 0;                               // globalAddress
  std::array<uint64_t, kTensorMapMaxRank> global_dims = {};  // globalDim
  // globalStrides: bytes; [i] is the stride of dimension i + 1.
  std::array<uint64_t, kTensorMapMaxRank - 1> global_strides = {};
  std::array<uint32_t, kTensorMapMaxRank> box_dims = {};  // boxDim
  std::array<uint32_t, kTensorMapMaxRank> element_strides = {1, 1, 1, 1, 1};
  TensorMapInterleave interleave = TensorMapInterleave::kNone;
  TensorMapSwizzle swizzle = TensorMapSwizzle::kNone;
  TensorMapL2Promotion l2_promotion = TensorMapL2Promotion::kNone;
  TensorMapOobFill oob_fill = TensorMapOobFill::kNone;

  friend bool operator==(const TensorMapSpec&, const TensorMapSpec&) = default;

  // Hashes every field (absl::Hash protocol), so the pool's key is complete.
  template <typename H>
  friend H AbslHashValue(H h, const TensorMapSpec& s) {
    return H::combine(std::move(h), s.data_type, s.rank, s.global_address,
                      s.global_dims, s.global_strides, s.box_dims,
                      s.element_strides, s.interleave, s.swizzle,
                      s.l2_promotion, s.oob_fill);
  }

  // One line, e.g. "TensorMapSpec{bf16 rank=2 addr=0x7f0000000000
  // dims=[4096,577] strides=[8192] box=[64,128] estrides=[1,1]
  // interleave=none swizzle=128B l2=none oob=none}". Shows the first
  // min(rank, 5) entries of each array; an out-of-range enum prints as its
  // number.
  std::string ToString() const;
};

// Short names used by ToString and by the checker's messages.
absl::string_view TensorMapDataTypeName(TensorMapDataType t);      // "bf16"
absl::string_view TensorMapInterleaveName(TensorMapInterleave i);  // "16B"
absl::string_view TensorMapSwizzleName(TensorMapSwizzle s);  // "128B_ATOM_32B"
absl::string_view TensorMapL2PromotionName(TensorMapL2Promotion p);
absl::string_view TensorMapOobFillName(TensorMapOobFill f);
// Each returns "?" for a value outside its enum.

// Bits one element occupies in global memory: 8..64 for the plain types, 4
// for the 16U4 types, 6 for 16U6, 0 for a value outside the enum.
int TensorMapElementBits(TensorMapDataType t);

// True for the three packed sub-byte types (16U4_ALIGN8B, 16U4_ALIGN16B,
// 16U6_ALIGN16B).
bool IsPackedTensorMapType(TensorMapDataType t);

// True for the floating-point types that may use the NaN out-of-bounds fill:
// FLOAT16, FLOAT32, FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ.
bool IsFloatTensorMapType(TensorMapDataType t);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_SPEC_H_
