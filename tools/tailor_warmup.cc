// tailor-warmup — precompile the kernels a server will need into the disk
// cache, so that it starts (and can run with TAILOR_DISABLE_JIT=1) without
// compiling. Kernel keys hold only static dims, dtypes, tiles and tail
// classes (never token counts), so a profile's model dims and routing policy
// name every kernel any routing of the model can need.
//
//   tailor-warmup --profile tools/profiles/qwen3-30b-a3b.json
//   tailor-warmup --from-history history.json  # SpecializationHistoryJson()
//   tailor-warmup --model qwen3-30b-a3b --dtype bf16  # built-in MoE shapes
//   tailor-warmup --profile P.json --dry-run | --check | --times
//
// Exit status: 0 when every kernel is in the cache; 1 when one could not be
// built or saved (or, with --check, is missing); 2 for bad usage or input.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/engine.h"
#include "core/family_registry.h"
#include "core/kernel_cache.h"
#include "tailor/runtime.h"
#include "tailor/status.h"
#include "warmup/history.h"
#include "warmup/json_fields.h"
#include "warmup/kernel_catalog.h"
#include "warmup/profile.h"
#include "warmup/warmup_runner.h"

namespace {

using tailor::internal::KernelList;
using tailor::internal::ServingProfile;

constexpr char kUsage[] = R"(usage: tailor-warmup --profile FILE.json [options]
       tailor-warmup --from-history FILE.json [options]
       tailor-warmup --model NAME [--dtype bf16|f32] [options]
       tailor-warmup --topk K --hidden H --intermediate I [options]
       tailor-warmup --list-models | --help

Precompiles the kernels a server will need into the disk cache, so that it
starts, and can run with TAILOR_DISABLE_JIT=1, without compiling.

inputs (one of):
  --profile FILE       a serving profile (tools/profiles/*.json; the schema is
                       documented in src/warmup/profile.h)
  --from-history FILE  the specializations a server used, as exported by
                       Runtime::SpecializationHistoryJson() or served at
                       GET /specializations by its stats endpoint (several
                       runtimes of one backend and arch are read together;
                       else fetch /specializations?runtime=NAME, or give
                       --runtime NAME)
  --model NAME         a built-in MoE shape (--list-models), or --topk,
                       --hidden and --intermediate; with --dtype bf16|f32,
                       --tile-rows N and --tail pow2|exact|full
options:
  --runtime NAME       with --from-history: read only this runtime of an
                       endpoint's answer for several ("cpu", "cpu#2",
                       "cuda:0"; the names of GET /stats)
  --backend cpu|cuda   the backend to build for (default: the input's)
  --tuning TEXT        the server's tuning keys, e.g. "moe.cluster=2" (as
                       Runtime::Options::tuning; default: the profile's
                       "tuning", else $TAILOR_TUNING)
  --cache-dir DIR      the disk cache (default: $TAILOR_CACHE_DIR, else
                       $XDG_CACHE_HOME/tailor, else ~/.cache/tailor)
  --jobs N             compiles at once (default: hardware threads)
  --dry-run            list the kernels' keys; compile nothing
  --check              compile nothing; exit 1 naming every kernel that is
                       not in the cache
  --times              print every kernel's compile time (wall and CPU ms)
  --quiet              no progress line
  --help               this text
exit status: 0 every kernel is in the cache; 1 a kernel could not be built
or saved (with --check: is missing); 2 bad usage or input.
)";

struct MoeShape {
  int64_t topk = 0, hidden = 0, intermediate = 0;  // E reaches no key
  int64_t experts = 0;  // --experts; 0: k (E is only checked against k)
};

const std::map<std::string, MoeShape>& Models() {
  static const std::map<std::string, MoeShape> models = {
      {"mixtral-8x7b", {2, 4096, 14336}},
      {"qwen3-30b-a3b", {8, 2048, 768}},
      {"qwen3-235b-a22b", {8, 4096, 1536}},
      {"deepseek-v3", {8, 7168, 2048}},
  };
  return models;
}

struct Flags {
  std::string profile_path, history_path;
  std::string history_runtime;  // --runtime: one of several in a history
  std::string model_name = "custom";
  MoeShape shape;
  tailor::DType dtype = tailor::DType::kBF16;
  tailor::moe::RoutingPolicy policy;
  std::optional<tailor::BackendKind> backend;
  std::string cache_dir;
  std::optional<std::string> tuning;
  int jobs = 0;
  bool dry_run = false, check = false, times = false, quiet = false;
};

enum class FlagResult { kRun, kExitOk };

// The flags that take a value (SetValueFlag's).
constexpr const char* kValueFlags[] = {
    "--profile", "--from-history", "--model",   "--topk",
    "--hidden",  "--intermediate", "--experts", "--tile-rows",
    "--jobs",    "--cache-dir",    "--dtype",   "--tail",
    "--backend", "--tuning",       "--runtime"};

bool TakesValue(const std::string& flag) {
  return std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) !=
         std::end(kValueFlags);
}

// Sets the flag `flag` (which takes `value`).
absl::Status SetValueFlag(const std::string& flag, const std::string& value,
                          Flags& f) {
  auto number = [&](int64_t& out) -> absl::Status {
    if (!absl::SimpleAtoi(value, &out) || out <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": must be a positive integer, got ", value));
    return absl::OkStatus();
  };
  int64_t n = 0;
  if (flag == "--profile") {
    f.profile_path = value;
  } else if (flag == "--from-history") {
    f.history_path = value;
  } else if (flag == "--runtime") {
    f.history_runtime = value;
  } else if (flag == "--model") {
    auto it = Models().find(value);
    if (it == Models().end())
      return absl::InvalidArgumentError(absl::StrCat(
          "--model: unknown model \"", value, "\" (see --list-models)"));
    f.model_name = value;
    f.shape = it->second;
  } else if (flag == "--topk") {
    TAILOR_RETURN_IF_ERROR(number(f.shape.topk));
  } else if (flag == "--hidden") {
    TAILOR_RETURN_IF_ERROR(number(f.shape.hidden));
  } else if (flag == "--intermediate") {
    TAILOR_RETURN_IF_ERROR(number(f.shape.intermediate));
  } else if (flag == "--experts") {
    TAILOR_RETURN_IF_ERROR(number(f.shape.experts));  // in no kernel key
  } else if (flag == "--tile-rows") {
    TAILOR_RETURN_IF_ERROR(number(n));
    f.policy.tile_rows = static_cast<int32_t>(std::min<int64_t>(n, 1 << 30));
  } else if (flag == "--jobs") {
    TAILOR_RETURN_IF_ERROR(number(n));
    f.jobs = static_cast<int>(std::min<int64_t>(n, 1024));
  } else if (flag == "--cache-dir") {
    f.cache_dir = value;
  } else if (flag == "--tuning") {
    f.tuning = value;
  } else if (flag == "--dtype") {
    if (value != "bf16" && value != "f32")
      return absl::InvalidArgumentError("--dtype: must be bf16 or f32, got " +
                                        value);
    f.dtype = value == "bf16" ? tailor::DType::kBF16 : tailor::DType::kF32;
  } else if (flag == "--tail") {
    using tailor::moe::TailPolicy;
    if (value == "pow2")
      f.policy.tail = TailPolicy::kNextPowerOfTwo;
    else if (value == "exact")
      f.policy.tail = TailPolicy::kExact;
    else if (value == "full")
      f.policy.tail = TailPolicy::kFullTile;
    else
      return absl::InvalidArgumentError(
          "--tail: must be pow2, exact or full, got " + value);
  } else if (flag == "--backend") {
    if (value != "cpu" && value != "cuda")
      return absl::InvalidArgumentError("--backend: must be cpu or cuda, got " +
                                        value);
    f.backend =
        value == "cpu" ? tailor::BackendKind::kCpu : tailor::BackendKind::kCuda;
  } else {
    return absl::InvalidArgumentError("unknown flag " + flag);
  }
  return absl::OkStatus();
}

absl::StatusOr<FlagResult> ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return FlagResult::kExitOk;
    }
    if (flag == "--list-models") {
      for (const auto& [name, m] : Models()) {
        std::printf("%-16s topk=%lld hidden=%lld intermediate=%lld\n",
                    name.c_str(), static_cast<long long>(m.topk),
                    static_cast<long long>(m.hidden),
                    static_cast<long long>(m.intermediate));
      }
      return FlagResult::kExitOk;
    }
    bool* toggle = flag == "--dry-run" ? &f.dry_run
                   : flag == "--check" ? &f.check
                   : flag == "--times" ? &f.times
                   : flag == "--quiet" ? &f.quiet
                                       : nullptr;
    if (toggle != nullptr) {
      *toggle = true;
      continue;
    }
    if (!TakesValue(flag)) {
      return absl::InvalidArgumentError(flag.rfind("-", 0) == 0
                                            ? "unknown flag " + flag
                                            : "unexpected argument " + flag);
    }
    if (i + 1 >= argc)
      return absl::InvalidArgumentError(flag + ": needs a value");
    TAILOR_RETURN_IF_ERROR(SetValueFlag(flag, argv[++i], f));
  }
  int inputs =
      !f.profile_path.empty() + !f.history_path.empty() +
      (f.shape.topk > 0 || f.shape.hidden > 0 || f.shape.intermediate > 0);
  if (inputs != 1)
    return absl::InvalidArgumentError(
        "give exactly one of --profile, --from-history, or --model (or "
        "--topk, --hidden and --intermediate)");
  if (!f.history_runtime.empty() && f.history_path.empty())
    return absl::InvalidArgumentError(
        "--runtime: only with --from-history (it picks one runtime's "
        "history from a stats endpoint's answer)");
  if (f.dry_run && f.check)
    return absl::InvalidArgumentError(
        "--dry-run and --check exclude each other");
  return FlagResult::kRun;
}

// The profile the legacy --model / --topk flags describe, validated like a
// profile file.
absl::StatusOr<ServingProfile> ProfileFromFlags(const Flags& f) {
  if (f.shape.topk <= 0 || f.shape.hidden <= 0 || f.shape.intermediate <= 0)
    return absl::InvalidArgumentError(
        "give --model NAME, or --topk, --hidden and --intermediate (all > 0)");
  const char* tail = f.policy.tail == tailor::moe::TailPolicy::kExact ? "exact"
                     : f.policy.tail == tailor::moe::TailPolicy::kFullTile
                         ? "full"
                         : "pow2";
  std::string json = absl::StrCat(
      R"({"schema": "tailor.profile/1", "name": ")", f.model_name,
      R"(", "target": {"backend": "cpu"}, "moe": {"experts": )",
      f.shape.experts > 0 ? f.shape.experts : f.shape.topk, R"(, "topk": )",
      f.shape.topk, R"(, "hidden": )", f.shape.hidden, R"(, "intermediate": )",
      f.shape.intermediate, R"(, "dtypes": [")", tailor::DTypeName(f.dtype),
      R"("], "routing": {"tile_rows": )", f.policy.tile_rows, R"(, "tail": ")",
      tail, R"("}}})");
  return tailor::internal::ParseProfile(json);
}

// What to warm: a profile (file or flags) or a history document, and the
// server's tuning keys.
struct Input {
  std::string description;  // "profile qwen3-30b-a3b", "history of ..."
  tailor::BackendKind backend = tailor::BackendKind::kCpu;
  std::string arch;  // exact, or "native": whatever this machine builds for
  std::optional<ServingProfile> profile;
  std::optional<tailor::internal::History> history;
  tailor::internal::Tuning tuning;
};

// --tuning, else the profile's "tuning", else $TAILOR_TUNING: the text the
// server gives Runtime::Options::tuning, validated the same way.
absl::StatusOr<tailor::internal::Tuning> TuningOf(const Flags& f,
                                                  const Input& in) {
  std::string text;
  absl::string_view origin = "--tuning";
  if (f.tuning.has_value()) {
    text = *f.tuning;
  } else if (in.profile.has_value() && !in.profile->tuning.empty()) {
    text = in.profile->tuning;
    origin = "profile tuning";
  } else if (const char* env = std::getenv("TAILOR_TUNING")) {
    text = env;
    origin = "TAILOR_TUNING";
  }
  absl::StatusOr<tailor::internal::Tuning> tuning =
      tailor::internal::ParseTuningText(text);
  if (tuning.ok()) return tuning;
  return absl::InvalidArgumentError(
      absl::StrCat(origin, ": ", tuning.status().message()));
}

absl::StatusOr<Input> LoadInput(const Flags& f) {
  Input input;
  if (!f.history_path.empty()) {
    TAILOR_ASSIGN_OR_RETURN(
        std::string text,
        tailor::internal::ReadJsonDocumentFile(f.history_path, "history"));
    TAILOR_ASSIGN_OR_RETURN(
        input.history, tailor::internal::ParseHistory(text, f.history_runtime));
    input.backend = input.history->backend;
    input.arch = input.history->arch;
    input.description =
        absl::StrCat("history ", f.history_path, " (",
                     input.history->keys.size(), " keys used by tailor ",
                     input.history->tailor_version, " on ", input.arch, ")");
  } else {
    if (!f.profile_path.empty()) {
      TAILOR_ASSIGN_OR_RETURN(
          std::string text,
          tailor::internal::ReadJsonDocumentFile(f.profile_path, "profile"));
      TAILOR_ASSIGN_OR_RETURN(input.profile,
                              tailor::internal::ParseProfile(text));
    } else {
      TAILOR_ASSIGN_OR_RETURN(input.profile, ProfileFromFlags(f));
    }
    input.backend = input.profile->backend;
    input.arch = input.profile->arch;
    input.description = absl::StrCat("profile ", input.profile->name);
  }
  if (f.backend.has_value() && *f.backend != input.backend) {
    input.backend = *f.backend;
    input.arch = tailor::internal::kNativeArch;  // the input's is for another
  }
  TAILOR_ASSIGN_OR_RETURN(input.tuning, TuningOf(f, input));
  return input;
}

absl::StatusOr<std::unique_ptr<tailor::Runtime>> MakeRuntime(const Flags& f,
                                                             const Input& in) {
  tailor::Runtime::Options options;
  options.backend = in.backend;
  options.cache_dir = f.cache_dir;
  options.cpu_threads = 1;  // nothing is launched
  options.tuning = in.tuning.ToString();
  options.compile_threads =
      f.jobs > 0
          ? f.jobs
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Quiet by default, but an explicit TAILOR_LOG_LEVEL (valid or not) is
  // honoured and checked.
  const char* level = std::getenv("TAILOR_LOG_LEVEL");
  if (level == nullptr || *level == '\0') options.log_level = "warn";
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<tailor::Runtime> runtime,
                          tailor::Runtime::Create(options));
  if (runtime->cache_dir().empty()) {
    return absl::FailedPreconditionError(
        "no usable disk cache: nothing would persist (see the warning above)");
  }
  // A profile may name an arch; it must be this machine's (history keys are
  // re-targeted instead: that is what warming up on a new machine means).
  if (in.profile.has_value() && in.arch != tailor::internal::kNativeArch &&
      in.arch != runtime->arch()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target.arch: this machine's ", tailor::BackendName(in.backend),
        " backend builds for ", runtime->arch(), ", not ", in.arch,
        " (use \"native\", or warm up on a machine of that arch)"));
  }
  return runtime;
}

absl::StatusOr<KernelList> ListKernels(const Input& in,
                                       const tailor::internal::KeyTarget& t) {
  if (in.profile.has_value())
    return tailor::internal::KernelsForProfile(t, *in.profile, in.tuning);
  return tailor::internal::KernelsForKeys(t, in.history->keys);
}

// Prints progress to stderr: one rewritten line on a terminal, else a line
// per tenth of the work.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet)
      : quiet_(quiet), terminal_(isatty(STDERR_FILENO) != 0) {}
  void operator()(const tailor::internal::WarmupProgress& p) {
    if (quiet_) return;
    int tenth = p.total == 0 ? 10 : p.done * 10 / p.total;
    if (terminal_) {
      std::fprintf(stderr, "\r%-60s", FormatProgress(p).c_str());
      if (p.done == p.total) std::fputc('\n', stderr);
    } else if (tenth != last_tenth_ || p.done == p.total) {
      std::fprintf(stderr, "%s\n", FormatProgress(p).c_str());
    }
    last_tenth_ = tenth;
  }

 private:
  bool quiet_, terminal_;
  int last_tenth_ = 0;
};

int Warm(tailor::Runtime& runtime, const Flags& f, const KernelList& kernels,
         bool skipped_are_failures) {
  tailor::internal::KernelCache& cache =
      tailor::internal::EngineOf(runtime).cache();
  const int parallel =
      f.jobs > 0
          ? f.jobs
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto start = std::chrono::steady_clock::now();
  const uint64_t evictions_before = runtime.stats().disk_evictions;
  ProgressPrinter progress(f.quiet);
  std::vector<tailor::internal::WarmupResult> results =
      tailor::internal::PrecompileAll(
          cache, kernels.jobs, parallel,
          [&](const tailor::internal::WarmupProgress& p) { progress(p); });
  double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  tailor::internal::RecheckOnDisk(
      cache, kernels.jobs, runtime.stats().disk_evictions - evictions_before,
      results);
  if (f.times) std::printf("%s", FormatCompileTimes(results).c_str());
  tailor::internal::WarmupSummary summary = SummarizeWarmup(results, wall);
  std::printf("%s", summary.table.c_str());
  std::vector<std::string> problems = summary.problems;
  if (skipped_are_failures) {
    for (const std::string& s : kernels.skipped)
      problems.push_back("cannot build  " + s);
  }
  if (problems.empty()) {
    std::printf("tailor-warmup: %d kernels ready in %s\n", summary.ready,
                runtime.cache_dir().c_str());
    return 0;
  }
  std::printf("tailor-warmup: INCOMPLETE: %zu of %zu kernels are not in %s:\n",
              problems.size(), problems.size() + summary.ready,
              runtime.cache_dir().c_str());
  for (const std::string& p : problems) std::printf("  %s\n", p.c_str());
  return 1;
}

int Check(tailor::Runtime& runtime, const KernelList& kernels,
          bool skipped_are_failures) {
  tailor::internal::KernelCache& cache =
      tailor::internal::EngineOf(runtime).cache();
  int missing = 0;
  for (const tailor::internal::KernelJob& job : kernels.jobs) {
    absl::Status s = cache.CheckOnDisk(job.key, job.generate);
    if (s.ok()) continue;
    ++missing;
    std::printf("missing: %s (%s)\n", job.key.ToString().c_str(),
                std::string(s.message()).c_str());
  }
  if (skipped_are_failures) {
    for (const std::string& s : kernels.skipped) {
      ++missing;
      std::printf("missing: %s\n", s.c_str());
    }
  }
  if (missing > 0) {
    std::printf("tailor-warmup: %d of %zu kernels are missing from %s\n",
                missing, kernels.jobs.size(), runtime.cache_dir().c_str());
    return 1;
  }
  std::printf("tailor-warmup: all %zu kernels are in %s\n", kernels.jobs.size(),
              runtime.cache_dir().c_str());
  return 0;
}

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "tailor-warmup: %s\n",
               std::string(status.message()).c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::StatusOr<FlagResult> parsed = ParseFlags(argc, argv, flags);
  if (!parsed.ok()) {
    Fail(2, parsed.status());
    std::fprintf(stderr, "(tailor-warmup --help prints the usage)\n");
    return 2;
  }
  if (*parsed == FlagResult::kExitOk) return 0;
  absl::StatusOr<Input> input = LoadInput(flags);
  if (!input.ok()) return Fail(2, input.status());

  // A dry run makes the real run's checks (the profile's arch must be this
  // machine's); only where no runtime of the backend can start here (no
  // device) does it list the keys for an explicit arch unchecked.
  std::unique_ptr<tailor::Runtime> runtime;
  std::string arch = input->arch;
  absl::StatusOr<std::unique_ptr<tailor::Runtime>> created =
      MakeRuntime(flags, *input);
  if (created.ok()) {
    runtime = *std::move(created);
    arch = runtime->arch();
  } else if (absl::IsInvalidArgument(created.status())) {
    return Fail(2, created.status());
  } else if (!flags.dry_run || arch == tailor::internal::kNativeArch) {
    return Fail(1, created.status());
  } else {
    std::printf(
        "tailor-warmup: no %s runtime here (%s): keys for %s are "
        "listed unchecked\n",
        std::string(tailor::BackendName(input->backend)).c_str(),
        std::string(created.status().message()).c_str(), arch.c_str());
  }
  const tailor::internal::KeyTarget target = {.backend = input->backend,
                                              .arch = arch};
  absl::StatusOr<KernelList> kernels = ListKernels(*input, target);
  if (!kernels.ok()) return Fail(2, kernels.status());
  const bool from_history = input->history.has_value();

  std::printf("tailor-warmup: %s: %zu kernels for %s %s%s%s%s%s\n",
              input->description.c_str(), kernels->jobs.size(),
              std::string(tailor::BackendName(input->backend)).c_str(),
              arch.c_str(), runtime ? " in " : "",
              runtime ? runtime->cache_dir().c_str() : "",
              input->tuning.empty() ? "" : ", tuning ",
              input->tuning.ToString().c_str());
  if (!from_history) {
    for (const std::string& s : kernels->skipped)
      std::printf("  skipped %s\n", s.c_str());
  }
  if (flags.dry_run) {
    for (const tailor::internal::KernelJob& job : kernels->jobs)
      std::printf("%s\n", job.key.ToString().c_str());
    if (from_history) {
      for (const std::string& s : kernels->skipped)
        std::printf("cannot build  %s\n", s.c_str());
    }
    return 0;
  }
  if (flags.check) return Check(*runtime, *kernels, from_history);
  return Warm(*runtime, flags, *kernels, from_history);
}
