// HIP backend host logic: the offline backend (a target without a device),
// Supports, keys, the grouped-GEMM and decode launch plans, the registry.
// No AMD GPU needed; parts that need hiprtc skip without it.
#include "backends/hip/hip_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/hip/attention/decode_kernels.h"
#include "backends/hip/attention/ragged_kernels.h"
#include "backends/hip/moe/kernels.h"
#include "core/backend_registry.h"
#include "core/embedded_files.h"
#include "core/hash.h"
#include "ops/attention/decode_spec.h"
#include "ops/attention/ragged_spec.h"
#include "ops/moe/spec.h"
#include "templates/hip/attention/decode_params.h"
#include "templates/hip/attention/ragged_params.h"
#include "templates/hip/moe/params.h"
#include "test_util.h"

namespace tailor::hip {
namespace {

using tailor::internal::DecodeShape;
using tailor::internal::GroupedGemmLaunch;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::LaunchConfig;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::MoeRouteKernel;
using tailor::internal::MoeRouteSpec;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr KeyTarget kTarget = {.backend = BackendKind::kHip, .arch = "gfx90a"};

// The route spec of a planned launch's key.
MoeRouteSpec RouteSpecOf(const SpecKey& key) {
  absl::StatusOr<MoeRouteSpec> spec = MoeRouteSpec::FromKey(key);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : MoeRouteSpec{};
}

class HipOfflineBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = HipBackend::CreateOffline("gfx90a:sramecc+:xnack-");
    if (!backend.ok()) {
      ASSERT_EQ(backend.status().code(), absl::StatusCode::kUnavailable)
          << backend.status();
      GTEST_SKIP() << "hiprtc not installed: " << backend.status();
    }
    backend_ = *std::move(backend);
  }
  SpecKey Key(OpKind op) const {
    SpecKey key;
    key.op = op;
    key.backend = BackendKind::kHip;
    key.SetArch(backend_->arch());
    return key;
  }
  std::unique_ptr<HipBackend> backend_;
};

TEST_F(HipOfflineBackendTest, KeysCarryTheTargetAndIdentityTheHiprtcVersion) {
  EXPECT_EQ(backend_->kind(), BackendKind::kHip);
  EXPECT_EQ(backend_->arch(), "gfx90a:sramecc+:xnack-");
  EXPECT_THAT(
      backend_->compiler_identity(),
      HasSubstr("hiprtc " + backend_->compiler().api().VersionString()));
  EXPECT_TRUE(backend_->offline());
}

TEST_F(HipOfflineBackendTest, SupportsMoeAndAttentionOnlyForItsTarget) {
  for (OpKind op :
       {OpKind::kMoeRoute, OpKind::kMoePack, OpKind::kMoeGroupedGemm,
        OpKind::kMoeCombine, OpKind::kAttentionDecode, OpKind::kAttentionRagged,
        OpKind::kAttentionRaggedMerge}) {
    TAILOR_EXPECT_OK(backend_->Supports(Key(op)));
  }
  SpecKey other = Key(OpKind::kMoePack);
  other.SetArch("gfx908");
  EXPECT_THAT(backend_->Supports(other),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "hip backend: key target \"gfx908\" is not this "
                       "backend's \"gfx90a:sramecc+:xnack-\""));
  SpecKey cuda = Key(OpKind::kMoePack);
  cuda.backend = BackendKind::kCuda;
  EXPECT_THAT(backend_->Supports(cuda),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "hip backend: key is for the cuda backend"));
  EXPECT_THAT(backend_->Supports(Key(OpKind::kAttentionDecodeMerge)),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("hip backend: no HIP kernel for")));
}

TEST_F(HipOfflineBackendTest, CompilesButLoadsAndLaunchesNothing) {
  SpecKey key = Key(OpKind::kMoePack);
  key.dtypes = {DType::kBF16};
  key.dims = {2048};
  absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::string> binary = backend_->Compile(key, *source);
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_THAT(backend_->Load(key, *source, *binary),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "hip backend: Load needs a device; this backend "
                       "compiles offline for gfx90a:sramecc+:xnack-"));
  EXPECT_THAT(backend_->AllocateDevice(16),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("AllocateDevice needs a device")));
}

// An offline backend for a target this hiprtc cannot compile for is refused
// when it is created, not at the first compile (where ROCm 5.2's hiprtc
// would abort the process).
TEST(HipOfflineTargetTest, TargetsTheCompilerCannotServeAreRefusedUpFront) {
  absl::StatusOr<HiprtcCompiler> compiler = HiprtcCompiler::Create({});
  if (!compiler.ok()) GTEST_SKIP() << compiler.status();
  auto backend = HipBackend::CreateOffline("gfx940");
  if (compiler->CheckTarget("gfx940").ok()) {
    EXPECT_TRUE(backend.ok()) << backend.status();
  } else {
    EXPECT_THAT(backend, StatusIs(absl::StatusCode::kUnimplemented,
                                  HasSubstr("target gfx940: hiprtc")));
  }
}

TEST(HipOfflineTargetTest, MalformedTargetIsInvalidArgument) {
  EXPECT_THAT(HipBackend::CreateOffline("sm_90a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("target: must be gfx")));
}

// ---- generators ----------------------------------------------------------

TEST(HipMoeGeneratorTest, SourceIsIncludesPlusOneInstantiation) {
  SpecKey key = MoeGemmSpec{.dtype = DType::kBF16,
                            .n = 1536,
                            .k = 2048,
                            .tile_rows = 64,
                            .epilogue = moe::Epilogue::kSiluAndMul,
                            .kernel = MoeGemmKernel::kMatrixCore}
                    .ToKey(kTarget);
  absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->code,
            "#include \"templates/hip/moe/grouped_gemm.h\"\n"
            "TAILOR_HIP_ENTRY(tailor_entry, "
            "(tailor::hip::MoeGroupedGemmMfma<1536, 2048, 64, 1>))\n");
  EXPECT_EQ(source->entry, "tailor_entry");

  key = MoeRouteSpec{}.ToKey(kTarget);
  key.variant = 7;
  EXPECT_THAT(GenerateHipMoeKernel(key),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kernel (variant): must be in [0, 2], got 7"));
  key.op = OpKind::kAttentionDecode;
  EXPECT_THAT(GenerateHipMoeKernel(key),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("hip moe kernels: no generator for")));
}

// Route, Pack and Combine are CUDA's sources compiled through the vendor
// header, never HIP forks: a fork is what drifted before (its planner and
// scatter disagreed with CUDA's about the histogram).
TEST(HipMoeGeneratorTest, RoutePackAndCombineAreTheSharedCudaSources) {
  for (MoeRouteKernel kernel :
       {MoeRouteKernel::kCountPlan, MoeRouteKernel::kFused,
        MoeRouteKernel::kScatter}) {
    const SpecKey key =
        MoeRouteSpec{
            .kernel = kernel,
            .scatter_warps = kernel == MoeRouteKernel::kScatter ? 4 : 0}
            .ToKey(kTarget);
    absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_THAT(source->code, HasSubstr("(tailor::cuda::MoeRoute"));
  }
  for (const char* wrapper :
       {"templates/hip/moe/route.h", "templates/hip/moe/pack.h",
        "templates/hip/moe/combine.h"}) {
    SCOPED_TRACE(wrapper);
    const tailor::internal::EmbeddedFile* file =
        tailor::internal::FindEmbeddedFile(wrapper);
    ASSERT_NE(file, nullptr);
    EXPECT_THAT(std::string(file->contents()),
                HasSubstr("#include \"templates/cuda/moe/"));
    EXPECT_THAT(std::string(file->contents()),
                Not(HasSubstr("struct ")));  // no kernel of its own
  }
}

// ---- launch plans ----------------------------------------------------------

GroupedGemmLaunch Gemm(DType dtype, int64_t n, int64_t k, int64_t tile_rows,
                       moe::Epilogue epilogue, int64_t max_work) {
  GroupedGemmLaunch l = {};
  l.dtype = dtype;
  l.n = n;
  l.k = k;
  l.tile_rows = tile_rows;
  l.epilogue = epilogue;
  l.plan.max_work = max_work;
  return l;
}

TEST(HipGroupedGemmPlanTest, MfmaForAlignedBf16WithOneCtaPerCu) {
  // Qwen3-30B-A3B gate_up: N = 2 x 768, K = 2048; 64-row tiles.
  const auto plan = PlanHipGroupedGemm(
      Gemm(DType::kBF16, 1536, 2048, 64, moe::Epilogue::kSiluAndMul, 300),
      kTarget, /*compute_units=*/104, /*has_mfma_bf16=*/true);
  EXPECT_EQ(plan.spec.kernel, MoeGemmKernel::kMatrixCore);
  EXPECT_EQ(plan.spec.tile_rows, 64);
  EXPECT_EQ(plan.spec.n, 1536);
  EXPECT_EQ(plan.spec.k, 2048);
  EXPECT_EQ(plan.spec.epilogue, moe::Epilogue::kSiluAndMul);
  EXPECT_EQ(plan.key, plan.spec.ToKey(kTarget));
  // 300 items x 12 N tiles (768 outputs / 64 per CTA) > 104 CUs x 1.
  EXPECT_EQ(plan.config.grid.x, 104u);
  EXPECT_EQ(plan.config.block.x, 256u);
  // Two buffers of (64 A rows + 128 W rows) x 128 bytes.
  EXPECT_EQ(plan.config.shared_bytes, 2u * (64 + 128) * 128);
  EXPECT_LE(plan.config.shared_bytes, 64u * 1024);
}

TEST(HipGroupedGemmPlanTest, TailOnlyStepsShrinkTheLds) {
  const auto plan = PlanHipGroupedGemm(
      Gemm(DType::kBF16, 2048, 768, 16, moe::Epilogue::kNone, 3), kTarget, 104,
      true);
  EXPECT_EQ(plan.config.grid.x, 3u * 16);  // 2048 / 128 N tiles, 3 items
  EXPECT_EQ(plan.config.shared_bytes, 2u * (16 + 128) * 128);
}

TEST(HipGroupedGemmPlanTest, SimtForF32AndUnalignedBf16) {
  for (const auto& [dtype, k] : {std::pair{DType::kF32, int64_t{2048}},
                                 std::pair{DType::kBF16, int64_t{98}}}) {
    const auto plan = PlanHipGroupedGemm(
        Gemm(dtype, 100, k, 64, moe::Epilogue::kNone, 5), kTarget, 104, true);
    EXPECT_EQ(plan.spec.kernel, MoeGemmKernel::kSimt);
    EXPECT_EQ(plan.config.shared_bytes, 0u);
    EXPECT_EQ(plan.config.grid.x, 5u * 2);  // 100 / 64 N tiles
  }
}

TEST(HipGroupedGemmPlanTest, Gfx908RunsSimtForBf16Too) {
  EXPECT_FALSE(HasMfmaBf16("gfx908"));  // MFMA, but no bf16 _1k
  EXPECT_TRUE(HasMfmaBf16("gfx90a"));
  EXPECT_TRUE(HasMfmaBf16("gfx942"));
  const auto plan = PlanHipGroupedGemm(
      Gemm(DType::kBF16, 1536, 2048, 64, moe::Epilogue::kSiluAndMul, 300),
      kTarget, 120, HasMfmaBf16("gfx908"));
  EXPECT_EQ(plan.spec.kernel, MoeGemmKernel::kSimt);
  EXPECT_EQ(plan.config.shared_bytes, 0u);
}

TEST(HipGroupedGemmPlanTest, EmptyPlanLaunchesNothing) {
  const auto plan = PlanHipGroupedGemm(
      Gemm(DType::kBF16, 128, 128, 64, moe::Epilogue::kNone, 0), kTarget, 104,
      true);
  EXPECT_EQ(plan.config.grid.x, 0u);
}

TEST(HipRoutePlanTest, SmallStepsRouteInOneFusedLaunch) {
  // Mixtral decode: T = 64, k = 2 over 8 experts.
  const auto launches = PlanHipRoute(128, 8, kTarget, nullptr);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(RouteSpecOf(launches[0].key).kernel, MoeRouteKernel::kFused);
  EXPECT_EQ(launches[0].config.grid.x, 1u);
  EXPECT_EQ(launches[0].config.block.x, 256u);
  EXPECT_EQ(launches[0].config.shared_bytes, (1u + 4) * 4 * 8);
}

TEST(HipRoutePlanTest, LargeStepsCountThenScatterPerSegment) {
  // Qwen3 prefill: T = 4096, k = 8 over 128 experts: 32 segments.
  const auto launches = PlanHipRoute(4096 * 8, 128, kTarget, nullptr);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(RouteSpecOf(launches[0].key).kernel, MoeRouteKernel::kCountPlan);
  EXPECT_EQ(launches[0].config.grid.x, 32u);
  EXPECT_EQ(launches[0].config.shared_bytes, 4u * 128);
  EXPECT_EQ(
      RouteSpecOf(launches[1].key),
      (MoeRouteSpec{.kernel = MoeRouteKernel::kScatter, .scatter_warps = 4}));
  EXPECT_EQ(launches[1].config.block.x, 256u);
  EXPECT_EQ(launches[1].config.shared_bytes, (1u + 4) * 4 * 128);
}

TEST(HipRoutePlanTest, ManyExpertsScatterWithFewerWavesToFitLds) {
  // (1 + 4) ints x 4000 experts > 63 KiB: two waves; 8000: one.
  EXPECT_EQ(RouteSpecOf(PlanHipRoute(100, 4000, kTarget, nullptr)[1].key)
                .scatter_warps,
            2);
  const auto one = PlanHipRoute(100, 8000, kTarget, nullptr);
  ASSERT_EQ(one.size(), 2u);  // a single segment, but not 4 waves: 2 kernels
  EXPECT_EQ(RouteSpecOf(one[1].key).scatter_warps, 1);
  EXPECT_EQ(one[1].config.block.x, 64u);
  EXPECT_LE(one[1].config.shared_bytes, 64u * 1024);
  EXPECT_EQ(kHipMaxDeviceExperts, (64 * 1024 - 1024) / 8);  // 1 wave fits
}

TEST(HipDecodeKeyTest, ShapesThatFitAndThoseThatDoNot) {
  absl::StatusOr<SpecKey> key =
      HipDecodeKey(kTarget, DecodeShape{.dtype = DType::kBF16,
                                        .head_dim = 128,
                                        .group = 8,
                                        .page_size = 16,
                                        .num_kv_heads = 4});
  ASSERT_TRUE(key.ok()) << key.status();
  // Hkv sizes the plan, not the kernel.
  EXPECT_EQ(*key, (tailor::internal::DecodeSpec{.dtype = DType::kBF16,
                                                .head_dim = 128,
                                                .group = 8,
                                                .page_size = 16,
                                                .tile_tokens = 64}
                       .ToKey(kTarget)));

  EXPECT_THAT(
      HipDecodeKey(
          kTarget,
          {.dtype = DType::kF32, .head_dim = 128, .group = 8, .page_size = 16}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "dtype: must be bf16 or f16, got f32"));
  EXPECT_THAT(HipDecodeKey(kTarget, {.dtype = DType::kBF16,
                                     .head_dim = 256,
                                     .group = 16,
                                     .page_size = 16}),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("hip decode: head_dim 256 with group 16 has "
                                 "no kernel")));
}

TEST(HipDecodeKernelsTest, PlansOneWorkerPerCuInWholeTiles) {
  // PlanConfig needs no device: a backend reference is only used by the
  // device slots.
  auto offline = HipBackend::CreateOffline("gfx90a");
  if (!offline.ok()) GTEST_SKIP() << offline.status();
  HipDecodeKernels kernels(**offline, 104);
  absl::StatusOr<tailor::internal::DecodePlanConfig> config =
      kernels.PlanConfig({.dtype = DType::kBF16,
                          .head_dim = 128,
                          .group = 4,
                          .page_size = 16,
                          .num_kv_heads = 8},
                         /*bucket=*/32, /*seq_lens=*/{});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_workers, 104);
  EXPECT_EQ(config->tile_tokens, 64);
  EXPECT_EQ(config->item_cost_tokens, HipDecodeKernels::kItemCostTokens);
  EXPECT_LE(HipDecodeLdsBytes(128, 16), 64 * 1024);
  EXPECT_LE(HipDecodeLdsBytes(256, 8), 64 * 1024);
}

// Ragged attention plans 64-row tiles over the kernel's KV blocks, one
// worker per CU, q_len = 1 rows as tiles; other shapes are refused naming
// the field.
TEST(HipRaggedKernelsTest, PlansItsTilesAndRefusesWhatItCannotServe) {
  tailor::internal::RaggedShape llama = {.dtype = DType::kBF16,
                                         .head_dim = 128,
                                         .num_qo_heads = 32,
                                         .num_kv_heads = 8,
                                         .page_size = 16};
  absl::StatusOr<tailor::internal::RaggedPlanConfig> config =
      HipRaggedPlanConfig(llama, 104);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tile_rows, kHipRaggedTileRows);
  EXPECT_EQ(config->kv_block, 32);
  EXPECT_EQ(config->head_pack, 4);
  EXPECT_EQ(config->num_workers, 104);
  EXPECT_FALSE(config->decode_rows);
  tailor::internal::RaggedShape wide = llama;
  wide.head_dim = 256;
  wide.num_kv_heads = 1;
  wide.page_size = 1;
  config = HipRaggedPlanConfig(wide, 0);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kv_block, 16);
  EXPECT_EQ(config->head_pack, 16);
  EXPECT_EQ(config->num_workers, 1);  // offline: one worker
  for (int d : {64, 128, 256}) {
    EXPECT_LE(HipRaggedLdsBytes(d), 64 * 1024) << d;
  }
  tailor::internal::RaggedShape bad = llama;
  bad.head_dim = 96;
  EXPECT_THAT(HipRaggedPlanConfig(bad, 104),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "head_dim: the hip ragged kernel serves 64, 128 and "
                       "256, got 96"));
  bad = llama;
  bad.page_size = 512;
  EXPECT_THAT(HipRaggedPlanConfig(bad, 104),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "page_size: the hip ragged kernel serves pages of 1 "
                       "to 256 tokens, got 512"));
  bad = llama;
  bad.dtype = DType::kF32;
  EXPECT_THAT(HipRaggedPlanConfig(bad, 104),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "dtype: the hip ragged kernel serves bf16 and f16, "
                       "got f32"));
}

TEST(HipRaggedKernelsTest, GeneratorBuildsItsKeysAndNamesTheFieldOfOthers) {
  const KeyTarget target = {.backend = BackendKind::kHip, .arch = "gfx90a"};
  tailor::internal::RaggedKernelSpec spec = {
      .dtype = DType::kF16,
      .head_dim = 64,
      .group = 8,
      .head_pack = 8,
      .page_size = 3,
      .mask = tailor::internal::RaggedMask::kCausal,
      .tile_rows = kHipRaggedTileRows};
  absl::StatusOr<KernelSource> source = GenerateHipRagged(spec.Key(target));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT(source->code,
              HasSubstr("tailor::hip::HipRaggedAttention<false, 64, 8, 3>"));
  const tailor::internal::RaggedMergeSpec merge = {
      .dtype = DType::kBF16,
      .head_dim = 256,
      .head_pack = 2,
      .tile_rows = kHipRaggedTileRows};
  source = GenerateHipRagged(merge.Key(target));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT(source->code,
              HasSubstr("tailor::hip::HipRaggedMerge<true, 256>"));
  spec.tile_rows = 128;
  EXPECT_THAT(GenerateHipRagged(spec.Key(target)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "key.tile.m (tile rows): the hip kernel tiles by 64, "
                       "got 128"));
  spec.tile_rows = kHipRaggedTileRows;
  spec.portable = true;
  EXPECT_THAT(GenerateHipRagged(spec.Key(target)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key.variant: the hip kernel has no "
                                 "variants")));
  spec.portable = false;
  spec.head_pack = 4;  // not group 8's pack
  EXPECT_THAT(GenerateHipRagged(spec.Key(target)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key.dims: the hip kernel needs")));
  SpecKey decode = target.MakeKey(OpKind::kAttentionDecode);
  EXPECT_THAT(GenerateHipRagged(decode),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "hip ragged kernels: no generator for "
                       "attention.decode"));
}

// ---- keys and sources, pinned ----------------------------------------------

// Every key the HIP launches build for the anchor shapes, with its source:
// a change to the digest changes users' HIP cache keys or kernels.
TEST(HipKeysGoldenTest, KeysAndSourcesAreUnchanged) {
  const KeyTarget target = {.backend = BackendKind::kHip, .arch = "gfx942"};
  std::vector<SpecKey> keys;
  for (int64_t experts : {8, 128, 256, 4000}) {
    for (int64_t assignments : {100, 4096 * 8}) {
      for (const HipLaunchPlan& launch :
           PlanHipRoute(assignments, experts, target, nullptr)) {
        keys.push_back(launch.key);
      }
    }
  }
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int64_t tile_rows : {16, 64, 128}) {
      for (int64_t k : {2048, 98}) {
        for (moe::Epilogue epilogue :
             {moe::Epilogue::kNone, moe::Epilogue::kSiluAndMul}) {
          keys.push_back(
              PlanHipGroupedGemm(Gemm(dtype, 1536, k, tile_rows, epilogue, 10),
                                 target, 104, true)
                  .key);
        }
      }
    }
    keys.push_back(
        tailor::internal::MoePackSpec{.dtype = dtype, .hidden = 2048}.ToKey(
            target));
    keys.push_back(tailor::internal::MoeCombineSpec{
        .dtype = dtype, .hidden = 2048, .topk = 8}
                       .ToKey(target));
  }
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t page : {1, 16, 64}) {
      absl::StatusOr<SpecKey> key = HipDecodeKey(
          target,
          {.dtype = dtype, .head_dim = 128, .group = 8, .page_size = page});
      ASSERT_TRUE(key.ok()) << key.status();
      keys.push_back(*key);
    }
  }
  std::string all;
  for (const SpecKey& key : keys) {
    absl::StatusOr<KernelSource> source = key.op == OpKind::kAttentionDecode
                                              ? GenerateHipDecode(key)
                                              : GenerateHipMoeKernel(key);
    ASSERT_TRUE(source.ok()) << key.ToString() << ": " << source.status();
    absl::StrAppend(&all, key.Hash().Hex(), " ", key.ToString(), "\n",
                    source->entry, "\n", source->code, "\n");
  }
  EXPECT_EQ(keys.size(), 47u);
  EXPECT_EQ(tailor::internal::HashBytes(all).Hex(),
            "f5222a0ff698c3cc81464545340cbc73");
}

// ---- the registry and the runtime path (no AMD GPU here) -------------------

TEST(HipRegistryTest, ExplicitHipIsUnavailableWithTheReasonWithoutAGpu) {
  absl::StatusOr<std::unique_ptr<tailor::internal::Backend>> backend =
      tailor::internal::CreateBackend(BackendKind::kHip, {});
  if (backend.ok()) GTEST_SKIP() << "an AMD GPU is present";
  EXPECT_THAT(backend.status(), StatusIs(absl::StatusCode::kUnavailable,
                                         HasSubstr("HIP backend unavailable")));
}

// Regression (make tsan, make asan): the sanitizer runtimes end the process
// on any dlopen with RTLD_DEEPBIND, so probing the HIP backend (kHip, or
// kAuto on a machine without a GPU) killed every sanitizer test process.
// A sanitizer build now reports the backend unavailable instead.
TEST(HipRegistryTest, SanitizerBuildsReportHipUnavailableInsteadOfDying) {
#ifndef TAILOR_UNDER_SANITIZER
  GTEST_SKIP() << "not a sanitizer build";
#else
  EXPECT_THAT(tailor::internal::CreateBackend(BackendKind::kHip, {}).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("is loaded in a sanitizer build")));
#endif
}

}  // namespace
}  // namespace tailor::hip
