// attention::DecodeWorkspace (a ragged workspace of decode rows only): its
// summary, ReserveDecodeWorkspace / DecodeWorkspaceBytes /
// BindDecodeWorkspace (host vectors or the decode block in device memory),
// and the device errors; the decode block's layout.
#include "ops/attention/workspace.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/internals.h"
#include "ops/attention/checks.h"
#include "ops/attention/kernels.h"
#include "ops/attention/ragged_decode.h"
#include "ops/attention/ragged_workspace.h"
#include "ops/device_layout.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

namespace tailor {
namespace internal {
namespace {

absl::Status TooSmall(absl::string_view what, int64_t reserved,
                      int64_t needed) {
  return absl::FailedPreconditionError(absl::StrCat(
      "ws: reserved for ", reserved, " ", what, ", this plan needs ", needed,
      "; call attention::ReserveDecodeWorkspace with larger limits"));
}

}  // namespace

absl::StatusOr<DecodeWorkspaceImpl*> ImplOf(attention::DecodeWorkspace& ws) {
  if (internal::WorkspaceImplOf(ws) == nullptr) {
    return absl::FailedPreconditionError(
        "ws: this DecodeWorkspace was moved from; assign a new one before "
        "use");
  }
  return internal::WorkspaceImplOf(ws);
}

plan::DecodePlanParams DecodePlanParamsFor(const DecodeShape& shape,
                                           const DecodePlanConfig& config) {
  return {.num_kv_heads = static_cast<int32_t>(shape.num_kv_heads),
          .num_workers = config.num_workers,
          .tile_tokens = config.tile_tokens,
          .page_size = static_cast<int32_t>(shape.page_size),
          .item_cost_tokens = config.item_cost_tokens,
          .cut_workers = config.cut_workers,
          .head_group = config.head_group,
          .head_group_always = config.head_group_always,
          .cluster_workers = config.cluster_workers};
}

DecodeCapacity DecodeCapacityFor(const DecodeShape& shape, int64_t batch,
                                 const DecodePlanConfig& config,
                                 int64_t scratch_bytes) {
  return DecodeCapacity{
      .batch = batch,
      .items = plan::MaxDecodeItems(batch, shape.num_kv_heads,
                                    config.num_workers, config.head_group),
      .workers = config.num_workers,
      .partials =
          plan::MaxDecodePartials(config.num_workers, config.head_group),
      .partial_row = shape.group * shape.head_dim,
      .group = shape.group,
      .scratch_bytes = scratch_bytes};
}

DecodeDeviceBuffers DecodeLayoutFor(const DecodeCapacity& c) {
  DecodeDeviceBuffers b;
  b.capacity = c;
  int64_t end = 0;
  b.items =
      PlaceDeviceBuffer(int64_t{sizeof(plan::DecodeWorkItem)} * c.items, end);
  b.worker_begin =
      PlaceDeviceBuffer(4 * (c.workers + 2), end);  // + the launch flags
  b.first_items =
      PlaceDeviceBuffer(int64_t{sizeof(plan::DecodeWorkItem)} * c.workers, end);
  b.partial_out = PlaceDeviceBuffer(4 * c.partials * c.partial_row, end);
  b.partial_lse = PlaceDeviceBuffer(4 * c.partials * c.group, end);
  b.scratch = PlaceDeviceBuffer(c.scratch_bytes, end);
  b.bytes = end;
  return b;
}

absl::Status CheckDecodeFits(const DecodeDeviceBuffers& buffers,
                             const DecodeCapacity& need) {
  const DecodeCapacity& have = buffers.capacity;
  if (need.items > have.items) {
    return TooSmall("work items (max_batch * num_kv_heads + workers - 1)",
                    have.items, need.items);
  }
  if (need.workers > have.workers) {
    return TooSmall("workers", have.workers, need.workers);
  }
  if (need.partials > have.partials) {
    return TooSmall("partial slots", have.partials, need.partials);
  }
  if (need.partial_row > have.partial_row || need.group > have.group) {
    return TooSmall("f32 per partial slot (group * head_dim)", have.partial_row,
                    need.partial_row);
  }
  if (need.scratch_bytes > have.scratch_bytes) {
    return TooSmall("scratch bytes", have.scratch_bytes, need.scratch_bytes);
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace attention {

using internal::DecodeCapacity;
using internal::DecodeKernels;
using internal::DecodeShape;
using internal::DecodeWorkspaceImpl;

// ---- DecodeWorkspace -------------------------------------------------------

DecodeWorkspace::DecodeWorkspace()
    : impl_(std::make_unique<DecodeWorkspaceImpl>()) {}
DecodeWorkspace::~DecodeWorkspace() = default;
DecodeWorkspace::DecodeWorkspace(DecodeWorkspace&& other) noexcept = default;
DecodeWorkspace& DecodeWorkspace::operator=(DecodeWorkspace&& other) noexcept =
    default;

bool DecodeWorkspace::planned() const {
  return impl_ != nullptr && impl_->ragged.planned;
}

int64_t DecodeWorkspace::batch() const {
  return planned() ? impl_->ragged.decode.plan.batch() : 0;
}

Device DecodeWorkspace::device() const {
  return impl_ != nullptr && impl_->ragged.device ? impl_->ragged.device->device
                                                  : Device{};
}

DecodePlanSummary DecodeWorkspace::plan() const {
  if (!planned()) return {};
  const plan::DecodePlan& p = impl_->ragged.decode.plan;
  const plan::DecodePlanStats s = p.stats();
  return {.batch = p.batch(),
          .workers = p.params().num_workers,
          .busy_workers = s.busy_workers,
          .items = s.items,
          .split_pairs = s.split_pairs,
          .partials = s.partials,
          .tokens = s.tokens,
          .max_worker_cost = s.max_worker_cost,
          .mean_worker_cost = s.mean_worker_cost,
          .head_group = p.params().head_group,
          .cluster_workers = p.params().cluster_workers};
}

std::string DecodePlanSummary::ToString() const {
  return absl::StrFormat(
      "batch=%d workers=%d/%d items=%d split_pairs=%d partials=%d tokens=%d "
      "max_worker_cost=%d mean_worker_cost=%.1f head_group=%d "
      "cluster_workers=%d",
      batch, busy_workers, workers, items, split_pairs, partials, tokens,
      max_worker_cost, mean_worker_cost, head_group, cluster_workers);
}

size_t DecodeWorkspace::CapacityBytes() const {
  if (impl_ == nullptr) return 0;
  const internal::RaggedDecodeRows& rows = impl_->ragged.decode;
  return rows.plan.CapacityBytes() +
         sizeof(int32_t) * (rows.seqs.capacity() + rows.kv_lens.capacity()) +
         sizeof(plan::DecodeWorkItem) *
             (rows.items.capacity() + rows.first_items.capacity()) +
         sizeof(float) *
             (rows.partial_out.capacity() + rows.partial_lse.capacity()) +
         (impl_->ragged.device ? impl_->ragged.device->bytes : 0);
}

absl::Status DecodeWorkspace::TakeErrors(Runtime& runtime, void* stream) {
  if (impl_ == nullptr || !impl_->ragged.device) return absl::OkStatus();
  internal::RaggedWorkspaceImpl& w = impl_->ragged;
  TAILOR_ASSIGN_OR_RETURN(internal::DecodeErrors errors,
                          internal::TakeRaggedDecodeErrors(runtime, w, stream));
  if (errors.bad_page) {
    const int64_t max_pages = std::max<int64_t>(w.last_max_pages, 1);
    const int64_t position = errors.bad_page->position;
    return absl::InvalidArgumentError(
        internal::BadPageText(position / max_pages, position % max_pages,
                              errors.bad_page->value, w.last_num_pages));
  }
  if (errors.bad_seq_len) {
    const int64_t b = errors.bad_seq_len->position;
    const plan::DecodePlan& p = w.decode.plan;
    const int64_t planned = b < p.batch() ? p.seq_lens()[b] : int64_t{-1};
    return absl::InvalidArgumentError(
        internal::BadSeqLenText(b, errors.bad_seq_len->value, planned));
  }
  if (errors.too_many_pages) {
    return absl::InvalidArgumentError(internal::TooManyPagesText(
        errors.too_many_pages->position, errors.too_many_pages->value,
        w.last_max_pages));
  }
  return absl::OkStatus();
}

// ---- reservation ------------------------------------------------------------

namespace {

absl::StatusOr<DecodeShape> LimitsShape(const DecodeLimits& limits) {
  if (limits.max_batch < 0 || limits.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_batch: must be in [0, ", kMaxBatch, "], got ",
                     limits.max_batch));
  }
  return internal::CheckDecodeShape({.num_qo_heads = limits.num_qo_heads,
                                     .num_kv_heads = limits.num_kv_heads,
                                     .head_dim = limits.head_dim,
                                     .page_size = limits.page_size,
                                     .dtype = limits.dtype},
                                    "limits.");
}

// What `limits` need on `kernels`' backend, with the host plans reserved
// for them in `w` (every storage keeps its plans on the host).
absl::StatusOr<DecodeCapacity> ReservePlan(Runtime& runtime,
                                           DecodeKernels& kernels,
                                           const DecodeLimits& limits,
                                           DecodeWorkspaceImpl& w) {
  TAILOR_ASSIGN_OR_RETURN(DecodeShape shape, LimitsShape(limits));
  TAILOR_ASSIGN_OR_RETURN(
      DecodeCapacity capacity,
      internal::DecodeRowsCapacity(kernels, shape, limits.max_batch));
  const bool host = runtime.device().type == DeviceType::kCpu;
  TAILOR_RETURN_IF_ERROR(internal::ReserveDecodeRows(kernels, shape, capacity,
                                                     host, w.ragged.decode));
  return capacity;
}

// Makes `buffers` the device storage of `w`, with fresh scratch.
absl::Status AdoptDeviceBuffers(Runtime& runtime,
                                internal::RaggedDeviceBuffers buffers,
                                void* stream, DecodeWorkspaceImpl& w) {
  TAILOR_RETURN_IF_ERROR(
      internal::InitRaggedDecodeScratch(runtime, buffers, stream));
  w.Invalidate();
  w.ragged.device = std::move(buffers);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReserveDecodeWorkspace(Runtime& runtime,
                                    const DecodeLimits& limits,
                                    DecodeWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.reserve_decode"));
  TAILOR_ASSIGN_OR_RETURN(DecodeWorkspaceImpl * w, internal::ImplOf(ws));
  TAILOR_ASSIGN_OR_RETURN(DecodeCapacity capacity,
                          ReservePlan(runtime, *kernels, limits, *w));
  if (runtime.device().type == DeviceType::kCpu) return absl::OkStatus();
  const std::optional<internal::RaggedDeviceBuffers>& held = w->ragged.device;
  if (held && held->owned && held->device == runtime.device() &&
      internal::CheckDecodeFits(held->DecodeBuffers(), capacity).ok()) {
    return absl::OkStatus();  // the current reservation is large enough
  }
  internal::RaggedDeviceBuffers buffers =
      internal::DecodeRowsLayoutFor(capacity);
  TAILOR_RETURN_IF_ERROR(internal::AllocateDeviceBlock(runtime, buffers));
  return AdoptDeviceBuffers(runtime, std::move(buffers), nullptr, *w);
}

absl::StatusOr<int64_t> DecodeWorkspaceBytes(Runtime& runtime,
                                             const DecodeLimits& limits) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.reserve_decode"));
  TAILOR_ASSIGN_OR_RETURN(DecodeShape shape, LimitsShape(limits));
  if (runtime.device().type == DeviceType::kCpu) return 0;
  TAILOR_ASSIGN_OR_RETURN(
      DecodeCapacity capacity,
      internal::DecodeRowsCapacity(*kernels, shape, limits.max_batch));
  return internal::DecodeRowsLayoutFor(capacity).bytes;
}

absl::Status BindDecodeWorkspace(Runtime& runtime, const DecodeLimits& limits,
                                 void* memory, int64_t bytes,
                                 DecodeWorkspace& ws, void* stream) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.bind_decode"));
  if (runtime.device().type == DeviceType::kCpu) {
    return absl::UnimplementedError(
        "attention.bind_decode: the cpu backend keeps decode workspaces in "
        "host memory; use attention::ReserveDecodeWorkspace");
  }
  TAILOR_ASSIGN_OR_RETURN(DecodeWorkspaceImpl * w, internal::ImplOf(ws));
  TAILOR_ASSIGN_OR_RETURN(DecodeCapacity capacity,
                          ReservePlan(runtime, *kernels, limits, *w));
  internal::RaggedDeviceBuffers buffers =
      internal::DecodeRowsLayoutFor(capacity);
  TAILOR_RETURN_IF_ERROR(internal::PlaceInCallerMemory(
      runtime, memory, bytes, "DecodeWorkspaceBytes", buffers));
  return AdoptDeviceBuffers(runtime, std::move(buffers), stream, *w);
}

}  // namespace attention
}  // namespace tailor
