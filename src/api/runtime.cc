#include "tailor/runtime.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/engine.h"
#include "core/logging.h"
#include "core/stats.h"
#include "serving/stats_endpoint.h"
#include "tailor/status.h"
#include "warmup/history.h"

#ifndef TAILOR_VERSION_STRING
#define TAILOR_VERSION_STRING "dev"
#endif

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

namespace {

// Options::stats_addr is the caller's request: failing to serve it fails
// Create. $TAILOR_STATS_ADDR is the environment's, shared by every runtime
// and tool of the process: failing it logs a warning naming the variable
// and the runtime goes on without an endpoint, so a taken port never stops
// a server (or tailor-warmup). Null: no endpoint.
absl::StatusOr<std::unique_ptr<internal::StatsAttachment>> AttachStats(
    const Runtime& runtime, const std::string& option) {
  const char* env = std::getenv("TAILOR_STATS_ADDR");
  const bool from_env = option.empty() && env != nullptr && *env != '\0';
  const std::string address = from_env ? std::string(env) : option;
  if (address.empty()) return nullptr;
  const Runtime* self = &runtime;
  absl::StatusOr<std::unique_ptr<internal::StatsAttachment>> attachment =
      internal::AttachStatsEndpoint(
          address, DeviceName(runtime.device()),
          [self] { return self->stats(); },
          [self] { return self->SpecializationHistoryJson(); });
  if (attachment.ok() || !from_env) return attachment;
  internal::Logger().warn("TAILOR_STATS_ADDR=\"{}\": {}; no stats endpoint",
                          address, attachment.status().message());
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    const Options& options) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<internal::Engine> engine,
                          internal::Engine::Create(options));
  std::unique_ptr<Runtime> runtime(new Runtime(std::move(engine)));
  TAILOR_ASSIGN_OR_RETURN(runtime->stats_endpoint_,
                          AttachStats(*runtime, options.stats_addr));
  return runtime;
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create() {
  return Create(Options{});
}

Runtime::Runtime(std::unique_ptr<internal::Engine> engine)
    : engine_(std::move(engine)) {}
Runtime::~Runtime() = default;

std::string Runtime::stats_address() const {
  return stats_endpoint_ ? stats_endpoint_->address() : std::string();
}

BackendKind Runtime::backend() const { return engine_->backend().kind(); }
Device Runtime::device() const { return engine_->backend().device(); }
const std::string& Runtime::arch() const { return engine_->backend().arch(); }
const std::string& Runtime::cache_dir() const { return engine_->cache_dir(); }
Runtime::JitMode Runtime::jit_mode() const {
  return engine_->background_jit() ? JitMode::kBackground : JitMode::kBlocking;
}
std::string Runtime::SpecializationHistoryJson() const {
  return internal::HistoryToJson({.tailor_version = TAILOR_VERSION_STRING,
                                  .backend = backend(),
                                  .arch = arch(),
                                  .keys = engine_->stats().SeenKeys()});
}

StatsSnapshot Runtime::stats() const {
  StatsSnapshot snapshot = engine_->stats().Snapshot();
  engine_->backend().AddCounters(snapshot);
  for (const auto& [key, value] : engine_->tuning().entries()) {
    snapshot.tuning.emplace(key, value);
  }
  return snapshot;
}

std::string Runtime::tuning() const { return engine_->tuning().ToString(); }

absl::StatusOr<std::shared_ptr<void>> Runtime::Allocate(size_t bytes) {
  if (device().type != DeviceType::kCpu) {
    return engine_->backend().AllocateDevice(bytes);
  }
  void* data = std::malloc(bytes == 0 ? 1 : bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Allocate: ", bytes, " bytes of host memory"));
  }
  return std::shared_ptr<void>(data, [](void* p) { std::free(p); });
}

absl::Status Runtime::CopyToDevice(void* device_dst, const void* host_src,
                                   size_t bytes, void* stream) {
  if (device().type != DeviceType::kCpu) {
    return engine_->backend().CopyToDevice(device_dst, host_src, bytes, stream);
  }
  if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status Runtime::CopyToHost(void* host_dst, const void* device_src,
                                 size_t bytes, void* stream) {
  if (device().type != DeviceType::kCpu) {
    return engine_->backend().CopyToHost(host_dst, device_src, bytes, stream);
  }
  if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  return absl::OkStatus();
}

absl::Status Runtime::Synchronize(void* stream) {
  if (device().type == DeviceType::kCpu) return absl::OkStatus();
  return engine_->backend().CopyToHost(nullptr, nullptr, 0, stream);
}

}  // namespace tailor
