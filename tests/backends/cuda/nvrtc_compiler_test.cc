// NVRTC compile-only tests: run everywhere NVRTC is installed, no GPU needed.
// They compile every CUDA kernel template for sm_90a (and the generic ones
// for sm_80) and check the PTX carries the instructions the template is
// about, so a template that stops compiling fails CI, not the GPU machine.
#include "backends/cuda/nvrtc_compiler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/nvrtc_api.h"
#include "core/embedded_files.h"
#include "kernels/cuda_test_kernels.h"
#include "kernels/test_op_kinds.h"
#include "ops/attention/decode_spec.h"
#include "ops/moe/spec.h"
#include "templates/cuda/attention/decode_params.h"
#include "templates/cuda/tma_test_params.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// The compiler, or a skip when this machine has no NVRTC.
class NvrtcCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<NvrtcCompiler> compiler = NvrtcCompiler::Create({});
    if (!compiler.ok()) {
      ASSERT_EQ(compiler.status().code(), absl::StatusCode::kUnavailable)
          << compiler.status();
      GTEST_SKIP() << "NVRTC not installed: " << compiler.status();
    }
    compiler_.emplace(*std::move(compiler));
  }

  std::optional<NvrtcCompiler> compiler_;
};

SpecKey TmaKey(OpKind op, DType dtype, int64_t cols, int32_t tile_rows,
               uint32_t variant = 0) {
  SpecKey key;
  key.op = op;
  key.backend = BackendKind::kCuda;
  key.SetArch("sm_90a");
  key.dtypes[0] = dtype;
  key.dims[0] = cols;
  key.tile.m = tile_rows;
  key.variant = variant;
  return key;
}

constexpr tailor::internal::KeyTarget kSm90a = {.backend = BackendKind::kCuda,
                                                .arch = "sm_90a"};

SpecKey RouteKey(tailor::internal::MoeRouteKernel kernel, int warps = 0) {
  return tailor::internal::MoeRouteSpec{.kernel = kernel,
                                        .scatter_warps = warps}
      .ToKey(kSm90a);
}

// A grouped-GEMM key of `kernel`; `flags`: Hopper's TMA store and checks.
struct HopperFlags {
  bool tma_store = false;
  bool pipeline_checks = false;
  bool pingpong = false;  // ping-pong consumers
};
SpecKey GemmKey(DType dtype, int64_t n, int64_t k, moe::Epilogue epilogue,
                int32_t tile_rows, tailor::internal::MoeGemmKernel kernel,
                HopperFlags flags = {}) {
  tailor::internal::MoeGemmSpec spec = {
      .dtype = dtype,
      .n = n,
      .k = k,
      .tile_rows = tile_rows,
      .epilogue = epilogue,
      .kernel = kernel,
      .pipeline_checks = flags.pipeline_checks,
      .tma_store = flags.tma_store};
  if (flags.pingpong) {
    spec.consumers = tailor::internal::MoeGemmConsumers::kPingPong;
  }
  return spec.ToKey(kSm90a);
}

// The source of a test key or of a library kernel key.
absl::StatusOr<KernelSource> Generate(const SpecKey& key) {
  if (key.op == OpKind::kAttentionDecode) return GenerateCudaDecode(key);
  absl::StatusOr<KernelSource> moe = GenerateMoeKernel(key);
  if (!absl::IsUnimplemented(moe.status())) return moe;
  return GenerateCudaTestKernel(key);
}

SpecKey DecodeKey(uint32_t variant, int64_t page) {
  return tailor::internal::DecodeSpec{
      .dtype = DType::kBF16,
      .head_dim = 128,
      .group = 4,
      .page_size = page,
      .tile_tokens = 64,
      .warps = 4,
      .stages = 4,
      .kernel = static_cast<tailor::internal::DecodeKernel>(variant)}
      .ToKey(kSm90a);
}

// One instantiation per template family; `header` is the template it covers.
// A family without a spec key yet gives its source in `code` (an explicit
// instantiation), and names in `also_covers` the headers only it includes.
struct TemplateCase {
  std::string name;
  SpecKey key;
  std::string header;
  std::vector<std::string> expected_ptx;  // substrings of the PTX
  std::string code = "";
  std::vector<std::string> also_covers = {};
};

// The ragged-attention kernels (templates/cuda/attention/prefill_*.cuh),
// instantiated by hand until the family has its typed spec.
std::vector<TemplateCase> RaggedAttentionCases() {
  return {
      {"prefill_sm90_bf16_d128_pack4_page16",
       SpecKey{},
       "templates/cuda/attention/prefill_sm90.cuh",
       {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes",
        "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group",
        "setmaxnreg.inc.sync.aligned.u32 224", "bar.arrive"},
       "#include \"templates/cuda/attention/prefill_sm90.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::PrefillSm90Kernel<tailor::cuda::Half16::kBf16, 128, 4, "
       "16>))\n",
       {"templates/cuda/attention/prefill_sm90_mainloop.cuh",
        "templates/cuda/attention/prefill_sm90_epilogue.cuh"}},
      {"prefill_sm90_f16_d256_pack8_page32",
       SpecKey{},
       "templates/cuda/attention/prefill_sm90.cuh",
       {"wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"},
       "#include \"templates/cuda/attention/prefill_sm90.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::PrefillSm90Kernel<tailor::cuda::Half16::kF16, 256, 8, "
       "32>))\n"},
      {"prefill_sm80_bf16_d128_pack4_page3",
       SpecKey{},
       "templates/cuda/attention/prefill_sm80.cuh",
       {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16", "cp.async"},
       "#include \"templates/cuda/attention/prefill_sm80.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::PrefillSm80Kernel<tailor::cuda::Half16::kBf16, 128, 4, "
       "3>))\n"},
      {"prefill_merge_bf16_d128",
       SpecKey{},
       "templates/cuda/attention/prefill_merge.cuh",
       {"ex2.approx.ftz.f32"},
       "#include \"templates/cuda/attention/prefill_merge.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::PrefillMergeKernel<tailor::cuda::Half16::kBf16, "
       "128>))\n"},
  };
}

// The FP8 MoE kernels (templates/cuda/moe/fp8_*.cuh) with runtime N and K,
// as the GPU harness bench/fp8/ builds them; the variants the typed spec
// builds are compiled by moe/fp8_nvrtc_test.cc.
std::vector<TemplateCase> Fp8MoeCases() {
  return {
      {"fp8_gemm_128_silu_quant",
       SpecKey{},
       "templates/cuda/moe/fp8_grouped_gemm_sm90.cuh",
       {"f32.e4m3.e4m3", "cvt.rn.satfinite.e4m3x2.f32"},
       "#include \"templates/cuda/moe/fp8_grouped_gemm_sm90.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::MoeFp8GroupedGemmSm90<0, 0, 128, "
       "tailor::cuda::kMoeEpilogueSiluAndMulQuant, 0>))\n",
       {"templates/cuda/moe/fp8_mainloop_sm90.cuh",
        "templates/cuda/moe/fp8_epilogue_sm90.cuh"}},
      {"fp8_gemm_swap_ab_16_plain",
       SpecKey{},
       "templates/cuda/moe/fp8_grouped_gemm_sm90.cuh",
       {"wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3"},
       "#include \"templates/cuda/moe/fp8_grouped_gemm_sm90.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::MoeFp8GroupedGemmSm90<0, 0, 16, "
       "tailor::cuda::kMoeEpilogueNone, 1>))\n"},
      {"fp8_gemm_mma_64_silu_quant",
       SpecKey{},
       "templates/cuda/moe/fp8_grouped_gemm_sm80.cuh",
       {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16"},
       "#include \"templates/cuda/moe/fp8_grouped_gemm_sm80.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, "
       "(tailor::cuda::MoeFp8GroupedGemmMma<0, 0, 0, "
       "tailor::cuda::kMoeEpilogueSiluAndMulQuant>))\n"},
      {"fp8_pack",
       SpecKey{},
       "templates/cuda/moe/fp8_pack.cuh",
       {"cvt.rn.satfinite.e4m3x2.f32"},
       "#include \"templates/cuda/moe/fp8_pack.cuh\"\n"
       "TAILOR_CUDA_ENTRY(tailor_template_probe, (tailor::cuda::MoeFp8Pack<0>))\n"},
  };
}

std::vector<TemplateCase> AllTemplateCases() {
  SpecKey empty;
  empty.op = tailor::internal::kTestEmptyOp;
  SpecKey axpy;
  axpy.op = tailor::internal::kTestAxpyOp;
  axpy.dims[0] = 4;
  const std::vector<std::string> kPatch = {
      "tensormap.replace.tile.global_address.shared::cta.b1024.b64",
      "tensormap.replace.tile.global_dim.shared::cta.b1024.b32",
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release."
      "gpu.sync.aligned",
      "fence.proxy.tensormap::generic.acquire.gpu",
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_"
      "tx::bytes",
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
      "mbarrier.arrive.expect_tx",
      "mbarrier.try_wait.parity",
      "cp.async.bulk.wait_group 0"};
  return {
      {"test_empty",
       empty,
       "templates/cuda/test_kernels.cuh",
       {".entry tailor_test_empty"}},
      {"test_axpy", axpy, "templates/cuda/test_kernels.cuh", {"fma.rn.f32"}},
      {"tma_patch_bf16",
       TmaKey(tailor::internal::kTmaPatchTestOp, DType::kBF16, 128, 64),
       "templates/cuda/tma_patch_test.cuh", kPatch},
      {"tma_patch_f32_stride",
       TmaKey(tailor::internal::kTmaPatchTestOp, DType::kF32, 64, 17,
              kTmaPatchReplaceStride),
       "templates/cuda/tma_patch_test.cuh",
       {"tensormap.replace.tile.global_stride.shared::cta.b1024.b64"}},
      {"tma_patch_only",
       TmaKey(tailor::internal::kTmaPatchTestOp, DType::kBF16, 128, 64,
              kTmaPatchOnly),
       "templates/cuda/tma_patch_test.cuh",
       {"tensormap.cp_fenceproxy"}},
      {"decode_tma",
       DecodeKey(kDecodeVariantTma, 16),
       "templates/cuda/attention/decode_sm90.cuh",
       {"cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes",
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}},
      {"decode_cp_async",
       DecodeKey(kDecodeVariantCpAsync, 5),
       "templates/cuda/attention/decode_sm80.cuh",
       {"cp.async.cg.shared.global", "cp.async.wait_group 3",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}},
      {"tma_copy_f32",
       TmaKey(tailor::internal::kTmaCopyTestOp, DType::kF32, 64, 32),
       "templates/cuda/tma_copy_test.cuh",
       {"cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes",
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"}},
      // The MoE family (templates/cuda/moe_*.cuh).
      {"moe_route_count_plan",
       RouteKey(tailor::internal::MoeRouteKernel::kCountPlan),
       "templates/cuda/moe/route.cuh",
       {"atom.global.min.u64", "ld.global.cg.s32"}},
      {"moe_route_fused",
       RouteKey(tailor::internal::MoeRouteKernel::kFused),
       "templates/cuda/moe/route.cuh",
       {"match.any.sync.b32"}},
      {"moe_route_scatter",
       RouteKey(tailor::internal::MoeRouteKernel::kScatter, 8),
       "templates/cuda/moe/route.cuh",
       {"match.any.sync.b32"}},
      {"moe_pack_bf16",
       tailor::internal::MoePackSpec{.dtype = DType::kBF16, .hidden = 4096}
           .ToKey(kSm90a),
       "templates/cuda/moe/pack.cuh",
       {"ld.global.v4.u32"}},
      {"moe_pack_f32_odd",
       tailor::internal::MoePackSpec{.dtype = DType::kF32, .hidden = 17}.ToKey(
           kSm90a),
       "templates/cuda/moe/pack.cuh",
       {"ld.global.u32"}},
      {"moe_combine_bf16",
       tailor::internal::MoeCombineSpec{
           .dtype = DType::kBF16, .hidden = 2048, .topk = 8}
           .ToKey(kSm90a),
       "templates/cuda/moe/combine.cuh",
       {"ld.global.v4.u32"}},
      {"moe_gemm_mma_silu",
       GemmKey(DType::kBF16, 1536, 2048, moe::Epilogue::kSiluAndMul, 64,
               tailor::internal::MoeGemmKernel::kMatrixCore),
       "templates/cuda/moe/grouped_gemm_sm80.cuh",
       {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "cp.async.cg.shared.global"}},
      {"moe_gemm_mma_ragged_n",
       GemmKey(DType::kBF16, 200, 72, moe::Epilogue::kNone, 17,
               tailor::internal::MoeGemmKernel::kMatrixCore),
       "templates/cuda/moe/grouped_gemm_sm80.cuh",
       {"mma.sync.aligned.m16n8k16"}},
      {"moe_gemm_sm90_rows64",
       GemmKey(DType::kBF16, 7168, 2048, moe::Epilogue::kNone, 64,
               tailor::internal::MoeGemmKernel::kHopper),
       "templates/cuda/moe/sm90/kernel.cuh",
       {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"}},
      {"moe_gemm_sm90_silu_rows128",
       GemmKey(DType::kBF16, 4096, 7168, moe::Epilogue::kSiluAndMul, 128,
               tailor::internal::MoeGemmKernel::kHopper),
       "templates/cuda/moe/sm90/kernel.cuh",
       {"wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
        "setmaxnreg.inc.sync.aligned.u32 232",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes",
        "mbarrier.try_wait.parity"}},
      {"moe_gemm_sm90_tma_store_rows128",
       GemmKey(DType::kBF16, 7168, 2048, moe::Epilogue::kNone, 128,
               tailor::internal::MoeGemmKernel::kHopper, {.tma_store = true}),
       "templates/cuda/moe/sm90/kernel.cuh",
       {"cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
        "cp.async.bulk.wait_group.read 1", "fence.proxy.async.shared::cta",
        "bar.sync"}},
      {"moe_gemm_sm90_tma_store_silu_rows64",
       GemmKey(DType::kBF16, 1536, 2048, moe::Epilogue::kSiluAndMul, 64,
               tailor::internal::MoeGemmKernel::kHopper, {.tma_store = true}),
       "templates/cuda/moe/sm90/kernel.cuh",
       {"cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"}},
      {"moe_gemm_sm90_checks_ragged",
       GemmKey(DType::kBF16, 200, 40, moe::Epilogue::kNone, 17,
               tailor::internal::MoeGemmKernel::kHopper,
               {.pipeline_checks = true}),
       "templates/cuda/moe/sm90/kernel.cuh",
       {"wgmma.mma_async", "trap;"}},
      {"moe_gemm_sm90_pingpong_tma_store_silu",
       GemmKey(DType::kBF16, 4096, 7168, moe::Epilogue::kSiluAndMul, 128,
               tailor::internal::MoeGemmKernel::kHopper,
               {.tma_store = true, .pingpong = true}),
       "templates/cuda/moe/sm90/kernel_pingpong.cuh",
       {"wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "bar.arrive",
        "setmaxnreg.inc.sync.aligned.u32 232",
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"}},
      {"moe_gemm_simt_f32",
       GemmKey(DType::kF32, 64, 32, moe::Epilogue::kSiluAndMul, 16,
               tailor::internal::MoeGemmKernel::kSimt),
       "templates/cuda/moe/grouped_gemm_sm80.cuh",
       {"fma.rn.f32"}},
      {"moe_gemm_simt_bf16_unaligned",
       GemmKey(DType::kBF16, 30, 17, moe::Epilogue::kNone, 64,
               tailor::internal::MoeGemmKernel::kSimt),
       "templates/cuda/moe/grouped_gemm_sm80.cuh",
       {"fma.rn.f32"}},
  };
}

// `headers` and every templates/cuda/ header they include, transitively.
std::set<std::string> IncludedTemplates(const std::set<std::string>& headers) {
  std::set<std::string> reached;
  std::vector<std::string> pending(headers.begin(), headers.end());
  while (!pending.empty()) {
    const std::string path = pending.back();
    pending.pop_back();
    if (!reached.insert(path).second) continue;
    const tailor::internal::EmbeddedFile* file =
        tailor::internal::FindEmbeddedFile(path);
    if (file == nullptr) continue;
    for (absl::string_view line : absl::StrSplit(file->contents(), '\n')) {
      constexpr absl::string_view kInclude = "#include \"templates/cuda/";
      if (!absl::ConsumePrefix(&line, kInclude)) continue;
      const size_t end = line.find('"');
      if (end == absl::string_view::npos) continue;
      pending.push_back(absl::StrCat("templates/cuda/", line.substr(0, end)));
    }
  }
  return reached;
}

TEST_F(NvrtcCompilerTest, EveryTemplateCompilesForSm90a) {
  std::set<std::string> covered;
  std::vector<TemplateCase> cases = AllTemplateCases();
  for (TemplateCase& c : RaggedAttentionCases()) cases.push_back(std::move(c));
  for (TemplateCase& c : Fp8MoeCases()) cases.push_back(std::move(c));
  for (const TemplateCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<KernelSource> source =
        c.code.empty() ? Generate(c.key)
                       : absl::StatusOr<KernelSource>(KernelSource{
                             .code = c.code, .entry = "tailor_template_probe"});
    TAILOR_ASSERT_OK(source.status());
    EXPECT_THAT(source->code, HasSubstr(c.header));
    absl::StatusOr<NvrtcCompiler::Output> out =
        compiler_->Compile(*source, "sm_90a", /*want_ptx=*/true);
    TAILOR_ASSERT_OK(out.status());
    EXPECT_GT(out->cubin.size(), 64u);
    EXPECT_EQ(out->cubin.substr(0, 4),
              "\x7f"
              "ELF");
    for (const std::string& instruction : c.expected_ptx) {
      EXPECT_THAT(out->ptx, HasSubstr(instruction));
    }
    covered.insert(c.header);
    covered.insert(c.also_covers.begin(), c.also_covers.end());
  }
  // Every kernel template (a .cuh with a device template) has a case above;
  // the parts a kernel is composed of (common code, a scheduler, a
  // mainloop, an epilogue) are covered through the kernels that include
  // them, and the decode trace (on only with its macro) by
  // DecodeTraceCompiles.
  const std::set<std::string> reached = IncludedTemplates(covered);
  for (const tailor::internal::EmbeddedFile& file :
       tailor::internal::EmbeddedFiles()) {
    const std::string path = file.path;
    if (!absl::StartsWith(path, "templates/cuda/") ||
        !absl::EndsWith(path, ".cuh"))
      continue;
    if (absl::EndsWith(path, "_trace.cuh")) continue;
    EXPECT_TRUE(reached.count(path))
        << path << " has no compile case in AllTemplateCases() and no "
        << "kernel template there includes it";
  }
}

// The TMA decode kernel with its per-CTA trace on (-DTAILOR_DECODE_TRACE,
// templates/cuda/attention/decode_trace.cuh): it still compiles, and prints.
TEST_F(NvrtcCompilerTest, DecodeTraceCompiles) {
  absl::StatusOr<KernelSource> source =
      Generate(DecodeKey(kDecodeVariantTma, 16));
  TAILOR_ASSERT_OK(source.status());
  source->code = "#define TAILOR_DECODE_TRACE\n" + source->code;
  absl::StatusOr<NvrtcCompiler::Output> out =
      compiler_->Compile(*source, "sm_90a", /*want_ptx=*/true);
  TAILOR_ASSERT_OK(out.status());
  EXPECT_THAT(out->ptx, HasSubstr("vprintf"));
  EXPECT_THAT(out->ptx, HasSubstr("%globaltimer"));
}

TEST_F(NvrtcCompilerTest, EveryTemplateHeaderCompilesAlone) {
  // Each header, included alone, must be self-contained for its arch.
  int headers = 0;
  for (const tailor::internal::EmbeddedFile& file :
       tailor::internal::EmbeddedFiles()) {
    const std::string path = file.path;
    if (!absl::StartsWith(path, "templates/cuda/") &&
        !absl::StartsWith(path, "templates/common/") &&
        !absl::StartsWith(path, "runtime/cuda/")) {
      continue;
    }
    SCOPED_TRACE(path);
    KernelSource source = {
        .code = absl::StrCat(
            "#include \"", path,
            "\"\nextern \"C\" __global__ void tailor_probe() {}\n"),
        .entry = "tailor_probe"};
    TAILOR_EXPECT_OK(compiler_->Compile(source, "sm_90a").status());
    ++headers;
  }
  EXPECT_GE(headers, 5);
}

// Uninstantiated helpers never reach ptxas: call every runtime/cuda helper
// once so that each PTX string is assembled.
TEST_F(NvrtcCompilerTest, EveryRuntimeHelperAssembles) {
  KernelSource source = {.code = R"(
#include "runtime/cuda/tensormap_patch.cuh"
#include "runtime/cuda/tma.cuh"
using namespace tailor::cuda;
struct Params { TensorMap map; TensorMap* slots; };
extern "C" __global__ void tailor_probe(const __grid_constant__ Params p) {
  __shared__ Mbarrier bar;
  __shared__ TensorMap staging;
  __shared__ alignas(128) unsigned char tile[4096];
  PrefetchTensorMap(&p.map);
  bar.Init(2);
  FenceMbarrierInit();
  bar.Arrive();
  bar.ArriveExpectTx(16);
  TmaLoad<1>(tile, &p.map, {0}, &bar);
  TmaLoad<3>(tile, &p.map, {0, 1, 2}, &bar);
  TmaLoad<4>(tile, &p.map, {0, 1, 2, 3}, &bar);
  TmaLoad<5>(tile, &p.map, {0, 1, 2, 3, 4}, &bar);
  bar.Wait(0);
  TmaStore<1>(&p.map, tile, {0});
  TmaStore<3>(&p.map, tile, {0, 1, 2});
  TmaStore<5>(&p.map, tile, {0, 1, 2, 3, 4});
  FenceSharedToAsyncProxy();
  BulkCommitGroup();
  BulkWaitGroupRead<1>();
  BulkWaitGroup<0>();
  StageTensorMap(&staging, p.map);
  ReplaceGlobalAddress(&staging, p.slots);
  ReplaceGlobalDim<4>(&staging, 7);
  ReplaceGlobalStride<3>(&staging, 4096);
  PublishTensorMap(RotatingSlot<3>(p.slots, 1, 5), &staging);
  AcquireTensorMap(p.slots);
}
)",
                         .entry = "tailor_probe"};
  absl::StatusOr<NvrtcCompiler::Output> out =
      compiler_->Compile(source, "sm_90a", /*want_ptx=*/true);
  TAILOR_ASSERT_OK(out.status());
  for (const char* instruction :
       {"prefetch.tensormap", "mbarrier.arrive.shared::cta.b64",
        "cp.async.bulk.tensor.5d.shared::cluster",
        "cp.async.bulk.tensor.5d.global", "cp.async.bulk.wait_group.read 1",
        "tensormap.replace.tile.global_stride",
        "fence.mbarrier_init.release.cluster"}) {
    EXPECT_THAT(out->ptx, HasSubstr(instruction));
  }
}

TEST_F(NvrtcCompilerTest, GenericKernelsCompileForSm80) {
  SpecKey axpy;
  axpy.op = tailor::internal::kTestAxpyOp;
  axpy.dims[0] = 1;
  absl::StatusOr<KernelSource> source = GenerateCudaTestKernel(axpy);
  TAILOR_ASSERT_OK(source.status());
  absl::StatusOr<NvrtcCompiler::Output> out =
      compiler_->Compile(*source, "sm_80", true);
  TAILOR_ASSERT_OK(out.status());
  EXPECT_THAT(out->ptx, HasSubstr(".target sm_80"));
}

TEST_F(NvrtcCompilerTest, PatcherNeedsArchSpecificTarget) {
  absl::StatusOr<KernelSource> source = GenerateCudaTestKernel(
      TmaKey(tailor::internal::kTmaPatchTestOp, DType::kBF16, 128, 64));
  TAILOR_ASSERT_OK(source.status());
  EXPECT_THAT(
      compiler_->Compile(*source, "sm_90"),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("needs -arch=sm_90a")));
  EXPECT_THAT(
      compiler_->Compile(*source, "sm_80"),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("needs sm_90 or newer")));
}

TEST_F(NvrtcCompilerTest, CompileErrorCarriesTheLog) {
  KernelSource source = {
      .code =
          "extern \"C\" __global__ void broken() { undeclared_name = 1; }\n",
      .entry = "broken"};
  absl::StatusOr<NvrtcCompiler::Output> out =
      compiler_->Compile(source, "sm_90a");
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kInternal,
                            HasSubstr("NVRTC_ERROR_COMPILATION")));
  EXPECT_THAT(
      out, StatusIs(absl::StatusCode::kInternal, HasSubstr("undeclared_name")));
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kInternal,
                            HasSubstr("broken for sm_90a")));
}

TEST_F(NvrtcCompilerTest, RejectsBadArguments) {
  KernelSource ok = {.code = "extern \"C\" __global__ void k() {}\n",
                     .entry = "k"};
  for (const char* arch :
       {"", "sm90", "sm_9", "sm_90b", "compute_90", "sm_1000", "sm_9x"}) {
    EXPECT_THAT(compiler_->Compile(ok, arch),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("arch: must be sm_")))
        << arch;
  }
  KernelSource no_entry = {.code = ok.code, .entry = ""};
  EXPECT_THAT(
      compiler_->Compile(no_entry, "sm_90a"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("source.entry")));
}

TEST_F(NvrtcCompilerTest, IdentityNamesVersionAndFlags) {
  const std::string& id = compiler_->identity();
  EXPECT_THAT(
      id, HasSubstr(absl::StrCat("nvrtc ", compiler_->api().VersionString())));
  EXPECT_THAT(id, HasSubstr("-std=c++20"));
  EXPECT_THAT(id, HasSubstr("-default-device"));
  EXPECT_THAT(id, Not(HasSubstr("-arch")));
  EXPECT_THAT(id, Not(HasSubstr("--use_fast_math")));

  absl::StatusOr<NvrtcCompiler> fast =
      NvrtcCompiler::Create({.line_info = true, .fast_math = true});
  TAILOR_ASSERT_OK(fast.status());
  EXPECT_THAT(fast->identity(), HasSubstr("-lineinfo"));
  EXPECT_THAT(fast->identity(), HasSubstr("--use_fast_math"));
  EXPECT_NE(fast->identity(), id);
}

TEST_F(NvrtcCompilerTest, MinimalFrontendOnNvrtc124AndNewer) {
  const NvrtcApi& api = compiler_->api();
  const bool supported = api.version_major > 12 ||
                         (api.version_major == 12 && api.version_minor >= 4);
  EXPECT_EQ(absl::StrContains(compiler_->identity(), " -minimal"), supported)
      << compiler_->identity();
  absl::StatusOr<NvrtcCompiler> full =
      NvrtcCompiler::Create({.minimal = false});
  TAILOR_ASSERT_OK(full.status());
  EXPECT_THAT(full->identity(), Not(HasSubstr("-minimal")));
}

TEST_F(NvrtcCompilerTest, ToolkitHeadersAreReachableWhenFound) {
  if (compiler_->toolkit_include_dir().empty()) {
    GTEST_SKIP() << "no CUDA toolkit headers here";
  }
  KernelSource source = {
      .code =
          "#include <cuda_bf16.h>\n#include <cuda/std/cstdint>\n"
          "extern \"C\" __global__ void k(__nv_bfloat16* p) {"
          " p[0] = __float2bfloat16(1.0f); }\n",
      .entry = "k"};
  TAILOR_EXPECT_OK(compiler_->Compile(source, "sm_90a").status());
}

TEST_F(NvrtcCompilerTest, CompilesConcurrently) {
  SpecKey axpy;
  axpy.op = tailor::internal::kTestAxpyOp;
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      SpecKey key = axpy;
      key.dims[0] = t + 1;
      absl::StatusOr<KernelSource> source = GenerateCudaTestKernel(key);
      results[t] = source.ok() ? compiler_->Compile(*source, "sm_90a").status()
                               : source.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : results) TAILOR_EXPECT_OK(status);
}

TEST(CudaTestKernelsTest, RejectsKeysTheTemplatesCannotBuild) {
  EXPECT_THAT(
      GenerateCudaTestKernel(
          TmaKey(tailor::internal::kTmaPatchTestOp, DType::kI32, 128, 64)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtypes[0]")));
  EXPECT_THAT(GenerateCudaTestKernel(TmaKey(tailor::internal::kTmaPatchTestOp,
                                            DType::kBF16, 100, 64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("multiple of 16")));
  EXPECT_THAT(
      GenerateCudaTestKernel(
          TmaKey(tailor::internal::kTmaCopyTestOp, DType::kF32, 512, 64)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[1, 256]")));
  EXPECT_THAT(
      GenerateCudaTestKernel(
          TmaKey(tailor::internal::kTmaCopyTestOp, DType::kF32, 64, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tile.m")));
  EXPECT_THAT(
      GenerateCudaTestKernel(
          TmaKey(tailor::internal::kTmaCopyTestOp, DType::kF32, 256, 256)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shared memory")));
  EXPECT_THAT(
      GenerateCudaTestKernel(TmaKey(tailor::internal::kTmaCopyTestOp,
                                    DType::kF32, 64, 8, kTmaPatchOnly)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("variant")));
  SpecKey axpy;
  axpy.op = tailor::internal::kTestAxpyOp;
  axpy.dims[0] = 0;
  EXPECT_THAT(
      GenerateCudaTestKernel(axpy),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unroll")));
  SpecKey gemm;
  gemm.op = OpKind::kMoeGroupedGemm;
  EXPECT_THAT(GenerateCudaTestKernel(gemm),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("moe.grouped_gemm")));
}

TEST(NvrtcApiTest, ResultConversionPicksSpecificCodes) {
  TAILOR_EXPECT_OK(NvrtcResultToStatus(NVRTC_SUCCESS, "x"));
  EXPECT_THAT(
      NvrtcResultToStatus(NVRTC_ERROR_OUT_OF_MEMORY, "nvrtcCompileProgram"),
      StatusIs(
          absl::StatusCode::kResourceExhausted,
          HasSubstr("nvrtcCompileProgram: NVRTC_ERROR_OUT_OF_MEMORY (1)")));
  EXPECT_THAT(NvrtcResultToStatus(NVRTC_ERROR_INVALID_OPTION, "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("NVRTC_ERROR_INVALID_OPTION")));
  EXPECT_THAT(NvrtcResultToStatus(NVRTC_ERROR_COMPILATION, "c"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("NVRTC_ERROR_COMPILATION (6)")));
  EXPECT_THAT(NvrtcResultToStatus(static_cast<nvrtcResult>(999), "c"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("NVRTC_ERROR_UNKNOWN (999)")));
}

TEST(NvrtcApiTest, ValidatesArchStrings) {
  for (const char* arch :
       {"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120f"}) {
    SCOPED_TRACE(arch);
    TAILOR_EXPECT_OK(ValidateCudaArch(arch));
  }
  EXPECT_THAT(ValidateCudaArch("gfx942"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got \"gfx942\"")));
}

TEST(NvrtcApiTest, LoadIsCachedAndNamesTheLibrary) {
  absl::StatusOr<const NvrtcApi*> first = LoadNvrtcApi();
  absl::StatusOr<const NvrtcApi*> second = LoadNvrtcApi();
  ASSERT_EQ(first.ok(), second.ok());
  if (!first.ok()) {
    EXPECT_THAT(
        first, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("libnvrtc")));
    return;
  }
  EXPECT_EQ(*first, *second);
  EXPECT_THAT((*first)->library_path, HasSubstr("nvrtc"));
  EXPECT_GE((*first)->version_major, 12);
}

}  // namespace
}  // namespace tailor::cuda
