// Fuzzes the TMA legality checker (cuda::DiagnoseTensorMap) with specs of
// any field values, biased towards the edges of every documented rule. The
// checker must be total and deterministic, agree with CheckTensorMap, name a
// rule exactly when it rejects (InvalidArgument for encode rules,
// Unimplemented only for the architecture ones), and never accept a spec
// that breaks one of the plainly stated rules re-derived here from cuda.h.
#include <algorithm>
#include <string>

#include "backends/cuda/tma/tensor_map_check.h"
#include "fuzz_input.h"

namespace tailor::cuda {
namespace {

using fuzz::FuzzInput;

// A value around the rule edges for a field whose legal range is
// [1, limit] and that prefers multiples of `multiple`.
uint64_t Field(FuzzInput& in, uint64_t limit, uint64_t multiple) {
  switch (in.InRange(0, 7)) {
    case 4:
      return 0;
    case 5:
      return limit + in.InRange(0, 2);
    case 6:
      return static_cast<uint64_t>(in.EdgeValue());
    case 7:
      return in.Take<uint64_t>();
    default:
      return multiple * static_cast<uint64_t>(in.InRange(1, 16));
  }
}

TensorMapSpec MakeSpec(FuzzInput& in) {
  TensorMapSpec spec;
  spec.data_type = in.Enum<TensorMapDataType>(kTensorMapDataTypeCount);
  spec.rank = in.OneIn(8) ? in.Take<uint32_t>() : in.InRange(1, 5);
  spec.global_address =
      in.OneIn(4) ? in.Take<uint64_t>() : 16 * in.InRange(0, 1 << 20);
  for (uint64_t& d : spec.global_dims) d = Field(in, uint64_t{1} << 32, 64);
  for (uint64_t& s : spec.global_strides) s = Field(in, uint64_t{1} << 40, 16);
  for (uint32_t& b : spec.box_dims)
    b = static_cast<uint32_t>(in.OneIn(4) ? Field(in, 256, 8)
                                          : in.InRange(1, 256));
  for (uint32_t& e : spec.element_strides)
    e = in.OneIn(4) ? static_cast<uint32_t>(in.Take<uint8_t>())
                    : static_cast<uint32_t>(in.InRange(1, 8));
  spec.interleave = in.Enum<TensorMapInterleave>(kTensorMapInterleaveCount);
  spec.swizzle = in.Enum<TensorMapSwizzle>(kTensorMapSwizzleCount);
  spec.l2_promotion = in.Enum<TensorMapL2Promotion>(kTensorMapL2PromotionCount);
  spec.oob_fill = in.Enum<TensorMapOobFill>(kTensorMapOobFillCount);
  return spec;
}

int Arch(FuzzInput& in) {
  static constexpr int kArchs[] = {80, 89, 90, 100, 103, 110, 120, 121};
  if (in.OneIn(8)) return in.Take<int32_t>();
  return kArchs[in.InRange(0, std::size(kArchs) - 1)];
}

bool IsArchRule(TensorMapRule rule) {
  return rule == TensorMapRule::kArchTensorMap ||
         rule == TensorMapRule::kArchSwizzleAtom ||
         rule == TensorMapRule::kArchPackedType;
}

// The rules cuda.h states without qualification; an accepted spec keeps
// every one of them.
void CheckAcceptedSpec(const TensorMapSpec& s, int arch) {
  const std::string where = s.ToString() + " on sm_" + std::to_string(arch);
  FUZZ_CHECK(arch >= 90) << where;
  FUZZ_CHECK(s.rank >= 1 && s.rank <= 5) << where;
  FUZZ_CHECK(s.global_address % 16 == 0) << where;
  uint64_t box_elements = 1;
  for (uint32_t i = 0; i < s.rank; ++i) {
    FUZZ_CHECK(s.global_dims[i] >= 1 && s.global_dims[i] <= (1ull << 32))
        << where;
    FUZZ_CHECK(s.box_dims[i] >= 1 && s.box_dims[i] <= 256) << where;
    FUZZ_CHECK(s.element_strides[i] >= 1 && s.element_strides[i] <= 8) << where;
    box_elements *= s.box_dims[i] / s.element_strides[i];
    if (i + 1 < s.rank) {
      FUZZ_CHECK(s.global_strides[i] % 16 == 0 &&
                 s.global_strides[i] < (1ull << 40))
          << where;
    }
  }
  const int bits = TensorMapElementBits(s.data_type);
  FUZZ_CHECK(bits > 0) << where;
  FUZZ_CHECK(uint64_t{s.box_dims[0]} * bits % 128 == 0) << where;
  // In shared memory the ALIGN16B types take a byte per value.
  const bool unpacked = s.data_type == TensorMapDataType::k16U4Align16B ||
                        s.data_type == TensorMapDataType::k16U6Align16B;
  FUZZ_CHECK(box_elements * (unpacked ? 8 : bits) / 8 <=
             TensorMapMaxBoxBytes(arch))
      << where;
  if (s.interleave != TensorMapInterleave::kNone) FUZZ_CHECK(s.rank >= 3);
  if (s.interleave == TensorMapInterleave::k32B) {
    FUZZ_CHECK(s.swizzle == TensorMapSwizzle::k32B) << where;
    FUZZ_CHECK(s.global_address % 32 == 0) << where;
  }
  if (s.oob_fill == TensorMapOobFill::kNanRequestZeroFma) {
    FUZZ_CHECK(IsFloatTensorMapType(s.data_type)) << where;
  }
  if (IsPackedTensorMapType(s.data_type)) FUZZ_CHECK(arch >= 100) << where;
}

}  // namespace
}  // namespace tailor::cuda

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::cuda;
  tailor::fuzz::FuzzInput in(data, size);
  const TensorMapSpec spec = MakeSpec(in);
  const int arch = Arch(in);
  const TensorMapVerdict verdict = DiagnoseTensorMap(spec, arch);
  const TensorMapVerdict again = DiagnoseTensorMap(spec, arch);
  FUZZ_CHECK(verdict.rule == again.rule && verdict.status == again.status)
      << "not deterministic: " << spec.ToString();
  FUZZ_CHECK(CheckTensorMap(spec, arch) == verdict.status);
  FUZZ_CHECK(verdict.ok() == (verdict.rule == TensorMapRule::kAccepted))
      << verdict.status;
  FUZZ_CHECK(TensorMapRuleName(verdict.rule) != "?");
  FUZZ_CHECK(!spec.ToString().empty());
  if (verdict.ok()) {
    CheckAcceptedSpec(spec, arch);
    return 0;
  }
  FUZZ_CHECK(!verdict.status.message().empty());
  const absl::StatusCode expected = IsArchRule(verdict.rule)
                                        ? absl::StatusCode::kUnimplemented
                                        : absl::StatusCode::kInvalidArgument;
  FUZZ_CHECK(verdict.status.code() == expected)
      << TensorMapRuleName(verdict.rule) << ": " << verdict.status;
  return 0;
}
