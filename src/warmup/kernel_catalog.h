// warmup/kernel_catalog.h — which kernels a serving profile can need, and
// how to build any library kernel from its key alone.
//
// This is the one place warm-up knows about op families: a family's keys
// (from its static model dims, dtypes and routing policy, never from ragged
// sizes) and its generator per backend. When kernel generators move (each
// backend owning its op families' generators, src/backends/<name>/), only
// this file is re-pointed. Keys come from the same builders the op fronts
// launch with (ops/moe_kernels.h), so warm-up and serving cannot disagree.
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
#include "core/spec_key.h"
#include "warmup/profile.h"

namespace tailor::internal {

// A plain function, so that a job can be stored and run on any thread.
using KernelGeneratorFn = absl::StatusOr<KernelSource> (*)(const SpecKey&);

struct KernelJob {
  SpecKey key;
  KernelGeneratorFn generate = nullptr;
};

// The generator of `key`'s op on `key`'s backend. NotFound naming the op and
// backend when this build has none (test-only ops, families a backend does
// not implement yet).
absl::StatusOr<KernelGeneratorFn> FindGenerator(const SpecKey& key);

// The tail classes a routing policy can produce, core (0) first:
// {0, 1, 2, 4, 8, 16} for tile_rows 16 and pow2 tails. InvalidArgument
// naming policy.tile_rows or policy.tail when the policy is out of range.
absl::StatusOr<std::vector<int32_t>> TailClassesOf(
    const moe::RoutingPolicy& policy);

struct KernelList {
  std::vector<KernelJob> jobs;  // distinct keys, in a stable order
  // What this build cannot generate, one line each: a profile section
  // ("paged_decode: no paged-decode kernels in this build yet") or a key.
  std::vector<std::string> skipped;
};

// Every kernel the profile's sections can need under any routing and batch,
// for `target` (whose arch must be exact, not "native").
absl::StatusOr<KernelList> KernelsForProfile(const KeyTarget& target,
                                             const ServingProfile& profile);

// Jobs for keys read from a history document, re-targeted to `target`
// (another machine's arch; the same op and static dims). Keys whose op this
// build cannot generate are listed in `skipped` with the reason.
KernelList KernelsForKeys(const KeyTarget& target,
                          const std::vector<SpecKey>& keys);

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_KERNEL_CATALOG_H_
