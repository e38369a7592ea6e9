// hiprtc compile-only tests: run wherever hiprtc is installed (Debian 12:
// libamdhip64-5 and libamd-comgr2 from ROCm 5.2), no AMD GPU needed. They
// compile every HIP kernel template (MoE route, pack, grouped GEMM core and
// tails, combine; paged decode; ragged attention) for gfx90a (MI200) and, when this hiprtc's
// code-object manager knows it, gfx940 (CDNA3); otherwise they check that
// gfx940 is refused with Unimplemented instead of crashing hiprtc.
#include "backends/hip/hiprtc_compiler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/hip/attention/decode_kernels.h"
#include "backends/hip/attention/ragged_kernels.h"
#include "backends/hip/hip_api.h"
#include "backends/hip/moe/kernels.h"
#include "ops/attention/ragged_spec.h"
#include "templates/hip/moe/params.h"
#include "test_util.h"

namespace tailor::hip {
namespace {

using tailor::internal::DecodeShape;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::MoeCombineSpec;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::MoePackSpec;
using tailor::internal::MoeRouteKernel;
using tailor::internal::MoeRouteSpec;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;
using tailor::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// The compiler, or a skip when this machine has no hiprtc.
class HiprtcCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<HiprtcCompiler> compiler = HiprtcCompiler::Create({});
    if (!compiler.ok()) {
      ASSERT_EQ(compiler.status().code(), absl::StatusCode::kUnavailable)
          << compiler.status();
      GTEST_SKIP() << "hiprtc not installed: " << compiler.status();
    }
    compiler_.emplace(*std::move(compiler));
  }

  bool Knows(absl::string_view target) const {
    return compiler_->CheckTarget(target).ok();
  }

  // Compiles `key`'s source for `target` and expects an AMDGPU ELF.
  void ExpectCompiles(const KernelSource& source, absl::string_view target) {
    absl::StatusOr<HiprtcCompiler::Output> out =
        compiler_->Compile(source, target);
    ASSERT_TRUE(out.ok()) << source.code << "\n" << out.status();
    ASSERT_GE(out->code_object.size(), 4u);
    EXPECT_EQ(out->code_object.substr(0, 4),
              "\x7f"
              "ELF")
        << source.code;
  }

  std::optional<HiprtcCompiler> compiler_;
};

KeyTarget HipTarget(absl::string_view target) {
  return KeyTarget{.backend = BackendKind::kHip, .arch = target};
}

// Every MoE kernel variant a step can launch.
std::vector<SpecKey> MoeKeys(absl::string_view target) {
  std::vector<SpecKey> keys;
  for (MoeRouteKernel kernel :
       {MoeRouteKernel::kCountPlan, MoeRouteKernel::kFused}) {
    keys.push_back(MoeRouteSpec{.kernel = kernel}.ToKey(HipTarget(target)));
  }
  for (int waves : {1, 2, 4}) {
    keys.push_back(
        MoeRouteSpec{.kernel = MoeRouteKernel::kScatter, .scatter_warps = waves}
            .ToKey(HipTarget(target)));
  }
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    keys.push_back(
        MoePackSpec{.dtype = dtype, .hidden = 4096}.ToKey(HipTarget(target)));
    // A row not 16-byte aligned, top-8.
    keys.push_back(
        MoeCombineSpec{.dtype = dtype, .hidden = 2050, .topk = 8}.ToKey(
            HipTarget(target)));
  }
  // Grouped GEMM: MFMA with 64- and 128-row tiles (core and tails in one
  // kernel), both epilogues, a K that is not a multiple of the 64-K tile;
  // SIMT for f32 and for bf16 rows that are not 16-byte aligned.
  constexpr auto kMfma = MoeGemmKernel::kMatrixCore;
  constexpr auto kSimt = MoeGemmKernel::kSimt;
  constexpr auto kSilu = moe::Epilogue::kSiluAndMul;
  constexpr auto kNone = moe::Epilogue::kNone;
  for (const MoeGemmSpec& g :
       {MoeGemmSpec{DType::kBF16, 1536, 2048, 64, 0, kSilu, kMfma},
        MoeGemmSpec{DType::kBF16, 2048, 768, 64, 0, kNone, kMfma},
        MoeGemmSpec{DType::kBF16, 2048, 776, 128, 0, kSilu, kMfma},
        MoeGemmSpec{DType::kBF16, 96, 72, 16, 0, kNone, kMfma},
        MoeGemmSpec{DType::kBF16, 512, 512, 32, 0, kSilu, kMfma},
        MoeGemmSpec{DType::kF32, 1536, 2048, 64, 0, kSilu, kSimt},
        MoeGemmSpec{DType::kBF16, 100, 98, 64, 0, kNone, kSimt}}) {
    keys.push_back(g.ToKey(HipTarget(target)));
  }
  return keys;
}

std::vector<SpecKey> DecodeKeys(absl::string_view target) {
  std::vector<SpecKey> keys;
  for (const DecodeShape& shape :
       {DecodeShape{.dtype = DType::kBF16,
       .head_dim = 128,
       .group = 4,
       .page_size = 16},
        DecodeShape{.dtype = DType::kF16,
        .head_dim = 128,
        .group = 16,
        .page_size = 16},
        DecodeShape{
            .dtype = DType::kBF16, .head_dim = 64, .group = 1, .page_size = 1},
        DecodeShape{.dtype = DType::kBF16,
        .head_dim = 256,
        .group = 8,
        .page_size = 5}}) {
    absl::StatusOr<SpecKey> key = HipDecodeKey(HipTarget(target), shape);
    if (key.ok()) keys.push_back(*key);
  }
  return keys;
}

// Ragged attention: both dtypes, every head_dim, packs 1 to 16, pages of 1,
// 3, 16 and 256, the three masks; the merge at every head_dim.
std::vector<SpecKey> RaggedKeys(absl::string_view target) {
  using tailor::internal::RaggedMask;
  std::vector<SpecKey> keys;
  struct Shape {
    DType dtype;
    int32_t d, group, page;
    RaggedMask mask;
  };
  for (const Shape& s :
       {Shape{DType::kBF16, 128, 4, 16, RaggedMask::kCausal},
        Shape{DType::kF16, 128, 8, 1, RaggedMask::kCausalWindow},
        Shape{DType::kBF16, 64, 1, 3, RaggedMask::kNone},
        Shape{DType::kF16, 256, 16, 256, RaggedMask::kCausal},
        Shape{DType::kBF16, 256, 2, 5, RaggedMask::kCausal}}) {
    const tailor::internal::RaggedShape shape = {
        .dtype = s.dtype,
        .head_dim = s.d,
        .num_qo_heads = s.group * 2,
        .num_kv_heads = 2,
        .page_size = s.page,
        .causal = s.mask != RaggedMask::kNone,
        .window_left = s.mask == RaggedMask::kCausalWindow ? 100 : -1};
    absl::StatusOr<tailor::internal::RaggedPlanConfig> config =
        HipRaggedPlanConfig(shape, 104);
    if (!config.ok()) continue;  // the count below fails
    keys.push_back(tailor::internal::RaggedKernelSpecFor(shape, *config)
                       .Key(HipTarget(target)));
  }
  for (int32_t d : {64, 128, 256}) {
    keys.push_back(tailor::internal::RaggedMergeSpec{
        .dtype = DType::kF16, .head_dim = d, .head_pack = 4, .tile_rows = 64}
                       .Key(HipTarget(target)));
  }
  return keys;
}

TEST_F(HiprtcCompilerTest, EveryMoeKernelCompilesForGfx90a) {
  for (const SpecKey& key : MoeKeys("gfx90a")) {
    SCOPED_TRACE(key.ToString());
    absl::StatusOr<KernelSource> source = GenerateHipMoeKernel(key);
    ASSERT_TRUE(source.ok()) << source.status();
    ExpectCompiles(*source, "gfx90a");
  }
}

TEST_F(HiprtcCompilerTest, EveryDecodeKernelCompilesForGfx90a) {
  const std::vector<SpecKey> keys = DecodeKeys("gfx90a");
  ASSERT_EQ(keys.size(), 4u);
  for (const SpecKey& key : keys) {
    SCOPED_TRACE(key.ToString());
    absl::StatusOr<KernelSource> source = GenerateHipDecode(key);
    ASSERT_TRUE(source.ok()) << source.status();
    ExpectCompiles(*source, "gfx90a");
  }
}

TEST_F(HiprtcCompilerTest, EveryRaggedKernelCompilesForGfx90a) {
  const std::vector<SpecKey> keys = RaggedKeys("gfx90a");
  ASSERT_EQ(keys.size(), 8u);
  for (const SpecKey& key : keys) {
    SCOPED_TRACE(key.ToString());
    absl::StatusOr<KernelSource> source = GenerateHipRagged(key);
    ASSERT_TRUE(source.ok()) << source.status();
    ExpectCompiles(*source, "gfx90a");
  }
}

// gfx940 (CDNA3): compiled when this hiprtc can; ROCm 5.2's comgr cannot
// (its ISA table stops at gfx90c/gfx1036), and hiprtc would abort the
// process on it, so the compiler must refuse it up front.
TEST_F(HiprtcCompilerTest, Gfx940CompilesOrIsRefusedWithTheReason) {
  if (!Knows("gfx940")) {
    const KernelSource source = *GenerateHipMoeKernel(MoeKeys("gfx940")[0]);
    EXPECT_THAT(
        compiler_->Compile(source, "gfx940"),
        StatusIs(absl::StatusCode::kUnimplemented,
                 HasSubstr("target gfx940: hiprtc " +
                           compiler_->api().VersionString() +
                           " cannot compile for it: its code-object manager")));
    EXPECT_THAT(
        compiler_->CheckTarget("gfx942:sramecc+:xnack-"),
        StatusIs(
            absl::StatusCode::kUnimplemented,
            HasSubstr("needs a newer ROCm: 6.0 or later supports MI300X")));
    GTEST_SKIP() << "hiprtc " << compiler_->api().VersionString()
                 << " cannot compile for gfx940 (checked: refused, no crash)";
  }
  for (const SpecKey& key : MoeKeys("gfx940")) {
    SCOPED_TRACE(key.ToString());
    ExpectCompiles(*GenerateHipMoeKernel(key), "gfx940");
  }
  for (const SpecKey& key : DecodeKeys("gfx940")) {
    SCOPED_TRACE(key.ToString());
    ExpectCompiles(*GenerateHipDecode(key), "gfx940");
  }
  for (const SpecKey& key : RaggedKeys("gfx940")) {
    SCOPED_TRACE(key.ToString());
    ExpectCompiles(*GenerateHipRagged(key), "gfx940");
  }
}

// gfx908 has MFMA but not the bf16 _1k instructions: LLVM would abort the
// process in instruction selection; the kernel's static_assert stops the
// compile first, and the SIMT kernel compiles there.
TEST_F(HiprtcCompilerTest, MfmaGemmForGfx908IsACompileErrorNotACrash) {
  MoeGemmSpec gemm = {.dtype = DType::kBF16,
                      .n = 256,
                      .k = 256,
                      .tile_rows = 64,
                      .kernel = MoeGemmKernel::kMatrixCore};
  EXPECT_THAT(
      compiler_->Compile(*GenerateHipMoeKernel(gemm.ToKey(HipTarget("gfx908"))),
                         "gfx908"),
      StatusIs(absl::StatusCode::kInternal,
               HasSubstr("bf16 _1k MFMAs need gfx90a or gfx94x")));
  gemm.kernel = MoeGemmKernel::kSimt;
  ExpectCompiles(*GenerateHipMoeKernel(gemm.ToKey(HipTarget("gfx908"))),
                 "gfx908");
}

// Disassembly of `code_object` by LLVM 14's objdump (it knows gfx90a), or
// "" when the tool is absent.
std::string Disassemble(const std::string& code_object,
                        absl::string_view target) {
  const std::filesystem::path tool = "/usr/lib/llvm-14/bin/llvm-objdump";
  if (!std::filesystem::exists(tool)) return "";
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      absl::StrCat("tailor_hip_test_", ::getpid(), ".co");
  std::ofstream(file, std::ios::binary) << code_object;
  const std::string command =
      absl::StrCat(tool.string(), " -d --mcpu=", target, " ", file.string());
  std::string text;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
      text.append(buffer, n);
    ::pclose(pipe);
  }
  std::filesystem::remove(file);
  return text;
}

// The MFMA GEMM is what it says: bf16 MFMAs fed by 16-byte LDS accesses
// (the swizzled layout of runtime/hip/mfma.h), and no scratch (spills).
TEST_F(HiprtcCompilerTest, MfmaGemmUsesMatrixCoresAndWideLdsAccesses) {
  const SpecKey key = MoeGemmSpec{.dtype = DType::kBF16,
                                  .n = 1536,
                                  .k = 2048,
                                  .tile_rows = 64,
                                  .epilogue = moe::Epilogue::kSiluAndMul,
                                  .kernel = MoeGemmKernel::kMatrixCore}
                          .ToKey(HipTarget("gfx90a"));
  absl::StatusOr<HiprtcCompiler::Output> out =
      compiler_->Compile(*GenerateHipMoeKernel(key), "gfx90a");
  ASSERT_TRUE(out.ok()) << out.status();
  const std::string text = Disassemble(out->code_object, "gfx90a");
  if (text.empty()) GTEST_SKIP() << "llvm-objdump-14 not installed";
  EXPECT_THAT(text, HasSubstr("v_mfma_f32_16x16x16bf16_1k"));
  EXPECT_THAT(text, HasSubstr("ds_read_b128"));
  EXPECT_THAT(text, HasSubstr("ds_write_b128"));
  EXPECT_THAT(text, Not(HasSubstr("scratch_store")));
  EXPECT_THAT(text, Not(HasSubstr("buffer_store_dword v"))) << "spills";
}

TEST_F(HiprtcCompilerTest, ComgrOfDebianRocm52KnowsGfx90a) {
  EXPECT_TRUE(Knows("gfx90a"));
  EXPECT_TRUE(Knows("gfx90a:sramecc+:xnack-"));
}

TEST_F(HiprtcCompilerTest, CompileErrorCarriesTheLog) {
  const KernelSource bad{.code = "extern \"C\" __global__ void k() { nope; }",
                         .entry = "k"};
  EXPECT_THAT(compiler_->Compile(bad, "gfx90a"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("hiprtc: compiling k for gfx90a: "
                                 "HIPRTC_ERROR_COMPILATION (6)")));
  EXPECT_THAT(compiler_->Compile(bad, "gfx90a"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("nope")));
}

TEST_F(HiprtcCompilerTest, RejectsEmptyEntryAndBadTarget) {
  const KernelSource ok{.code = "extern \"C\" __global__ void k() {}",
                        .entry = ""};
  EXPECT_THAT(compiler_->Compile(ok, "gfx90a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("source.entry: must name")));
  EXPECT_THAT(compiler_->Compile(ok, "sm_90a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("target: must be gfx")));
}

TEST_F(HiprtcCompilerTest, IdentityNamesVersionLibraryAndFlagsNotTarget) {
  const std::string& id = compiler_->identity();
  EXPECT_THAT(id, HasSubstr("hiprtc " + compiler_->api().VersionString()));
  EXPECT_THAT(id, HasSubstr("-O3"));
  EXPECT_THAT(id, Not(HasSubstr("gpu-architecture")));
}

// ---- pure host logic (no hiprtc needed) -------------------------------------

TEST(ValidateGfxTargetTest, AcceptsTargetIdsAndRejectsOthers) {
  for (const char* ok : {"gfx90a", "gfx940", "gfx942:sramecc+:xnack-",
                         "gfx1030", "gfx908:xnack+"}) {
    EXPECT_TRUE(ValidateGfxTarget(ok).ok()) << ok;
  }
  for (const char* bad : {"", "gfx", "gfx9", "gfx90a:", "gfx90a:xnack",
                          "sm_90a", "gfx90g", "GFX90A", "gfx12345"}) {
    EXPECT_THAT(ValidateGfxTarget(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("got \"", bad, "\""))))
        << bad;
  }
  EXPECT_EQ(GfxProcessor("gfx942:sramecc+:xnack-"), "gfx942");
  EXPECT_TRUE(IsCdnaProcessor("gfx90a"));
  EXPECT_TRUE(IsCdnaProcessor("gfx942"));
  EXPECT_FALSE(IsCdnaProcessor("gfx1030"));  // RDNA: wave32
}

TEST(HipErrorConversionTest, HiprtcResultsMapToCanonicalCodes) {
  EXPECT_TRUE(HiprtcResultToStatus(HIPRTC_SUCCESS, "x").ok());
  EXPECT_THAT(HiprtcResultToStatus(HIPRTC_ERROR_OUT_OF_MEMORY, "c"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "c: HIPRTC_ERROR_OUT_OF_MEMORY (1)"));
  EXPECT_THAT(HiprtcResultToStatus(HIPRTC_ERROR_INVALID_OPTION, "c"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c: HIPRTC_ERROR_INVALID_OPTION (5)"));
  EXPECT_THAT(
      HiprtcResultToStatus(HIPRTC_ERROR_COMPILATION, "c"),
      StatusIs(absl::StatusCode::kInternal, "c: HIPRTC_ERROR_COMPILATION (6)"));
  EXPECT_THAT(
      HiprtcResultToStatus(99, "c"),
      StatusIs(absl::StatusCode::kInternal, "c: HIPRTC_ERROR_UNKNOWN (99)"));
}

TEST(HipErrorConversionTest, HipErrorsMapToCanonicalCodes) {
  EXPECT_TRUE(HipErrorToStatus(hipSuccess, "x").ok());
  EXPECT_THAT(HipErrorToStatus(hipErrorOutOfMemory, "hipMalloc"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "hipMalloc: hipError (2)"));
  EXPECT_THAT(HipErrorToStatus(hipErrorNoDevice, "n"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(100)")));
  EXPECT_THAT(HipErrorToStatus(hipErrorInvalidImage, "load"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(200)")));
  EXPECT_THAT(
      HipErrorToStatus(hipErrorLaunchOutOfResources, "launch"),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("(701)")));
  EXPECT_THAT(HipErrorToStatus(hipErrorUnknown, "u"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("u: hipError")));
}

}  // namespace
}  // namespace tailor::hip
