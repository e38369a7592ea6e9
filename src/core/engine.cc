#include "core/engine.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backend_registry.h"
#include "core/disk_eviction.h"
#include "core/family_registry.h"
#include "core/fork_handlers.h"
#include "core/kernel_cache.h"
#include "core/logging.h"
#include "core/stats.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// $TAILOR_DISABLE_JIT, which fails closed: compiling stays allowed only
// when it is unset, empty, 0, false, no or off (any case); 1, true, yes and
// on forbid it, and so does any other value, with a warning. For a "never
// compile in production" switch, a typo must not mean "compile".
bool JitDisabledByEnvironment() {
  const char* env = std::getenv("TAILOR_DISABLE_JIT");
  if (env == nullptr || *env == '\0') return false;
  const std::string value = absl::AsciiStrToLower(env);
  for (const char* off : {"0", "false", "no", "off"}) {
    if (value == off) return false;
  }
  for (const char* on : {"1", "true", "yes", "on"}) {
    if (value == on) return true;
  }
  Logger().warn(
      "TAILOR_DISABLE_JIT=\"{}\" is none of 1, true, yes, on (disable) or 0, "
      "false, no, off (allow); compiling is disabled",
      env);
  return true;
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
  if (o.jit_mode != Runtime::JitMode::kDefault &&
      o.jit_mode != Runtime::JitMode::kBlocking &&
      o.jit_mode != Runtime::JitMode::kBackground) {
    return absl::InvalidArgumentError(absl::StrCat(
        "jit_mode: must be kDefault, kBlocking or kBackground, got ",
        static_cast<int>(o.jit_mode)));
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

// Options::jit_mode resolved: background or not. An unknown
// $TAILOR_JIT_MODE is reported and blocking applies.
bool BackgroundJit(const Runtime::Options& options) {
  if (options.jit_mode != Runtime::JitMode::kDefault) {
    return options.jit_mode == Runtime::JitMode::kBackground;
  }
  const char* env = std::getenv("TAILOR_JIT_MODE");
  if (env == nullptr || *env == '\0') return false;
  const absl::string_view mode = env;
  if (mode == "background") return true;
  if (mode != "blocking") {
    Logger().warn(
        "TAILOR_JIT_MODE: expected blocking or background, got \"{}\"; "
        "using blocking",
        mode);
  }
  return false;
}

// The disk cache size limit in bytes (0: none): the option, else
// $TAILOR_CACHE_MAX_SIZE, else the default. A malformed variable is reported
// and the default applies.
uint64_t DiskCacheMaxBytes(const Runtime::Options& options) {
  if (options.cache_max_bytes == Runtime::kNoCacheSizeLimit) return 0;
  if (options.cache_max_bytes != 0) return options.cache_max_bytes;
  const char* env = std::getenv("TAILOR_CACHE_MAX_SIZE");
  if (env == nullptr || *env == '\0') return kDefaultDiskCacheMaxBytes;
  absl::StatusOr<uint64_t> parsed = ParseByteSize(env);
  if (parsed.ok()) return *parsed;  // "0": no limit
  Logger().warn("TAILOR_CACHE_MAX_SIZE: {}; using the default limit, {}",
                parsed.status().message(),
                FormatByteSize(kDefaultDiskCacheMaxBytes));
  return kDefaultDiskCacheMaxBytes;
}

// Options::tuning, else $TAILOR_TUNING, validated. InvalidArgument names
// where the text came from, the key and the accepted values.
absl::StatusOr<Tuning> TuningOf(const Runtime::Options& options) {
  const char* env = std::getenv("TAILOR_TUNING");
  const bool from_env = options.tuning.empty() && env != nullptr;
  absl::StatusOr<Tuning> tuning =
      ParseTuningText(from_env ? absl::string_view(env) : options.tuning);
  if (tuning.ok()) return tuning;
  return absl::InvalidArgumentError(absl::StrCat(
      from_env ? "TAILOR_TUNING: " : "tuning: ", tuning.status().message()));
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
  TAILOR_ASSIGN_OR_RETURN(Tuning tuning, TuningOf(options));
  engine->tuning_ = std::make_shared<const Tuning>(std::move(tuning));
  engine->stats_ = std::make_unique<Stats>();
  TAILOR_ASSIGN_OR_RETURN(
      engine->backend_,
      CreateBackend(options.backend,
                    BackendOptions{.device_index = options.device_index,
                                   .cpu_threads = options.cpu_threads,
                                   .stats = engine->stats_.get(),
                                   .tuning = *engine->tuning_}));
  int compile_threads = options.compile_threads;
  if (compile_threads == 0) {
    compile_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  engine->cache_ = std::make_unique<KernelCache>(
      *engine->backend_, *engine->stats_,
      KernelCache::Config{
          .capacity = options.memory_cache_capacity,
          .disable_jit = options.disable_jit || JitDisabledByEnvironment(),
          .compile_threads = compile_threads,
          .disk = OpenDiskCache(options),
          .disk_max_bytes = DiskCacheMaxBytes(options)});
  engine->background_jit_ = BackgroundJit(options);
  // The logger's fork participant must be registered before this one, so
  // that a fork quiesces the engine (whose lookups log) before it takes the
  // console lock: Logger() registers it on first use.
  Logger();
  engine->fork_participant_ =
      std::make_unique<EngineForkParticipant>(*engine->cache_, *engine->stats_);
  RegisterForkParticipant(engine->fork_participant_.get());
  // Generic kernels ready (or their compiles queued) before the first call.
  if (engine->background_jit_) engine->backend_->PrepareBackgroundJit(*engine);
  Logger().debug(
      "runtime ready: backend {} arch {} cache {}{}{}",
      BackendName(engine->backend_->kind()), engine->backend_->arch(),
      engine->cache_dir().empty() ? "(memory only)" : engine->cache_dir(),
      engine->tuning_->empty() ? "" : " tuning ", engine->tuning_->ToString());
  return engine;
}

Engine::~Engine() {
  if (fork_participant_) UnregisterForkParticipant(fork_participant_.get());
}

const std::string& Engine::cache_dir() const {
  static const std::string kNone;
  return cache_->disk() ? cache_->disk()->dir() : kNone;
}

SpecKey Engine::MakeKey(OpKind op) const { return target().MakeKey(op); }

KeyTarget Engine::target() const {
  return KeyTarget{.backend = backend_->kind(), .arch = backend_->arch()};
}

KernelGeneratorFn Engine::GeneratorFor(OpKind op,
                                       KernelGeneratorFn library) const {
  const auto index = static_cast<size_t>(op);
  if (index >= generator_overrides_.size()) return library;
  KernelGeneratorFn override = generator_overrides_[index].load();
  return override != nullptr ? override : library;
}

void Engine::SetGeneratorOverride(OpKind op, KernelGeneratorFn generate) {
  const auto index = static_cast<size_t>(op);
  if (index < generator_overrides_.size()) {
    generator_overrides_[index].store(generate);
  }
}

absl::StatusOr<std::shared_ptr<Kernel>> Engine::GetKernel(
    const SpecKey& key, KernelGenerator generate) {
  return cache_->Get(key, generate);
}

std::shared_ptr<Kernel> Engine::TryGetKernel(const SpecKey& key,
                                             KernelGeneratorFn generate) {
  return cache_->TryGet(key, generate);
}

absl::Status Engine::LaunchFallback(OpKind op, const Kernel& generic,
                                    const LaunchConfig& config,
                                    const void* params, size_t params_size) {
  stats_->Add(stats_->fallback_launches);
  return Launch(op, generic, config, params, params_size);
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
