// Pins every key and every generated source of the warm-up kernel lists of
// the bundled model profiles, per backend and arch: a digest over each
// job's key hash, key text, entry and source code. A change here changes
// the disk-cache identity of users' kernels (or the kernels themselves):
// when it is intended, bump the disk cache format version if the key format
// changed, and update the digests with the new values this test prints.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/family_registry.h"
#include "core/hash.h"
#include "gtest/gtest.h"
#include "warmup/kernel_catalog.h"
#include "warmup/profile.h"

namespace tailor::internal {
namespace {

ServingProfile LoadProfile(const std::string& name) {
  std::ifstream in(std::string(TAILOR_PROFILES_DIR) + "/" + name + ".json");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ServingProfile> profile = ParseProfile(text.str());
  EXPECT_TRUE(profile.ok()) << name << ": " << profile.status();
  return profile.ok() ? *profile : ServingProfile{};
}

// The bundled profiles, each also with f32 and a fixed 32-row exact-tail
// routing where its MoE section has one (more tail classes and kernels).
std::vector<ServingProfile> Profiles() {
  std::vector<ServingProfile> out;
  for (const char* name :
       {"qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "llama-3-8b"}) {
    ServingProfile profile = LoadProfile(name);
    out.push_back(profile);
    for (MoeLayerProfile& moe : profile.moe) {
      moe.dtypes = {DType::kBF16, DType::kF32};
      moe.routing = {{.tile_rows = 32, .tail = moe::TailPolicy::kExact}};
    }
    for (PagedDecodeProfile& decode : profile.paged_decode) {
      decode.dtypes = {DType::kBF16, DType::kF16};
      decode.page_size = 64;
    }
    out.push_back(profile);
  }
  return out;
}

// "" when the build cannot generate `target`'s kernels (a backend compiled
// out); else the digest of every job of every profile, and their count.
std::string DigestOf(const KeyTarget& target, absl::string_view tuning_text,
                     int* jobs) {
  absl::StatusOr<Tuning> tuning = ParseTuningText(tuning_text);
  EXPECT_TRUE(tuning.ok()) << tuning.status();
  std::string all;
  *jobs = 0;
  for (const ServingProfile& profile : Profiles()) {
    absl::StatusOr<KernelList> list =
        KernelsForProfile(target, profile, *tuning);
    EXPECT_TRUE(list.ok()) << profile.name << ": " << list.status();
    if (!list.ok()) return "";
    for (const KernelJob& job : list->jobs) {
      absl::StatusOr<KernelSource> source = job.generate(job.key);
      if (absl::IsUnavailable(source.status())) return "";
      EXPECT_TRUE(source.ok()) << job.key.ToString() << ": " << source.status();
      if (!source.ok()) return "";
      absl::StrAppend(&all, job.key.Hash().Hex(), " ", job.key.FileStem(), "\n",
                      source->entry, "\n", source->code, "\n");
      ++*jobs;
    }
  }
  return HashBytes(all).Hex();
}

struct Golden {
  BackendKind backend;
  const char* arch;
  const char* tuning;
  bool pipeline_checks;  // $TAILOR_CUDA_PIPELINE_CHECKS=1
  int jobs;
  const char* digest;
};

TEST(KernelSourcesGoldenTest, WarmUpListsAndSourcesAreUnchanged) {
  const Golden goldens[] = {
      {BackendKind::kCpu, "x86_64-test", "", false, 474,
       "044b37a8ea4d8d063855d69668936aa3"},
      // The cost model never picks ping-pong consumers, so warm-up lists
      // their keys only when forced (6 more jobs).
      {BackendKind::kCuda, "sm_90a", "", false, 126,
       "3adc65bb21a793e90c12f5a02429303f"},
      {BackendKind::kCuda, "sm_90a", "moe.consumers=pingpong", false, 132,
       "abc085cc8cb3eff67c516c14ac546fec"},
      {BackendKind::kCuda, "sm_90a",
       "moe.cluster=2,moe.store=registers,decode.stages=3", true, 132,
       "2de683e08b9630353d4409fa985aeddc"},
      {BackendKind::kCuda, "sm_90a", "moe.swap_ab=off,moe.cluster=4", false,
       120, "710c210fca257b50cf6f3056ad6bd769"},
      {BackendKind::kCuda, "sm_90a", "moe.gemm=portable", false, 108,
       "4443284d804a614c3f2e9987966a04df"},
      // sm_80 lists the portable ragged kernel and its merge of 64-row
      // slots; ragged.kernel=portable lists them on sm_90a too.
      {BackendKind::kCuda, "sm_80", "", false, 81,
       "9d7d94c9f373f6b4bfa15b2adac23ab4"},
      {BackendKind::kCuda, "sm_90a", "ragged.kernel=portable", false, 126,
       "f2c77fe695d4f34e0753a9a3b9e3f285"},
  };
  for (const Golden& golden : goldens) {
    const KeyTarget target = {.backend = golden.backend, .arch = golden.arch};
    int jobs = 0;
    if (golden.pipeline_checks) setenv("TAILOR_CUDA_PIPELINE_CHECKS", "1", 1);
    const std::string digest = DigestOf(target, golden.tuning, &jobs);
    unsetenv("TAILOR_CUDA_PIPELINE_CHECKS");
    if (digest.empty()) continue;  // this build has no such backend
    EXPECT_EQ(jobs, golden.jobs) << golden.arch << " " << golden.tuning;
    EXPECT_EQ(digest, golden.digest)
        << BackendName(golden.backend) << " " << golden.arch << " \""
        << golden.tuning << "\": " << jobs << " jobs";
  }
}

}  // namespace
}  // namespace tailor::internal
