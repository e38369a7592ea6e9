// core/engine.h — what a Runtime is made of, for op fronts and tools.
//
// The Engine ties one Backend to the KernelCache and the Stats. Op fronts use
// two calls per kernel: GetKernel (memory -> disk -> compile, single flight)
// and Launch. Both are thread-safe. The warm path (key already in memory)
// does one hash lookup and no allocation.
//
// Example (an op front):
//   const SpecKey key = EncodeMoePackSpec(
//       engine.target(), {.dtype = DType::kBF16, .hidden = 2048});
//   TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
//                           engine.GetKernel(key, GeneratePack));
//   MoePackParams params = {...};
//   TAILOR_RETURN_IF_ERROR(engine.Launch(key.op, *kernel, config, params));
#ifndef TAILOR_CORE_ENGINE_H_
#define TAILOR_CORE_ENGINE_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/spec_key.h"
#include "core/tuning.h"
#include "tailor/runtime.h"

namespace tailor::internal {

class ForkParticipant;
class KernelCache;
class Stats;
class ThreadPool;

// Emits the source for `key`. Called only when the key is not cached.
using KernelGenerator =
    absl::FunctionRef<absl::StatusOr<KernelSource>(const SpecKey&)>;

// A generator as a plain function, so that it can be stored with its key and
// run later on any thread (warm-up jobs, background compiles).
using KernelGeneratorFn = absl::StatusOr<KernelSource> (*)(const SpecKey&);

// A key and the generator that builds it.
struct KernelJob {
  SpecKey key;
  KernelGeneratorFn generate = nullptr;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const Runtime::Options& options);
  ~Engine();

  Backend& backend() { return *backend_; }
  Stats& stats() { return *stats_; }
  KernelCache& cache() { return *cache_; }
  const std::string& cache_dir() const;

  // A SpecKey for `op` with this engine's backend and arch filled in.
  SpecKey MakeKey(OpKind op) const;
  // This engine's backend and arch, for key builders (valid while it lives).
  KeyTarget target() const;
  // The validated tuning overrides (Runtime::Options::tuning, else
  // $TAILOR_TUNING).
  const Tuning& tuning() const { return *tuning_; }
  // The same, shared: workspaces keep it to report it (a copy costs no
  // allocation).
  const std::shared_ptr<const Tuning>& shared_tuning() const { return tuning_; }

  absl::StatusOr<std::shared_ptr<Kernel>> GetKernel(const SpecKey& key,
                                                    KernelGenerator generate);

  // Background JIT (Runtime::Options::jit_mode resolved): op families with
  // a generic kernel ask TryGetKernel instead of GetKernel and launch the
  // generic kernel with LaunchFallback while it returns null.
  bool background_jit() const { return background_jit_; }
  // The kernel when it is ready; else null at once, its resolve queued
  // (KernelCache::TryGet).
  std::shared_ptr<Kernel> TryGetKernel(const SpecKey& key,
                                       KernelGeneratorFn generate);
  // Launch, counted also as a fallback launch (StatsSnapshot).
  absl::Status LaunchFallback(OpKind op, const Kernel& generic,
                              const LaunchConfig& config, const void* params,
                              size_t params_size);

  absl::Status Launch(OpKind op, const Kernel& kernel,
                      const LaunchConfig& config, const void* params,
                      size_t params_size);

  // Backend::LaunchBatch; every request counts as one launch of `op`.
  absl::Status LaunchBatch(OpKind op, absl::Span<const LaunchRequest> requests);

  template <typename Params>
  absl::Status Launch(OpKind op, const Kernel& kernel,
                      const LaunchConfig& config, const Params& params) {
    return Launch(op, kernel, config, &params, sizeof(Params));
  }

 private:
  Engine() = default;
  std::unique_ptr<Stats> stats_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KernelCache> cache_;
  bool background_jit_ = false;
  std::shared_ptr<const Tuning> tuning_;
  // Quiesces the cache and the stats around fork() (core/fork_handlers.h).
  std::unique_ptr<ForkParticipant> fork_participant_;
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_ENGINE_H_
