// The catalog: tail classes per routing policy, the keys a profile implies
// (built with the launch paths' own key builders), re-targeted history keys.
#include "warmup/kernel_catalog.h"

#include "backends/cpu/moe/kernels.h"
#include "core/family_registry.h"
#include "ops/attention/ragged_spec.h"
#include "ops/moe/kernels.h"
#include "ops/moe/spec.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::ElementsAre;

constexpr KeyTarget kTarget = {.backend = BackendKind::kCpu,
                               .arch = "x86_64-test"};

// A Qwen3-30B-A3B MoE layer (128 experts, top 8, hidden 2048, 768 a
// projection) in `dtype` under `routing`.
MoeLayerProfile Qwen3MoeLayer(
    DType dtype, moe::RoutingPolicy routing = moe::RoutingPolicy{}) {
  return {.path = "moe",
          .experts = 128,
          .topk = 8,
          .hidden = 2048,
          .intermediate = 768,
          .dtypes = {dtype},
          .routing = {routing}};
}

std::vector<std::string> KeyStrings(const KernelList& list) {
  std::vector<std::string> keys;
  for (const KernelJob& job : list.jobs) keys.push_back(job.key.ToString());
  return keys;
}

TEST(KernelCatalogTest, TailClassesOfEachPolicy) {
  using cpu::TailClassesOf;
  using moe::TailPolicy;
  EXPECT_THAT(*TailClassesOf({.tile_rows = 16}),
              ElementsAre(0, 1, 2, 4, 8, 16));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 6, .tail = TailPolicy::kExact}),
              ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 48, .tail = TailPolicy::kFullTile}),
              ElementsAre(0, 48));
  EXPECT_THAT(*TailClassesOf({.tile_rows = 1}), ElementsAre(0));
  // 0: the CPU backend's 16.
  EXPECT_THAT(*TailClassesOf({.tile_rows = 0}), ElementsAre(0, 1, 2, 4, 8, 16));
  EXPECT_THAT(TailClassesOf({.tile_rows = 65}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "policy.tile_rows: must be in [1, 64] (or 0: the "
                       "backend's choice), got 65"));
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
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile, {});
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
            cpu::GroupedGemmKey(
                kTarget,
                GroupedGemmLaunch{.dtype = DType::kF32,
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

// f8e4m3: the quantizing Pack, the block-scaled GEMMs (gate|up with the
// quantizing epilogue, e4m3 C) per tail class and combine, each the key the
// FP8 launch builds, each generating a source.
TEST(KernelCatalogTest, Fp8MoeLayerListsTheBlockScaledKernels) {
  ServingProfile profile;
  profile.moe.push_back({.path = "moe",
                         .experts = 8,
                         .topk = 2,
                         .hidden = 256,
                         .intermediate = 128,
                         .dtypes = {DType::kF8E4M3},
                         .routing = {{.tile_rows = 2}}});
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile, {});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->skipped.empty());
  const std::string g = "moe.grouped_gemm/cpu/x86_64-test/f8e4m3,f8e4m3,f32,";
  EXPECT_THAT(
      KeyStrings(*list),
      ElementsAre("moe.pack/cpu/x86_64-test/bf16,f8e4m3/H=256/b0/t0/m0n0k0/v3",
                  g + "f8e4m3/N=256,K=256/b0/t0/m2n0k0/v6145",
                  g + "f8e4m3/N=256,K=256/b0/t1/m2n0k0/v6145",
                  g + "bf16/N=256,K=128/b0/t0/m2n0k0/v6144",
                  g + "bf16/N=256,K=128/b0/t1/m2n0k0/v6144",
                  "moe.combine/cpu/x86_64-test/bf16,f32,bf16/H=256,topk=2/"
                  "b0/t0/m0n0k0"));
  EXPECT_EQ(list->jobs[1].key,
            cpu::GroupedGemmKey(
                kTarget,
                GroupedGemmLaunch{.dtype = DType::kF8E4M3,
                                  .n = 256,
                                  .k = 256,
                                  .tile_rows = 2,
                                  .epilogue = moe::Epilogue::kSiluAndMul,
                                  .scale_mode = moe::ScaleMode::kBlock},
                0));
  for (const KernelJob& job : list->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    ASSERT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
    if (job.key.op == OpKind::kMoeCombine) continue;  // combine is bf16
    EXPECT_NE(source->code.find("fp8_"), std::string::npos) << source->code;
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
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile, {});
  ASSERT_TRUE(list.ok()) << list.status();
  // Per dtype: pack, combine, 2 GEMMs x tail classes {0,1,2,4} u {0,1,2,3}.
  EXPECT_EQ(list->jobs.size(), 2u * (2 + 2 * 5));
}

TEST(KernelCatalogTest, CpuPagedDecodeNeedsAttentionAndMerge) {
  ServingProfile profile;
  profile.paged_decode.push_back({.path = "paged_decode",
                                  .heads_q = 32,
                                  .heads_kv = 8,
                                  .head_dim = 128,
                                  .page_size = 16,
                                  .dtypes = {DType::kBF16, DType::kF32},
                                  .ragged_masks = {}});  // decode only
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile, {});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(KeyStrings(*list),
              ElementsAre("attention.decode/cpu/x86_64-test/bf16/D=128,group=4,"
                          "page=16/b0/t0/m0n0k0",
                          "attention.decode_merge/cpu/x86_64-test/bf16/D=128,"
                          "group=4/b0/t0/m0n0k0"));
  EXPECT_THAT(list->skipped,
              ElementsAre("paged_decode (f32): dtype: paged decode takes "
                          "bf16 or f16, got f32"));
  for (const KernelJob& job : list->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    EXPECT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
  }
}

// An attention layer lists its ragged kernels (prefill, mixed steps) for
// each mask it names, with the op front's rules: one merge kernel serves
// every mask; f32 is one skipped line per mask; [] lists decode only.
TEST(KernelCatalogTest, CpuAttentionLayerListsItsRaggedKernels) {
  ServingProfile profile;
  profile.paged_decode.push_back(
      {.path = "paged_decode",
       .heads_q = 32,
       .heads_kv = 8,
       .head_dim = 128,
       .page_size = 16,
       .dtypes = {DType::kF16, DType::kF32},
       .ragged_masks = {RaggedMask::kNone, RaggedMask::kCausal,
                        RaggedMask::kCausalWindow}});
  absl::StatusOr<KernelList> list = KernelsForProfile(kTarget, profile, {});
  ASSERT_TRUE(list.ok()) << list.status();
  const std::string r = "attention.ragged/cpu/x86_64-test/f16/";
  EXPECT_THAT(
      KeyStrings(*list),
      ElementsAre(
          "attention.decode/cpu/x86_64-test/f16/D=128,group=4,page=16/b0/t0/"
          "m0n0k0",
          "attention.decode_merge/cpu/x86_64-test/f16/D=128,group=4/b0/t0/"
          "m0n0k0",
          r + "D=128,group=4,pack=4,page=16,mask=0/b0/t0/m32n0k0",
          "attention.ragged_merge/cpu/x86_64-test/f16/D=128,pack=4/b0/t0/"
          "m32n0k0",
          r + "D=128,group=4,pack=4,page=16,mask=1/b0/t0/m32n0k0",
          r + "D=128,group=4,pack=4,page=16,mask=2/b0/t0/m32n0k0"));
  EXPECT_THAT(list->skipped,
              ElementsAre("paged_decode (f32): dtype: paged decode takes "
                          "bf16 or f16, got f32",
                          "paged_decode (f32, ragged none): dtype: must be "
                          "bf16 or f16, got f32",
                          "paged_decode (f32, ragged causal): dtype: must be "
                          "bf16 or f16, got f32",
                          "paged_decode (f32, ragged window): dtype: must be "
                          "bf16 or f16, got f32"));
  for (const KernelJob& job : list->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    EXPECT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
  }
  profile.paged_decode[0].ragged_masks.clear();
  list = KernelsForProfile(kTarget, profile, {});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->jobs.size(), 2u);  // decode and its merge
}

// CUDA lists a layer's ragged kernel and merge (their sources build), none
// under ragged.cuda=off, and names a page size the kernel does not serve.
TEST(KernelCatalogTest, CudaRaggedKernelsFollowTheTuning) {
  ServingProfile profile;
  profile.paged_decode.push_back({.path = "paged_decode",
                                  .heads_q = 32,
                                  .heads_kv = 8,
                                  .head_dim = 128,
                                  .page_size = 16,
                                  .dtypes = {DType::kBF16}});
  const KeyTarget hopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
  absl::StatusOr<KernelList> listed = KernelsForProfile(hopper, profile, {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  int ragged = 0, merges = 0;
  for (const KernelJob& job : listed->jobs) {
    if (job.key.op == OpKind::kAttentionRagged) ++ragged;
    if (job.key.op == OpKind::kAttentionRaggedMerge) ++merges;
    if (job.key.op == OpKind::kAttentionRagged ||
        job.key.op == OpKind::kAttentionRaggedMerge) {
      EXPECT_TRUE(job.generate(job.key).ok()) << job.key.ToString();
    }
  }
  EXPECT_EQ(ragged, 1);
  EXPECT_EQ(merges, 1);

  absl::StatusOr<Tuning> off = ParseTuningText("ragged.cuda=off");
  ASSERT_TRUE(off.ok()) << off.status();
  absl::StatusOr<KernelList> none = KernelsForProfile(hopper, profile, *off);
  ASSERT_TRUE(none.ok()) << none.status();
  for (const KernelJob& job : none->jobs) {
    EXPECT_NE(job.key.op, OpKind::kAttentionRagged) << job.key.ToString();
  }

  // Pages the sm_90a kernel does not load by TMA, and ragged.kernel=portable,
  // list the portable kernel (variant bit 1, 64-row tiles) and its merge.
  absl::StatusOr<Tuning> portable = ParseTuningText("ragged.kernel=portable");
  ASSERT_TRUE(portable.ok()) << portable.status();
  for (int64_t page : {12, 16}) {
    profile.paged_decode[0].page_size = page;
    absl::StatusOr<KernelList> listed_portable =
        KernelsForProfile(hopper, profile, page == 16 ? *portable : Tuning());
    ASSERT_TRUE(listed_portable.ok()) << listed_portable.status();
    EXPECT_THAT(listed_portable->skipped, ::testing::IsEmpty());
    std::vector<std::string> ragged_keys;
    for (const KernelJob& job : listed_portable->jobs) {
      if (job.key.op == OpKind::kAttentionRagged ||
          job.key.op == OpKind::kAttentionRaggedMerge) {
        ragged_keys.push_back(job.key.ToString());
        EXPECT_TRUE(job.generate(job.key).ok()) << job.key.ToString();
      }
    }
    EXPECT_THAT(
        ragged_keys,
        ElementsAre(absl::StrCat("attention.ragged/cuda/sm_90a/bf16/D=128,"
                                 "group=4,pack=4,page=",
                                 page, ",mask=1/b0/t0/m64n0k0/v2"),
                    "attention.ragged_merge/cuda/sm_90a/bf16/D=128,pack=4/"
                    "b0/t0/m64n0k0"));
  }
}

// CUDA keys need no device: a profile for an H100 lists them here.
TEST(KernelCatalogTest, CudaKeysFollowTheDevicesChoices) {
  ServingProfile profile;
  profile.moe.push_back(Qwen3MoeLayer(DType::kBF16));
  profile.paged_decode.push_back({.path = "paged_decode",
                                  .heads_q = 32,
                                  .heads_kv = 4,
                                  .head_dim = 128,
                                  .page_size = 16,
                                  .dtypes = {DType::kBF16}});
  absl::StatusOr<KernelList> hopper = KernelsForProfile(
      {.backend = BackendKind::kCuda, .arch = "sm_90a"}, profile, {});
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  if (!hopper->skipped.empty()) {
    GTEST_SKIP() << "built without CUDA headers: " << hopper->skipped[0];
  }
  const std::string g = "moe.grouped_gemm/cuda/sm_90a/bf16,bf16,f32/";
  // Route (fused for steps of one segment, else count+plan then scatter),
  // pack, the Hopper GEMMs (tile.n = 2; variant: epilogue | 512, full tiles
  // leave by TMA stores) at the cost model's 64 and 128 rows, its swap-AB tiles
  // of 8 and 32 rows (variant: epilogue | 1024), combine, and
  // the decode variants (cp.async, TMA) for one CTA an SM (4 stages) and
  // two (2 stages).
  EXPECT_THAT(
      KeyStrings(*hopper),
      ElementsAre(
          "moe.route/cuda/sm_90a//warps=0/b0/t0/m0n0k0/v1",
          "moe.route/cuda/sm_90a//warps=0/b0/t0/m0n0k0",
          "moe.route/cuda/sm_90a//warps=8/b0/t0/m0n0k0/v2",
          "moe.pack/cuda/sm_90a/bf16/H=2048/b0/t0/m0n0k0",
          g + "N=1536,K=2048/b0/t0/m64n2k0/v513",
          g + "N=2048,K=768/b0/t0/m64n2k0/v512",
          g + "N=1536,K=2048/b0/t0/m128n2k0/v513",
          g + "N=2048,K=768/b0/t0/m128n2k0/v512",
          g + "N=1536,K=2048/b0/t0/m8n2k0/v1025",
          g + "N=2048,K=768/b0/t0/m8n2k0/v1024",
          g + "N=1536,K=2048/b0/t0/m32n2k0/v1025",
          g + "N=2048,K=768/b0/t0/m32n2k0/v1024",
          "moe.combine/cuda/sm_90a/bf16,f32,bf16/H=2048,topk=8/b0/t0/m0n0k0",
          "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/"
          "m64n0k0s4w4",
          "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/"
          "m64n0k0s4w4/v1",
          "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/"
          "m64n0k0s2w4",
          "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/"
          "m64n0k0s2w4/v1",
          "attention.ragged/cuda/sm_90a/bf16/D=128,group=8,pack=8,page=16,"
          "mask=1/b0/t0/m128n0k0",
          "attention.ragged_merge/cuda/sm_90a/bf16/D=128,pack=8/b0/t0/"
          "m128n0k0"));
  for (const KernelJob& job : hopper->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    EXPECT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
  }
  // An A100: 64-row tiles only, the mma.sync GEMM, no TMA decode, the
  // portable ragged kernel and its merge.
  absl::StatusOr<KernelList> ampere = KernelsForProfile(
      {.backend = BackendKind::kCuda, .arch = "sm_80"}, profile, {});
  ASSERT_TRUE(ampere.ok()) << ampere.status();
  ASSERT_EQ(ampere->jobs.size(), 10u);
  EXPECT_EQ(ampere->jobs[8].key.ToString(),
            "attention.ragged/cuda/sm_80/bf16/D=128,group=8,pack=8,page=16,"
            "mask=1/b0/t0/m64n0k0/v2");
  absl::StatusOr<MoeGemmSpec> gemm = MoeGemmSpec::FromKey(ampere->jobs[4].key);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  EXPECT_EQ(gemm->kernel, MoeGemmKernel::kMatrixCore);
  EXPECT_EQ(gemm->tile_rows, 64);
}

// An FP8 (block-scaled) layer on sm_90a lists what moe::Experts launches:
// the route kernels, the quantizing Pack, per tile the gate|up GEMM writing
// e4m3 (dtypes ...,f8e4m3; variant: epilogue | swap-AB | block << 11) and the
// bf16 down GEMM, and Combine; an A100 the portable FP8 GEMMs.
TEST(KernelCatalogTest, CudaFp8LayersListTheExpertsKernels) {
  ServingProfile profile;
  profile.moe.push_back(Qwen3MoeLayer(DType::kF8E4M3));
  absl::StatusOr<KernelList> hopper = KernelsForProfile(
      {.backend = BackendKind::kCuda, .arch = "sm_90a"}, profile, {});
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  if (!hopper->skipped.empty()) {
    GTEST_SKIP() << "built without CUDA headers: " << hopper->skipped[0];
  }
  const std::string g = "moe.grouped_gemm/cuda/sm_90a/f8e4m3,f8e4m3,f32,";
  EXPECT_THAT(
      KeyStrings(*hopper),
      ElementsAre("moe.route/cuda/sm_90a//warps=0/b0/t0/m0n0k0/v1",
                  "moe.route/cuda/sm_90a//warps=0/b0/t0/m0n0k0",
                  "moe.route/cuda/sm_90a//warps=8/b0/t0/m0n0k0/v2",
                  "moe.pack/cuda/sm_90a/bf16,f8e4m3/H=2048/b0/t0/m0n0k0/v3",
                  g + "f8e4m3/N=1536,K=2048/b0/t0/m64n2k0/v6145",
                  g + "bf16/N=2048,K=768/b0/t0/m64n2k0/v6144",
                  g + "f8e4m3/N=1536,K=2048/b0/t0/m128n2k0/v6145",
                  g + "bf16/N=2048,K=768/b0/t0/m128n2k0/v6144",
                  g + "f8e4m3/N=1536,K=2048/b0/t0/m8n2k0/v7169",
                  g + "bf16/N=2048,K=768/b0/t0/m8n2k0/v7168",
                  g + "f8e4m3/N=1536,K=2048/b0/t0/m32n2k0/v7169",
                  g + "bf16/N=2048,K=768/b0/t0/m32n2k0/v7168",
                  "moe.combine/cuda/sm_90a/bf16,f32,bf16/H=2048,topk=8/b0/t0/"
                  "m0n0k0"));
  for (const KernelJob& job : hopper->jobs) {
    absl::StatusOr<KernelSource> source = job.generate(job.key);
    ASSERT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
    if (job.key.op == OpKind::kMoePack ||
        job.key.op == OpKind::kMoeGroupedGemm) {
      EXPECT_NE(source->code.find("fp8_"), std::string::npos) << source->code;
    }
  }
  // An A100 (and moe.gemm=portable on sm_90a) runs the portable mma.sync
  // GEMMs (tile.n = 1) on 64-row tiles; a Turing target is skipped.
  for (const auto& [arch, tuning] :
       {std::pair{"sm_80", ""}, std::pair{"sm_90a", "moe.gemm=portable"}}) {
    SCOPED_TRACE(arch);
    absl::StatusOr<Tuning> parsed = ParseTuningText(tuning);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<KernelList> portable = KernelsForProfile(
        {.backend = BackendKind::kCuda, .arch = arch}, profile, *parsed);
    ASSERT_TRUE(portable.ok()) << portable.status();
    EXPECT_TRUE(portable->skipped.empty());
    const std::string p =
        absl::StrCat("moe.grouped_gemm/cuda/", arch, "/f8e4m3,f8e4m3,f32,");
    EXPECT_THAT(
        KeyStrings(*portable),
        ::testing::IsSupersetOf({p + "f8e4m3/N=1536,K=2048/b0/t0/m64n1k0/v6145",
                                 p + "bf16/N=2048,K=768/b0/t0/m64n1k0/v6144"}));
    for (const KernelJob& job : portable->jobs) {
      if (job.key.op != OpKind::kMoeGroupedGemm) continue;
      absl::StatusOr<KernelSource> source = job.generate(job.key);
      ASSERT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
      EXPECT_NE(source->code.find("fp8_grouped_gemm_sm80.cuh"),
                std::string::npos)
          << source->code;
    }
  }
  absl::StatusOr<KernelList> turing = KernelsForProfile(
      {.backend = BackendKind::kCuda, .arch = "sm_75"}, profile, {});
  ASSERT_TRUE(turing.ok()) << turing.status();
  EXPECT_TRUE(turing->jobs.empty());
  EXPECT_THAT(turing->skipped,
              ElementsAre("moe f8e4m3: FP8 (e4m3) MoE on cuda needs sm_80 or "
                          "newer (mma.sync); target is sm_75"));
}

// The server's tuning keys reach warm-up's keys: forced clusters add the
// 128-row launches' cluster variants, moe.consumers=pingpong adds the
// ping-pong variants (the cost model never picks them), the portable GEMM
// replaces Hopper's,
// decode.stages caps the decode depths.
TEST(KernelCatalogTest, TuningShapesTheCudaKeys) {
  ServingProfile profile;
  profile.moe.push_back(Qwen3MoeLayer(DType::kBF16, {.tile_rows = 128}));
  profile.paged_decode.push_back({.path = "paged_decode",
                                  .heads_q = 32,
                                  .heads_kv = 4,
                                  .head_dim = 128,
                                  .page_size = 16,
                                  .dtypes = {DType::kBF16}});
  const KeyTarget hopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
  auto list = [&](absl::string_view text) {
    absl::StatusOr<Tuning> tuning = ParseTuningText(text);
    EXPECT_TRUE(tuning.ok()) << tuning.status();
    absl::StatusOr<KernelList> kernels =
        KernelsForProfile(hopper, profile, *tuning);
    EXPECT_TRUE(kernels.ok()) << kernels.status();
    return *kernels;
  };
  const KernelList plain = list("");
  if (!plain.skipped.empty()) {
    GTEST_SKIP() << "built without CUDA headers: " << plain.skipped[0];
  }
  const std::string g = "moe.grouped_gemm/cuda/sm_90a/bf16,bf16,f32/";
  const std::string d =
      "attention.decode/cuda/sm_90a/bf16/D=128,group=8,page=16/b0/t0/m64n0k0";
  std::vector<std::string> keys = KeyStrings(list("moe.cluster=2"));
  EXPECT_THAT(std::vector<std::string>(keys.begin() + 4, keys.begin() + 8),
              ElementsAre(g + "N=1536,K=2048/b0/t0/m128n2k0/v513",
                          g + "N=1536,K=2048/b0/t0/m128n2k0c2/v513",
                          g + "N=2048,K=768/b0/t0/m128n2k0/v512",
                          g + "N=2048,K=768/b0/t0/m128n2k0c2/v512"));
  // Ping-pong consumers beside the cooperative kernel only when forced.
  keys = KeyStrings(list("moe.consumers=pingpong"));
  EXPECT_THAT(std::vector<std::string>(keys.begin() + 4, keys.begin() + 8),
              ElementsAre(g + "N=1536,K=2048/b0/t0/m128n2k0/v513",
                          g + "N=1536,K=2048/b0/t0/m128n2k0/v8705",
                          g + "N=2048,K=768/b0/t0/m128n2k0/v512",
                          g + "N=2048,K=768/b0/t0/m128n2k0/v8704"));
  for (const char* tuning : {"", "moe.consumers=cooperative"}) {
    keys = KeyStrings(list(tuning));
    EXPECT_THAT(std::vector<std::string>(keys.begin() + 4, keys.begin() + 6),
                ElementsAre(g + "N=1536,K=2048/b0/t0/m128n2k0/v513",
                            g + "N=2048,K=768/b0/t0/m128n2k0/v512"))
        << tuning;
  }
  keys = KeyStrings(list("moe.gemm=portable,decode.stages=3"));
  EXPECT_THAT(
      std::vector<std::string>(keys.begin() + 4, keys.end()),
      ElementsAre(g + "N=1536,K=2048/b0/t0/m128n1k0/v1",
                  g + "N=2048,K=768/b0/t0/m128n1k0",
                  "moe.combine/cuda/sm_90a/bf16,f32,bf16/"
                  "H=2048,topk=8/b0/t0/m0n0k0",
                  d + "s3w4", d + "s3w4/v1", d + "s2w4", d + "s2w4/v1",
                  "attention.ragged/cuda/sm_90a/bf16/D=128,group=8,pack=8,"
                  "page=16,mask=1/b0/t0/m128n0k0",
                  "attention.ragged_merge/cuda/sm_90a/bf16/D=128,pack=8/b0/"
                  "t0/m128n0k0"));
}

TEST(KernelCatalogTest, HistoryKeysAreRetargetedAndUnknownOnesReported) {
  SpecKey pack = cpu::PackKey(
      {.backend = BackendKind::kCpu, .arch = "x86_64-old"}, DType::kF32, 64);
  SpecKey route = pack;
  route.op = OpKind::kMoeRoute;  // routed on the host: no cpu kernel
  KernelList list = KernelsForKeys(kTarget, {pack, route, pack});
  ASSERT_EQ(list.jobs.size(), 1u);
  EXPECT_EQ(list.jobs[0].key.arch_name(), "x86_64-test");
  EXPECT_EQ(list.jobs[0].key, cpu::PackKey(kTarget, DType::kF32, 64));
  EXPECT_THAT(list.skipped,
              ElementsAre("moe.route/cpu/x86_64-test/f32/warps=64/b0/t0/"
                          "m0n0k0: this build has no cpu moe.route kernels"));
}

}  // namespace
}  // namespace tailor::internal
