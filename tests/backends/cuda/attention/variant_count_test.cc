// Bounded specialization of attention on an H200: the kernels a serving run
// of a model launches for prefill, mixed and decode steps of any lengths and
// batch sizes are the few its warm-up profile lists (so warm-up covers
// serving), at most kMaxVariantsPerModel.
//
// Steps are planned with the real planners (plan::BuildAttentionPlan, the
// ragged partition, plan::BuildDecodePlan) under the CUDA backend's own
// plan configs, and keys come from the launches' key builders, for an
// H200 described (CudaDecodeDevice) rather than present: no GPU needed.
// The counts are recorded in bench/results/attention_variants_h200.txt.
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/attention/ragged_kernels.h"
#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/tma/tensor_map_check.h"
#include "core/family_registry.h"
#include "ops/attention/ragged_checks.h"
#include "ops/attention/ragged_decode.h"
#include "ops/attention/ragged_spec.h"
#include "ops/attention/workspace.h"
#include "plan/attention_plan.h"
#include "plan/decode_plan.h"
#include "plan/ragged_partition.h"
#include "templates/cuda/attention/decode_params.h"
#include "test_util.h"
#include "warmup/kernel_catalog.h"
#include "warmup/profile.h"

namespace tailor::cuda {
namespace {

using tailor::internal::DecodePlanConfig;
using tailor::internal::DecodeShape;
using tailor::internal::KeyTarget;
using tailor::internal::RaggedPlanConfig;
using tailor::internal::RaggedShape;
using tailor::internal::ServingProfile;

// The bound: prefill + decode kernels of one model.
constexpr size_t kMaxVariantsPerModel = 16;

constexpr KeyTarget kHopper = {.backend = BackendKind::kCuda, .arch = "sm_90a"};
// An H200 SXM: 132 SMs, 227 KiB opt-in shared memory per block. Clusters
// only change a small bucket's worker count (at most one CTA an SM), never
// a key; the L2 only the evict-first flag.
const CudaDecodeDevice kH200 = {.arch = "sm_90a",
                                .multiprocessors = 132,
                                .shared_limit = 232448,
                                .l2_bytes = int64_t{60} << 20};
constexpr DecodeClusterCapacity kH200Clusters = {.of8 = 16, .of16 = 8};
constexpr int32_t kMaxLen = 32768;
constexpr int64_t kStepTokens = 65536;  // the server's token budget a step

// A cache's element strides {page, token, head} ([P, page, Hkv, D] views).
struct CacheLayout {
  const char* name;
  int64_t strides[3];
  bool ragged_ok;  // RunRagged takes it (its prefill kernel reads by TMA)
};

std::vector<CacheLayout> LayoutsOf(int64_t d, int64_t h, int64_t p) {
  return {{"NHD", {p * h * d, h * d, d}, true},
          {"HND", {h * p * d, d, p * d}, true},
          // Heads 8 bytes apart from a 16-byte multiple: no TMA map, so the
          // decode kernels take the cp.async path; RunRagged refuses it.
          {"padded", {p * h * (d + 4), h * (d + 4), d + 4}, false}};
}

absl::StatusOr<ServingProfile> LoadProfile(const std::string& name) {
  std::ifstream in(std::string(TAILOR_PROFILES_DIR) + "/" + name + ".json");
  std::stringstream text;
  text << in.rdbuf();
  return tailor::internal::ParseProfile(text.str());
}

// The distinct kernel keys of one model's serving run.
struct ServedKeys {
  std::set<std::string> keys;
  void Add(const tailor::internal::SpecKey& key) {
    keys.insert(key.ToString());
  }
};

class ModelServing {
 public:
  // `portable`: as under ragged.kernel=portable.
  ModelServing(const ServingProfile& profile, uint32_t seed, bool portable)
      : profile_(profile), rng_(seed) {
    const auto& layer = profile.paged_decode.at(0);
    absl::StatusOr<RaggedShape> shape =
        tailor::internal::CheckRaggedShape({.num_qo_heads = layer.heads_q,
                                            .num_kv_heads = layer.heads_kv,
                                            .head_dim = layer.head_dim,
                                            .page_size = layer.page_size,
                                            .dtype = layer.dtypes.at(0),
                                            .causal = true,
                                            .window_left = -1},
                                           "");
    EXPECT_TRUE(shape.ok()) << shape.status();
    shape_ = *shape;
    decode_shape_ = *tailor::internal::RaggedDecodeShapeOf(shape_);
    portable_ = RaggedUsesPortable(kHopper.arch, shape_, portable);
  }

  const ServedKeys& served() const { return served_; }

  // A workspace bucket of the profile (the server's CUDA-graph sizes) for a
  // step of `batch` sequences.
  int64_t BucketFor(int64_t batch) const {
    for (int64_t bucket : profile_.batch_buckets) {
      if (bucket >= batch) return bucket;
    }
    return batch;
  }

  // One mixed step: prefill chunks over cached prefixes, speculative rows,
  // decode rows; lengths 0..32k, batch 1..256.
  void RaggedStep(const CacheLayout& cache) {
    const int32_t batch = Uniform(1, 256);
    std::vector<int32_t> q_lens(batch), kv_lens(batch);
    int64_t tokens = 0;
    for (int32_t b = 0; b < batch; ++b) {
      const int kind = Uniform(0, 99);
      int32_t q = kind < 55   ? 1
                  : kind < 70 ? Uniform(2, 8)
                              : Uniform(0, kMaxLen);
      q = static_cast<int32_t>(std::min<int64_t>(q, kStepTokens - tokens));
      tokens += q;
      q_lens[b] = q;
      kv_lens[b] = q + Uniform(0, kMaxLen);  // a cached prefix
    }
    RunRagged(q_lens, kv_lens, BucketFor(batch), cache);
  }

  // One decode step on the decode entry points (PlanDecode / RunDecode).
  void DecodeStep(const CacheLayout& cache) {
    const int32_t batch = Uniform(1, 256);
    std::vector<int32_t> kv_lens(batch);
    for (int32_t& len : kv_lens) len = Uniform(1, kMaxLen);
    RunDecode(kv_lens, BucketFor(batch), cache);
  }

  // PlanRagged + RunRagged of a step on a workspace of `bucket` sequences.
  void RunRagged(const std::vector<int32_t>& q_lens,
                 const std::vector<int32_t>& kv_lens, int64_t bucket,
                 const CacheLayout& cache) {
    const RaggedPlanConfig config = CudaRaggedPlanConfig(
        shape_, kH200.multiprocessors,
        RaggedDecodeRowsOnDecodeKernel(tailor::internal::Tuning{}), portable_);
    ASSERT_TRUE(config.decode_rows);
    ASSERT_TRUE(tailor::plan::BuildAttentionPlan(
                    q_lens, kv_lens,
                    tailor::internal::RaggedPlanParamsFor(shape_, config),
                    &plan_)
                    .ok());
    // The attention kernel and its merge launch on every step with rows.
    if (plan_.total_q() > 0) {
      tailor::internal::RaggedKernelSpec spec =
          RaggedKernelSpecFor(shape_, config);
      spec.portable = portable_;
      served_.Add(spec.Key(kHopper));
      served_.Add(RaggedMergeSpecFor(shape_, config).Key(kHopper));
    }
    // The decode rows' plan and kernel (launched on every step).
    tailor::plan::CollectDecodeRows(plan_.q_lens(), plan_.kv_lens(), &seqs_,
                                    &seq_kv_lens_);
    RunDecode(seq_kv_lens_, bucket, cache);
  }

  // The decode plan of `kv_lens` and the kernel Decode launches for it.
  void RunDecode(const std::vector<int32_t>& kv_lens, int64_t bucket,
                 const CacheLayout& cache) {
    const DecodeTuning tuning;
    absl::StatusOr<DecodePlanConfig> config =
        CudaDecodePlanConfig(decode_shape_, bucket, kv_lens, kH200, tuning,
                             [] { return kH200Clusters; });
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(
        tailor::plan::BuildDecodePlan(
            kv_lens,
            tailor::internal::DecodePlanParamsFor(decode_shape_, *config),
            &decode_plan_)
            .ok());
    absl::StatusOr<int> stages = CudaDecodeStagesFor(
        decode_shape_, decode_plan_.params().num_workers, kH200, tuning);
    ASSERT_TRUE(stages.ok()) << stages.status();
    const uint32_t variant =
        TmaLegal(cache, *stages) ? kDecodeVariantTma : kDecodeVariantCpAsync;
    served_.Add(CudaDecodeKey(kHopper, decode_shape_, variant, *stages));
  }

 private:
  int32_t Uniform(int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }

  // As CudaDecodeKernels::Decode: the TMA kernel when the caches' maps
  // (and, where a plan may group heads, the head groups' maps) are legal.
  bool TmaLegal(const CacheLayout& cache, int stages) const {
    const void* base = reinterpret_cast<const void*>(uintptr_t{1} << 20);
    std::vector<int> box_heads = {1};
    if (DecodeHeadGroupsFit(decode_shape_, stages, kH200.arch)) {
      box_heads.push_back(kDecodeHeadGroup);
    }
    for (int heads : box_heads) {
      const TensorMapSpec spec = DecodeCacheMapSpec(
          decode_shape_, /*num_pages=*/4096, base, cache.strides, heads);
      if (!CheckTensorMap(spec, 90).ok()) return false;
    }
    return true;
  }

  const ServingProfile& profile_;
  std::mt19937 rng_;
  RaggedShape shape_;
  bool portable_ = false;
  DecodeShape decode_shape_;
  tailor::plan::AttentionPlan plan_;
  tailor::plan::DecodePlan decode_plan_;
  std::vector<int32_t> seqs_, seq_kv_lens_;
  ServedKeys served_;
};

// The attention kernels the warm-up profile lists for an H200 under
// `tuning`.
std::set<std::string> WarmupAttentionKeys(const ServingProfile& profile,
                                          const std::string& tuning) {
  absl::StatusOr<tailor::internal::Tuning> parsed =
      tailor::internal::ParseTuningText(tuning);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return {};
  absl::StatusOr<tailor::internal::KernelList> list =
      tailor::internal::KernelsForProfile(kHopper, profile, *parsed);
  EXPECT_TRUE(list.ok()) << list.status();
  std::set<std::string> keys;
  if (!list.ok()) return keys;
  for (const std::string& line : list->skipped) ADD_FAILURE() << line;
  for (const tailor::internal::KernelJob& job : list->jobs) {
    if (absl::StartsWith(job.key.ToString(), "attention.")) {
      keys.insert(job.key.ToString());
    }
  }
  return keys;
}

// The op of a key string, "attention.decode" of "attention.decode/cuda/...".
std::string OpOf(const std::string& key) {
  return key.substr(0, key.find('/'));
}

// `tuning`: "" or "ragged.kernel=portable" (the portable ragged kernel).
void ExpectServingWithinWarmup(const std::string& model, uint32_t seed,
                               const std::string& tuning = "") {
  absl::StatusOr<ServingProfile> profile = LoadProfile(model);
  ASSERT_TRUE(profile.ok()) << profile.status();
  ModelServing serving(*profile, seed,
                       /*portable=*/tuning == "ragged.kernel=portable");
  const auto& layer = profile->paged_decode.at(0);
  const std::vector<CacheLayout> layouts =
      LayoutsOf(layer.head_dim, layer.heads_kv, layer.page_size);
  int ragged_steps = 0, decode_steps = 0;
  for (int step = 0; step < 600; ++step) {
    const CacheLayout& cache = layouts[step % layouts.size()];
    if (cache.ragged_ok && step % 2 == 0) {
      serving.RaggedStep(cache);
      ++ragged_steps;
    } else {
      serving.DecodeStep(cache);
      ++decode_steps;
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Edges: one 32k prompt alone, a full bucket of decode rows, empty rows.
  serving.RunRagged({kMaxLen}, {kMaxLen}, 1, layouts[0]);
  serving.RunRagged(std::vector<int32_t>(512, 1),
                    std::vector<int32_t>(512, kMaxLen), 512, layouts[0]);
  serving.RunRagged({0, 1, 0}, {7, 1, 0}, 4, layouts[1]);

  const std::set<std::string> listed = WarmupAttentionKeys(*profile, tuning);
  const std::set<std::string>& served = serving.served().keys;
  EXPECT_EQ(served, listed) << "serving and warm-up disagree for " << model;
  EXPECT_LE(listed.size(), kMaxVariantsPerModel);
  std::map<std::string, int> by_op;
  for (const std::string& key : served) ++by_op[OpOf(key)];
  std::cout << model << (tuning.empty() ? "" : " " + tuning) << ": "
            << ragged_steps << " ragged + " << decode_steps << " decode steps, "
            << served.size() << " kernels served, " << listed.size()
            << " listed by warm-up\n";
  for (const auto& [op, count] : by_op) {
    std::cout << "  " << op << ": " << count << "\n";
  }
  for (const std::string& key : served) std::cout << "    " << key << "\n";
}

TEST(AttentionVariantCount, Llama3_8bServingStaysWithinWarmup) {
  ExpectServingWithinWarmup("llama-3-8b", 8);
}

TEST(AttentionVariantCount, Qwen3_30bA3bServingStaysWithinWarmup) {
  ExpectServingWithinWarmup("qwen3-30b-a3b", 30);
}

// Under ragged.kernel=portable serving launches the portable kernel (its
// own key and merge) and warm-up lists the same ones.
TEST(AttentionVariantCount, PortableKernelServingStaysWithinWarmup) {
  ExpectServingWithinWarmup("llama-3-8b", 8, "ragged.kernel=portable");
  ExpectServingWithinWarmup("qwen3-30b-a3b", 30, "ragged.kernel=portable");
}

}  // namespace
}  // namespace tailor::cuda
