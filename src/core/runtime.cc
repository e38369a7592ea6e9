#include "tailor/runtime.h"

#include "absl/strings/string_view.h"
#include "core/engine.h"
#include "core/stats.h"
#include "tailor/status.h"

namespace tailor {

absl::string_view BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
    case BackendKind::kHip:
      return "hip";
  }
  return "invalid";
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    const Options& options) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<internal::Engine> engine,
                          internal::Engine::Create(options));
  return std::unique_ptr<Runtime>(new Runtime(std::move(engine)));
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create() {
  return Create(Options{});
}

Runtime::Runtime(std::unique_ptr<internal::Engine> engine)
    : engine_(std::move(engine)) {}
Runtime::~Runtime() = default;

BackendKind Runtime::backend() const { return engine_->backend().kind(); }
Device Runtime::device() const { return engine_->backend().device(); }
const std::string& Runtime::arch() const { return engine_->backend().arch(); }
const std::string& Runtime::cache_dir() const { return engine_->cache_dir(); }
StatsSnapshot Runtime::stats() const {
  StatsSnapshot snapshot = engine_->stats().Snapshot();
  engine_->backend().AddCounters(snapshot);
  return snapshot;
}

}  // namespace tailor
