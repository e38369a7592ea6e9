#include "tailor/tensor.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/tensor_checks.h"
#include "test_util.h"

namespace tailor {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TensorTest, ContiguousStridesAreRowMajor) {
  float data[24] = {};
  TensorRef t = TensorRef::Contiguous(data, DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.ShapeString(), "[2, 3, 4] f32 cpu");
  t.strides[1] = 5;
  EXPECT_FALSE(t.is_contiguous());
}

// Regression (c_api_fuzz under UBSan): Contiguous, numel and is_contiguous
// multiplied dims with signed overflow (undefined behavior) for shapes whose
// element count does not fit int64, and ValidateTensor reached numel() for
// any null view. They saturate now, and such views are still rejected.
TEST(TensorTest, ShapesPastInt64SaturateInsteadOfOverflowing) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kHuge = int64_t{1} << 40;
  TensorRef t = TensorRef::Contiguous(nullptr, DType::kF32, {4, kHuge, kHuge});
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.strides[1], kHuge);
  EXPECT_EQ(t.strides[0], kMax);  // 2^80
  EXPECT_EQ(t.numel(), kMax);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_THAT(ValidateTensor("x", t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x: data is null but the tensor has")));
  // One dim of 0: empty, whatever the others.
  t = TensorRef::Contiguous(nullptr, DType::kF32, {0, kHuge, kHuge});
  EXPECT_EQ(t.numel(), 0);
  TAILOR_EXPECT_OK(ValidateTensor("x", t));
  // Size-1 dims take any stride, also past an overflowing product.
  t = TensorRef::Contiguous(nullptr, DType::kF32, {1, kHuge, kHuge});
  EXPECT_TRUE(t.is_contiguous());
}

// Regression: a misaligned view was accepted, and host code then read it as
// int32_t (moe::Route's topk_ids, PlanDecode's seq_lens): undefined
// behavior, reported by UBSan through the C ABI. Views must be aligned to
// their element size now (empty ones excepted: nothing reads them).
TEST(TensorTest, DataMustBeAlignedToTheElementSize) {
  alignas(8) unsigned char bytes[64] = {};
  EXPECT_THAT(
      ValidateTensor("ids", TensorRef::Contiguous(bytes + 2, DType::kI32, {4})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("ids: data must be aligned to its element size (4 "
                         "bytes for i32), got address ")));
  EXPECT_THAT(
      ValidateTensor("x", TensorRef::Contiguous(bytes + 1, DType::kBF16, {4})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("(2 bytes for bf16)")));
  TAILOR_EXPECT_OK(
      ValidateTensor("x", TensorRef::Contiguous(bytes + 2, DType::kBF16, {4})));
  TAILOR_EXPECT_OK(
      ValidateTensor("x", TensorRef::Contiguous(bytes + 1, DType::kU8, {4})));
  TAILOR_EXPECT_OK(
      ValidateTensor("x", TensorRef::Contiguous(bytes + 1, DType::kF32, {0})));
}

TEST(TensorTest, NullDataIsAllowedOnlyWhenEmpty) {
  TAILOR_EXPECT_OK(
      ValidateTensor("x", TensorRef::Contiguous(nullptr, DType::kF32, {0, 8})));
  EXPECT_THAT(
      ValidateTensor("x", TensorRef::Contiguous(nullptr, DType::kF32, {2, 8})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("x: data is null but the tensor has 16 elements")));
}

TEST(TensorTest, RejectsNegativeDimsAndStrides) {
  float data[4] = {};
  TensorRef t = TensorRef::Contiguous(data, DType::kF32, {2, 2});
  t.dims[1] = -1;
  EXPECT_THAT(ValidateTensor("w", t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w: dims[1] must be >= 0, got -1")));
  t.dims[1] = 2;
  t.strides[0] = -2;
  EXPECT_THAT(ValidateTensor("w", t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w: strides[0] must be >= 0, got -2")));
  t.rank = 7;
  EXPECT_THAT(ValidateTensor("w", t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w: rank must be in [0, 6], got 7")));
}

TEST(TensorTest, ExpectTensorNamesRankAndDtype) {
  float data[4] = {};
  TensorRef t = TensorRef::Contiguous(data, DType::kF32, {4});
  EXPECT_THAT(
      ExpectTensor("hidden", t, 2, DType::kF32),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("hidden: expected rank 2, got 1 ([4] f32 cpu)")));
  EXPECT_THAT(ExpectTensor("hidden", t, 1, DType::kBF16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden: expected dtype bf16, got f32")));
  t.dtype = static_cast<DType>(99);
  EXPECT_THAT(
      ValidateTensor("hidden", t),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("hidden: dtype is not a tailor::DType value")));
}

}  // namespace
}  // namespace tailor
