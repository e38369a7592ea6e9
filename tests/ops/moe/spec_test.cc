// Golden test of the MoE family's key encoding (ops/moe/spec.h): the key
// text of a representative spec of every kernel on every backend is pinned,
// every spec survives ToKey -> FromKey, and each key the family cannot
// build is refused naming its field. A change to a golden here changes
// users' cache keys: bump the disk cache format version with it.
#include "ops/moe/spec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
constexpr KeyTarget kAmpere = {.backend = BackendKind::kCuda, .arch = "sm_80"};
constexpr KeyTarget kHip = {.backend = BackendKind::kHip, .arch = "gfx942"};
constexpr KeyTarget kCpu = {.backend = BackendKind::kCpu,
                            .arch = "x86_64-test"};

// Encodes `spec`, checks the key's text and that it decodes back to `spec`.
template <typename Spec>
void ExpectGolden(const Spec& spec, const KeyTarget& target,
                  const std::string& text) {
  const SpecKey key = spec.ToKey(target);
  EXPECT_EQ(key.ToString(), text);
  absl::StatusOr<Spec> decoded = Spec::FromKey(key);
  ASSERT_TRUE(decoded.ok()) << text << ": " << decoded.status();
  EXPECT_TRUE(*decoded == spec) << text;
}

TEST(MoeSpecTest, RouteEncodingIsPinned) {
  const std::string cuda = "moe.route/cuda/sm_90a//warps=";
  ExpectGolden(MoeRouteSpec{}, kHopper, cuda + "0/b0/t0/m0n0k0");
  ExpectGolden(MoeRouteSpec{.kernel = MoeRouteKernel::kFused}, kHopper,
               cuda + "0/b0/t0/m0n0k0/v1");
  ExpectGolden(
      MoeRouteSpec{.kernel = MoeRouteKernel::kScatter, .scatter_warps = 8},
      kHopper, cuda + "8/b0/t0/m0n0k0/v2");
  ExpectGolden(
      MoeRouteSpec{.kernel = MoeRouteKernel::kScatter, .scatter_warps = 4},
      kHip, "moe.route/hip/gfx942//warps=4/b0/t0/m0n0k0/v2");
}

TEST(MoeSpecTest, PackAndCombineEncodingsArePinned) {
  ExpectGolden(MoePackSpec{.dtype = DType::kBF16, .hidden = 2048}, kHopper,
               "moe.pack/cuda/sm_90a/bf16/H=2048/b0/t0/m0n0k0");
  ExpectGolden(MoePackSpec{.dtype = DType::kF32, .hidden = 64}, kCpu,
               "moe.pack/cpu/x86_64-test/f32/H=64/b0/t0/m0n0k0");
  ExpectGolden(
      MoeCombineSpec{.dtype = DType::kBF16, .hidden = 2048, .topk = 8}, kHip,
      "moe.combine/hip/gfx942/bf16,f32,bf16/H=2048,topk=8/b0/t0/m0n0k0");
  EXPECT_EQ(MoePackSpec({.dtype = DType::kBF16, .hidden = 2048})
                .ToKey(kHopper)
                .FileStem(),
            "moe.pack_cuda_sm_90a_bf16_H_2048_b0_t0_m0n0k0");
}

TEST(MoeSpecTest, GroupedGemmEncodingIsPinned) {
  const std::string bf16 = "/bf16,bf16,f32/N=1536,K=2048/b0/t0/";
  const std::string hopper = "moe.grouped_gemm/cuda/sm_90a" + bf16;
  const MoeGemmSpec gate = {.dtype = DType::kBF16,
                            .n = 1536,
                            .k = 2048,
                            .tile_rows = 64,
                            .epilogue = moe::Epilogue::kSiluAndMul,
                            .kernel = MoeGemmKernel::kHopper,
                            .tma_store = true};
  ExpectGolden(gate, kHopper, hopper + "m64n2k0/v513");
  MoeGemmSpec quad = gate;
  quad.tile_rows = 128;
  quad.pipeline_checks = true;
  quad.cluster = 4;
  ExpectGolden(quad, kHopper, hopper + "m128n2k0c4/v769");
  MoeGemmSpec swap = gate;
  swap.tile_rows = 8;
  swap.epilogue = moe::Epilogue::kNone;
  swap.tma_store = false;
  swap.swap_ab = true;
  ExpectGolden(swap, kHopper, hopper + "m8n2k0/v1024");
  // Ping-pong consumers add bit 13; the cooperative keys above are unchanged.
  MoeGemmSpec pingpong = gate;
  pingpong.tile_rows = 128;
  pingpong.consumers = MoeGemmConsumers::kPingPong;
  ExpectGolden(pingpong, kHopper, hopper + "m128n2k0/v8705");
  MoeGemmSpec mma = {.dtype = DType::kBF16,
                     .n = 1536,
                     .k = 2048,
                     .tile_rows = 64,
                     .epilogue = moe::Epilogue::kSiluAndMul,
                     .kernel = MoeGemmKernel::kMatrixCore};
  ExpectGolden(mma, kAmpere,
               "moe.grouped_gemm/cuda/sm_80" + bf16 + "m64n1k0/v1");
  ExpectGolden(mma, kHip, "moe.grouped_gemm/hip/gfx942" + bf16 + "m64n1k0/v1");
  ExpectGolden(MoeGemmSpec{.dtype = DType::kF32,
                           .n = 768,
                           .k = 2047,
                           .tile_rows = 64,
                           .kernel = MoeGemmKernel::kSimt},
               kAmpere,
               "moe.grouped_gemm/cuda/sm_80/f32,f32,f32/N=768,K=2047/b0/t0/"
               "m64n0k0");
  ExpectGolden(MoeGemmSpec{.dtype = DType::kF32,
                           .n = 64,
                           .k = 64,
                           .tile_rows = 16,
                           .tail_class = 8,
                           .epilogue = moe::Epilogue::kSiluAndMul},
               kCpu,
               "moe.grouped_gemm/cpu/x86_64-test/f32,f32,f32/N=64,K=64/b0/t8/"
               "m16n0k0/v1");
}

// A valid key of each op with one field changed by `edit`.
template <typename Spec>
absl::Status Decode(Spec spec, const KeyTarget& target,
                    void (*edit)(SpecKey&)) {
  SpecKey key = spec.ToKey(target);
  edit(key);
  return Spec::FromKey(key).status();
}

TEST(MoeSpecTest, KeysTheFamilyCannotBuildNameTheirField) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const MoeRouteSpec route;
  EXPECT_THAT(Decode(route, kHopper, [](SpecKey& k) { k.variant = 7; }),
              StatusIs(code, "kernel (variant): must be in [0, 2], got 7"));
  EXPECT_THAT(Decode(route, kHopper, [](SpecKey& k) { k.dims[0] = 4; }),
              StatusIs(code,
                       "dims[0]: not used by this kernel, must be 0, "
                       "got 4"));
  EXPECT_THAT(Decode(route, kHopper, [](SpecKey& k) { k.variant = 2; }),
              StatusIs(code,
                       "scatter_warps (dims[0]): must be in [1, 32], "
                       "got 0"));
  EXPECT_THAT(Decode(MoePackSpec{.hidden = 8}, kCpu,
                     [](SpecKey& k) { k.op = OpKind::kMoeCombine; }),
              StatusIs(code, "op: must be moe.pack, got moe.combine"));
  EXPECT_THAT(Decode(MoePackSpec{.hidden = 8}, kCpu,
                     [](SpecKey& k) { k.bucket_id = 3; }),
              StatusIs(code,
                       "bucket_id: not used by this kernel, must be 0, "
                       "got 3"));
  EXPECT_THAT(Decode(MoeCombineSpec{.hidden = 8, .topk = 2}, kCpu,
                     [](SpecKey& k) { k.dtypes[1] = DType::kBF16; }),
              StatusIs(code, "dtypes[1] (weights): must be f32, got 2"));
}

TEST(MoeSpecTest, GemmKeysTheBackendCannotBuildNameTheirField) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const MoeGemmSpec gemm = {.n = 64, .k = 64, .tile_rows = 16};
  EXPECT_THAT(Decode(gemm, kCpu, [](SpecKey& k) { k.tile.n = 1; }),
              StatusIs(code,
                       "kernel (tile.n) on cpu: must be in [0, 0], "
                       "got 1"));
  EXPECT_THAT(Decode(gemm, kHip, [](SpecKey& k) { k.tile.n = 2; }),
              StatusIs(code,
                       "kernel (tile.n) on hip: must be in [0, 1], "
                       "got 2"));
  EXPECT_THAT(Decode(gemm, kHip, [](SpecKey& k) { k.variant = 1u << 9; }),
              StatusIs(code,
                       "variant: flags (bits 8-10, 13) belong to the "
                       "Hopper kernel only, got 512"));
  EXPECT_THAT(Decode(gemm, kAmpere, [](SpecKey& k) { k.variant = 1u << 13; }),
              StatusIs(code,
                       "variant: flags (bits 8-10, 13) belong to the "
                       "Hopper kernel only, got 8192"));
  EXPECT_THAT(Decode(gemm, kHopper, [](SpecKey& k) { k.tail_class = 3; }),
              StatusIs(code,
                       "tail_class: not used by this kernel, must be 0, "
                       "got 3"));
  EXPECT_THAT(Decode(gemm, kHopper, [](SpecKey& k) { k.tile.cluster = 2; }),
              StatusIs(code,
                       "tile.cluster: not used by this kernel, must be "
                       "0, got 2"));
  EXPECT_THAT(Decode(gemm, kHopper,
                     [](SpecKey& k) {
                       k.tile.n = 2;
                       k.tile.cluster = 3;
                     }),
              StatusIs(code,
                       "cluster (tile.cluster): must be 0 (none), 2 or "
                       "4, got 3"));
  // Ping-pong consumers: 128-row CTA tiles, without swap-AB or clusters.
  const std::string pingpong_rule =
      "variant: ping-pong consumers (bit 13) need tile_rows > 64, no "
      "swap-AB, no cluster and no scale mode, got ";
  const MoeGemmSpec hopper = {.dtype = DType::kBF16,
                              .n = 256,
                              .k = 64,
                              .tile_rows = 128,
                              .kernel = MoeGemmKernel::kHopper,
                              .consumers = MoeGemmConsumers::kPingPong};
  EXPECT_THAT(Decode(hopper, kHopper, [](SpecKey& k) { k.tile.m = 64; }),
              StatusIs(code, pingpong_rule + "8192"));
  EXPECT_THAT(Decode(hopper, kHopper, [](SpecKey& k) { k.tile.cluster = 2; }),
              StatusIs(code, pingpong_rule + "8192"));
  EXPECT_THAT(
      Decode(hopper, kHopper, [](SpecKey& k) { k.variant |= 1u << 10; }),
      StatusIs(code, pingpong_rule + "9216"));
  EXPECT_THAT(Decode(gemm, kCpu, [](SpecKey& k) { k.tile.m = 0; }),
              StatusIs(code, "tile_rows (tile.m): must be in [1, 128], got 0"));
  EXPECT_THAT(Decode(gemm, kCpu, [](SpecKey& k) { k.variant = 2; }),
              StatusIs(code,
                       "epilogue (variant & 0xff): must be in [0, 1], "
                       "got 2"));
  EXPECT_THAT(
      Decode(gemm, kCpu, [](SpecKey& k) { k.dtypes[2] = DType::kBF16; }),
      StatusIs(code, "dtypes[2] (accumulator): must be f32, got 2"));
  EXPECT_THAT(Decode(gemm, kCpu, [](SpecKey& k) { k.tile.k = 64; }),
              StatusIs(code,
                       "tile.k: not used by this kernel, must be 0, "
                       "got 64"));
}

}  // namespace
}  // namespace tailor::internal
