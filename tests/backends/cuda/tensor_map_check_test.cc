// Tests for backends/cuda/tma/tensor_map_check: every documented rule of
// cuTensorMapEncodeTiled, each with a spec exactly on the boundary (accepted)
// and one just past it (rejected with the exact code, rule and message).
#include "backends/cuda/tma/tensor_map_check.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/tma/tensor_map_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tailor::cuda {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kAddress = 0x7f0000000000;  // 256-byte aligned
constexpr int kHopper = 90;
constexpr int kBlackwell = 100;

// bf16 [577, 4096] row-major, 128 x 64 boxes, 128-byte swizzle: the GEMM
// operand tailor uses most.
TensorMapSpec Bf16Matrix() {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kBfloat16,
      .rank = 2,
      .global_address = kAddress,
      .global_dims = {4096, 577},
      .global_strides = {4096 * 2},
      .box_dims = {64, 128},
      .swizzle = TensorMapSwizzle::k128B,
  };
}

// A rank-3 f16 tensor in the NC/8HWC8 style: 8 channels (16 bytes) innermost.
TensorMapSpec InterleavedF16(TensorMapInterleave interleave) {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kFloat16,
      .rank = 3,
      .global_address = kAddress,
      .global_dims = {16, 56, 64},
      .global_strides = {64, 64 * 56},
      .box_dims = {16, 8, 8},
      .interleave = interleave,
      .swizzle = interleave == TensorMapInterleave::k32B
                     ? TensorMapSwizzle::k32B
                     : TensorMapSwizzle::kNone,
  };
}

// A packed sub-byte matrix [64, 1024] with the documented mandatory box.
TensorMapSpec PackedMatrix(TensorMapDataType type) {
  return TensorMapSpec{
      .data_type = type,
      .rank = 2,
      .global_address = kAddress,
      .global_dims = {1024, 64},
      .global_strides = {512},  // 1024 x 4 bits; a multiple of 32 too
      .box_dims = {128, 64},
      .swizzle = TensorMapSwizzle::kNone,
  };
}

// One boundary: `on` must pass, `past` must fail with code, rule and text.
struct BoundaryCase {
  std::string name = {};
  TensorMapSpec on = {};
  TensorMapSpec past = {};
  int sm_arch = kHopper;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  TensorMapRule rule = TensorMapRule::kAccepted;
  std::string message = {};  // substring of the rejection
  int past_sm_arch = 0;      // 0: same as sm_arch
};

template <typename Mutate>
BoundaryCase Boundary(std::string name, TensorMapSpec base, Mutate on_mutation,
                      Mutate past_mutation, TensorMapRule rule,
                      std::string message, int sm_arch = kHopper) {
  BoundaryCase c{.name = std::move(name), .on = base, .past = base};
  on_mutation(c.on);
  past_mutation(c.past);
  c.sm_arch = sm_arch;
  c.rule = rule;
  c.message = std::move(message);
  return c;
}

using Mutation = void (*)(TensorMapSpec&);

std::vector<BoundaryCase> EnumAndRankCases() {
  std::vector<BoundaryCase> cases;
  cases.push_back(Boundary(
      "data_type_past_enum", PackedMatrix(TensorMapDataType::k16U6Align16B),
      +[](TensorMapSpec&) {},  // 15, the last value
      +[](TensorMapSpec& s) {
        s.data_type = static_cast<TensorMapDataType>(16);
      },
      TensorMapRule::kEnumValue,
      "tensorDataType: must be a CUtensorMapDataType value in [0, 15], got 16",
      kBlackwell));
  cases.push_back(Boundary(
      "interleave_past_enum", InterleavedF16(TensorMapInterleave::k32B),
      +[](TensorMapSpec&) {},
      +[](TensorMapSpec& s) {
        s.interleave = static_cast<TensorMapInterleave>(3);
      },
      TensorMapRule::kEnumValue,
      "interleave: must be a CUtensorMapInterleave value in [0, 2], got 3"));
  cases.push_back(Boundary(
      "swizzle_past_enum", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k128BAtom64B; },
      +[](TensorMapSpec& s) { s.swizzle = static_cast<TensorMapSwizzle>(7); },
      TensorMapRule::kEnumValue,
      "swizzle: must be a CUtensorMapSwizzle value in [0, 6], got 7",
      kBlackwell));
  cases.push_back(Boundary(
      "l2_promotion_past_enum", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.l2_promotion = TensorMapL2Promotion::k256B; },
      +[](TensorMapSpec& s) {
        s.l2_promotion = static_cast<TensorMapL2Promotion>(4);
      },
      TensorMapRule::kEnumValue,
      "l2Promotion: must be a CUtensorMapL2promotion value in [0, 3], got 4"));
  cases.push_back(Boundary(
      "oob_fill_past_enum", Bf16Matrix(),
      +[](TensorMapSpec& s) {
        s.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
      },
      +[](TensorMapSpec& s) { s.oob_fill = static_cast<TensorMapOobFill>(2); },
      TensorMapRule::kEnumValue,
      "oobFill: must be a CUtensorMapFloatOOBfill value in [0, 1], got 2"));
  cases.push_back(Boundary(
      "rank_zero", Bf16Matrix(), +[](TensorMapSpec& s) { s.rank = 1; },
      +[](TensorMapSpec& s) { s.rank = 0; }, TensorMapRule::kRank,
      "tensorRank: must be in [1, 5], got 0"));
  cases.push_back(Boundary(
      "rank_six", Bf16Matrix(),
      +[](TensorMapSpec& s) {
        s.rank = 5;
        s.global_dims = {4096, 577, 2, 3, 4};
        s.global_strides = {8192, 8192 * 577, 8192 * 577 * 2, 8192 * 577 * 6};
        s.box_dims = {64, 128, 1, 2, 4};
      },
      +[](TensorMapSpec& s) { s.rank = 6; }, TensorMapRule::kRank,
      "tensorRank: must be in [1, 5], got 6"));
  cases.push_back(Boundary(
      "interleave_rank", InterleavedF16(TensorMapInterleave::k16B),
      +[](TensorMapSpec&) {}, +[](TensorMapSpec& s) { s.rank = 2; },
      TensorMapRule::kInterleaveRank,
      "tensorRank: must be >= 3 when interleave is 16B, got 2"));
  return cases;
}

std::vector<BoundaryCase> AddressAndDimCases() {
  std::vector<BoundaryCase> cases;
  cases.push_back(Boundary(
      "address_16", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.global_address = kAddress + 16; },
      +[](TensorMapSpec& s) { s.global_address = kAddress + 8; },
      TensorMapRule::kAddressAlignment,
      "globalAddress: must be 16-byte aligned, got 0x7f0000000008"));
  cases.push_back(Boundary(
      "address_32_interleave", InterleavedF16(TensorMapInterleave::k32B),
      +[](TensorMapSpec& s) { s.global_address = kAddress + 32; },
      +[](TensorMapSpec& s) { s.global_address = kAddress + 16; },
      TensorMapRule::kAddressAlignment,
      "globalAddress: must be 32-byte aligned when interleave is 32B, got "
      "0x7f0000000010"));
  cases.push_back(Boundary(
      "address_32_packed", PackedMatrix(TensorMapDataType::k16U6Align16B),
      +[](TensorMapSpec& s) { s.global_address = kAddress + 32; },
      +[](TensorMapSpec& s) { s.global_address = kAddress + 48; },
      TensorMapRule::kAddressAlignment,
      "globalAddress: must be 32-byte aligned when tensorDataType is "
      "16u6_align16b, got 0x7f0000000030",
      kBlackwell));
  cases.push_back(Boundary(
      "global_dim_zero", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.global_dims[1] = 1; },
      +[](TensorMapSpec& s) { s.global_dims[1] = 0; },
      TensorMapRule::kGlobalDimRange,
      "globalDim[1]: must be in [1, 2^32], got 0"));
  cases.push_back(Boundary(
      "global_dim_max", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.global_dims[0] = uint64_t{1} << 32; },
      +[](TensorMapSpec& s) { s.global_dims[0] = (uint64_t{1} << 32) + 1; },
      TensorMapRule::kGlobalDimRange,
      "globalDim[0]: must be in [1, 2^32], got 4294967297"));
  cases.push_back(Boundary(
      "packed_dim_128", PackedMatrix(TensorMapDataType::k16U4Align16B),
      +[](TensorMapSpec& s) { s.global_dims[0] = 256; },
      +[](TensorMapSpec& s) { s.global_dims[0] = 257; },
      TensorMapRule::kPackedGlobalDim,
      "globalDim[0]: must be a multiple of 128 when tensorDataType is "
      "16u4_align16b, got 257",
      kBlackwell));
  cases.push_back(Boundary(
      "packed_dim_2", PackedMatrix(TensorMapDataType::k16U4Align8B),
      +[](TensorMapSpec& s) { s.global_dims[0] = 2; },
      +[](TensorMapSpec& s) { s.global_dims[0] = 3; },
      TensorMapRule::kPackedGlobalDim,
      "globalDim[0]: must be a multiple of 2 when tensorDataType is "
      "16u4_align8b, got 3",
      kBlackwell));
  return cases;
}

// A rank-3 u8 tensor whose strides sit on the documented limits.
TensorMapSpec U8Cube() {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kUint8,
      .rank = 3,
      .global_address = kAddress,
      .global_dims = {64, 2, 3},
      .global_strides = {64, 128},
      .box_dims = {64, 2, 3},
  };
}

std::vector<BoundaryCase> StrideCases() {
  std::vector<BoundaryCase> cases;
  cases.push_back(Boundary(
      "stride_multiple_16", U8Cube(),
      +[](TensorMapSpec& s) { s.global_strides[1] = 48; },
      +[](TensorMapSpec& s) { s.global_strides[1] = 40; },
      TensorMapRule::kGlobalStrideAlignment,
      "globalStrides[1]: must be a multiple of 16 bytes, got 40"));
  cases.push_back(Boundary(
      "stride_multiple_32_interleave",
      InterleavedF16(TensorMapInterleave::k32B),
      +[](TensorMapSpec& s) { s.global_strides[0] = 96; },
      +[](TensorMapSpec& s) { s.global_strides[0] = 80; },
      TensorMapRule::kGlobalStrideAlignment,
      "globalStrides[0]: must be a multiple of 32 bytes when interleave is "
      "32B, got 80"));
  cases.push_back(Boundary(
      "stride_multiple_32_packed",
      PackedMatrix(TensorMapDataType::k16U4Align16B),
      +[](TensorMapSpec& s) { s.global_strides[0] = 544; },
      +[](TensorMapSpec& s) { s.global_strides[0] = 528; },
      TensorMapRule::kGlobalStrideAlignment,
      "globalStrides[0]: must be a multiple of 32 bytes when tensorDataType "
      "is 16u4_align16b, got 528",
      kBlackwell));
  cases.push_back(Boundary(
      "stride_below_2_40", U8Cube(),
      +[](TensorMapSpec& s) { s.global_strides[1] = (uint64_t{1} << 40) - 16; },
      +[](TensorMapSpec& s) { s.global_strides[1] = uint64_t{1} << 40; },
      TensorMapRule::kGlobalStrideRange,
      "globalStrides[1]: must be < 2^40 bytes, got 1099511627776"));
  return cases;
}

std::vector<BoundaryCase> BoxCases() {
  std::vector<BoundaryCase> cases;
  cases.push_back(Boundary(
      "box_256", Bf16Matrix(), +[](TensorMapSpec& s) { s.box_dims[1] = 256; },
      +[](TensorMapSpec& s) { s.box_dims[1] = 257; },
      TensorMapRule::kBoxDimRange, "boxDim[1]: must be in [1, 256], got 257"));
  cases.push_back(Boundary(
      "box_zero", Bf16Matrix(), +[](TensorMapSpec& s) { s.box_dims[1] = 1; },
      +[](TensorMapSpec& s) { s.box_dims[1] = 0; }, TensorMapRule::kBoxDimRange,
      "boxDim[1]: must be in [1, 256], got 0"));
  cases.push_back(Boundary(
      "packed_box_128", PackedMatrix(TensorMapDataType::k16U4Align16B),
      +[](TensorMapSpec& s) { s.box_dims[0] = 128; },
      +[](TensorMapSpec& s) { s.box_dims[0] = 64; },
      TensorMapRule::kPackedBoxDim,
      "boxDim[0]: must be 128 when tensorDataType is 16u4_align16b, got 64",
      kBlackwell));
  cases.push_back(Boundary(
      "inner_bytes_16", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.box_dims[0] = 8; },
      +[](TensorMapSpec& s) { s.box_dims[0] = 12; },
      TensorMapRule::kBoxInnerBytes,
      "boxDim[0]: boxDim[0] * element size must be a multiple of 16 bytes, "
      "got 12 x bf16 = 24 bytes"));
  // Driver: the 16-byte rule holds with interleave too.
  cases.push_back(Boundary(
      "inner_bytes_16_interleaved", InterleavedF16(TensorMapInterleave::k32B),
      +[](TensorMapSpec& s) { s.box_dims[0] = 24; },
      +[](TensorMapSpec& s) { s.box_dims[0] = 12; },
      TensorMapRule::kBoxInnerBytes, "got 12 x f16 = 24 bytes"));
  cases.push_back(Boundary(
      "inner_bytes_16_u4", PackedMatrix(TensorMapDataType::k16U4Align8B),
      +[](TensorMapSpec& s) { s.box_dims[0] = 32; },
      +[](TensorMapSpec& s) { s.box_dims[0] = 16; },
      TensorMapRule::kBoxInnerBytes, "got 16 x 16u4_align8b = 8 bytes",
      kBlackwell));
  cases.push_back(Boundary(
      "element_stride_8", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.element_strides[1] = 8; },
      +[](TensorMapSpec& s) { s.element_strides[1] = 9; },
      TensorMapRule::kElementStrideRange,
      "elementStrides[1]: must be in [1, 8], got 9"));
  cases.push_back(Boundary(
      "element_stride_zero", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.element_strides[1] = 1; },
      +[](TensorMapSpec& s) { s.element_strides[1] = 0; },
      TensorMapRule::kElementStrideRange,
      "elementStrides[1]: must be in [1, 8], got 0"));
  // Interpretation (see tensor_map_check.cc): elementStrides[0] is range
  // checked even though the driver ignores it without interleave.
  cases.push_back(Boundary(
      "element_stride_inner_ignored_but_checked", Bf16Matrix(),
      +[](TensorMapSpec& s) { s.element_strides[0] = 8; },
      +[](TensorMapSpec& s) { s.element_strides[0] = 0; },
      TensorMapRule::kElementStrideRange,
      "elementStrides[0]: must be in [1, 8], got 0"));
  // Driver: the box must fit in one SM's shared memory (228 KiB on sm_90).
  cases.push_back(Boundary(
      "box_bytes_sm90", U8Cube(),
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 228, 64};
      },  // 233472 bytes
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 105, 139};
      },  // 233520
      TensorMapRule::kBoxBytes,
      "boxDim: a box of 233520 bytes (boxDim [16,105,139] / elementStrides "
      "[1,1,1] of u8) exceeds the 233472 bytes of shared memory of an sm_90 "
      "SM"));
  cases.push_back(Boundary(
      "box_bytes_sm120", U8Cube(),
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 100, 64};
      },  // 102400 bytes
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 201, 32};
      },  // 102912
      TensorMapRule::kBoxBytes,
      "exceeds the 102400 bytes of shared memory "
      "of an sm_120 SM",
      120));
  // The driver counts floor(boxDim / elementStrides): 127 / 2 = 63 planes.
  cases.push_back(Boundary(
      "box_bytes_counts_floor_of_element_strides", U8Cube(),
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 228, 129};
        s.element_strides = {1, 1, 2};  // 64 planes: 233472 bytes
      },
      +[](TensorMapSpec& s) {
        s.box_dims = {16, 229, 129};
        s.element_strides = {1, 1, 2};  // 64 planes: 234496 bytes
      },
      TensorMapRule::kBoxBytes, "a box of 234496 bytes"));
  return cases;
}

std::vector<BoundaryCase> SwizzleCases() {
  std::vector<BoundaryCase> cases;
  cases.push_back(Boundary(
      "interleave_32_needs_swizzle_32",
      InterleavedF16(TensorMapInterleave::k32B), +[](TensorMapSpec&) {},
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k64B; },
      TensorMapRule::kInterleaveSwizzle,
      "swizzle: must be 32B when interleave is 32B, got 64B"));
  cases.push_back(Boundary(
      "u6_needs_no_interleave", PackedMatrix(TensorMapDataType::k16U6Align16B),
      +[](TensorMapSpec& s) {
        s.rank = 3;
        s.global_dims[2] = 2;
        s.global_strides[1] = 512 * 64;
        s.box_dims[2] = 1;
      },
      +[](TensorMapSpec& s) {
        s.rank = 3;
        s.global_dims[2] = 2;
        s.global_strides[1] = 512 * 64;
        s.box_dims[2] = 1;
        s.interleave = TensorMapInterleave::k16B;
      },
      TensorMapRule::kPackedInterleave,
      "interleave: must be none when tensorDataType is 16u6_align16b, got 16B",
      kBlackwell));
  cases.push_back(Boundary(
      "u4_align16_swizzle", PackedMatrix(TensorMapDataType::k16U4Align16B),
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k128BAtom32B; },
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k128BAtom64B; },
      TensorMapRule::kPackedSwizzle,
      "swizzle: 128B_ATOM_64B is not supported when tensorDataType is "
      "16u4_align16b (supported: none, 128B, 128B_ATOM_32B)",
      kBlackwell));
  cases.push_back(Boundary(
      "u6_swizzle", PackedMatrix(TensorMapDataType::k16U6Align16B),
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k128BAtom64B; },
      +[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::k64B; },
      TensorMapRule::kPackedSwizzle,
      "swizzle: 64B is not supported when tensorDataType is 16u6_align16b "
      "(supported: none, 128B, 128B_ATOM_32B, 128B_ATOM_64B)",
      kBlackwell));
  const std::vector<std::tuple<TensorMapSwizzle, uint32_t, std::string>> spans =
      {{TensorMapSwizzle::k32B, 16, "32-byte span of swizzle 32B"},
       {TensorMapSwizzle::k64B, 32, "64-byte span of swizzle 64B"},
       {TensorMapSwizzle::k128B, 64, "128-byte span of swizzle 128B"},
       {TensorMapSwizzle::k128BAtom32BFlip8B, 64,
        "128-byte span of swizzle 128B_ATOM_32B_FLIP_8B"}};
  for (const auto& [swizzle, max_bf16, text] : spans) {
    BoundaryCase c{.name = "swizzle_span_" + text,
                   .on = Bf16Matrix(),
                   .past = Bf16Matrix()};
    c.on.swizzle = c.past.swizzle = swizzle;
    c.on.box_dims[0] = max_bf16;
    c.past.box_dims[0] = max_bf16 + 8;  // next multiple of 16 bytes
    c.sm_arch = kBlackwell;
    c.rule = TensorMapRule::kSwizzleInnerBytes;
    c.message = absl::StrCat("boxDim[0]: inner box of ", max_bf16 + 8,
                             " x bf16 = ", (max_bf16 + 8) * 2,
                             " bytes exceeds the ", text);
    cases.push_back(c);
  }
  cases.push_back(Boundary(
      "oob_nan_needs_float", Bf16Matrix(),
      +[](TensorMapSpec& s) {
        s.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
      },
      +[](TensorMapSpec& s) {
        s.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
        s.data_type = TensorMapDataType::kUint16;  // same size as bf16
      },
      TensorMapRule::kOobFillType,
      "oobFill: nan_request_zero_fma needs a floating-point tensorDataType, "
      "got u16"));
  return cases;
}

std::vector<BoundaryCase> ArchCases() {
  std::vector<BoundaryCase> cases;
  BoundaryCase sm_arch{
      .name = "sm_arch_value", .on = Bf16Matrix(), .past = Bf16Matrix()};
  sm_arch.sm_arch = 999;
  sm_arch.past_sm_arch = 1000;
  sm_arch.rule = TensorMapRule::kSmArch;
  sm_arch.message = "sm_arch: must be a compute capability x 10 in [10, 999]";
  cases.push_back(sm_arch);
  BoundaryCase hopper{
      .name = "arch_tensor_map", .on = Bf16Matrix(), .past = Bf16Matrix()};
  hopper.sm_arch = 90;
  hopper.past_sm_arch = 89;
  hopper.code = absl::StatusCode::kUnimplemented;
  hopper.rule = TensorMapRule::kArchTensorMap;
  hopper.message = "sm_arch: tensor maps need sm_90 or newer, got sm_89";
  cases.push_back(hopper);
  BoundaryCase atom{
      .name = "arch_swizzle_atom", .on = Bf16Matrix(), .past = Bf16Matrix()};
  atom.on.swizzle = atom.past.swizzle = TensorMapSwizzle::k128BAtom32B;
  atom.sm_arch = 100;
  atom.past_sm_arch = 90;
  atom.code = absl::StatusCode::kUnimplemented;
  atom.rule = TensorMapRule::kArchSwizzleAtom;
  atom.message = "swizzle: 128B_ATOM_32B needs sm_100 or newer, got sm_90";
  cases.push_back(atom);
  BoundaryCase packed{.name = "arch_packed_type",
                      .on = PackedMatrix(TensorMapDataType::k16U4Align8B),
                      .past = PackedMatrix(TensorMapDataType::k16U4Align8B)};
  packed.sm_arch = 100;
  packed.past_sm_arch = 90;
  packed.code = absl::StatusCode::kUnimplemented;
  packed.rule = TensorMapRule::kArchPackedType;
  packed.message =
      "tensorDataType: 16u4_align8b needs sm_100 or newer, got sm_90";
  cases.push_back(packed);
  return cases;
}

std::vector<BoundaryCase> AllBoundaryCases() {
  std::vector<BoundaryCase> all;
  for (auto make : {EnumAndRankCases, AddressAndDimCases, StrideCases, BoxCases,
                    SwizzleCases, ArchCases}) {
    for (BoundaryCase& c : make()) all.push_back(std::move(c));
  }
  return all;
}

TEST(TensorMapCheckTest, BaseSpecsAreAccepted) {
  EXPECT_TRUE(CheckTensorMap(Bf16Matrix(), kHopper).ok());
  EXPECT_TRUE(
      CheckTensorMap(InterleavedF16(TensorMapInterleave::k16B), kHopper).ok());
  EXPECT_TRUE(
      CheckTensorMap(InterleavedF16(TensorMapInterleave::k32B), kHopper).ok());
  EXPECT_TRUE(CheckTensorMap(U8Cube(), kHopper).ok());
  for (auto type :
       {TensorMapDataType::k16U4Align8B, TensorMapDataType::k16U4Align16B,
        TensorMapDataType::k16U6Align16B}) {
    EXPECT_TRUE(CheckTensorMap(PackedMatrix(type), kBlackwell).ok())
        << TensorMapDataTypeName(type);
  }
}

TEST(TensorMapCheckTest, EveryBoundaryAcceptsOnAndRejectsPast) {
  for (const BoundaryCase& c : AllBoundaryCases()) {
    SCOPED_TRACE(c.name);
    const TensorMapVerdict on = DiagnoseTensorMap(c.on, c.sm_arch);
    EXPECT_TRUE(on.ok()) << c.on.ToString() << " -> " << on.status;
    const int past_arch = c.past_sm_arch != 0 ? c.past_sm_arch : c.sm_arch;
    const TensorMapVerdict past = DiagnoseTensorMap(c.past, past_arch);
    EXPECT_EQ(past.status.code(), c.code)
        << c.past.ToString() << " -> " << past.status;
    EXPECT_EQ(past.rule, c.rule) << TensorMapRuleName(past.rule);
    EXPECT_THAT(std::string(past.status.message()), HasSubstr(c.message));
    EXPECT_EQ(CheckTensorMap(c.past, past_arch), past.status);
  }
}

TEST(TensorMapCheckTest, EveryRuleHasABoundaryCase) {
  std::set<TensorMapRule> covered;
  for (const BoundaryCase& c : AllBoundaryCases()) covered.insert(c.rule);
  for (int r = 1; r < kTensorMapRuleCount; ++r) {
    const auto rule = static_cast<TensorMapRule>(r);
    EXPECT_TRUE(covered.count(rule)) << TensorMapRuleName(rule);
    EXPECT_NE(TensorMapRuleName(rule), "?");
  }
}

TEST(TensorMapCheckTest, NanFillAcceptsExactlyTheFloatTypes) {
  // cuda.h: floating-point types only, and none of the packed ones.
  const std::set<TensorMapDataType> floats = {
      TensorMapDataType::kFloat16,    TensorMapDataType::kFloat32,
      TensorMapDataType::kFloat64,    TensorMapDataType::kBfloat16,
      TensorMapDataType::kFloat32Ftz, TensorMapDataType::kTfloat32,
      TensorMapDataType::kTfloat32Ftz};
  for (uint32_t t = 0; t < kTensorMapDataTypeCount; ++t) {
    TensorMapSpec spec = U8Cube();  // 64-byte rows fit every element size
    spec.data_type = static_cast<TensorMapDataType>(t);
    SCOPED_TRACE(TensorMapDataTypeName(spec.data_type));
    spec.global_dims[0] = 256;
    spec.global_strides = {512, 1024};
    spec.box_dims[0] = 128;  // 16 bytes or more for every type
    spec.oob_fill = TensorMapOobFill::kNanRequestZeroFma;
    const TensorMapVerdict v = DiagnoseTensorMap(spec, kBlackwell);
    if (floats.count(spec.data_type)) {
      EXPECT_TRUE(v.ok()) << v.status;
    } else {
      EXPECT_EQ(v.rule, TensorMapRule::kOobFillType) << v.status;
    }
    EXPECT_EQ(IsFloatTensorMapType(spec.data_type),
              floats.count(spec.data_type) == 1);
  }
}

TEST(TensorMapCheckTest, AtomSwizzlesNeedBlackwell) {
  TensorMapSpec atom = Bf16Matrix();
  atom.swizzle = TensorMapSwizzle::k128BAtom64B;
  EXPECT_EQ(CheckTensorMap(atom, kHopper).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(CheckTensorMap(atom, kBlackwell).ok());
  EXPECT_TRUE(CheckTensorMap(atom, 120).ok());
}

TEST(TensorMapCheckTest, MaxBoxBytesFollowsSharedMemoryPerSm) {
  EXPECT_EQ(TensorMapMaxBoxBytes(90), 233472u);
  EXPECT_EQ(TensorMapMaxBoxBytes(100), 233472u);
  EXPECT_EQ(TensorMapMaxBoxBytes(103), 233472u);
  EXPECT_EQ(TensorMapMaxBoxBytes(110), 233472u);
  EXPECT_EQ(TensorMapMaxBoxBytes(120), 102400u);
  EXPECT_EQ(TensorMapMaxBoxBytes(121), 102400u);
  EXPECT_EQ(TensorMapMaxBoxBytes(150), 102400u);  // unknown: the smallest
}

// Driver: strides are never related to each other or to the dims.
TEST(TensorMapCheckTest, StridesNeedOnlyAlignmentAndRange) {
  TensorMapSpec spec = U8Cube();
  for (const std::array<uint64_t, 4>& strides :
       std::vector<std::array<uint64_t, 4>>{{0, 0},        // broadcast
                                            {128, 64},     // permuted
                                            {16, 16},      // overlapping
                                            {64, 128}}) {  // natural
    spec.global_strides = strides;
    spec.global_dims = {64, 1000, 3};
    EXPECT_TRUE(CheckTensorMap(spec, kHopper).ok()) << spec.ToString();
  }
}

TEST(TensorMapCheckTest, EntriesPastRankAreNotChecked) {
  TensorMapSpec spec = Bf16Matrix();
  spec.global_dims[2] = 0;
  spec.global_strides[1] = 7;
  spec.box_dims[4] = 1000;
  spec.element_strides[3] = 0;
  EXPECT_TRUE(CheckTensorMap(spec, kHopper).ok());
}

TEST(TensorMapCheckTest, SixteenByteInterleaveAllowsAnySwizzleWidth) {
  // No inner-box limit is documented with 16B interleave.
  TensorMapSpec spec = InterleavedF16(TensorMapInterleave::k16B);
  spec.swizzle = TensorMapSwizzle::k32B;
  spec.box_dims[0] = 200;  // 400 bytes
  EXPECT_TRUE(CheckTensorMap(spec, kHopper).ok());
}

// Random valid specs stay valid; pushing one field just past its limit
// breaks exactly the matching rule.
TEST(TensorMapCheckTest, RandomSpecsAndSingleViolations) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  const std::vector<TensorMapDataType> types = {
      TensorMapDataType::kUint8, TensorMapDataType::kFloat16,
      TensorMapDataType::kFloat32, TensorMapDataType::kFloat64};
  for (int iter = 0; iter < 2000; ++iter) {
    TensorMapSpec spec{.data_type = types[pick(0, types.size() - 1)],
                       .rank = static_cast<uint32_t>(pick(1, 5)),
                       .global_address = kAddress + 16 * pick(0, 1000)};
    const uint64_t elem = TensorMapElementBits(spec.data_type) / 8;
    uint64_t stride = 0;
    for (uint32_t i = 0; i < spec.rank; ++i) {
      spec.global_dims[i] = pick(1, 577);
      spec.box_dims[i] = static_cast<uint32_t>(pick(1, 256));
      spec.element_strides[i] = static_cast<uint32_t>(pick(1, 8));
      stride = i == 0 ? (spec.global_dims[0] * elem + 15) / 16 * 16
                      : stride * spec.global_dims[i];
      if (i + 1 < spec.rank) spec.global_strides[i] = stride;
    }
    spec.box_dims[0] = static_cast<uint32_t>(16 * pick(1, 4) / elem);
    // Keep the box within shared memory (the kBoxBytes rule).
    auto box_bytes = [&] {
      uint64_t bytes = elem;
      for (uint32_t i = 0; i < spec.rank; ++i) {
        bytes *= spec.box_dims[i] / spec.element_strides[i];
      }
      return bytes;
    };
    while (box_bytes() > TensorMapMaxBoxBytes(kHopper)) {
      auto largest = std::max_element(spec.box_dims.begin() + 1,
                                      spec.box_dims.begin() + spec.rank);
      *largest = std::max<uint32_t>(1, *largest / 2);
    }
    ASSERT_TRUE(CheckTensorMap(spec, kHopper).ok()) << spec.ToString();

    TensorMapSpec bad = spec;
    const uint32_t dim = static_cast<uint32_t>(pick(0, spec.rank - 1));
    TensorMapRule expected = TensorMapRule::kAccepted;
    switch (pick(0, 3)) {
      case 0:
        bad.box_dims[dim] = static_cast<uint32_t>(pick(257, 100000));
        expected = TensorMapRule::kBoxDimRange;
        break;
      case 1:
        bad.element_strides[dim] = static_cast<uint32_t>(pick(9, 1000));
        expected = TensorMapRule::kElementStrideRange;
        break;
      case 2:
        bad.global_dims[dim] =
            pick(0, 1) == 0 ? 0 : pick(uint64_t{1} << 32 | 1, ~uint64_t{0});
        expected = TensorMapRule::kGlobalDimRange;
        break;
      default:
        bad.global_address += pick(1, 15);
        expected = TensorMapRule::kAddressAlignment;
        break;
    }
    const TensorMapVerdict v = DiagnoseTensorMap(bad, kHopper);
    ASSERT_EQ(v.rule, expected) << bad.ToString() << " -> " << v.status;
    ASSERT_EQ(v.status.code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(TensorMapSpecTest, ToStringShowsUsedEntriesAndRawEnums) {
  TensorMapSpec spec = Bf16Matrix();
  EXPECT_EQ(spec.ToString(),
            "TensorMapSpec{bf16 rank=2 addr=0x7f0000000000 dims=[4096,577] "
            "strides=[8192] box=[64,128] estrides=[1,1] interleave=none "
            "swizzle=128B l2=none oob=none}");
  spec.swizzle = static_cast<TensorMapSwizzle>(42);
  spec.rank = 9;
  EXPECT_THAT(spec.ToString(), HasSubstr("rank=9"));
  EXPECT_THAT(spec.ToString(), HasSubstr("swizzle=42"));
}

TEST(TensorMapSpecTest, HashAndEqualityCoverEveryField) {
  std::vector<TensorMapSpec> specs(12, Bf16Matrix());
  specs[1].data_type = TensorMapDataType::kFloat16;
  specs[2].rank = 3;
  specs[3].global_address += 16;
  specs[4].global_dims[4] = 1;
  specs[5].global_strides[3] = 16;
  specs[6].box_dims[2] = 1;
  specs[7].element_strides[4] = 2;
  specs[8].interleave = TensorMapInterleave::k16B;
  specs[9].swizzle = TensorMapSwizzle::k64B;
  specs[10].l2_promotion = TensorMapL2Promotion::k128B;
  specs[11].oob_fill = TensorMapOobFill::kNanRequestZeroFma;
  const absl::Hash<TensorMapSpec> hash;
  EXPECT_EQ(hash(Bf16Matrix()), hash(specs[0]));
  EXPECT_TRUE(Bf16Matrix() == specs[0]);
  for (size_t i = 1; i < specs.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_FALSE(specs[0] == specs[i]);
    EXPECT_NE(hash(specs[0]), hash(specs[i]));
  }
}

}  // namespace
}  // namespace tailor::cuda
