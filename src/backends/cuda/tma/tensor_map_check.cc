// backends/cuda/tma/tensor_map_check.cc — cuTensorMapEncodeTiled's rules.
//
// Each Check* function below covers one paragraph of the cuTensorMapEncodeTiled
// comment in CUDA 13.0's cuda.h and quotes the sentence it implements. The
// first broken rule wins; the order follows the documentation, except where a
// more specific rule gives a clearer message (noted in place).
//
// "Driver:" marks what the differential test measured on driver 580.159.04
// (CUDA 13.0) with an H100 where it differs from, or adds to, cuda.h.
#include "backends/cuda/tma/tensor_map_check.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace tailor::cuda {
namespace {

constexpr uint64_t kMaxGlobalDim = uint64_t{1} << 32;       // inclusive
constexpr uint64_t kGlobalStrideLimit = uint64_t{1} << 40;  // exclusive
constexpr uint32_t kMaxBoxDim = 256;
constexpr uint32_t kMaxElementStride = 8;
constexpr int kTensorMapMinArch = 90;     // "compute capability 9.0 or higher"
constexpr int kSwizzleAtomMinArch = 100;  // see the file comment of the .h
constexpr int kPackedTypeMinArch = 100;
constexpr uint32_t kPackedAlign16BBoxDim = 128;
constexpr uint64_t kSharedMemoryPerSm228KiB = 228 * 1024;  // sm_90/100/110
constexpr uint64_t kSharedMemoryPerSm100KiB = 100 * 1024;  // sm_120/121

TensorMapVerdict Accept() { return {}; }

TensorMapVerdict Reject(TensorMapRule rule, std::string message) {
  return {rule, absl::InvalidArgumentError(std::move(message))};
}

TensorMapVerdict RejectForArch(TensorMapRule rule, std::string message) {
  return {rule, absl::UnimplementedError(std::move(message))};
}

bool IsAlign16BPackedType(TensorMapDataType t) {
  return t == TensorMapDataType::k16U4Align16B ||
         t == TensorMapDataType::k16U6Align16B;
}

bool IsSwizzleAtom(TensorMapSwizzle s) {
  return s == TensorMapSwizzle::k128BAtom32B ||
         s == TensorMapSwizzle::k128BAtom32BFlip8B ||
         s == TensorMapSwizzle::k128BAtom64B;
}

// Bytes of the 16-byte-chunk span a swizzle permutes within.
uint32_t SwizzleSpanBytes(TensorMapSwizzle s) {
  switch (s) {
    case TensorMapSwizzle::k32B:
      return 32;
    case TensorMapSwizzle::k64B:
      return 64;
    default:
      return 128;  // k128B and every 128B_ATOM_* mode
  }
}

// The inner box in bits: boxDim[0] * element size. Interpretation: the
// element size of a packed type is its global-memory width (4 or 6 bits), so
// that 16U4_ALIGN8B needs boxDim[0] % 32 == 0 to fill whole 16-byte rows.
// For the ALIGN16B types boxDim[0] must be 128 anyway (64 or 96 bytes packed,
// 128 bytes unpacked in shared memory): both readings give the same verdicts.
uint64_t InnerBoxBits(const TensorMapSpec& spec) {
  return uint64_t{spec.box_dims[0]} *
         static_cast<uint64_t>(TensorMapElementBits(spec.data_type));
}

std::string ArchName(int sm_arch) { return absl::StrCat("sm_", sm_arch); }

// Bits one element takes in shared memory. Interpretation: the ALIGN16B
// types are unpacked there to 16 bytes per 16 values, 16U4_ALIGN8B stays
// packed (cuda.h's layout notes). Unmeasured: sm_90 rejects packed types.
uint64_t SharedMemoryElementBits(TensorMapDataType t) {
  if (IsAlign16BPackedType(t)) return 8;
  return static_cast<uint64_t>(TensorMapElementBits(t));
}

// "tensorDataType has to be an enum from CUtensorMapDataType", and likewise
// for interleave, swizzle, l2Promotion and oobFill.
TensorMapVerdict CheckEnumValues(const TensorMapSpec& spec) {
  struct Field {
    absl::string_view name;
    absl::string_view enum_name;
    uint32_t value;
    uint32_t count;
  };
  const std::array<Field, 5> fields = {{
      {"tensorDataType", "CUtensorMapDataType",
       static_cast<uint32_t>(spec.data_type), kTensorMapDataTypeCount},
      {"interleave", "CUtensorMapInterleave",
       static_cast<uint32_t>(spec.interleave), kTensorMapInterleaveCount},
      {"swizzle", "CUtensorMapSwizzle", static_cast<uint32_t>(spec.swizzle),
       kTensorMapSwizzleCount},
      {"l2Promotion", "CUtensorMapL2promotion",
       static_cast<uint32_t>(spec.l2_promotion), kTensorMapL2PromotionCount},
      {"oobFill", "CUtensorMapFloatOOBfill",
       static_cast<uint32_t>(spec.oob_fill), kTensorMapOobFillCount},
  }};
  for (const Field& f : fields) {
    if (f.value >= f.count) {
      return Reject(TensorMapRule::kEnumValue,
                    absl::StrFormat("%s: must be a %s value in [0, %u], got %u",
                                    f.name, f.enum_name, f.count - 1, f.value));
    }
  }
  return Accept();
}

// "tensorRank must be non-zero and less than or equal to the maximum
// supported dimensionality of 5. If interleave is not
// CU_TENSOR_MAP_INTERLEAVE_NONE, then tensorRank must additionally be greater
// than or equal to 3."
TensorMapVerdict CheckRank(const TensorMapSpec& spec) {
  if (spec.rank < 1 || spec.rank > kTensorMapMaxRank) {
    return Reject(TensorMapRule::kRank,
                  absl::StrFormat("tensorRank: must be in [1, %d], got %u",
                                  kTensorMapMaxRank, spec.rank));
  }
  if (spec.interleave != TensorMapInterleave::kNone && spec.rank < 3) {
    return Reject(TensorMapRule::kInterleaveRank,
                  absl::StrFormat(
                      "tensorRank: must be >= 3 when interleave is %s, got %u",
                      TensorMapInterleaveName(spec.interleave), spec.rank));
  }
  return Accept();
}

// The stricter 32-byte alignment of addresses and strides, and why; empty
// reason means 16 bytes.
struct Alignment {
  uint64_t bytes = 16;
  std::string reason;
};

// "When interleave is CU_TENSOR_MAP_INTERLEAVE_32B, ... must be 32 byte
// aligned. When tensorDataType is 16U6_ALIGN16B or 16U4_ALIGN16B, ... must be
// 32 byte aligned." The same two conditions raise the stride multiple to 32.
Alignment RequiredAlignment(const TensorMapSpec& spec) {
  if (spec.interleave == TensorMapInterleave::k32B) {
    return {32, " when interleave is 32B"};
  }
  if (IsAlign16BPackedType(spec.data_type)) {
    return {32, absl::StrCat(" when tensorDataType is ",
                             TensorMapDataTypeName(spec.data_type))};
  }
  return {};
}

// "globalAddress ... must be 16 byte aligned" (32 B, see RequiredAlignment).
TensorMapVerdict CheckAddress(const TensorMapSpec& spec) {
  const Alignment align = RequiredAlignment(spec);
  if (spec.global_address % align.bytes != 0) {
    return Reject(
        TensorMapRule::kAddressAlignment,
        absl::StrFormat("globalAddress: must be %u-byte aligned%s, "
                        "got 0x%x",
                        align.bytes, align.reason, spec.global_address));
  }
  return Accept();
}

// "globalDim ... must be non-zero and less than or equal to 2^32. ... When
// tensorDataType is 16U6_ALIGN16B or 16U4_ALIGN16B, globalDim[0] must be a
// multiple of 128. When tensorDataType is 16U4_ALIGN8B, globalDim[0] must be
// a multiple of 2."
TensorMapVerdict CheckGlobalDims(const TensorMapSpec& spec) {
  for (uint32_t i = 0; i < spec.rank; ++i) {
    const uint64_t dim = spec.global_dims[i];
    if (dim < 1 || dim > kMaxGlobalDim) {
      return Reject(TensorMapRule::kGlobalDimRange,
                    absl::StrFormat("globalDim[%u]: must be in [1, 2^32], "
                                    "got %u",
                                    i, dim));
    }
  }
  uint64_t multiple = 1;
  if (IsAlign16BPackedType(spec.data_type)) multiple = 128;
  if (spec.data_type == TensorMapDataType::k16U4Align8B) multiple = 2;
  if (spec.global_dims[0] % multiple != 0) {
    return Reject(
        TensorMapRule::kPackedGlobalDim,
        absl::StrFormat("globalDim[0]: must be a multiple of %u "
                        "when tensorDataType is %s, got %u",
                        multiple, TensorMapDataTypeName(spec.data_type),
                        spec.global_dims[0]));
  }
  return Accept();
}

// "globalStrides ... must be a multiple of 16 and less than 2^40" (32 with
// 32B interleave or the ALIGN16B types), followed in cuda.h by a sketch of
// how a packed-with-padding layout builds its strides, ending in
// assert(globalStrides[i] >= globalDim[i]).
// Driver: no stride is related to another stride or to a dim. Zero strides
// (broadcast), permuted outer dimensions, overlapping rows and strides below
// the dim all encode, so the sketch is an illustration, not a rule.
TensorMapVerdict CheckGlobalStrides(const TensorMapSpec& spec) {
  const Alignment align = RequiredAlignment(spec);
  for (uint32_t i = 0; i + 1 < spec.rank; ++i) {
    const uint64_t stride = spec.global_strides[i];
    if (stride % align.bytes != 0) {
      return Reject(TensorMapRule::kGlobalStrideAlignment,
                    absl::StrFormat("globalStrides[%u]: must be a multiple of "
                                    "%u bytes%s, got %u",
                                    i, align.bytes, align.reason, stride));
    }
    if (stride >= kGlobalStrideLimit) {
      return Reject(TensorMapRule::kGlobalStrideRange,
                    absl::StrFormat("globalStrides[%u]: must be < 2^40 bytes, "
                                    "got %u",
                                    i, stride));
    }
  }
  return Accept();
}

// "boxDim ... must be non-zero and less than or equal to 256. ... When
// interleave is CU_TENSOR_MAP_INTERLEAVE_NONE, { boxDim[0] *
// elementSizeInBytes( tensorDataType ) } must be a multiple of 16 bytes. When
// tensorDataType is 16U6_ALIGN16B or 16U4_ALIGN16B, boxDim[0] must be 128."
// The packed rule is checked before the 16-byte rule: its message is clearer.
// Driver: the 16-byte rule holds with 16B and 32B interleave too (24 bytes
// is rejected, 48 accepted, with either), and boxDim may exceed globalDim.
TensorMapVerdict CheckBoxDims(const TensorMapSpec& spec) {
  for (uint32_t i = 0; i < spec.rank; ++i) {
    const uint32_t box = spec.box_dims[i];
    if (box < 1 || box > kMaxBoxDim) {
      return Reject(TensorMapRule::kBoxDimRange,
                    absl::StrFormat("boxDim[%u]: must be in [1, %u], got %u", i,
                                    kMaxBoxDim, box));
    }
  }
  if (IsAlign16BPackedType(spec.data_type) &&
      spec.box_dims[0] != kPackedAlign16BBoxDim) {
    return Reject(TensorMapRule::kPackedBoxDim,
                  absl::StrFormat("boxDim[0]: must be %u when tensorDataType "
                                  "is %s, got %u",
                                  kPackedAlign16BBoxDim,
                                  TensorMapDataTypeName(spec.data_type),
                                  spec.box_dims[0]));
  }
  const uint64_t inner_bits = InnerBoxBits(spec);
  if (inner_bits % 128 != 0) {
    return Reject(
        TensorMapRule::kBoxInnerBytes,
        absl::StrFormat("boxDim[0]: boxDim[0] * element size must be a "
                        "multiple of 16 bytes, got %u x %s = %g bytes",
                        spec.box_dims[0], TensorMapDataTypeName(spec.data_type),
                        static_cast<double>(inner_bits) / 8));
  }
  return Accept();
}

// "elementStrides ... must be non-zero and less than or equal to 8. Note that
// when interleave is CU_TENSOR_MAP_INTERLEAVE_NONE, the first element of this
// array is ignored". Driver: elementStrides[0] is range-checked like the
// others even without interleave (0 and 9 are rejected).
TensorMapVerdict CheckElementStrides(const TensorMapSpec& spec) {
  for (uint32_t i = 0; i < spec.rank; ++i) {
    const uint32_t stride = spec.element_strides[i];
    if (stride < 1 || stride > kMaxElementStride) {
      return Reject(TensorMapRule::kElementStrideRange,
                    absl::StrFormat("elementStrides[%u]: must be in [1, %u], "
                                    "got %u",
                                    i, kMaxElementStride, stride));
    }
  }
  return Accept();
}

bool PackedTypeAllowsSwizzle(TensorMapDataType t, TensorMapSwizzle s) {
  switch (s) {
    case TensorMapSwizzle::kNone:
    case TensorMapSwizzle::k128B:
    case TensorMapSwizzle::k128BAtom32B:
      return true;
    case TensorMapSwizzle::k128BAtom64B:  // 16U6: "Store only"
      return t == TensorMapDataType::k16U6Align16B;
    default:
      return false;
  }
}

// "When interleave is CU_TENSOR_MAP_INTERLEAVE_32B, swizzle must be
// CU_TENSOR_MAP_SWIZZLE_32B." "tensorDataType of 16U6_ALIGN16B requires
// interleave to be CU_TENSOR_MAP_INTERLEAVE_NONE." "When the tensorDataType
// is 16U6_ALIGN16B, only the following swizzle modes are supported: NONE,
// 128B, 128B_ATOM_32B, 128B_ATOM_64B (Store only). When the tensorDataType is
// 16U4_ALIGN16B: NONE, 128B, 128B_ATOM_32B (Load only)." The load/store
// direction is not part of the descriptor: the caller must respect it.
// Driver: encodes 32B interleave with any swizzle. The documented rule is
// kept: what the copy engine does with such a map is undefined.
TensorMapVerdict CheckInterleaveAndSwizzle(const TensorMapSpec& spec) {
  if (spec.interleave == TensorMapInterleave::k32B &&
      spec.swizzle != TensorMapSwizzle::k32B) {
    return Reject(TensorMapRule::kInterleaveSwizzle,
                  absl::StrFormat("swizzle: must be 32B when interleave is "
                                  "32B, got %s",
                                  TensorMapSwizzleName(spec.swizzle)));
  }
  if (spec.data_type == TensorMapDataType::k16U6Align16B &&
      spec.interleave != TensorMapInterleave::kNone) {
    return Reject(TensorMapRule::kPackedInterleave,
                  absl::StrFormat("interleave: must be none when "
                                  "tensorDataType is 16u6_align16b, got %s",
                                  TensorMapInterleaveName(spec.interleave)));
  }
  if (IsAlign16BPackedType(spec.data_type) &&
      !PackedTypeAllowsSwizzle(spec.data_type, spec.swizzle)) {
    const bool is_u6 = spec.data_type == TensorMapDataType::k16U6Align16B;
    return Reject(TensorMapRule::kPackedSwizzle,
                  absl::StrFormat("swizzle: %s is not supported when "
                                  "tensorDataType is %s (supported: none, "
                                  "128B, 128B_ATOM_32B%s)",
                                  TensorMapSwizzleName(spec.swizzle),
                                  TensorMapDataTypeName(spec.data_type),
                                  is_u6 ? ", 128B_ATOM_64B" : ""));
  }
  return Accept();
}

// "When interleave is CU_TENSOR_MAP_INTERLEAVE_NONE and swizzle is not
// CU_TENSOR_MAP_SWIZZLE_NONE, the bounding box inner dimension (computed as
// boxDim[0] multiplied by element size derived from tensorDataType) must be
// less than or equal to the swizzle size" (32, 64, 128 for every 128B*).
// Driver: with interleave there is no inner limit (16B or 32B interleave
// with a 32-byte swizzle encodes a 256-byte inner box).
TensorMapVerdict CheckSwizzleInnerBytes(const TensorMapSpec& spec) {
  if (spec.interleave != TensorMapInterleave::kNone ||
      spec.swizzle == TensorMapSwizzle::kNone) {
    return Accept();
  }
  const uint64_t span_bits = uint64_t{SwizzleSpanBytes(spec.swizzle)} * 8;
  const uint64_t inner_bits = InnerBoxBits(spec);
  if (inner_bits > span_bits) {
    return Reject(
        TensorMapRule::kSwizzleInnerBytes,
        absl::StrFormat("boxDim[0]: inner box of %u x %s = %g bytes exceeds "
                        "the %u-byte span of swizzle %s",
                        spec.box_dims[0], TensorMapDataTypeName(spec.data_type),
                        static_cast<double>(inner_bits) / 8,
                        SwizzleSpanBytes(spec.swizzle),
                        TensorMapSwizzleName(spec.swizzle)));
  }
  return Accept();
}

// "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA can only be used when
// tensorDataType represents a floating-point data type, and when
// tensorDataType is not 16U4_ALIGN8B, 16U4_ALIGN16B, and 16U6_ALIGN16B."
TensorMapVerdict CheckOobFill(const TensorMapSpec& spec) {
  if (spec.oob_fill == TensorMapOobFill::kNanRequestZeroFma &&
      !IsFloatTensorMapType(spec.data_type)) {
    return Reject(TensorMapRule::kOobFillType,
                  absl::StrFormat("oobFill: nan_request_zero_fma needs a "
                                  "floating-point tensorDataType, got %s",
                                  TensorMapDataTypeName(spec.data_type)));
  }
  return Accept();
}

// Driver (undocumented in cuda.h): the box must fit in one SM's shared
// memory, with or without interleave. The driver counts
// floor(boxDim[i] / elementStrides[i]) elements per dimension,
// elementStrides[0] included even without interleave. The boundary probes:
// bench/results/tma_differential_h100.txt, "Box bytes".
TensorMapVerdict CheckBoxBytes(const TensorMapSpec& spec, int sm_arch) {
  uint64_t elements = 1;
  for (uint32_t i = 0; i < spec.rank; ++i) {
    elements *= spec.box_dims[i] / spec.element_strides[i];
  }
  const uint64_t bytes = elements * SharedMemoryElementBits(spec.data_type) / 8;
  const uint64_t limit = TensorMapMaxBoxBytes(sm_arch);
  if (bytes > limit) {
    const size_t rank = spec.rank;
    return Reject(
        TensorMapRule::kBoxBytes,
        absl::StrFormat(
            "boxDim: a box of %u bytes (boxDim [%s] / elementStrides [%s] of "
            "%s) exceeds the %u bytes of shared memory of an %s SM",
            bytes,
            absl::StrJoin(spec.box_dims.begin(), spec.box_dims.begin() + rank,
                          ","),
            absl::StrJoin(spec.element_strides.begin(),
                          spec.element_strides.begin() + rank, ","),
            TensorMapDataTypeName(spec.data_type), limit, ArchName(sm_arch)));
  }
  return Accept();
}

// sm_arch is compute capability x 10 (sm_90 -> 90, sm_100 -> 100).
TensorMapVerdict CheckSmArch(int sm_arch) {
  if (sm_arch < 10 || sm_arch > 999) {
    return Reject(TensorMapRule::kSmArch,
                  absl::StrFormat("sm_arch: must be a compute capability x 10 "
                                  "in [10, 999] (e.g. 90 for sm_90), got %d",
                                  sm_arch));
  }
  return Accept();
}

// What the target can use: tensor maps from sm_90 ("Tensor map objects are
// only supported on devices of compute capability 9.0 or higher"); the
// 128B_ATOM_* swizzles and the packed types from sm_100 (not in cuda.h: PTX
// ISA and libcu++'s make_tma_descriptor reject both on compute capability 9).
TensorMapVerdict CheckArchSupport(const TensorMapSpec& spec, int sm_arch) {
  if (sm_arch < kTensorMapMinArch) {
    return RejectForArch(
        TensorMapRule::kArchTensorMap,
        absl::StrFormat("sm_arch: tensor maps need sm_%d or newer, got %s",
                        kTensorMapMinArch, ArchName(sm_arch)));
  }
  if (IsSwizzleAtom(spec.swizzle) && sm_arch < kSwizzleAtomMinArch) {
    return RejectForArch(
        TensorMapRule::kArchSwizzleAtom,
        absl::StrFormat("swizzle: %s needs sm_%d or newer, got %s",
                        TensorMapSwizzleName(spec.swizzle), kSwizzleAtomMinArch,
                        ArchName(sm_arch)));
  }
  if (IsPackedTensorMapType(spec.data_type) && sm_arch < kPackedTypeMinArch) {
    return RejectForArch(
        TensorMapRule::kArchPackedType,
        absl::StrFormat("tensorDataType: %s needs sm_%d or newer, got %s",
                        TensorMapDataTypeName(spec.data_type),
                        kPackedTypeMinArch, ArchName(sm_arch)));
  }
  return Accept();
}

}  // namespace

absl::string_view TensorMapRuleName(TensorMapRule rule) {
  static constexpr std::array<absl::string_view, kTensorMapRuleCount> kNames = {
      "accepted",
      "sm_arch",
      "enum_value",
      "rank",
      "interleave_rank",
      "address_alignment",
      "global_dim_range",
      "packed_global_dim",
      "global_stride_alignment",
      "global_stride_range",
      "box_dim_range",
      "packed_box_dim",
      "box_inner_bytes",
      "element_stride_range",
      "interleave_swizzle",
      "packed_interleave",
      "packed_swizzle",
      "swizzle_inner_bytes",
      "oob_fill_type",
      "box_bytes",
      "arch_tensor_map",
      "arch_swizzle_atom",
      "arch_packed_type",
  };
  const auto index = static_cast<size_t>(rule);
  return index < kNames.size() ? kNames[index] : absl::string_view("?");
}

uint64_t TensorMapMaxBoxBytes(int sm_arch) {
  if (sm_arch >= 90 && sm_arch < 120) return kSharedMemoryPerSm228KiB;
  return kSharedMemoryPerSm100KiB;  // sm_120/121, and the unknown
}

TensorMapVerdict DiagnoseTensorMap(const TensorMapSpec& spec, int sm_arch) {
  if (TensorMapVerdict v = CheckSmArch(sm_arch); !v.ok()) return v;
  // Enum values first: later rules index tables with them.
  using CheckFn = TensorMapVerdict (*)(const TensorMapSpec&);
  static constexpr std::array<CheckFn, 10> kChecks = {
      CheckEnumValues,        CheckRank,
      CheckAddress,           CheckGlobalDims,
      CheckGlobalStrides,     CheckBoxDims,
      CheckElementStrides,    CheckInterleaveAndSwizzle,
      CheckSwizzleInnerBytes, CheckOobFill,
  };
  for (CheckFn check : kChecks) {
    if (TensorMapVerdict v = check(spec); !v.ok()) return v;
  }
  if (TensorMapVerdict v = CheckBoxBytes(spec, sm_arch); !v.ok()) return v;
  return CheckArchSupport(spec, sm_arch);
}

absl::Status CheckTensorMap(const TensorMapSpec& spec, int sm_arch) {
  return DiagnoseTensorMap(spec, sm_arch).status;
}

}  // namespace tailor::cuda
