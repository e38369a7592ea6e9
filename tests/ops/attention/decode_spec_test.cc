// Golden test of paged decode's key encoding (ops/attention/decode_spec.h):
// the key text of a representative spec of every kernel on every backend is
// pinned, every spec survives ToKey -> FromKey, and each key the family
// cannot build is refused naming its field. A change to a golden here
// changes users' cache keys: bump the disk cache format version with it.
#include "ops/attention/decode_spec.h"

#include <string>

#include "gtest/gtest.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
constexpr KeyTarget kHip = {.backend = BackendKind::kHip, .arch = "gfx90a"};
constexpr KeyTarget kCpu = {.backend = BackendKind::kCpu,
                            .arch = "x86_64-test"};

template <typename Spec>
void ExpectGolden(const Spec& spec, const KeyTarget& target,
                  const std::string& text) {
  const SpecKey key = spec.ToKey(target);
  EXPECT_EQ(key.ToString(), text);
  absl::StatusOr<Spec> decoded = Spec::FromKey(key);
  ASSERT_TRUE(decoded.ok()) << text << ": " << decoded.status();
  EXPECT_TRUE(*decoded == spec) << text;
}

TEST(DecodeSpecTest, EncodingIsPinned) {
  const DecodeSpec tma = {.dtype = DType::kBF16,
                          .head_dim = 128,
                          .group = 8,
                          .page_size = 16,
                          .tile_tokens = 64,
                          .warps = 4,
                          .stages = 3,
                          .kernel = DecodeKernel::kTma};
  ExpectGolden(tma, kHopper,
               "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/"
               "m64n0k0s3w4/v1");
  DecodeSpec cp_async = tma;
  cp_async.dtype = DType::kF16;
  cp_async.kernel = DecodeKernel::kPortable;
  cp_async.stages = 2;
  ExpectGolden(cp_async, kHopper,
               "attention.decode/cuda/sm_90a/f16/D=128,group=8,page=16/b0/t0/"
               "m64n0k0s2w4");
  ExpectGolden(DecodeSpec{.dtype = DType::kBF16,
                          .head_dim = 64,
                          .group = 4,
                          .page_size = 5,
                          .tile_tokens = 64},
               kHip,
               "attention.decode/hip/gfx90a/bf16/D=64,group=4,page=5/b0/t0/"
               "m64n0k0");
  ExpectGolden(
      DecodeSpec{
          .dtype = DType::kF32, .head_dim = 128, .group = 1, .page_size = 1},
      kCpu,
      "attention.decode/cpu/x86_64-test/f32/D=128,group=1,page=1/b0/"
      "t0/m0n0k0");
  ExpectGolden(
      DecodeMergeSpec{.dtype = DType::kBF16, .head_dim = 256, .group = 16},
      kCpu,
      "attention.decode_merge/cpu/x86_64-test/bf16/D=256,group=16/b0/t0/"
      "m0n0k0");
  EXPECT_EQ(tma.ToKey(kHopper).FileStem(),
            "attention.decode_cuda_sm_90a_bf16_D_128_group_8_page_16_b0_t0_"
            "m64n0k0s3w4_v1");
}

template <typename Spec>
absl::Status Decode(Spec spec, const KeyTarget& target,
                    void (*edit)(SpecKey&)) {
  SpecKey key = spec.ToKey(target);
  edit(key);
  return Spec::FromKey(key).status();
}

TEST(DecodeSpecTest, KeysTheFamilyCannotBuildNameTheirField) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const DecodeSpec spec = {.head_dim = 128, .group = 4, .page_size = 16};
  EXPECT_THAT(Decode(spec, kCpu, [](SpecKey& k) { k.variant = 2; }),
              StatusIs(code, "kernel (variant): must be in [0, 1], got 2"));
  EXPECT_THAT(Decode(spec, kCpu, [](SpecKey& k) { k.dims[1] = 0; }),
              StatusIs(code,
                       "group (dims[1]): must be in [1, 1048576], "
                       "got 0"));
  EXPECT_THAT(Decode(spec, kCpu, [](SpecKey& k) { k.dims[3] = 2; }),
              StatusIs(code,
                       "dims[3]: not used by this kernel, must be 0, "
                       "got 2"));
  EXPECT_THAT(Decode(spec, kCpu, [](SpecKey& k) { k.tile.cluster = 2; }),
              StatusIs(code,
                       "tile.cluster: not used by this kernel, must be "
                       "0, got 2"));
  EXPECT_THAT(Decode(spec, kCpu,
                     [](SpecKey& k) { k.op = OpKind::kAttentionDecodeMerge; }),
              StatusIs(code,
                       "op: must be attention.decode, got "
                       "attention.decode_merge"));
  EXPECT_THAT(Decode(DecodeMergeSpec{.head_dim = 64, .group = 2}, kCpu,
                     [](SpecKey& k) { k.dims[2] = 16; }),
              StatusIs(code,
                       "dims[2]: not used by this kernel, must be 0, "
                       "got 16"));
  EXPECT_THAT(Decode(DecodeMergeSpec{.head_dim = 64, .group = 2}, kCpu,
                     [](SpecKey& k) { k.dtypes[0] = DType{0}; }),
              StatusIs(code, "dtype (dtypes[0]): must be in [1, 7], got 0"));
}

}  // namespace
}  // namespace tailor::internal
