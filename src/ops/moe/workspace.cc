// moe::Workspace: its views, ReserveWorkspace / WorkspaceBytes /
// BindWorkspace (host vectors or one block of device memory), and the device
// routing errors.
#include "ops/moe/workspace.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/internals.h"
#include "core/engine.h"
#include "core/stats.h"
#include "ops/moe/checks.h"
#include "ops/moe/device_workspace.h"
#include "ops/moe/kernels.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor {
namespace moe {

using internal::GrowTo;
using internal::MoeCapacity;
using internal::MoeDeviceBuffers;
using internal::MoeKernels;
using internal::MoeWorkspace;

// ---- Workspace --------------------------------------------------------------

Workspace::Workspace() : impl_(std::make_unique<MoeWorkspace>()) {}
Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&& other) noexcept = default;
Workspace& Workspace::operator=(Workspace&& other) noexcept = default;

bool Workspace::routed() const { return impl_ != nullptr && impl_->routed; }
int64_t Workspace::num_tokens() const {
  return routed() ? impl_->num_tokens : 0;
}
int64_t Workspace::topk() const { return routed() ? impl_->topk : 0; }
int64_t Workspace::num_experts() const {
  return routed() ? impl_->num_experts : 0;
}
int64_t Workspace::num_rows() const { return routed() ? impl_->num_rows : 0; }

Device Workspace::device() const {
  return impl_ != nullptr && impl_->device ? impl_->device->device : Device{};
}

namespace {

// A view of a routing buffer: host vector data or a device buffer.
TensorRef View(const MoeWorkspace& w, void* host, int64_t device_offset,
               std::initializer_list<int64_t> dims) {
  if (!w.device) return TensorRef::Contiguous(host, DType::kI32, dims);
  return TensorRef::Contiguous(w.device->at(device_offset), DType::kI32, dims,
                               w.device->device);
}

}  // namespace

TensorRef Workspace::counts() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  const MoeWorkspace& w = *impl_;
  return View(w, impl_->counts.data(), w.device ? w.device->counts : 0,
              {w.num_experts});
}

TensorRef Workspace::offsets() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  const MoeWorkspace& w = *impl_;
  return View(w, impl_->offsets.data(), w.device ? w.device->offsets : 0,
              {w.num_experts + 1});
}

TensorRef Workspace::permutation() const {
  if (!routed() || impl_->topk == 0)
    return TensorRef::Contiguous(nullptr, DType::kI32, {0});
  const MoeWorkspace& w = *impl_;
  return View(w, impl_->permutation.data(),
              w.device ? w.device->permutation : 0, {w.num_rows});
}

TensorRef Workspace::inverse() const {
  if (!routed()) return TensorRef::Contiguous(nullptr, DType::kI32, {0, 0});
  const MoeWorkspace& w = *impl_;
  return View(w, impl_->inverse.data(), w.device ? w.device->inverse : 0,
              {w.num_tokens, w.topk});
}

namespace {

// GemmChoice::features of `c`: its listed features as "key=value,...".
std::string FeaturesText(const internal::GemmConfig& c) {
  std::string text;
  for (const internal::GemmFeature& f : c.features) {
    if (f.key == nullptr) break;
    if (!text.empty()) text += ',';
    if (f.name != nullptr) {
      absl::StrAppend(&text, f.key, "=", f.name);
    } else {
      absl::StrAppend(&text, f.key, "=", f.value);
    }
  }
  return text;
}

std::vector<GemmChoice> GemmChoices(const internal::MoeWorkspace& w) {
  std::vector<GemmChoice> out;
  for (const internal::GemmConfig& c : w.Gemms()) {
    out.push_back({.kernel = c.kernel,
                   .n = c.n,
                   .k = c.k,
                   .cta_rows = c.cta_rows,
                   .cta_cols = c.cta_cols,
                   .k_tile = c.k_tile,
                   .stages = c.stages,
                   .ctas = c.ctas,
                   .features = FeaturesText(c)});
  }
  return out;
}

// The moe.* tuning keys of the runtime that routed `w` ("" none).
std::string MoeTuningText(const internal::MoeWorkspace& w) {
  if (w.tuning == nullptr) return "";
  return absl::StrJoin(w.tuning->WithPrefix("moe."), ",",
                       absl::PairFormatter("="));
}

}  // namespace

PlanSummary Workspace::plan() const {
  if (!routed()) return {};
  if (impl_->device) {
    return {.tile_rows = static_cast<int32_t>(impl_->tile_rows),
            .core_tiles = -1,
            .tail_pieces = -1,
            .variants = -1,
            .useful_rows = -1,
            .executed_rows = -1,
            .gemms = GemmChoices(*impl_),
            .tuning = MoeTuningText(*impl_)};
  }
  const plan::PiecewisePlan& p = impl_->plan;
  const int32_t core = p.core_range().size();
  return {.tile_rows = static_cast<int32_t>(p.tile_rows()),
          .core_tiles = core,
          .tail_pieces = static_cast<int32_t>(p.work().size()) - core,
          .variants = static_cast<int32_t>(p.variants().size()),
          .useful_rows = p.accounting().useful_rows,
          .executed_rows = p.accounting().executed_rows,
          .gemms = GemmChoices(*impl_),
          .tuning = MoeTuningText(*impl_)};
}

namespace {

// The FP8 Experts intermediates (host).
size_t Fp8CapacityBytes(const internal::MoeWorkspace& w) {
  return w.fp8_rows_h.capacity() + w.fp8_rows_i.capacity() +
         sizeof(float) *
             (w.fp8_scales_h.capacity() + w.fp8_scales_i.capacity()) +
         sizeof(int32_t) * w.identity.capacity();
}

}  // namespace

size_t Workspace::CapacityBytes() const {
  if (impl_ == nullptr) return 0;
  const MoeWorkspace& w = *impl_;
  const size_t device_bytes = w.device ? w.device->bytes : 0;
  return sizeof(int32_t) * (w.counts.capacity() + w.offsets.capacity() +
                            w.permutation.capacity() + w.inverse.capacity() +
                            w.local_ids.capacity()) +
         sizeof(int64_t) * w.extents.capacity() + w.rows_h.capacity() +
         w.rows_i.capacity() + w.plan.CapacityBytes() + device_bytes +
         Fp8CapacityBytes(w);
}

std::optional<std::string> GemmChoice::Feature(std::string_view key) const {
  std::string_view rest = features;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    const size_t equals = entry.find('=');
    if (equals != std::string_view::npos && entry.substr(0, equals) == key) {
      return std::string(entry.substr(equals + 1));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return std::nullopt;
}

std::string GemmChoice::ToString() const {
  std::string s = absl::StrCat(kernel, " N=", n, " K=", k, " cta=", cta_rows,
                               "x", cta_cols);
  if (k_tile > 0) absl::StrAppend(&s, " k_tile=", k_tile);
  if (stages > 0) absl::StrAppend(&s, " stages=", stages);
  if (ctas > 0) absl::StrAppend(&s, " ctas=", ctas);
  if (!features.empty()) absl::StrAppend(&s, " [", features, "]");
  return s;
}

std::string PlanSummary::ToString() const {
  std::string s =
      absl::StrCat("tile_rows=", tile_rows, " core=", core_tiles,
                   " tails=", tail_pieces, " variants=", variants,
                   " useful=", useful_rows, " executed=", executed_rows);
  if (!tuning.empty()) absl::StrAppend(&s, " tuning=", tuning);
  for (const GemmChoice& g : gemms) absl::StrAppend(&s, " | ", g.ToString());
  return s;
}

absl::Status Workspace::TakeErrors(Runtime& runtime, void* stream) {
  if (impl_ == nullptr || !impl_->device) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.route"));
  MoeDeviceBuffers& d = *impl_->device;
  TAILOR_ASSIGN_OR_RETURN(internal::RouteErrors errors,
                          kernels->TakeRouteErrors(internal::EngineOf(runtime),
                                                   d.at(d.scratch), stream));
  const int64_t k = std::max<int64_t>(impl_->topk, 1);
  if (errors.bad_id) {
    const int64_t i = errors.bad_id->position;
    return absl::InvalidArgumentError(absl::StrCat(
        "topk_ids[", i / k, ",", i % k, "]: expert id ", errors.bad_id->value,
        " is outside [0, ", impl_->id_limit, ")"));
  }
  if (errors.bad_map_entry) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert_map[", errors.bad_map_entry->position,
                     "]: local id ", errors.bad_map_entry->value,
                     " is outside [-1, ", impl_->num_experts, ")"));
  }
  return absl::OkStatus();
}

// ---- reservation ------------------------------------------------------------

namespace {

absl::Status OutOfRange(absl::string_view field, int64_t lo, int64_t hi,
                        int64_t got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "limits.", field, ": must be in [", lo, ", ", hi, "], got ", got));
}

absl::Status ValidateLimits(const WorkspaceLimits& limits) {
  const int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  if (limits.topk < 1 || limits.topk > kMaxTopk)
    return OutOfRange("topk", 1, kMaxTopk, limits.topk);
  if (limits.max_tokens < 0 || limits.max_tokens > kMaxIndex / limits.topk) {
    return OutOfRange("max_tokens", 0, kMaxIndex / limits.topk,
                      limits.max_tokens);
  }
  if (limits.num_experts < 1 || limits.num_experts > kMaxExperts) {
    return OutOfRange("num_experts", 1, kMaxExperts, limits.num_experts);
  }
  if (limits.hidden < 0 || limits.hidden > kMaxModelDim) {
    return OutOfRange("hidden", 0, kMaxModelDim, limits.hidden);
  }
  if (limits.intermediate < 0 || limits.intermediate > kMaxModelDim) {
    return OutOfRange("intermediate", 0, kMaxModelDim, limits.intermediate);
  }
  if (limits.dtype != DType::kBF16 && limits.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.dtype: must be bf16 or f32, got ", DTypeName(limits.dtype)));
  }
  return absl::OkStatus();
}

// Validates `limits` against `kernels` and resolves them to a capacity.
absl::StatusOr<MoeCapacity> DeviceCapacity(const MoeKernels& kernels,
                                           const WorkspaceLimits& limits) {
  TAILOR_RETURN_IF_ERROR(ValidateLimits(limits));
  TAILOR_ASSIGN_OR_RETURN(
      plan::PlanParams params,
      internal::ResolvePolicy(limits.policy,
                              kernels.DefaultTileRows(0, limits.num_experts, 0),
                              kernels.MaxTileRows(), "limits."));
  if (limits.num_experts > kernels.MaxDeviceRouteExperts()) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.num_experts: the device route supports at most ",
                     kernels.MaxDeviceRouteExperts(), " local experts, got ",
                     limits.num_experts));
  }
  const int64_t assignments = limits.max_tokens * limits.topk;
  return MoeCapacity{
      .assignments = assignments,
      .experts = limits.num_experts,
      .hidden = limits.hidden,
      .intermediate = limits.intermediate,
      .element_bytes = static_cast<int64_t>(DTypeSize(limits.dtype)),
      .tile_rows = params.tile_rows,
      .scratch_bytes =
          kernels.RouteScratchBytes(assignments, limits.num_experts)};
}

// The host memory ReserveHost's buffers take for `limits` (valid) planned
// with `tile_rows`: what it grows below, the plan's per PiecewisePlan::Reserve.
uint64_t HostReservationBytes(const WorkspaceLimits& limits,
                              int64_t tile_rows) {
  const uint64_t experts = limits.num_experts;
  const uint64_t rows = limits.max_tokens * limits.topk;  // R <= T * k
  const uint64_t element = DTypeSize(limits.dtype);
  const uint64_t index_bytes = 4 * (2 * experts + 1) + 8 * experts +  // E
                               3 * 4 * rows;  // permutation, inverse, ids
  const uint64_t row_bytes =
      rows * (limits.hidden + limits.intermediate) * element;  // rows_h, rows_i
  const uint64_t plan_bytes =
      16 * (rows / tile_rows + experts) + 8 * experts + 12 * tile_rows;
  return index_bytes + row_bytes + plan_bytes;
}

// The most host memory a reservation could get: physical memory, or less
// under an address-space or data-segment limit.
uint64_t HostMemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t limit = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page
                                         : std::numeric_limits<uint64_t>::max();
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit r;
    if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      limit = std::min<uint64_t>(limit, r.rlim_cur);
  }
  return limit;
}

// A reservation that cannot fit fails before any buffer is touched (growing
// them one by one wrote gigabytes before the last failed, or met the OOM
// killer first).
absl::Status ExpectHostReservationFits(const WorkspaceLimits& limits,
                                       int64_t tile_rows) {
  const uint64_t bytes = HostReservationBytes(limits, tile_rows);
  const uint64_t limit = HostMemoryLimit();
  if (bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "moe.reserve_workspace: cannot allocate ", bytes,
      " bytes of host workspace for these limits (T x k = ",
      limits.max_tokens * limits.topk, " rows of H + I = ",
      limits.hidden + limits.intermediate, " ", DTypeName(limits.dtype),
      " values): more than the ", limit, " bytes this process can have"));
}

absl::Status ReserveHost(const WorkspaceLimits& limits,
                         const MoeKernels& kernels, MoeWorkspace& w) {
  TAILOR_RETURN_IF_ERROR(ValidateLimits(limits));
  TAILOR_ASSIGN_OR_RETURN(
      plan::PlanParams params,
      internal::ResolvePolicy(limits.policy,
                              kernels.DefaultTileRows(0, limits.num_experts, 0),
                              kernels.MaxTileRows(), "limits."));
  TAILOR_RETURN_IF_ERROR(ExpectHostReservationFits(limits, params.tile_rows));
  const int64_t assignments = limits.max_tokens * limits.topk;  // R <= T * k
  const size_t element = DTypeSize(limits.dtype);
  GrowTo(w.counts, limits.num_experts);
  GrowTo(w.offsets, limits.num_experts + 1);
  GrowTo(w.extents, limits.num_experts);
  GrowTo(w.permutation, assignments);
  GrowTo(w.inverse, assignments);
  GrowTo(w.local_ids, assignments);
  GrowTo(w.rows_h, static_cast<size_t>(assignments * limits.hidden) * element);
  GrowTo(w.rows_i,
         static_cast<size_t>(assignments * limits.intermediate) * element);
  const int64_t groups = std::max(w.plan_reserved_groups, limits.num_experts);
  const int64_t rows = std::max(w.plan_reserved_rows, assignments);
  TAILOR_RETURN_IF_ERROR(w.plan.Reserve(groups, rows, params));
  w.plan_reserved_groups = groups;
  w.plan_reserved_rows = rows;
  w.plan_reserved_tile_rows = params.tile_rows;
  return absl::OkStatus();
}

absl::StatusOr<MoeWorkspace*> WorkspaceOf(Workspace& ws) {
  if (internal::WorkspaceImplOf(ws) == nullptr) {
    return absl::FailedPreconditionError(
        "ws: this Workspace was moved from; assign a new one before use");
  }
  return internal::WorkspaceImplOf(ws);
}

// Makes `buffers` the device storage of `w` and clears its routing errors.
absl::Status AdoptDeviceBuffers(Runtime& runtime, MoeKernels& kernels,
                                MoeDeviceBuffers buffers, void* stream,
                                MoeWorkspace& w) {
  TAILOR_RETURN_IF_ERROR(kernels.InitRouteScratch(
      internal::EngineOf(runtime), buffers.at(buffers.scratch), stream));
  w.Invalidate();
  w.device = std::move(buffers);
  return absl::OkStatus();
}

}  // namespace

// Keeps the runtime's workspace_bytes gauge at what `ws` holds after a
// successful reservation or binding.
static absl::Status Accounted(Runtime& runtime, Workspace& ws,
                              absl::Status status) {
  if (status.ok() && internal::WorkspaceImplOf(ws) != nullptr) {
    internal::WorkspaceImplOf(ws)->accounted_bytes.Set(
        internal::EngineOf(runtime).stats().workspace_bytes,
        static_cast<int64_t>(ws.CapacityBytes()));
  }
  return status;
}

static absl::Status ReserveUnaccounted(Runtime& runtime,
                                       const WorkspaceLimits& limits,
                                       Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.reserve"));
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  if (runtime.device().type == DeviceType::kCpu) {
    return ReserveHost(limits, *kernels, *w);
  }
  TAILOR_ASSIGN_OR_RETURN(MoeCapacity capacity,
                          DeviceCapacity(*kernels, limits));
  if (w->device && w->device->owned && w->device->device == runtime.device() &&
      internal::CheckFits(*w->device, capacity).ok()) {
    return absl::OkStatus();  // the current reservation is large enough
  }
  MoeDeviceBuffers buffers = internal::LayoutFor(capacity);
  TAILOR_ASSIGN_OR_RETURN(
      buffers.owned,
      internal::EngineOf(runtime).backend().AllocateDevice(buffers.bytes));
  buffers.base = static_cast<char*>(buffers.owned.get());
  buffers.device = runtime.device();
  return AdoptDeviceBuffers(runtime, *kernels, std::move(buffers), nullptr, *w);
}

absl::StatusOr<int64_t> WorkspaceBytes(Runtime& runtime,
                                       const WorkspaceLimits& limits) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.reserve"));
  if (runtime.device().type == DeviceType::kCpu) {
    TAILOR_RETURN_IF_ERROR(ValidateLimits(limits));
    return 0;
  }
  TAILOR_ASSIGN_OR_RETURN(MoeCapacity capacity,
                          DeviceCapacity(*kernels, limits));
  return internal::LayoutFor(capacity).bytes;
}

static absl::Status BindUnaccounted(Runtime& runtime,
                                    const WorkspaceLimits& limits, void* memory,
                                    int64_t bytes, Workspace& ws,
                                    void* stream) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.bind"));
  if (runtime.device().type == DeviceType::kCpu) {
    return absl::UnimplementedError(
        "moe.bind: the cpu backend keeps workspaces in host memory; use "
        "moe::ReserveWorkspace");
  }
  TAILOR_ASSIGN_OR_RETURN(MoeWorkspace * w, WorkspaceOf(ws));
  TAILOR_ASSIGN_OR_RETURN(MoeCapacity capacity,
                          DeviceCapacity(*kernels, limits));
  MoeDeviceBuffers buffers = internal::LayoutFor(capacity);
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % 256 != 0) {
    return absl::InvalidArgumentError(
        "memory: must be non-null device memory aligned to 256 bytes");
  }
  if (bytes < buffers.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes: must be >= WorkspaceBytes(limits) = ", buffers.bytes, ", got ",
        bytes));
  }
  buffers.base = static_cast<char*>(memory);
  buffers.device = runtime.device();
  return AdoptDeviceBuffers(runtime, *kernels, std::move(buffers), stream, *w);
}

absl::Status ReserveWorkspace(Runtime& runtime, const WorkspaceLimits& limits,
                              Workspace& ws) {
  // No std::bad_alloc crosses the API (moe_workspace.h).
  return internal::ResourceExhaustedOnBadAlloc("moe.reserve_workspace", [&] {
    return Accounted(runtime, ws, ReserveUnaccounted(runtime, limits, ws));
  });
}

absl::Status BindWorkspace(Runtime& runtime, const WorkspaceLimits& limits,
                           void* memory, int64_t bytes, Workspace& ws,
                           void* stream) {
  return Accounted(runtime, ws,
                   BindUnaccounted(runtime, limits, memory, bytes, ws, stream));
}

}  // namespace moe
}  // namespace tailor
