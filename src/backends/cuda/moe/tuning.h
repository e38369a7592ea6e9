// backends/cuda/moe/tuning.h — the MoE family's tuning keys on CUDA.
//
// Every key is declared once here (MoeTuningKnobs) and read once, into a
// MoeTuning, when a CUDA backend is created or warm-up lists a layer's
// kernels (MoeTuningFrom), so that both build the same keys. The first
// value of each key is its default, the cost model's choice; the others
// compare a rule with its alternatives on new hardware, or force a variant
// the cost model takes only at sizes too large for a test's reference. The
// keys, their values and what each does: kKnobs in tuning.cc (and the
// README's table of tuning keys).
//
// Pure host code without CUDA headers: the keys are validated (and warm-up
// lists CUDA keys) in every build.
#ifndef TAILOR_BACKENDS_CUDA_MOE_TUNING_H_
#define TAILOR_BACKENDS_CUDA_MOE_TUNING_H_

#include "absl/types/span.h"
#include "core/tuning.h"

namespace tailor::cuda {

// Raster group bounds of the Hopper GEMM (moe.expert_groups).
enum class MoeExpertGroups { kAuto, kFixed, kForward, kBack };

struct MoeTuning {
  bool portable_gemm = false;  // moe.gemm=portable
  int cluster = 1;             // moe.cluster
  MoeExpertGroups expert_groups = MoeExpertGroups::kAuto;
  tailor::internal::Switch wave_sync = tailor::internal::Switch::kAuto;
  tailor::internal::Switch w_evict_first = tailor::internal::Switch::kAuto;
  tailor::internal::Switch prefetch_w = tailor::internal::Switch::kAuto;
  // moe.consumers: kAuto (the cost model: cooperative) or kOff cooperative,
  // kOn ping-pong wherever the kernel exists (128-row tiles without clusters
  // or swap-AB).
  tailor::internal::Switch pingpong = tailor::internal::Switch::kAuto;
  bool swap_ab = true;           // moe.swap_ab
  bool tma_store = true;         // moe.store=tma
  bool split_k = true;           // moe.split_k
  bool dynamic_schedule = true;  // moe.schedule=dynamic
  bool pdl = true;               // moe.pdl
  // Not a tuning key: $TAILOR_CUDA_PIPELINE_CHECKS=1 (a developer knob)
  // compiles the Hopper GEMM with its mbarrier-protocol checks.
  bool pipeline_checks = false;
};

// The MoE family's keys on CUDA (see the file comment).
absl::Span<const tailor::internal::TuningKnob> MoeTuningKnobs();

// The MoE settings of `tuning` (validated against MoeTuningKnobs), plus
// $TAILOR_CUDA_PIPELINE_CHECKS.
MoeTuning MoeTuningFrom(const tailor::internal::Tuning& tuning);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_MOE_TUNING_H_
