#include "core/spec_key.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace tailor::internal {
namespace {

SpecKey GroupedGemmKey() {
  SpecKey key;
  key.op = OpKind::kMoeGroupedGemm;
  key.backend = BackendKind::kCpu;
  key.SetArch("x86_64-znver3");
  key.dtypes = {DType::kBF16, DType::kBF16, DType::kF32};
  key.dims = {768, 2048};
  key.bucket_id = 3;
  key.tail_class = 8;
  key.tile = {.m = 16, .n = 64, .k = 64};
  key.variant = 1;
  return key;
}

// Golden values: these pin the serialization. If one changes, every disk
// cache entry in the field is invalidated: bump the format on purpose only.
TEST(SpecKeyTest, GoldenHashes) {
  EXPECT_EQ(GroupedGemmKey().Hash().Hex(), "40a051107943097132261450475f34c1");
  SpecKey empty;
  EXPECT_EQ(empty.Hash().Hex(), "7b7bdb6f9f0a3c52703505678b4d7854");
}

TEST(SpecKeyTest, ReadableForm) {
  EXPECT_EQ(GroupedGemmKey().ToString(),
            "moe.grouped_gemm/cpu/x86_64-znver3/bf16,bf16,f32/N=768,K=2048/b3/"
            "t8/m16n64k64/v1");
  EXPECT_EQ(GroupedGemmKey().FileStem(),
            "moe.grouped_gemm_cpu_x86_64-znver3_bf16_bf16_f32_N_768_K_2048_b3_"
            "t8_m16n64k64_v1");
}

TEST(SpecKeyTest, FileStemIsBoundedAndSafe) {
  SpecKey key = GroupedGemmKey();
  key.SetArch("a/b\\c d..e/../../etc/passwd-very-long-arch-name-indeed");
  std::string stem = key.FileStem();
  EXPECT_LE(stem.size(), 120u);
  EXPECT_EQ(stem.find('/'), std::string::npos);
  EXPECT_EQ(stem.find(' '), std::string::npos);
}

TEST(SpecKeyTest, ArchIsTruncatedNotOverflowed) {
  SpecKey key;
  key.SetArch(std::string(100, 'x'));
  EXPECT_EQ(key.arch_name().size(), static_cast<size_t>(kMaxArchLength));
}

// Every field that changes what is compiled must change the key.
TEST(SpecKeyTest, EveryFieldChangesTheHash) {
  const SpecKey base = GroupedGemmKey();
  std::vector<std::function<void(SpecKey&)>> edits = {
      [](SpecKey& k) { k.op = OpKind::kMoePack; },
      [](SpecKey& k) { k.backend = BackendKind::kCuda; },
      [](SpecKey& k) { k.SetArch("x86_64-skylake"); },
      [](SpecKey& k) { k.dtypes[0] = DType::kF32; },
      [](SpecKey& k) { k.dtypes[3] = DType::kF32; },
      [](SpecKey& k) { k.dims[0] = 769; },
      [](SpecKey& k) { k.dims[5] = 1; },
      [](SpecKey& k) { k.bucket_id = 4; },
      [](SpecKey& k) { k.tail_class = 0; },
      [](SpecKey& k) { k.tile.m = 32; },
      [](SpecKey& k) { k.tile.n = 128; },
      [](SpecKey& k) { k.tile.k = 32; },
      [](SpecKey& k) { k.tile.stages = 2; },
      [](SpecKey& k) { k.tile.warps = 4; },
      [](SpecKey& k) { k.tile.cluster = 2; },
      [](SpecKey& k) { k.variant = 0; },
  };
  std::vector<Hash128> seen = {base.Hash()};
  for (size_t i = 0; i < edits.size(); ++i) {
    SpecKey key = base;
    edits[i](key);
    EXPECT_NE(key, base) << "edit " << i;
    Hash128 h = key.Hash();
    for (const Hash128& other : seen) EXPECT_NE(h, other) << "edit " << i;
    seen.push_back(h);
  }
}

TEST(SpecKeyTest, EqualKeysHashEqually) {
  EXPECT_EQ(GroupedGemmKey(), GroupedGemmKey());
  EXPECT_EQ(GroupedGemmKey().Hash(), GroupedGemmKey().Hash());
}

}  // namespace
}  // namespace tailor::internal
