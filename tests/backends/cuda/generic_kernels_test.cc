// The generic CUDA kernels of background JIT, without a GPU: the image
// built into the library (when the build found NVRTC) holds every kernel of
// the table for sm_80, sm_90 and as compute_80 PTX; a device picks the
// right one; the run-time fallback's keys and sources (one kernel each)
// compile with NVRTC here.
#include "backends/cuda/generic_kernels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/cuda/generic_image.h"
#include "backends/cuda/generic_kernel_table.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/nvrtc_report_test_util.h"
#include "test_util.h"

namespace tailor::cuda {
namespace {

using ::tailor::internal::KernelSource;
using ::tailor::internal::KeyTarget;
using ::tailor::internal::OpKind;
using ::tailor::internal::SpecKey;
using ::tailor::testing::StatusIs;
using ::testing::HasSubstr;

GenericKernelId Id(int i) { return static_cast<GenericKernelId>(i); }

TEST(GenericKernelTable, EntriesAreUniqueAndNamedForTheirFamily) {
  std::set<std::string> entries;
  for (int i = 0; i < kNumGenericKernels; ++i) {
    const GenericKernelInfo& info = GenericKernelInfoOf(Id(i));
    EXPECT_TRUE(absl::StartsWith(info.entry, "tailor_generic_")) << info.entry;
    EXPECT_TRUE(entries.insert(info.entry).second) << info.entry;
    EXPECT_TRUE(absl::StrContains(GenericKernelsSource(), info.entry));
  }
  EXPECT_EQ(entries.size(), 45u);
  EXPECT_EQ(
      std::string(GenericKernelInfoOf(GenericKernelId::kDecodeF16D256).entry),
      "tailor_generic_decode_f16_d256");
  EXPECT_EQ(
      std::string(GenericKernelInfoOf(GenericKernelId::kRaggedBf16D128).entry),
      "tailor_generic_ragged_bf16_d128");
  EXPECT_EQ(std::string(
                GenericKernelInfoOf(GenericKernelId::kRaggedMergeF16D64).entry),
            "tailor_generic_ragged_merge_f16_d64");
  EXPECT_EQ(std::string(
                GenericKernelInfoOf(GenericKernelId::kFp8GemmBlockQuant).entry),
            "tailor_generic_moe_fp8_gemm_block_silu_quant");
  EXPECT_EQ(std::string(
                GenericKernelInfoOf(GenericKernelId::kFp8PackPerTensor).kernel),
            "MoeFp8Pack<0, tailor::cuda::kMoeFp8PerTensor>");
}

#ifdef TAILOR_EXPECT_GENERIC_IMAGE
TEST(GenericImage, HoldsEveryKernelForEachTarget) {
  ASSERT_EQ(kNumGenericImages, 3);
  EXPECT_THAT(kGenericImageCompiler, HasSubstr("nvrtc"));
  for (int i = 0; i < kNumGenericImages; ++i) {
    const GenericImage& image = kGenericImages[i];
    SCOPED_TRACE(image.target);
    const absl::string_view bytes(reinterpret_cast<const char*>(image.data),
                                  image.size);
    if (image.ptx) {
      EXPECT_EQ(std::string(image.target), "compute_80");
      EXPECT_THAT(std::string(bytes.substr(0, 2000)),
                  HasSubstr(".target sm_80"));
      EXPECT_EQ(bytes.back(), '\0');  // cuModuleLoadData reads a C string
    } else {
      EXPECT_EQ(bytes.substr(0, 4),
                "\x7f"
                "ELF");
    }
    for (int k = 0; k < kNumGenericKernels; ++k) {
      const std::string entry = GenericKernelInfoOf(Id(k)).entry;
      // ELF symbol names and PTX entries both spell the name out.
      EXPECT_TRUE(absl::StrContains(
          bytes, image.ptx ? ".entry " + entry + "(" : entry + '\0'))
          << entry;
    }
  }
}

TEST(GenericImage, EachDevicePicksTheImageOfItsMajor) {
  ASSERT_NE(GenericImageFor(80), nullptr);
  EXPECT_STREQ(GenericImageFor(80)->target, "sm_80");
  EXPECT_STREQ(GenericImageFor(86)->target, "sm_80");
  EXPECT_STREQ(GenericImageFor(89)->target, "sm_80");
  EXPECT_STREQ(GenericImageFor(90)->target, "sm_90");
  EXPECT_STREQ(GenericImageFor(100)->target, "compute_80");
  EXPECT_STREQ(GenericImageFor(120)->target, "compute_80");
  EXPECT_EQ(GenericImageFor(75), nullptr);
}
#else
TEST(GenericImage, NoneWithoutNvrtcAtBuildTime) {
  EXPECT_EQ(kNumGenericImages, 0);
  EXPECT_EQ(GenericImageFor(90), nullptr);
}
#endif

TEST(GenericKernelKeys, OneKeyPerKernelWithItsFamilysOp) {
  const KeyTarget target = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
  const SpecKey pack = GenericKernelKey(target, GenericKernelId::kPackBf16);
  // No shape: one kernel serves them all. The encoding, pinned:
  EXPECT_EQ(pack.ToString(),
            absl::StrCat("moe.pack/cuda/sm_90a//H=0/b0/t0/m0n0k0/v",
                         kGenericKeyVariant | static_cast<uint32_t>(
                                                  GenericKernelId::kPackBf16)));
  absl::StatusOr<GenericKernelId> id = GenericKernelIdOf(pack);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, GenericKernelId::kPackBf16);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kRouteScatter4).op,
            OpKind::kMoeRoute);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kGemmSimtF32None).op,
            OpKind::kMoeGroupedGemm);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kCombineF32).op,
            OpKind::kMoeCombine);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kDecodeBf16D64).op,
            OpKind::kAttentionDecode);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kRaggedF16D256).op,
            OpKind::kAttentionRagged);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kRaggedMergeBf16D256).op,
            OpKind::kAttentionRaggedMerge);
  EXPECT_EQ(GenericKernelKey(target, GenericKernelId::kFp8PackBlock).op,
            OpKind::kMoePack);
  EXPECT_EQ(
      GenericKernelKey(target, GenericKernelId::kFp8GemmPerChannelNone).op,
      OpKind::kMoeGroupedGemm);
  std::set<uint64_t> hashes;
  for (int i = 0; i < kNumGenericKernels; ++i) {
    hashes.insert(GenericKernelKey(target, Id(i)).Hash().low);
  }
  EXPECT_EQ(hashes.size(), static_cast<size_t>(kNumGenericKernels));

  absl::StatusOr<KernelSource> source = GenerateGenericKernel(pack);
  TAILOR_ASSERT_OK(source.status());
  EXPECT_EQ(source->entry, "tailor_generic_moe_pack_bf16");
  EXPECT_THAT(source->code, HasSubstr("MoePack<tailor::cuda::bf16, 0>"));

  SpecKey specialized = target.MakeKey(OpKind::kMoePack);
  EXPECT_THAT(GenerateGenericKernel(specialized).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "variant: not a generic kernel of moe.pack, got 0"));
  SpecKey shaped = pack;
  shaped.dims[0] = 4096;
  EXPECT_THAT(GenerateGenericKernel(shaped).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "dims[0]: not used by this kernel, must be 0, got "
                       "4096"));
  SpecKey wrong_op = pack;
  wrong_op.op = OpKind::kMoeCombine;
  EXPECT_THAT(GenerateGenericKernel(wrong_op).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a generic kernel of moe.combine")));
}

// The run-time fallback compiles one kernel per key: two of them here (the
// build compiled all of them into the image already).
TEST(GenericKernelKeys, RunTimeSourcesCompileWithNvrtc) {
  absl::StatusOr<NvrtcCompiler> compiler = NvrtcCompiler::Create({});
  if (!compiler.ok()) GTEST_SKIP() << compiler.status();
  const KeyTarget target = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
  for (GenericKernelId id :
       {GenericKernelId::kCombineBf16, GenericKernelId::kDecodeF16D64,
        GenericKernelId::kRaggedMergeBf16D128}) {
    absl::StatusOr<KernelSource> source =
        GenerateGenericKernel(GenericKernelKey(target, id));
    TAILOR_ASSERT_OK(source.status());
    absl::StatusOr<NvrtcCompiler::Output> out =
        compiler->Compile(*source, "sm_90a");
    TAILOR_ASSERT_OK(out.status());
    EXPECT_TRUE(absl::StrContains(out->cubin, source->entry)) << source->entry;
  }
}

// Prints one compile's registers and spill bytes beside its entry and arch;
// every generic kernel reports registers and spills nothing.
void ExpectNoSpills(const NvrtcCompiler::Output& out, const char* entry,
                    const char* arch) {
  const int regs = testing::LogNumber(out.log, R"(Used (\d+) registers)");
  const int stores = testing::LogNumber(out.log, R"((\d+) bytes spill stores)");
  const int loads = testing::LogNumber(out.log, R"((\d+) bytes spill loads)");
  std::printf("%-50s %6s regs %3d spill %d/%d\n", entry, arch, regs, stores,
              loads);
  EXPECT_GT(regs, 0) << out.log;
  EXPECT_EQ(stores, 0) << out.log;
  EXPECT_EQ(loads, 0) << out.log;
}

class GenericNvrtcTest
    : public testing::NvrtcReportTest<&GenerateGenericKernel> {
 protected:
  // Compiles the generic kernels [first, last] for both cubins of the image
  // (sm_80, sm_90), expects each without spills, and hands it to
  // check(info, arch, output).
  template <typename Check>
  void CompileEach(GenericKernelId first, GenericKernelId last, Check check) {
    const KeyTarget target = {.backend = BackendKind::kCuda, .arch = "sm_80"};
    for (const char* arch : {"sm_80", "sm_90"}) {
      for (int i = static_cast<int>(first); i <= static_cast<int>(last); ++i) {
        const GenericKernelInfo& info = GenericKernelInfoOf(Id(i));
        SCOPED_TRACE(absl::StrCat(info.entry, " ", arch));
        absl::StatusOr<NvrtcCompiler::Output> out =
            Compile(GenericKernelKey(target, Id(i)), arch);
        TAILOR_ASSERT_OK(out.status());
        ExpectNoSpills(*out, info.entry, arch);
        check(info, std::string(arch), *out);
      }
    }
  }
};

// The generic ragged kernels (the portable kernel with runtime pack and
// page size) compile without spills for both cubins of the image.
TEST_F(GenericNvrtcTest, RaggedKernelsCompileWithoutSpills) {
  CompileEach(GenericKernelId::kRaggedBf16D64, GenericKernelId::kRaggedF16D256,
              [](const GenericKernelInfo&, const std::string&,
                 const NvrtcCompiler::Output& out) {
                EXPECT_THAT(out.ptx, HasSubstr("mma.sync.aligned.m16n8k16"));
              });
}

// The generic FP8 kernels (the quantizing Pack with runtime H; the portable
// FP8 GEMM with runtime N, K and tile rows in every scale mode and
// epilogue) compile without spills for both cubins of the image; the GEMMs
// run on mma.sync, sm_90 converts e4m3 with its cvt instructions.
TEST_F(GenericNvrtcTest, Fp8KernelsCompileWithoutSpills) {
  CompileEach(GenericKernelId::kFp8PackBlock,
              GenericKernelId::kFp8GemmPerChannelSiluAndMul,
              [](const GenericKernelInfo& info, const std::string& arch,
                 const NvrtcCompiler::Output& out) {
                const bool gemm = info.op == OpKind::kMoeGroupedGemm;
                EXPECT_EQ(
                    absl::StrContains(out.ptx, "mma.sync.aligned.m16n8k16"),
                    gemm);
                EXPECT_EQ(absl::StrContains(out.ptx, "cvt.rn.f16x2.e4m3x2"),
                          gemm && arch == "sm_90");
              });
}

}  // namespace
}  // namespace tailor::cuda
