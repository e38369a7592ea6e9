#include "warmup/kernel_catalog.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ops/moe_kernels.h"
#include "ops/moe_workspace.h"
#include "plan/piecewise_plan.h"
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

// Every kernel of moe::Experts for one layer: pack, the two grouped GEMMs
// (gate|up with silu_and_mul, then down) for every tail class, combine.
absl::Status AddMoeLayer(const KeyTarget& target, const MoeLayerProfile& layer,
                         JobCollector& jobs) {
  for (DType dtype : layer.dtypes) {
    jobs.Add(PackKey(target, dtype, layer.hidden), GenerateMoeKernel);
    for (const moe::RoutingPolicy& policy : layer.routing) {
      TAILOR_ASSIGN_OR_RETURN(std::vector<int32_t> classes,
                              TailClassesOf(policy));
      const GroupedGemmShape gate_up = {.dtype = dtype,
                                        .n = 2 * layer.intermediate,
                                        .k = layer.hidden,
                                        .tile_rows = policy.tile_rows,
                                        .epilogue = moe::Epilogue::kSiluAndMul};
      const GroupedGemmShape down = {.dtype = dtype,
                                     .n = layer.hidden,
                                     .k = layer.intermediate,
                                     .tile_rows = policy.tile_rows,
                                     .epilogue = moe::Epilogue::kNone};
      for (const GroupedGemmShape& shape : {gate_up, down}) {
        for (int32_t tail_class : classes) {
          jobs.Add(GroupedGemmKey(target, shape, tail_class),
                   GenerateMoeKernel);
        }
      }
    }
    jobs.Add(CombineKey(target, dtype, layer.hidden, layer.topk),
             GenerateMoeKernel);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KernelGeneratorFn> FindGenerator(const SpecKey& key) {
  const bool moe = key.op == OpKind::kMoePack ||
                   key.op == OpKind::kMoeGroupedGemm ||
                   key.op == OpKind::kMoeCombine;
  if (moe && key.backend == BackendKind::kCpu) return &GenerateMoeKernel;
  return absl::NotFoundError(absl::StrCat("this build has no ",
                                          BackendName(key.backend), " ",
                                          GetOpInfo(key.op).name, " kernels"));
}

absl::StatusOr<std::vector<int32_t>> TailClassesOf(
    const moe::RoutingPolicy& policy) {
  TAILOR_ASSIGN_OR_RETURN(plan::PlanParams params, MoePlanParams(policy));
  std::vector<int32_t> classes = {0};
  for (int64_t rows = 1; rows < params.tile_rows; ++rows) {
    TAILOR_ASSIGN_OR_RETURN(int32_t tail_class, TailClassOf(rows, params));
    if (std::find(classes.begin(), classes.end(), tail_class) == classes.end())
      classes.push_back(tail_class);
  }
  std::sort(classes.begin() + 1, classes.end());
  return classes;
}

absl::StatusOr<KernelList> KernelsForProfile(const KeyTarget& target,
                                             const ServingProfile& profile) {
  KernelList list;
  JobCollector jobs;
  for (const MoeLayerProfile& layer : profile.moe) {
    if (target.backend != BackendKind::kCpu) {
      list.skipped.push_back(absl::StrCat(layer.path, ": this build has no ",
                                          BackendName(target.backend),
                                          " MoE kernels yet"));
      continue;
    }
    TAILOR_RETURN_IF_ERROR(AddMoeLayer(target, layer, jobs));
  }
  for (const PagedDecodeProfile& decode : profile.paged_decode) {
    list.skipped.push_back(absl::StrCat(
        decode.path, ": this build has no paged-decode kernels yet"));
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
