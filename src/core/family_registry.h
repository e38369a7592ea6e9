// core/family_registry.h — every op family on every backend, in one table.
//
// An op family (moe, attention) brings, for each backend that implements
// it, one device-free descriptor: the ops whose keys it builds, the
// generator that turns any such key into source, the kernels one layer of
// the family can launch (warm-up), its tuning keys, and what the backend's
// Supports checks. family_registry.cc lists them, one entry per backend x
// family (as ggml lists its backends): warm-up (KernelsForProfile,
// FindGenerator), the backends' Supports and the tuning parser read this
// table, so no code elsewhere switches over backends and families. A
// backend compiled out keeps its entries (its generators and lists report
// Unavailable), so that its tuning keys are checked in every build.
//
// Adding a family: its ops in OpKind (core/spec_key.h), its key builders and
// generator per backend, and one entry per backend here.
//
// Example:
//   const FamilyDescriptor* family = FindFamily(key.backend, key.op);
//   if (family == nullptr) return absl::UnimplementedError(...);
//   TAILOR_ASSIGN_OR_RETURN(KernelSource source, family->generate(key));
#ifndef TAILOR_CORE_FAMILY_REGISTRY_H_
#define TAILOR_CORE_FAMILY_REGISTRY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "core/tuning.h"

namespace tailor::internal {

struct MoeLayerShape;  // ops/moe/kernels.h
struct DecodeShape;    // ops/attention/kernels.h
struct RaggedShape;    // ops/attention/ragged_kernels.h

// One layer as warm-up describes it: the field of its family is set.
struct LayerShape {
  const MoeLayerShape* moe = nullptr;
  const DecodeShape* decode = nullptr;
  const RaggedShape* ragged = nullptr;
};

// The kernels one layer can launch on `target` under any routing and batch,
// as `tuning` shapes them, with the launches' own key builders (no device
// needed). InvalidArgument naming the field the family cannot build;
// Unavailable when this build cannot build the backend's kernels.
using LayerKernelsFn = absl::StatusOr<std::vector<KernelJob>> (*)(
    const KeyTarget& target, const LayerShape& layer, const Tuning& tuning);

struct FamilyDescriptor {
  absl::string_view name;  // "moe", "attention"
  BackendKind backend = BackendKind::kCpu;
  // The ops whose keys `generate` builds on this backend (Supports accepts
  // keys of these ops only).
  absl::Span<const OpKind> ops;
  // The source of any key of `ops` (includes plus one instantiation).
  KernelGeneratorFn generate = nullptr;
  // (optional) The kernels of one layer, for warm-up. Defaults to none:
  // warm-up lists the family's sections as skipped on this backend.
  LayerKernelsFn layer_kernels = nullptr;
  // (optional) This family's tuning keys on this backend. Defaults to none.
  absl::Span<const TuningKnob> knobs;
  // (optional, GPU backends) The least compute capability (major * 10 +
  // minor) the family's kernels need, and whether they need the
  // arch-specific target (sm_90a). Defaults to no requirement.
  int min_compute_capability = 0;
  bool arch_specific = false;
};

// Every family of this build on every backend, the library's first, then
// those RegisterFamily added, in order.
std::vector<const FamilyDescriptor*> Families();

// The family that builds `op` on `backend`; null when none does.
const FamilyDescriptor* FindFamily(BackendKind backend, OpKind op);

// Adds a family that is not built into the library: the test kernels
// (tests/kernels/) register theirs from a static initializer, before any
// Runtime exists. `family` must outlive every lookup (a static).
void RegisterFamily(const FamilyDescriptor* family);

// Every tuning key of every family on every backend, whichever backend
// runs (ParseTuning checks a text against all of them).
absl::Span<const TuningKnob> AllTuningKnobs();

// ParseTuning(text, AllTuningKnobs()).
absl::StatusOr<Tuning> ParseTuningText(absl::string_view text);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_FAMILY_REGISTRY_H_
