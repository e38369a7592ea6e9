#include "warmup/kernel_catalog.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/family_registry.h"
#include "ops/attention/kernels.h"
#include "ops/attention/ragged_checks.h"
#include "ops/attention/ragged_kernels.h"
#include "ops/attention/ragged_spec.h"
#include "ops/moe/kernels.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// Appends `job` unless its key is already listed.
class JobCollector {
 public:
  void Add(const SpecKey& key, KernelGeneratorFn generate) {
    if (seen_.insert(key.Hash()).second) jobs_.push_back({key, generate});
  }
  std::vector<KernelJob> Take() { return std::move(jobs_); }

 private:
  absl::flat_hash_set<Hash128> seen_;
  std::vector<KernelJob> jobs_;
};

// The kernels of one layer of family `name` on `target`'s backend, through
// the family's list in the registry; Unavailable when it has none there.
absl::StatusOr<std::vector<KernelJob>> LayerKernelsOn(absl::string_view name,
                                                      const KeyTarget& target,
                                                      const LayerShape& layer,
                                                      const Tuning& tuning) {
  for (const FamilyDescriptor* family : Families()) {
    if (family->name == name && family->backend == target.backend &&
        family->layer_kernels != nullptr) {
      return family->layer_kernels(target, layer, tuning);
    }
  }
  return absl::UnavailableError(absl::StrCat("no ", BackendName(target.backend),
                                             " kernel list for warm-up yet"));
}

// The kernels of one MoE profile section on `target`'s backend: each dtype
// and routing policy through the backend's own list (the launches' key
// builders). A backend this build lacks is one `skipped` line.
absl::Status AddMoeLayer(const KeyTarget& target, const MoeLayerProfile& layer,
                         const Tuning& tuning, JobCollector& jobs,
                         std::vector<std::string>& skipped) {
  for (DType dtype : layer.dtypes) {
    // f8e4m3: block-scaled FP8 weights, bf16 activations.
    const bool fp8 = dtype == DType::kF8E4M3;
    for (const moe::RoutingPolicy& policy : layer.routing) {
      const MoeLayerShape shape = {
          .dtype = fp8 ? DType::kBF16 : dtype,
          .scale_mode = fp8 ? moe::ScaleMode::kBlock : moe::ScaleMode::kNone,
          .experts = layer.experts,
          .topk = layer.topk,
          .hidden = layer.hidden,
          .intermediate = layer.intermediate,
          .policy = policy};
      absl::StatusOr<std::vector<KernelJob>> kernels =
          LayerKernelsOn("moe", target, {.moe = &shape}, tuning);
      if (absl::IsUnavailable(kernels.status())) {
        skipped.push_back(
            absl::StrCat(layer.path, ": ", kernels.status().message()));
        return absl::OkStatus();
      }
      if (absl::IsUnimplemented(kernels.status())) {  // e.g. FP8 on cuda
        skipped.push_back(absl::StrCat(layer.path, " ", DTypeName(dtype), ": ",
                                       kernels.status().message()));
        continue;
      }
      if (!kernels.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(layer.path, ": ", kernels.status().message()));
      }
      for (const KernelJob& job : *kernels) jobs.Add(job.key, job.generate);
    }
  }
  return absl::OkStatus();
}

// The kernels of one paged-decode section. A dtype or shape the backend
// cannot build is one `skipped` line naming why (nothing to precompile).
void AddDecodeLayer(const KeyTarget& target, const PagedDecodeProfile& layer,
                    const Tuning& tuning, JobCollector& jobs,
                    std::vector<std::string>& skipped) {
  for (DType dtype : layer.dtypes) {
    const DecodeShape shape = {.dtype = dtype,
                               .head_dim = layer.head_dim,
                               .group = layer.heads_q / layer.heads_kv,
                               .page_size = layer.page_size,
                               .num_kv_heads = layer.heads_kv};
    absl::StatusOr<std::vector<KernelJob>> kernels =
        LayerKernelsOn("attention", target, {.decode = &shape}, tuning);
    if (!kernels.ok()) {
      skipped.push_back(absl::StrCat(layer.path, " (", DTypeName(dtype),
                                     "): ", kernels.status().message()));
      continue;
    }
    for (const KernelJob& job : *kernels) jobs.Add(job.key, job.generate);
  }
}

// The ragged-attention kernels of one paged_decode section (its layer's
// prefill and mixed steps), for each dtype and mask it lists. The rules are
// the op front's (CheckRaggedShape): a dtype the kernels do not take is one
// `skipped` line. A window mask is listed with window 0: keys hold the mask
// kind, never the window.
void AddRaggedLayer(const KeyTarget& target, const PagedDecodeProfile& layer,
                    const Tuning& tuning, JobCollector& jobs,
                    std::vector<std::string>& skipped) {
  for (DType dtype : layer.dtypes) {
    for (RaggedMask mask : layer.ragged_masks) {
      const std::string where =
          absl::StrCat(layer.path, " (", DTypeName(dtype), ", ragged ",
                       RaggedMaskName(mask), ")");
      absl::StatusOr<RaggedShape> shape = CheckRaggedShape(
          {.num_qo_heads = layer.heads_q,
           .num_kv_heads = layer.heads_kv,
           .head_dim = layer.head_dim,
           .page_size = layer.page_size,
           .dtype = dtype,
           .causal = mask != RaggedMask::kNone,
           .window_left = mask == RaggedMask::kCausalWindow ? 0 : -1},
          "");
      absl::StatusOr<std::vector<KernelJob>> kernels =
          shape.ok() ? LayerKernelsOn("ragged_attention", target,
                                      {.ragged = &*shape}, tuning)
                     : absl::StatusOr<std::vector<KernelJob>>(shape.status());
      if (!kernels.ok()) {
        skipped.push_back(
            absl::StrCat(where, ": ", kernels.status().message()));
        continue;
      }
      for (const KernelJob& job : *kernels) jobs.Add(job.key, job.generate);
    }
  }
}

}  // namespace

absl::StatusOr<KernelGeneratorFn> FindGenerator(const SpecKey& key) {
  const FamilyDescriptor* family = FindFamily(key.backend, key.op);
  if (family == nullptr || family->generate == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("this build has no ", BackendName(key.backend), " ",
                     GetOpInfo(key.op).name, " kernels"));
  }
  return family->generate;
}

absl::StatusOr<KernelList> KernelsForProfile(const KeyTarget& target,
                                             const ServingProfile& profile,
                                             const Tuning& tuning) {
  KernelList list;
  JobCollector jobs;
  for (const MoeLayerProfile& layer : profile.moe) {
    TAILOR_RETURN_IF_ERROR(
        AddMoeLayer(target, layer, tuning, jobs, list.skipped));
  }
  for (const PagedDecodeProfile& decode : profile.paged_decode) {
    AddDecodeLayer(target, decode, tuning, jobs, list.skipped);
    AddRaggedLayer(target, decode, tuning, jobs, list.skipped);
  }
  list.jobs = jobs.Take();
  return list;
}

KernelList KernelsForKeys(const KeyTarget& target,
                          const std::vector<SpecKey>& keys) {
  KernelList list;
  JobCollector jobs;
  for (SpecKey key : keys) {
    key.backend = target.backend;
    key.SetArch(target.arch);
    absl::StatusOr<KernelGeneratorFn> generate = FindGenerator(key);
    if (!generate.ok()) {
      list.skipped.push_back(
          absl::StrCat(key.ToString(), ": ", generate.status().message()));
      continue;
    }
    jobs.Add(key, *generate);
  }
  list.jobs = jobs.Take();
  return list;
}

}  // namespace tailor::internal
