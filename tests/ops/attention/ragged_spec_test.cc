// The typed specs of ragged attention: keys hold only static quantities,
// FromKey inverts Key, and malformed keys are named.
#include "ops/attention/ragged_spec.h"

#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

constexpr KeyTarget kTarget = {.backend = BackendKind::kCpu,
                               .arch = "x86_64-test"};

TEST(RaggedSpecTest, KeyRoundTrips) {
  const RaggedKernelSpec spec = {.dtype = DType::kBF16,
                                 .head_dim = 128,
                                 .group = 4,
                                 .head_pack = 4,
                                 .page_size = 16,
                                 .mask = RaggedMask::kCausalWindow,
                                 .tile_rows = 128};
  const SpecKey key = spec.Key(kTarget);
  EXPECT_EQ(key.ToString(),
            "attention.ragged/cpu/x86_64-test/bf16/D=128,group=4,pack=4,"
            "page=16,mask=2/b0/t0/m128n0k0");
  absl::StatusOr<RaggedKernelSpec> back = RaggedKernelSpec::FromKey(key);
  TAILOR_ASSERT_OK(back.status());
  EXPECT_EQ(*back, spec);
  RaggedKernelSpec checked = spec;
  checked.pipeline_checks = true;
  const SpecKey checked_key = checked.Key(kTarget);
  EXPECT_NE(checked_key, key);  // the checked build is its own variant
  EXPECT_EQ(checked_key.variant, 1u);
  absl::StatusOr<RaggedKernelSpec> checked_back =
      RaggedKernelSpec::FromKey(checked_key);
  TAILOR_ASSERT_OK(checked_back.status());
  EXPECT_EQ(*checked_back, checked);
  RaggedKernelSpec portable = checked;  // a backend's portable kernel
  portable.portable = true;
  portable.tile_rows = 64;
  EXPECT_EQ(portable.Key(kTarget).variant, 3u);
  absl::StatusOr<RaggedKernelSpec> portable_back =
      RaggedKernelSpec::FromKey(portable.Key(kTarget));
  TAILOR_ASSERT_OK(portable_back.status());
  EXPECT_EQ(*portable_back, portable);
  EXPECT_EQ(portable.ToString(),
            "bf16 D=128 group=4 pack=4 page=16 mask=window rows=64 checks "
            "portable");
  const RaggedMergeSpec merge = {
      .dtype = DType::kF16, .head_dim = 64, .head_pack = 8, .tile_rows = 32};
  absl::StatusOr<RaggedMergeSpec> merge_back =
      RaggedMergeSpec::FromKey(merge.Key(kTarget));
  TAILOR_ASSERT_OK(merge_back.status());
  EXPECT_EQ(*merge_back, merge);
}

TEST(RaggedSpecTest, LayersOfOneModelShareKeysWhateverTheirLengths) {
  const RaggedShape shape = {.dtype = DType::kBF16,
                             .head_dim = 128,
                             .num_qo_heads = 32,
                             .num_kv_heads = 8,
                             .page_size = 16};
  const RaggedPlanConfig config = {.head_pack = 4, .tile_rows = 128};
  EXPECT_EQ(RaggedKernelSpecFor(shape, config).mask, RaggedMask::kCausal);
  RaggedShape bidirectional = shape;
  bidirectional.causal = false;
  EXPECT_EQ(RaggedKernelSpecFor(bidirectional, config).mask, RaggedMask::kNone);
}

TEST(RaggedSpecTest, MalformedKeysAreNamed) {
  RaggedKernelSpec spec = {.dtype = DType::kBF16,
                           .head_dim = 96,
                           .group = 4,
                           .head_pack = 4,
                           .page_size = 16,
                           .tile_rows = 128};
  EXPECT_THAT(RaggedKernelSpec::FromKey(spec.Key(kTarget)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.dims[0] (D): must be 64, 128 or 256, got 96"));
  spec.head_dim = 128;
  spec.head_pack = 8;
  EXPECT_THAT(RaggedKernelSpec::FromKey(spec.Key(kTarget)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.dims[1] (group): must be in [1, 16] and divide by "
                       "pack, got 4"));
  spec.head_pack = 4;
  SpecKey flagged = spec.Key(kTarget);
  flagged.variant = 6;
  EXPECT_THAT(RaggedKernelSpec::FromKey(flagged),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.variant: only bits 0 (pipeline checks) and 1 "
                       "(portable) are defined, got 6"));
  SpecKey other = kTarget.MakeKey(OpKind::kAttentionDecode);
  EXPECT_THAT(RaggedKernelSpec::FromKey(other),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.op: attention.decode is not attention.ragged"));
}

}  // namespace
}  // namespace tailor::internal
