// Golden test of the FP8 keys of the MoE family (ops/moe/spec.h): the scale
// mode and the f8e4m3 operands add keys beside the bf16 / f32 ones (which
// spec_test.cc pins, unchanged); every FP8 spec survives ToKey -> FromKey and
// each FP8 key the family cannot build is refused naming its field.
#include <string>

#include "gtest/gtest.h"
#include "ops/moe/spec.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
constexpr KeyTarget kAmpere = {.backend = BackendKind::kCuda, .arch = "sm_80"};
constexpr KeyTarget kHip = {.backend = BackendKind::kHip, .arch = "gfx942"};
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

template <typename Spec>
absl::Status Decode(Spec spec, const KeyTarget& target,
                    void (*edit)(SpecKey&)) {
  SpecKey key = spec.ToKey(target);
  edit(key);
  return Spec::FromKey(key).status();
}

TEST(MoeFp8SpecTest, QuantizingPackEncodingIsPinned) {
  ExpectGolden(MoePackSpec{.dtype = DType::kBF16,
                           .hidden = 7168,
                           .scale_mode = moe::ScaleMode::kBlock},
               kHopper,
               "moe.pack/cuda/sm_90a/bf16,f8e4m3/H=7168/b0/t0/m0n0k0/v3");
  ExpectGolden(MoePackSpec{.dtype = DType::kF32,
                           .hidden = 200,
                           .scale_mode = moe::ScaleMode::kPerChannel},
               kCpu,
               "moe.pack/cpu/x86_64-test/f32,f8e4m3/H=200/b0/t0/m0n0k0/v2");
  ExpectGolden(MoePackSpec{.dtype = DType::kBF16,
                           .hidden = 64,
                           .scale_mode = moe::ScaleMode::kPerTensor},
               kCpu,
               "moe.pack/cpu/x86_64-test/bf16,f8e4m3/H=64/b0/t0/m0n0k0/v1");
}

TEST(MoeFp8SpecTest, GroupedGemmEncodingIsPinned) {
  const std::string fp8 = "/f8e4m3,f8e4m3,f32,";
  // Block mode, gate|up with the quantizing silu_and_mul epilogue (C e4m3).
  ExpectGolden(MoeGemmSpec{.dtype = DType::kF8E4M3,
                           .n = 256,
                           .k = 256,
                           .tile_rows = 16,
                           .epilogue = moe::Epilogue::kSiluAndMul,
                           .scale_mode = moe::ScaleMode::kBlock},
               kCpu,
               "moe.grouped_gemm/cpu/x86_64-test" + fp8 +
                   "f8e4m3/N=256,K=256/b0/t0/m16n0k0/v6145");
  ExpectGolden(MoeGemmSpec{.dtype = DType::kBF16,
                           .n = 2048,
                           .k = 768,
                           .tile_rows = 16,
                           .tail_class = 4,
                           .scale_mode = moe::ScaleMode::kPerTensor},
               kCpu,
               "moe.grouped_gemm/cpu/x86_64-test" + fp8 +
                   "bf16/N=2048,K=768/b0/t4/m16n0k0/v2048");
  ExpectGolden(MoeGemmSpec{.dtype = DType::kF32,
                           .n = 768,
                           .k = 2048,
                           .tile_rows = 16,
                           .scale_mode = moe::ScaleMode::kPerChannel},
               kCpu,
               "moe.grouped_gemm/cpu/x86_64-test" + fp8 +
                   "f32/N=768,K=2048/b0/t0/m16n0k0/v4096");
  ExpectGolden(MoeGemmSpec{.dtype = DType::kBF16,
                           .n = 7168,
                           .k = 2048,
                           .tile_rows = 128,
                           .kernel = MoeGemmKernel::kHopper,
                           .tma_store = true,
                           .scale_mode = moe::ScaleMode::kBlock},
               kHopper,
               "moe.grouped_gemm/cuda/sm_90a" + fp8 +
                   "bf16/N=7168,K=2048/b0/t0/m128n2k0/v6656");
  // Per tensor, gate|up quantized by a static scale: cuda only.
  const MoeGemmSpec static_quant = {.dtype = DType::kF8E4M3,
                                    .n = 28672,
                                    .k = 4096,
                                    .tile_rows = 128,
                                    .epilogue = moe::Epilogue::kSiluAndMul,
                                    .kernel = MoeGemmKernel::kHopper,
                                    .scale_mode = moe::ScaleMode::kPerTensor};
  ExpectGolden(static_quant, kHopper,
               "moe.grouped_gemm/cuda/sm_90a" + fp8 +
                   "f8e4m3/N=28672,K=4096/b0/t0/m128n2k0/v2049");
  MoeGemmSpec on_cpu = static_quant;
  on_cpu.kernel = MoeGemmKernel::kSimt;
  EXPECT_THAT(MoeGemmSpec::FromKey(on_cpu.ToKey(kCpu)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dtypes[3] (C): f8e4m3 only with silu_and_mul, in "
                       "block mode (cuda: or per tensor), got 8"));
}

TEST(MoeFp8SpecTest, KeysTheFamilyCannotBuildNameTheirField) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const MoeGemmSpec gemm = {.n = 64, .k = 128, .tile_rows = 16};
  const auto block = [](SpecKey& k) {
    k.variant |= 3u << 11;
    k.dtypes = {DType::kF8E4M3, DType::kF8E4M3, DType::kF32, DType::kBF16};
  };
  EXPECT_THAT(Decode(gemm, kHip, block),
              StatusIs(code,
                       "scale_mode (variant bits 11-12): FP8 kernels are the "
                       "cpu's and cuda's Hopper and mma.sync kernels, got 3"));
  EXPECT_THAT(Decode(MoeGemmSpec{.n = 64,
                                 .k = 128,
                                 .tile_rows = 64,
                                 .kernel = MoeGemmKernel::kSimt},
                     kAmpere, block),
              StatusIs(code,
                       "scale_mode (variant bits 11-12): FP8 kernels are the "
                       "cpu's and cuda's Hopper and mma.sync kernels, got 3"));
  // The portable FP8 kernel (mma.sync, sm_80+) decodes.
  TAILOR_EXPECT_OK(Decode(MoeGemmSpec{.n = 64,
                                      .k = 128,
                                      .tile_rows = 64,
                                      .kernel = MoeGemmKernel::kMatrixCore},
                          kAmpere, block));
  EXPECT_THAT(Decode(gemm, kCpu,
                     [](SpecKey& k) {
                       k.variant |= 1u << 11;
                       k.dtypes[3] = DType::kBF16;
                     }),
              StatusIs(code, "dtype (dtypes[0], A): must be f8e4m3, got 1"));
  const MoeGemmSpec fp8 = {.dtype = DType::kBF16,
                           .n = 64,
                           .k = 128,
                           .tile_rows = 16,
                           .scale_mode = moe::ScaleMode::kBlock};
  EXPECT_THAT(
      Decode(fp8, kCpu, [](SpecKey& k) { k.dtypes[3] = DType::kI32; }),
      StatusIs(code, "dtypes[3] (C): must be f32, bf16 or f8e4m3, got 4"));
  EXPECT_THAT(Decode(fp8, kCpu, [](SpecKey& k) { k.dtypes[1] = DType::kBF16; }),
              StatusIs(code, "dtypes[1] (W): must be f8e4m3, got 2"));
  EXPECT_THAT(
      Decode(fp8, kCpu, [](SpecKey& k) { k.dtypes[3] = DType::kF8E4M3; }),
      StatusIs(code,
               "dtypes[3] (C): f8e4m3 only with silu_and_mul, in block "
               "mode (cuda: or per tensor), got 8"));
  EXPECT_THAT(
      Decode(gemm, kCpu, [](SpecKey& k) { k.dtypes[3] = DType::kBF16; }),
      StatusIs(code, "dtypes[3]: not used by this kernel, must be 0, got 2"));
  const MoePackSpec pack = {.dtype = DType::kBF16,
                            .hidden = 128,
                            .scale_mode = moe::ScaleMode::kBlock};
  EXPECT_THAT(Decode(pack, kCpu, [](SpecKey& k) { k.variant = 4; }),
              StatusIs(code, "scale_mode (variant): must be in [0, 3], got 4"));
  EXPECT_THAT(
      Decode(pack, kCpu, [](SpecKey& k) { k.dtypes[1] = DType::kBF16; }),
      StatusIs(code, "dtypes[1] (a): must be f8e4m3, got 2"));
  EXPECT_THAT(Decode(pack, kCpu, [](SpecKey& k) { k.dtypes[0] = DType::kI32; }),
              StatusIs(code, "dtype (dtypes[0]): must be f32 or bf16, got 4"));
}

}  // namespace
}  // namespace tailor::internal
