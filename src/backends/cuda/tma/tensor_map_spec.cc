// backends/cuda/tma/tensor_map_spec.cc — names and printing of TensorMapSpec.
#include "backends/cuda/tma/tensor_map_spec.h"

#include <algorithm>
#include <array>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace tailor::cuda {
namespace {

// Name of an enum value from a table indexed by the value, "?" outside it.
template <typename Enum, size_t N>
absl::string_view NameFromTable(Enum value,
                                const std::array<absl::string_view, N>& names) {
  const auto index = static_cast<uint32_t>(value);
  return index < N ? names[index] : absl::string_view("?");
}

// The name of a known enum value, else its number (e.g. "bf16", "42").
template <typename Enum>
std::string EnumText(absl::string_view name, Enum value) {
  if (name != "?") return std::string(name);
  return absl::StrCat(static_cast<uint32_t>(value));
}

}  // namespace

absl::string_view TensorMapDataTypeName(TensorMapDataType t) {
  static constexpr std::array<absl::string_view, kTensorMapDataTypeCount>
      kNames = {"u8",       "u16",          "u32",           "i32",
                "u64",      "i64",          "f16",           "f32",
                "f64",      "bf16",         "f32_ftz",       "tf32",
                "tf32_ftz", "16u4_align8b", "16u4_align16b", "16u6_align16b"};
  return NameFromTable(t, kNames);
}

absl::string_view TensorMapInterleaveName(TensorMapInterleave i) {
  static constexpr std::array<absl::string_view, kTensorMapInterleaveCount>
      kNames = {"none", "16B", "32B"};
  return NameFromTable(i, kNames);
}

absl::string_view TensorMapSwizzleName(TensorMapSwizzle s) {
  static constexpr std::array<absl::string_view, kTensorMapSwizzleCount>
      kNames = {"none",         "32B",           "64B",
                "128B",         "128B_ATOM_32B", "128B_ATOM_32B_FLIP_8B",
                "128B_ATOM_64B"};
  return NameFromTable(s, kNames);
}

absl::string_view TensorMapL2PromotionName(TensorMapL2Promotion p) {
  static constexpr std::array<absl::string_view, kTensorMapL2PromotionCount>
      kNames = {"none", "64B", "128B", "256B"};
  return NameFromTable(p, kNames);
}

absl::string_view TensorMapOobFillName(TensorMapOobFill f) {
  static constexpr std::array<absl::string_view, kTensorMapOobFillCount>
      kNames = {"none", "nan_request_zero_fma"};
  return NameFromTable(f, kNames);
}

int TensorMapElementBits(TensorMapDataType t) {
  static constexpr std::array<int, kTensorMapDataTypeCount> kBits = {
      8, 16, 32, 32, 64, 64, 16, 32, 64, 16, 32, 32, 32, 4, 4, 6};
  const auto index = static_cast<uint32_t>(t);
  return index < kBits.size() ? kBits[index] : 0;
}

bool IsPackedTensorMapType(TensorMapDataType t) {
  return t == TensorMapDataType::k16U4Align8B ||
         t == TensorMapDataType::k16U4Align16B ||
         t == TensorMapDataType::k16U6Align16B;
}

bool IsFloatTensorMapType(TensorMapDataType t) {
  switch (t) {
    case TensorMapDataType::kFloat16:
    case TensorMapDataType::kFloat32:
    case TensorMapDataType::kFloat64:
    case TensorMapDataType::kBfloat16:
    case TensorMapDataType::kFloat32Ftz:
    case TensorMapDataType::kTfloat32:
    case TensorMapDataType::kTfloat32Ftz:
      return true;
    default:
      return false;
  }
}

std::string TensorMapSpec::ToString() const {
  // Print the used entries only; an out-of-range rank still prints up to the
  // array sizes so that a rejected spec stays readable.
  const size_t shown = std::min<size_t>(rank, kTensorMapMaxRank);
  const size_t shown_strides = shown > 0 ? shown - 1 : 0;
  auto join = [](const auto& values, size_t count) {
    return absl::StrJoin(values.begin(), values.begin() + count, ",");
  };
  return absl::StrFormat(
      "TensorMapSpec{%s rank=%u addr=0x%x dims=[%s] strides=[%s] box=[%s] "
      "estrides=[%s] interleave=%s swizzle=%s l2=%s oob=%s}",
      EnumText(TensorMapDataTypeName(data_type), data_type), rank,
      global_address, join(global_dims, shown),
      join(global_strides, shown_strides), join(box_dims, shown),
      join(element_strides, shown),
      EnumText(TensorMapInterleaveName(interleave), interleave),
      EnumText(TensorMapSwizzleName(swizzle), swizzle),
      EnumText(TensorMapL2PromotionName(l2_promotion), l2_promotion),
      EnumText(TensorMapOobFillName(oob_fill), oob_fill));
}

}  // namespace tailor::cuda
