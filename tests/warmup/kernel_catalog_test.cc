// The catalog: tail classes per routing policy, the keys a profile implies
// (built with the launch paths' own key builders), re-targeted history keys.
#include "warmup/kernel_catalog.h"

#include "ops/moe_kernels.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::ElementsAre;

constexpr KeyTarget kTarget = {.backend = BackendKind::kCpu,
                               .arch = "x86_64-test"};

std::vector<std::string> KeyStrings(const KernelList& list) {
  std::vector<std::string> keys;
  for (const KernelJob& job : list.jobs) keys.push_back(job.key.ToString());
  return keys;
}

TEST(KernelCatalogTest, TailClassesOfEachPolicy) {
  using moe::TailPolicy;
  EXPECT_THAT(*TailClassesOf({.tile_rows = 16}),
              ElementsAre(0, 1, 2, 4, 8, 16));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 6, .tail = TailPolicy::kExact}),
              ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 48, .tail = TailPolicy::kFullTile}),
              ElementsAre(0, 48));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 1}), ElementsAre(0));
  EXPECT_THAT(TailClassesOf({.tile_rows = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "policy.tile_rows: must be in [1, 64], got 0"));
}

TEST(KernelCatalogTest, MoeLayerNeedsPackGemmsPerTailClassAndCombine) {
  ServingProfile profile;
  profile.moe.push_back({.path = "moe",
                         .experts = 8,
                         .topk = 2,
                         .hidden = 64,
                         .intermediate = 32,
                         .dtypes = {DType::kF32},
                         .routing = {{.tile_rows = 4}}});
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->skipped.empty());
  const std::string g = "moe.grouped_gemm/cpu/x86_64-test/f32,f32,f32/";
  EXPECT_THAT(
      KeyStrings(*list),
      ElementsAre(
          "moe.pack/cpu/x86_64-test/f32/H=64/b0/t0/m0n0k0",
          g + "N=64,K=64/b0/t0/m4n0k0/v1", g + "N=64,K=64/b0/t1/m4n0k0/v1",
          g + "N=64,K=64/b0/t2/m4n0k0/v1", g + "N=64,K=64/b0/t4/m4n0k0/v1",
          g + "N=64,K=32/b0/t0/m4n0k0", g + "N=64,K=32/b0/t1/m4n0k0",
          g + "N=64,K=32/b0/t2/m4n0k0", g + "N=64,K=32/b0/t4/m4n0k0",
          "moe.combine/cpu/x86_64-test/f32,f32,f32/H=64,topk=2/"
          "b0/t0/m0n0k0"));
  // The very keys the launch path builds.
  EXPECT_EQ(list->jobs[1].key,
            GroupedGemmKey(kTarget,
                           {.dtype = DType::kF32,
                            .n = 64,
                            .k = 64,
                            .tile_rows = 4,
                            .epilogue = moe::Epilogue::kSiluAndMul},
                           0));
  for (const KernelJob& job : list->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    EXPECT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
  }
}

TEST(KernelCatalogTest, SharedKernelsAreListedOnce) {
  MoeLayerProfile layer = {
      .path = "moe",
      .experts = 8,
      .topk = 2,
      .hidden = 64,
      .intermediate = 32,
      .dtypes = {DType::kF32, DType::kBF16},
      .routing = {{.tile_rows = 4},
                  {.tile_rows = 4, .tail = moe::TailPolicy::kExact}}};
  ServingProfile profile;
  profile.moe = {layer, layer};  // e.g. two identical layer kinds
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile);
  ASSERT_TRUE(list.ok()) << list.status();
  // Per dtype: pack, combine, 2 GEMMs x tail classes {0,1,2,4} u {0,1,2,3}.
  EXPECT_EQ(list->jobs.size(), 2u * (2 + 2 * 5));
}

TEST(KernelCatalogTest, SectionsWithoutKernelsAreSkippedAndSaySo) {
  ServingProfile profile;
  profile.paged_decode.push_back({.path = "paged_decode"});
  profile.moe.push_back({.path = "moe[0]", .dtypes = {DType::kF32}});
  absl::StatusOr<KernelList> list = KernelsForProfile(
      {.backend = BackendKind::kCuda, .arch = "sm_90a"}, profile);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->jobs.empty());
  EXPECT_THAT(list->skipped,
              ElementsAre("moe[0]: this build has no cuda MoE kernels yet",
                          "paged_decode: this build has no paged-decode "
                          "kernels yet"));
}

TEST(KernelCatalogTest, HistoryKeysAreRetargetedAndUnknownOnesReported) {
  SpecKey pack = PackKey({.backend = BackendKind::kCpu, .arch = "x86_64-old"},
                         DType::kF32, 64);
  SpecKey axpy = pack;
  axpy.op = OpKind::kTestAxpy;  // test scaffolding: no library generator
  KernelList list = KernelsForKeys(kTarget, {pack, axpy, pack});
  ASSERT_EQ(list.jobs.size(), 1u);
  EXPECT_EQ(list.jobs[0].key.arch_name(), "x86_64-test");
  EXPECT_EQ(list.jobs[0].key, PackKey(kTarget, DType::kF32, 64));
  EXPECT_THAT(list.skipped,
              ElementsAre("test.axpy/cpu/x86_64-test/f32/d=64/b0/t0/m0n0k0: "
                          "this build has no cpu test.axpy kernels"));
}

}  // namespace
}  // namespace tailor::internal
