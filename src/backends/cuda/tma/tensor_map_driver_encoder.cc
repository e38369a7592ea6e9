// backends/cuda/tma/tensor_map_driver_encoder.cc — the driver's encode.
#include "backends/cuda/tma/tensor_map_driver_encoder.h"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tailor::cuda {
namespace {

// tailor's enums mirror the driver's; keep them in lock step.
template <typename Ours, typename Theirs>
constexpr bool SameValue(Ours ours, Theirs theirs) {
  return static_cast<int64_t>(ours) == static_cast<int64_t>(theirs);
}
static_assert(SameValue(TensorMapDataType::kUint8,
                        CU_TENSOR_MAP_DATA_TYPE_UINT8));
static_assert(SameValue(TensorMapDataType::kBfloat16,
                        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16));
static_assert(SameValue(TensorMapDataType::kTfloat32Ftz,
                        CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ));
static_assert(SameValue(TensorMapDataType::k16U4Align8B,
                        CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B));
static_assert(SameValue(TensorMapDataType::k16U4Align16B,
                        CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B));
static_assert(SameValue(TensorMapDataType::k16U6Align16B,
                        CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B));
static_assert(SameValue(TensorMapInterleave::k32B,
                        CU_TENSOR_MAP_INTERLEAVE_32B));
static_assert(SameValue(TensorMapSwizzle::k128B, CU_TENSOR_MAP_SWIZZLE_128B));
static_assert(SameValue(TensorMapSwizzle::k128BAtom32B,
                        CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B));
static_assert(SameValue(TensorMapSwizzle::k128BAtom32BFlip8B,
                        CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B));
static_assert(SameValue(TensorMapSwizzle::k128BAtom64B,
                        CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B));
static_assert(SameValue(TensorMapL2Promotion::k256B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B));
static_assert(SameValue(TensorMapOobFill::kNanRequestZeroFma,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
static_assert(sizeof(CUtensorMap) == sizeof(TensorMapBytes));

// Room for probes with a rank past the driver's maximum of 5.
constexpr uint32_t kProbeArraySize = 8;

}  // namespace

CUresult EncodeTensorMapTiled(const DriverApi& api, const TensorMapSpec& spec,
                              TensorMapBytes* out) {
  if (spec.rank > kProbeArraySize) return CUDA_ERROR_INVALID_VALUE;
  std::array<cuuint64_t, kProbeArraySize> dims = {};
  std::array<cuuint64_t, kProbeArraySize> strides = {};
  std::array<cuuint32_t, kProbeArraySize> box = {};
  std::array<cuuint32_t, kProbeArraySize> element_strides = {};
  for (int i = 0; i < kTensorMapMaxRank; ++i) {
    dims[i] = spec.global_dims[i];
    box[i] = spec.box_dims[i];
    element_strides[i] = spec.element_strides[i];
    if (i + 1 < kTensorMapMaxRank) strides[i] = spec.global_strides[i];
  }
  CUtensorMap map;  // cuda.h's type carries the alignment the driver wants
  const CUresult result = api.cuTensorMapEncodeTiled(
      &map, static_cast<CUtensorMapDataType>(spec.data_type), spec.rank,
      reinterpret_cast<void*>(static_cast<uintptr_t>(spec.global_address)),
      dims.data(), strides.data(), box.data(), element_strides.data(),
      static_cast<CUtensorMapInterleave>(spec.interleave),
      static_cast<CUtensorMapSwizzle>(spec.swizzle),
      static_cast<CUtensorMapL2promotion>(spec.l2_promotion),
      static_cast<CUtensorMapFloatOOBfill>(spec.oob_fill));
  if (result == CUDA_SUCCESS) std::memcpy(out->bytes, &map, sizeof(map));
  return result;
}

TensorMapEncoder DriverTensorMapEncoder(const DriverApi* api) {
  return [api](const TensorMapSpec& spec, TensorMapBytes* out) {
    return CudaResultToStatus(
        EncodeTensorMapTiled(*api, spec, out),
        absl::StrCat("cuTensorMapEncodeTiled(", spec.ToString(), ")"));
  };
}

}  // namespace tailor::cuda
