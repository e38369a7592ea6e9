#include "core/engine.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backend_registry.h"
#include "core/fork_handlers.h"
#include "core/kernel_cache.h"
#include "core/logging.h"
#include "core/stats.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr &&
         (absl::string_view(v) == "1" || absl::string_view(v) == "true");
}

absl::Status ValidateOptions(const Runtime::Options& o) {
  if (o.backend != BackendKind::kAuto && o.backend != BackendKind::kCpu &&
      o.backend != BackendKind::kCuda && o.backend != BackendKind::kHip) {
    return absl::InvalidArgumentError(
        "backend: must be kAuto, kCpu, kCuda or kHip");
  }
  if (o.device_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_index: must be >= 0, got ", o.device_index));
  }
  if (o.backend == BackendKind::kCpu && o.device_index != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_index: must be 0 for the cpu backend, got ", o.device_index));
  }
  if (o.memory_cache_capacity == 0) {
    return absl::InvalidArgumentError(
        "memory_cache_capacity: must be >= 1, got 0");
  }
  if (o.compile_threads < 0 || o.compile_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compile_threads: must be in [0, 1024], got ", o.compile_threads));
  }
  if (o.cpu_threads < 0 || o.cpu_threads > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads: must be in [0, 4096], got ", o.cpu_threads));
  }
  return absl::OkStatus();
}

// Opens the disk cache, or explains (once, as a warning) why it is off.
std::optional<DiskCache> OpenDiskCache(const Runtime::Options& options) {
  if (options.disable_disk_cache) return std::nullopt;
  std::string dir =
      options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  absl::StatusOr<DiskCache> disk = DiskCache::Open(dir);
  if (!disk.ok()) {
    Logger().warn("disk cache disabled, working from memory only: {}",
                  disk.status().message());
    return std::nullopt;
  }
  return *std::move(disk);
}

// A fork() waits for this engine's lookups in flight, and the child gets a
// cache and stats whose locks nobody holds.
class EngineForkParticipant final : public ForkParticipant {
 public:
  EngineForkParticipant(KernelCache& cache, Stats& stats)
      : cache_(cache), stats_(stats) {}
  void Prepare() override {
    cache_.PrepareFork();
    stats_.PrepareFork();
  }
  void AfterInParent() override {
    stats_.AfterForkInParent();
    cache_.AfterForkInParent();
  }
  void AfterInChild() override {
    stats_.AfterForkInChild();
    cache_.AfterForkInChild();
  }

 private:
  KernelCache& cache_;
  Stats& stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const Runtime::Options& options) {
  TAILOR_RETURN_IF_ERROR(ValidateOptions(options));
  TAILOR_RETURN_IF_ERROR(SetLogLevel(options.log_level));
  std::unique_ptr<Engine> engine(new Engine());
  engine->stats_ = std::make_unique<Stats>();
  TAILOR_ASSIGN_OR_RETURN(
      engine->backend_,
      CreateBackend(options.backend,
                    BackendOptions{.device_index = options.device_index,
                                   .cpu_threads = options.cpu_threads,
                                   .stats = engine->stats_.get()}));
  int compile_threads = options.compile_threads;
  if (compile_threads == 0) {
    compile_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  engine->cache_ = std::make_unique<KernelCache>(
      *engine->backend_, *engine->stats_,
      KernelCache::Config{
          .capacity = options.memory_cache_capacity,
          .disable_jit = options.disable_jit || EnvFlag("TAILOR_DISABLE_JIT"),
          .compile_threads = compile_threads,
          .disk = OpenDiskCache(options)});
  // The logger's fork participant must be registered before this one, so
  // that a fork quiesces the engine (whose lookups log) before it takes the
  // console lock: Logger() registers it on first use.
  Logger();
  engine->fork_participant_ =
      std::make_unique<EngineForkParticipant>(*engine->cache_, *engine->stats_);
  RegisterForkParticipant(engine->fork_participant_.get());
  Logger().debug(
      "runtime ready: backend {} arch {} cache {}",
      BackendName(engine->backend_->kind()), engine->backend_->arch(),
      engine->cache_dir().empty() ? "(memory only)" : engine->cache_dir());
  return engine;
}

Engine::~Engine() {
  if (fork_participant_) UnregisterForkParticipant(fork_participant_.get());
}

const std::string& Engine::cache_dir() const {
  static const std::string kNone;
  return cache_->disk() ? cache_->disk()->dir() : kNone;
}

SpecKey Engine::MakeKey(OpKind op) const {
  SpecKey key;
  key.op = op;
  key.backend = backend_->kind();
  key.SetArch(backend_->arch());
  return key;
}

absl::StatusOr<std::shared_ptr<Kernel>> Engine::GetKernel(
    const SpecKey& key, KernelGenerator generate) {
  return cache_->Get(key, generate);
}

absl::Status Engine::Launch(OpKind op, const Kernel& kernel,
                            const LaunchConfig& config, const void* params,
                            size_t params_size) {
  stats_->CountLaunch(op);
  return backend_->Launch(kernel, config, params, params_size);
}

absl::Status Engine::LaunchBatch(OpKind op,
                                 absl::Span<const LaunchRequest> requests) {
  for (size_t i = 0; i < requests.size(); ++i) stats_->CountLaunch(op);
  return backend_->LaunchBatch(requests);
}

}  // namespace tailor::internal
