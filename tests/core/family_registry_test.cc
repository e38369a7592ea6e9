// The family registry: one entry per backend x family, what each names, and
// what Supports and warm-up read from it.
#include "core/family_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "tailor/runtime.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsNull;
using ::testing::NotNull;

constexpr OpKind kLibraryOps[] = {
    OpKind::kMoePack,         OpKind::kMoeGroupedGemm,
    OpKind::kMoeCombine,      OpKind::kMoeRoute,
    OpKind::kAttentionDecode, OpKind::kAttentionDecodeMerge,
    OpKind::kAttentionRagged, OpKind::kAttentionRaggedMerge};

// (backend, family) pairs in registry order, and who builds which op.
TEST(FamilyRegistryTest, OneEntryPerBackendAndFamily) {
  std::vector<std::string> entries;
  std::set<std::pair<BackendKind, OpKind>> ops;
  for (const FamilyDescriptor* family : Families()) {
    // The library's (other tests here register their own).
    if (family->name != "moe" && family->name != "attention" &&
        family->name != "ragged_attention") {
      continue;
    }
    entries.push_back(
        absl::StrCat(BackendName(family->backend), ".", family->name));
    EXPECT_THAT(family->generate, NotNull()) << entries.back();
    for (OpKind op : family->ops) {
      EXPECT_TRUE(ops.insert({family->backend, op}).second)
          << GetOpInfo(op).name << " is in two families on "
          << BackendName(family->backend);
    }
  }
  EXPECT_THAT(entries,
              ElementsAre("cpu.moe", "cpu.attention", "cpu.ragged_attention",
                          "cuda.moe", "cuda.attention", "cuda.ragged_attention",
                          "hip.moe", "hip.attention", "hip.ragged_attention"));
  for (OpKind op : kLibraryOps) {
    EXPECT_NE(GetOpInfo(op).name, "invalid");
    EXPECT_EQ(OpKindFromName(GetOpInfo(op).name), op);
  }
}

TEST(FamilyRegistryTest, FindFamilyNamesTheBuilderOfAnOp) {
  // The CPU routes on the host; GPUs route on the device.
  EXPECT_THAT(FindFamily(BackendKind::kCpu, OpKind::kMoeRoute), IsNull());
  ASSERT_THAT(FindFamily(BackendKind::kCuda, OpKind::kMoeRoute), NotNull());
  EXPECT_EQ(FindFamily(BackendKind::kCuda, OpKind::kMoeRoute)->name, "moe");
  EXPECT_EQ(
      FindFamily(BackendKind::kCuda, OpKind::kMoeRoute)->min_compute_capability,
      80);
  // Only the CPU merges split decode pieces in a kernel of their own.
  ASSERT_THAT(FindFamily(BackendKind::kCpu, OpKind::kAttentionDecodeMerge),
              NotNull());
  EXPECT_THAT(FindFamily(BackendKind::kCuda, OpKind::kAttentionDecodeMerge),
              IsNull());
  EXPECT_EQ(FindFamily(BackendKind::kHip, OpKind::kAttentionDecode)->name,
            "attention");
  ASSERT_THAT(FindFamily(BackendKind::kHip, OpKind::kAttentionRaggedMerge),
              NotNull());
  EXPECT_EQ(FindFamily(BackendKind::kHip, OpKind::kAttentionRagged)->name,
            "ragged_attention");
  // Test kernels are no library op (tests/kernels/ registers them).
  EXPECT_THAT(FindFamily(BackendKind::kCpu, static_cast<OpKind>(1)), IsNull());
  EXPECT_EQ(GetOpInfo(static_cast<OpKind>(1)).name, "invalid");
}

absl::StatusOr<KernelSource> NoSource(const SpecKey&) {
  return absl::InternalError("not used");
}

TEST(FamilyRegistryTest, RegisteredFamiliesAndOpsJoinTheTable) {
  static constexpr OpInfo kInfo = {"registry_test.op", {"n"}};
  static constexpr OpKind kOp = static_cast<OpKind>(60);
  static constexpr OpKind kOps[] = {kOp};
  static const FamilyDescriptor kFamily = {.name = "registry_test",
                                           .backend = BackendKind::kHip,
                                           .ops = kOps,
                                           .generate = &NoSource};
  TAILOR_ASSERT_OK(RegisterOpKind(kOp, &kInfo));
  TAILOR_ASSERT_OK(RegisterOpKind(kOp, &kInfo));  // again: the same name
  EXPECT_EQ(GetOpInfo(kOp).name, "registry_test.op");
  EXPECT_EQ(OpKindFromName("registry_test.op"), kOp);
  RegisterFamily(&kFamily);
  EXPECT_EQ(FindFamily(BackendKind::kHip, kOp), &kFamily);
  EXPECT_EQ(Families().back(), &kFamily);

  static constexpr OpInfo kOther = {"registry_test.other", {}};
  EXPECT_THAT(RegisterOpKind(kOp, &kOther),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "op 60: already registered as registry_test.op"));
  EXPECT_THAT(RegisterOpKind(OpKind::kMoePack, &kOther),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "op 10: is the library's moe.pack"));
  EXPECT_THAT(RegisterOpKind(static_cast<OpKind>(64), &kOther),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "op: must be in [1, 64), got 64"));
}

TEST(FamilyRegistryTest, TuningKeysComeFromEveryFamily) {
  size_t knobs = 0;
  for (const FamilyDescriptor* family : Families()) {
    knobs += family->knobs.size();
  }
  EXPECT_EQ(AllTuningKnobs().size(), knobs);
}

// The CPU backend builds only what its families list.
TEST(FamilyRegistryTest, CpuSupportsOnlyItsFamiliesOps) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  Engine& engine = tailor::internal::EngineOf(**runtime);
  TAILOR_EXPECT_OK(engine.backend().Supports(engine.MakeKey(OpKind::kMoePack)));
  EXPECT_THAT(engine.backend().Supports(engine.MakeKey(OpKind::kMoeRoute)),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "cpu backend: no cpu kernel for moe.route"));
}

absl::StatusOr<KernelSource> LibraryGenerator(const SpecKey&) {
  return KernelSource{.code = "library", .entry = "e"};
}
absl::StatusOr<KernelSource> TestGenerator(const SpecKey&) {
  return KernelSource{.code = "test", .entry = "e"};
}

// The one generator hook for tests: per op, on the engine, removable.
TEST(FamilyRegistryTest, EngineGeneratorOverrideReplacesOneOpsGenerator) {
  Runtime::Options options;
  options.backend = BackendKind::kCpu;
  options.disable_disk_cache = true;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  Engine& engine = EngineOf(**runtime);
  EXPECT_EQ(engine.GeneratorFor(OpKind::kMoePack, &LibraryGenerator),
            &LibraryGenerator);
  engine.SetGeneratorOverride(OpKind::kMoePack, &TestGenerator);
  EXPECT_EQ(engine.GeneratorFor(OpKind::kMoePack, &LibraryGenerator),
            &TestGenerator);
  EXPECT_EQ(engine.GeneratorFor(OpKind::kMoeCombine, &LibraryGenerator),
            &LibraryGenerator);
  engine.SetGeneratorOverride(OpKind::kMoePack, nullptr);
  EXPECT_EQ(engine.GeneratorFor(OpKind::kMoePack, &LibraryGenerator),
            &LibraryGenerator);
}

}  // namespace
}  // namespace tailor::internal
