#include "core/family_registry.h"

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/attention/decode_kernels.h"
#include "backends/cpu/attention/ragged_kernels.h"
#include "backends/cpu/moe/kernels.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/attention/ragged_kernels.h"
#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/cuda/moe/tuning.h"
#include "backends/hip/attention/decode_kernels.h"
#include "backends/hip/attention/ragged_kernels.h"
#include "backends/hip/moe/kernels.h"
#include "ops/attention/kernels.h"
#include "ops/moe/kernels.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// ---- the layer lists, adapted to LayerKernelsFn -----------------------------

template <typename Shape>
absl::StatusOr<const Shape*> Need(const Shape* shape, absl::string_view name) {
  if (shape == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer: not a ", name, " layer"));
  }
  return shape;
}

absl::StatusOr<std::vector<KernelJob>> CpuMoeLayer(const KeyTarget& target,
                                                   const LayerShape& layer,
                                                   const Tuning&) {
  TAILOR_ASSIGN_OR_RETURN(const MoeLayerShape* moe, Need(layer.moe, "moe"));
  return cpu::MoeLayerKernels(target, *moe);
}

absl::StatusOr<std::vector<KernelJob>> CpuDecodeLayer(const KeyTarget& target,
                                                      const LayerShape& layer,
                                                      const Tuning&) {
  TAILOR_ASSIGN_OR_RETURN(const DecodeShape* decode,
                          Need(layer.decode, "attention"));
  return cpu::DecodeLayerKernels(target, *decode);
}

absl::StatusOr<std::vector<KernelJob>> CudaMoeLayer(const KeyTarget& target,
                                                    const LayerShape& layer,
                                                    const Tuning& tuning) {
  TAILOR_ASSIGN_OR_RETURN(const MoeLayerShape* moe, Need(layer.moe, "moe"));
  return cuda::MoeLayerKernels(target, *moe, cuda::MoeTuningFrom(tuning));
}

absl::StatusOr<std::vector<KernelJob>> CudaDecodeLayer(const KeyTarget& target,
                                                       const LayerShape& layer,
                                                       const Tuning& tuning) {
  TAILOR_ASSIGN_OR_RETURN(const DecodeShape* decode,
                          Need(layer.decode, "attention"));
  return cuda::DecodeLayerKernels(target, *decode,
                                  cuda::DecodeTuningFrom(tuning));
}

absl::StatusOr<std::vector<KernelJob>> CpuRaggedLayer(const KeyTarget& target,
                                                      const LayerShape& layer,
                                                      const Tuning&) {
  TAILOR_ASSIGN_OR_RETURN(const RaggedShape* ragged,
                          Need(layer.ragged, "ragged_attention"));
  // The keys do not depend on the thread count (only the plan's workers do).
  return cpu::RaggedLayerKernels(target, *ragged, /*num_threads=*/1);
}

// With ragged.cuda=off a layer launches no ragged kernel: nothing to warm.
absl::StatusOr<std::vector<KernelJob>> CudaRaggedLayer(const KeyTarget& target,
                                                       const LayerShape& layer,
                                                       const Tuning& tuning) {
  TAILOR_ASSIGN_OR_RETURN(const RaggedShape* ragged,
                          Need(layer.ragged, "ragged_attention"));
  if (!cuda::RaggedCudaEnabled(tuning)) return std::vector<KernelJob>{};
  return cuda::RaggedLayerKernels(target, *ragged,
                                  cuda::RaggedPortableForced(tuning));
}

// ---- the table --------------------------------------------------------------

constexpr OpKind kHostMoeOps[] = {OpKind::kMoePack, OpKind::kMoeGroupedGemm,
                                  OpKind::kMoeCombine};  // routed on the host
constexpr OpKind kDeviceMoeOps[] = {OpKind::kMoeRoute, OpKind::kMoePack,
                                    OpKind::kMoeGroupedGemm,
                                    OpKind::kMoeCombine};
constexpr OpKind kCpuDecodeOps[] = {OpKind::kAttentionDecode,
                                    OpKind::kAttentionDecodeMerge};
constexpr OpKind kGpuDecodeOps[] = {OpKind::kAttentionDecode};  // merges fused
constexpr OpKind kRaggedOps[] = {OpKind::kAttentionRagged,
                                 OpKind::kAttentionRaggedMerge};

// One entry per backend x family. CUDA's kernels need sm_80 (mma.sync bf16,
// cp.async, warp match_any); the TMA paths are asked for only on sm_90a.
// Ragged attention has a portable kernel (sm_80) beside its Hopper one.
const std::vector<FamilyDescriptor>& LibraryFamilies() {
  static const auto* const families = new std::vector<FamilyDescriptor>{
      {.name = "moe",
       .backend = BackendKind::kCpu,
       .ops = kHostMoeOps,
       .generate = &cpu::GenerateMoeKernel,
       .layer_kernels = &CpuMoeLayer},
      {.name = "attention",
       .backend = BackendKind::kCpu,
       .ops = kCpuDecodeOps,
       .generate = &cpu::GenerateDecodeKernel,
       .layer_kernels = &CpuDecodeLayer},
      {.name = "ragged_attention",
       .backend = BackendKind::kCpu,
       .ops = kRaggedOps,
       .generate = &cpu::GenerateRaggedKernel,
       .layer_kernels = &CpuRaggedLayer},
      {.name = "moe",
       .backend = BackendKind::kCuda,
       .ops = kDeviceMoeOps,
       .generate = &cuda::GenerateMoeKernel,
       .layer_kernels = &CudaMoeLayer,
       .knobs = cuda::MoeTuningKnobs(),
       .min_compute_capability = 80},
      {.name = "attention",
       .backend = BackendKind::kCuda,
       .ops = kGpuDecodeOps,
       .generate = &cuda::GenerateCudaDecode,
       .layer_kernels = &CudaDecodeLayer,
       .knobs = cuda::DecodeTuningKnobs(),
       .min_compute_capability = 80},
      {.name = "ragged_attention",
       .backend = BackendKind::kCuda,
       .ops = kRaggedOps,
       .generate = &cuda::GenerateCudaRagged,
       .layer_kernels = &CudaRaggedLayer,
       .knobs = cuda::RaggedTuningKnobs(),
       .min_compute_capability = 80},
      {.name = "moe",
       .backend = BackendKind::kHip,
       .ops = kDeviceMoeOps,
       .generate = &hip::GenerateHipMoeKernel},
      {.name = "attention",
       .backend = BackendKind::kHip,
       .ops = kGpuDecodeOps,
       .generate = &hip::GenerateHipDecode},
      {.name = "ragged_attention",
       .backend = BackendKind::kHip,
       .ops = kRaggedOps,
       .generate = &hip::GenerateHipRagged},
  };
  return *families;
}

// RegisterFamily's additions.
class Registered {
 public:
  void Add(const FamilyDescriptor* family) {
    absl::MutexLock lock(&mu_);
    families_.push_back(family);
  }
  std::vector<const FamilyDescriptor*> Get() const {
    absl::MutexLock lock(&mu_);
    return families_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<const FamilyDescriptor*> families_ ABSL_GUARDED_BY(mu_);
};

Registered& RegisteredFamilies() {
  static Registered* const registered = new Registered();
  return *registered;
}

}  // namespace

std::vector<const FamilyDescriptor*> Families() {
  std::vector<const FamilyDescriptor*> out;
  for (const FamilyDescriptor& family : LibraryFamilies()) {
    out.push_back(&family);
  }
  for (const FamilyDescriptor* family : RegisteredFamilies().Get()) {
    out.push_back(family);
  }
  return out;
}

const FamilyDescriptor* FindFamily(BackendKind backend, OpKind op) {
  for (const FamilyDescriptor* family : Families()) {
    if (family->backend != backend) continue;
    for (OpKind candidate : family->ops) {
      if (candidate == op) return family;
    }
  }
  return nullptr;
}

void RegisterFamily(const FamilyDescriptor* family) {
  RegisteredFamilies().Add(family);
}

absl::Span<const TuningKnob> AllTuningKnobs() {
  static const std::vector<TuningKnob>* const knobs = [] {
    auto* all = new std::vector<TuningKnob>();
    for (const FamilyDescriptor& family : LibraryFamilies()) {
      all->insert(all->end(), family.knobs.begin(), family.knobs.end());
    }
    return all;
  }();
  return *knobs;
}

absl::StatusOr<Tuning> ParseTuningText(absl::string_view text) {
  return ParseTuning(text, AllTuningKnobs());
}

}  // namespace tailor::internal
