// warmup/kernel_catalog.h — which kernels a serving profile can need, and
// how to build any library kernel from its key alone.
//
// Warm-up knows which profile section is which family; which backend lists
// a family's kernels, and with which generator, comes from the family
// registry (core/family_registry.h). The lists themselves live with each
// backend's launch glue (src/backends/<name>/<family>/: MoeLayerKernels,
// DecodeLayerKernels, RaggedLayerKernels) and use the launches' own key
// builders, so warm-up and serving cannot disagree. A new family adds a
// profile section (or, as ragged attention, fields of its layer's
// section), its lists in the registry, and a section reader here.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(KernelList kernels,
//                           KernelsForProfile(engine.target(), profile));
//   for (const KernelJob& job : kernels.jobs)
//     cache.Precompile(job.key, job.generate);
#ifndef TAILOR_WARMUP_KERNEL_CATALOG_H_
#define TAILOR_WARMUP_KERNEL_CATALOG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/engine.h"
#include "core/spec_key.h"
#include "core/tuning.h"
#include "warmup/profile.h"

namespace tailor::internal {

// The generator of `key`'s op on `key`'s backend (its family's, from the
// registry). NotFound naming the op and backend when this build has none
// (test-only ops, families a backend does not implement yet).
absl::StatusOr<KernelGeneratorFn> FindGenerator(const SpecKey& key);

struct KernelList {
  std::vector<KernelJob> jobs;  // distinct keys, in a stable order
  // What this build cannot generate, one line each: a profile section
  // ("paged_decode: no paged-decode kernels in this build yet") or a key.
  std::vector<std::string> skipped;
};

// Every kernel the profile's sections can need under any routing and batch,
// for `target` (whose arch must be exact, not "native"), as `tuning` (the
// server's tuning keys: Engine::tuning) shapes them.
absl::StatusOr<KernelList> KernelsForProfile(const KeyTarget& target,
                                             const ServingProfile& profile,
                                             const Tuning& tuning);

// Jobs for keys read from a history document, re-targeted to `target`
// (another machine's arch; the same op and static dims). Keys whose op this
// build cannot generate are listed in `skipped` with the reason.
KernelList KernelsForKeys(const KeyTarget& target,
                          const std::vector<SpecKey>& keys);

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_KERNEL_CATALOG_H_
