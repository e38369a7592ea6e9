// attention::RaggedWorkspace: its summary, ReserveRaggedWorkspace /
// RaggedWorkspaceBytes / BindRaggedWorkspace (host vectors or one block of
// device memory, owned or the caller's) and the device errors.
#include "ops/attention/ragged_workspace.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/internals.h"
#include "ops/attention/checks.h"
#include "ops/attention/ragged_checks.h"
#include "ops/attention/ragged_decode.h"
#include "ops/device_layout.h"
#include "tailor/status.h"

namespace tailor {
namespace internal {
namespace {

// Keeps in `into` the lower-positioned of `from` (a decode kernel's
// record) and `into` (the tiles').
void LowestOf(const std::optional<DecodeErrors::Bad>& from,
              std::optional<RaggedErrors::Bad>& into) {
  if (from && (!into || from->position < into->position)) {
    into = RaggedErrors::Bad{.position = from->position, .value = from->value};
  }
}

absl::Status TooSmall(absl::string_view what, int64_t reserved,
                      int64_t needed) {
  return absl::FailedPreconditionError(absl::StrCat(
      "ws: reserved for ", reserved, " ", what, ", this plan needs ", needed,
      "; call attention::ReserveRaggedWorkspace with larger limits"));
}

}  // namespace

absl::StatusOr<RaggedWorkspaceImpl*> ImplOf(attention::RaggedWorkspace& ws) {
  if (internal::WorkspaceImplOf(ws) == nullptr) {
    return absl::FailedPreconditionError(
        "ws: this RaggedWorkspace was moved from; assign a new one before "
        "use");
  }
  return internal::WorkspaceImplOf(ws);
}

RaggedCapacity RaggedCapacityFor(const RaggedShape& shape,
                                 const RaggedPlanConfig& config, int64_t batch,
                                 int64_t tokens, int64_t scratch_bytes) {
  // Every sequence's packed rows end in at most one partial tile.
  const int64_t packs = shape.num_qo_heads / config.head_pack;
  const int64_t tiles =
      (tokens * config.head_pack / config.tile_rows + batch) * packs;
  const plan::AttentionPlanParams params = RaggedPlanParamsFor(shape, config);
  return RaggedCapacity{
      .batch = batch,
      .tiles = tiles,
      .items = plan::MaxAttentionItems(tiles, params),
      .workers = config.num_workers,
      .partials = plan::MaxAttentionPartials(tiles, params),
      .partial_row = int64_t{config.tile_rows} * shape.head_dim,
      .tile_rows = config.tile_rows,
      .scratch_bytes = scratch_bytes};
}

RaggedDeviceBuffers RaggedLayoutFor(const RaggedCapacity& c) {
  RaggedDeviceBuffers b;
  b.capacity = c;
  int64_t end = 0;
  b.items = PlaceDeviceBuffer(
      int64_t{sizeof(plan::AttentionWorkItem)} * c.items, end);
  b.worker_begin = PlaceDeviceBuffer(4 * (c.workers + 1), end);
  b.merge_groups = PlaceDeviceBuffer(
      int64_t{sizeof(plan::AttentionMergeGroup)} * c.partials, end);
  b.num_merges = PlaceDeviceBuffer(4, end);
  b.partial_out = PlaceDeviceBuffer(4 * c.partials * c.partial_row, end);
  b.partial_lse = PlaceDeviceBuffer(4 * c.partials * c.tile_rows, end);
  b.scratch = PlaceDeviceBuffer(c.scratch_bytes, end);
  if (c.decode.batch > 0) {
    b.q_rows = PlaceDeviceBuffer(4 * (c.decode.batch + 1), end);
    b.seq_lens = PlaceDeviceBuffer(4 * c.decode.batch, end);
    b.decode_layout = DecodeLayoutFor(c.decode);
    b.decode = PlaceDeviceBuffer(b.decode_layout.bytes, end);
  }
  b.bytes = end;
  return b;
}

RaggedDeviceBuffers DecodeRowsLayoutFor(const DecodeCapacity& decode) {
  RaggedDeviceBuffers b;
  b.capacity.decode = decode;
  b.decode_layout = DecodeLayoutFor(decode);
  b.bytes = b.decode_layout.bytes;
  return b;
}

absl::Status AllocateDeviceBlock(Runtime& runtime,
                                 RaggedDeviceBuffers& buffers) {
  TAILOR_ASSIGN_OR_RETURN(
      buffers.owned, EngineOf(runtime).backend().AllocateDevice(buffers.bytes));
  buffers.base = static_cast<char*>(buffers.owned.get());
  buffers.device = runtime.device();
  return absl::OkStatus();
}

absl::Status PlaceInCallerMemory(Runtime& runtime, void* memory, int64_t bytes,
                                 absl::string_view bytes_function,
                                 RaggedDeviceBuffers& buffers) {
  if (memory == nullptr ||
      reinterpret_cast<uintptr_t>(memory) % kDeviceBufferAlignment != 0) {
    return absl::InvalidArgumentError(
        "memory: must be non-null device memory aligned to 256 bytes");
  }
  if (bytes < buffers.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes: must be >= ", bytes_function,
                     "(limits) = ", buffers.bytes, ", got ", bytes));
  }
  buffers.base = static_cast<char*>(memory);
  buffers.device = runtime.device();
  return absl::OkStatus();
}

absl::Status CheckRaggedFits(const RaggedDeviceBuffers& buffers,
                             const RaggedCapacity& need) {
  const RaggedCapacity& have = buffers.capacity;
  if (need.items > have.items) {
    return TooSmall("work items", have.items, need.items);
  }
  if (need.workers != have.workers) {
    return TooSmall("workers", have.workers, need.workers);
  }
  if (need.partials > have.partials) {
    return TooSmall("partial slots", have.partials, need.partials);
  }
  if (need.partial_row > have.partial_row) {
    return TooSmall("f32 per partial slot (tile_rows * head_dim)",
                    have.partial_row, need.partial_row);
  }
  if (need.scratch_bytes > have.scratch_bytes) {
    return TooSmall("scratch bytes", have.scratch_bytes, need.scratch_bytes);
  }
  if (need.decode.batch > have.decode.batch) {
    return TooSmall("decode sequences", have.decode.batch, need.decode.batch);
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace attention {

using internal::RaggedCapacity;
using internal::RaggedDeviceBuffers;
using internal::RaggedKernels;
using internal::RaggedShape;
using internal::RaggedWorkspaceImpl;

RaggedWorkspace::RaggedWorkspace()
    : impl_(std::make_unique<RaggedWorkspaceImpl>()) {}
RaggedWorkspace::~RaggedWorkspace() = default;
RaggedWorkspace::RaggedWorkspace(RaggedWorkspace&& other) noexcept = default;
RaggedWorkspace& RaggedWorkspace::operator=(RaggedWorkspace&& other) noexcept =
    default;

bool RaggedWorkspace::planned() const {
  return impl_ != nullptr && impl_->planned;
}
int64_t RaggedWorkspace::batch() const {
  return planned() ? impl_->plan.batch() : 0;
}
int64_t RaggedWorkspace::total_q() const {
  return planned() ? impl_->plan.total_q() : 0;
}
Device RaggedWorkspace::device() const {
  return impl_ != nullptr && impl_->device ? impl_->device->device : Device{};
}

RaggedPlanSummary RaggedWorkspace::plan() const {
  if (!planned()) return {};
  const plan::AttentionPlan& p = impl_->plan;
  const plan::AttentionPlanStats& s = p.stats();
  return {.batch = p.batch(),
          .total_q = p.total_q(),
          .tiles = s.tiles,
          .items = s.items,
          .tail_tiles = s.tail_tiles,
          .masked_tiles = s.masked_tiles,
          .split_tiles = s.split_tiles,
          .partials = s.partials,
          .workers = p.params().num_workers,
          .busy_workers = s.busy_workers,
          .tile_rows = p.params().tile_rows,
          .head_pack = p.params().head_pack,
          .max_worker_cost = s.max_worker_cost,
          .mean_worker_cost = s.mean_worker_cost,
          .decode_seqs = s.skipped_seqs,
          .decode_items = s.skipped_seqs > 0
                              ? static_cast<int32_t>(impl_->decode.items.size())
                              : 0};
}

std::string RaggedPlanSummary::ToString() const {
  return absl::StrFormat(
      "batch=%d total_q=%d tiles=%d items=%d tail=%d masked=%d split=%d "
      "partials=%d workers=%d/%d tile_rows=%d head_pack=%d max_cost=%d "
      "mean_cost=%.1f decode_seqs=%d decode_items=%d",
      batch, total_q, tiles, items, tail_tiles, masked_tiles, split_tiles,
      partials, busy_workers, workers, tile_rows, head_pack, max_worker_cost,
      mean_worker_cost, decode_seqs, decode_items);
}

size_t RaggedWorkspace::CapacityBytes() const {
  if (impl_ == nullptr) return 0;
  const RaggedWorkspaceImpl& w = *impl_;
  return w.plan.CapacityBytes() +
         sizeof(int32_t) * (w.q_lens.capacity() + w.kv_lens.capacity()) +
         sizeof(float) * (w.partial_out.capacity() + w.partial_lse.capacity()) +
         w.decode.plan.CapacityBytes() +
         sizeof(int32_t) *
             (w.decode.seqs.capacity() + w.decode.kv_lens.capacity()) +
         sizeof(plan::DecodeWorkItem) *
             (w.decode.items.capacity() + w.decode.first_items.capacity()) +
         (w.device ? w.device->bytes : 0);
}

absl::Status RaggedWorkspace::TakeErrors(Runtime& runtime, void* stream) {
  if (impl_ == nullptr || !impl_->device) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.ragged errors"));
  RaggedDeviceBuffers& d = *impl_->device;
  TAILOR_ASSIGN_OR_RETURN(internal::RaggedErrors errors,
                          kernels->TakeErrors(internal::EngineOf(runtime),
                                              d.at(d.scratch), stream));
  // The decode rows' kernel records bad pages (b * max_pages + j) and KV
  // lengths (b) at the same positions; the lowest of both is the one
  // reported.
  TAILOR_ASSIGN_OR_RETURN(
      internal::DecodeErrors decode,
      internal::TakeRaggedDecodeErrors(runtime, *impl_, stream));
  internal::LowestOf(decode.bad_page, errors.bad_page);
  internal::LowestOf(decode.bad_seq_len, errors.bad_kv_len);
  if (errors.bad_page) {
    const int64_t max_pages = std::max<int64_t>(impl_->last_max_pages, 1);
    const int64_t position = errors.bad_page->position;
    const int64_t seq = position / max_pages, slot = position % max_pages;
    const int32_t page = errors.bad_page->value;
    return absl::InvalidArgumentError(
        impl_->last_page_indptr
            ? absl::StrCat("kv_indices: page ", slot, " of sequence ", seq,
                           " is ", page, ", outside [0, ",
                           impl_->last_num_pages,
                           ") (or page_indptr gives it no such page)")
            : internal::BadPageText(seq, slot, page, impl_->last_num_pages));
  }
  if (decode.too_many_pages && impl_->last_page_indptr) {
    // The device's page_indptr gave a decode row fewer pages than it needs.
    return absl::InvalidArgumentError(absl::StrCat(
        "page_indptr: sequence ", decode.too_many_pages->position, " needs ",
        decode.too_many_pages->value,
        " pages; page_indptr gives it fewer (or a range outside kv_indices)"));
  }
  if (errors.bad_kv_len) {
    const int64_t b = errors.bad_kv_len->position;
    const auto planned = impl_->plan.kv_lens();
    return absl::InvalidArgumentError(internal::BadKvLenText(
        b, errors.bad_kv_len->value,
        b < static_cast<int64_t>(planned.size()) ? planned[b] : int64_t{-1}));
  }
  if (decode.too_many_pages) {
    // Planned page counts are checked against the block table on the host.
    return absl::InternalError(
        "attention.ragged: the decode rows' kernel saw page counts that "
        "differ from its plan");
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<RaggedShape> LimitsShape(const RaggedLimits& limits) {
  if (limits.max_batch < 0 || limits.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_batch: must be in [0, ", kMaxBatch, "], got ",
                     limits.max_batch));
  }
  if (limits.max_tokens < 0 || limits.max_tokens > plan::kMaxAttentionLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_tokens: must be in [0, ",
                     plan::kMaxAttentionLen, "], got ", limits.max_tokens));
  }
  return internal::CheckRaggedShape({.num_qo_heads = limits.num_qo_heads,
                                     .num_kv_heads = limits.num_kv_heads,
                                     .head_dim = limits.head_dim,
                                     .page_size = limits.page_size,
                                     .dtype = limits.dtype,
                                     .causal = limits.causal,
                                     .window_left = limits.window_left},
                                    "limits.");
}

// What `limits` need on `kernels`' backend (the decode rows' block
// included where they run on the decode kernel), with the host plans
// reserved for them in `w` (every storage keeps its plans on the host).
absl::StatusOr<RaggedCapacity> ReservePlan(Runtime& runtime,
                                           RaggedKernels& kernels,
                                           const RaggedLimits& limits,
                                           RaggedWorkspaceImpl& w) {
  TAILOR_ASSIGN_OR_RETURN(RaggedShape shape, LimitsShape(limits));
  TAILOR_ASSIGN_OR_RETURN(internal::RaggedPlanConfig config,
                          kernels.PlanConfig(shape));
  RaggedCapacity capacity =
      internal::RaggedCapacityFor(shape, config, limits.max_batch,
                                  limits.max_tokens, kernels.ScratchBytes());
  if (runtime.device().type != DeviceType::kCpu) {
    capacity.decode = internal::RaggedDecodeCapacity(runtime, shape, config,
                                                     limits.max_batch);
  }
  config.decode_rows = capacity.decode.batch > 0;
  TAILOR_RETURN_IF_ERROR(
      w.plan.Reserve(limits.max_batch, capacity.tiles,
                     internal::RaggedPlanParamsFor(shape, config)));
  if (capacity.decode.batch > 0) {  // RaggedDecodeCapacity: shape served
    TAILOR_ASSIGN_OR_RETURN(
        internal::DecodeKernels * decode_kernels,
        internal::DecodeKernelsOf(runtime, "attention.reserve_ragged"));
    TAILOR_RETURN_IF_ERROR(internal::ReserveDecodeRows(
        *decode_kernels, *internal::RaggedDecodeShapeOf(shape), capacity.decode,
        /*host=*/false, w.decode));
  }
  w.q_lens.reserve(limits.max_batch);
  w.kv_lens.reserve(limits.max_batch);
  return capacity;
}

// Makes `buffers` the device storage of `w`, with fresh scratch.
absl::Status AdoptDeviceBuffers(Runtime& runtime, RaggedKernels& kernels,
                                RaggedDeviceBuffers buffers, void* stream,
                                RaggedWorkspaceImpl& w) {
  TAILOR_RETURN_IF_ERROR(kernels.InitScratch(
      internal::EngineOf(runtime), buffers.at(buffers.scratch), stream));
  TAILOR_RETURN_IF_ERROR(
      internal::InitRaggedDecodeScratch(runtime, buffers, stream));
  w.Invalidate();
  w.device = std::move(buffers);
  w.tiles_launched = w.decode_launched = false;
  return absl::OkStatus();
}

}  // namespace

absl::Status ReserveRaggedWorkspace(Runtime& runtime,
                                    const RaggedLimits& limits,
                                    RaggedWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.reserve_ragged"));
  TAILOR_ASSIGN_OR_RETURN(RaggedWorkspaceImpl * w, internal::ImplOf(ws));
  TAILOR_ASSIGN_OR_RETURN(RaggedCapacity capacity,
                          ReservePlan(runtime, *kernels, limits, *w));
  if (runtime.device().type == DeviceType::kCpu) {
    w->partial_out.resize(std::max<size_t>(
        w->partial_out.size(), capacity.partials * capacity.partial_row));
    w->partial_lse.resize(std::max<size_t>(
        w->partial_lse.size(), capacity.partials * capacity.tile_rows));
    return absl::OkStatus();
  }
  if (w->device && w->device->owned && w->device->device == runtime.device() &&
      internal::CheckRaggedFits(*w->device, capacity).ok()) {
    return absl::OkStatus();  // the current reservation is large enough
  }
  RaggedDeviceBuffers buffers = internal::RaggedLayoutFor(capacity);
  TAILOR_RETURN_IF_ERROR(internal::AllocateDeviceBlock(runtime, buffers));
  return AdoptDeviceBuffers(runtime, *kernels, std::move(buffers), nullptr, *w);
}

absl::StatusOr<int64_t> RaggedWorkspaceBytes(Runtime& runtime,
                                             const RaggedLimits& limits) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.reserve_ragged"));
  TAILOR_ASSIGN_OR_RETURN(RaggedShape shape, LimitsShape(limits));
  if (runtime.device().type == DeviceType::kCpu) return 0;
  TAILOR_ASSIGN_OR_RETURN(internal::RaggedPlanConfig config,
                          kernels->PlanConfig(shape));
  RaggedCapacity capacity =
      internal::RaggedCapacityFor(shape, config, limits.max_batch,
                                  limits.max_tokens, kernels->ScratchBytes());
  capacity.decode =
      internal::RaggedDecodeCapacity(runtime, shape, config, limits.max_batch);
  return internal::RaggedLayoutFor(capacity).bytes;
}

absl::Status BindRaggedWorkspace(Runtime& runtime, const RaggedLimits& limits,
                                 void* memory, int64_t bytes,
                                 RaggedWorkspace& ws, void* stream) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.bind_ragged"));
  if (runtime.device().type == DeviceType::kCpu) {
    return absl::UnimplementedError(
        "attention.bind_ragged: the cpu backend keeps ragged workspaces in "
        "host memory; use attention::ReserveRaggedWorkspace");
  }
  TAILOR_ASSIGN_OR_RETURN(RaggedWorkspaceImpl * w, internal::ImplOf(ws));
  TAILOR_ASSIGN_OR_RETURN(RaggedCapacity capacity,
                          ReservePlan(runtime, *kernels, limits, *w));
  RaggedDeviceBuffers buffers = internal::RaggedLayoutFor(capacity);
  TAILOR_RETURN_IF_ERROR(internal::PlaceInCallerMemory(
      runtime, memory, bytes, "RaggedWorkspaceBytes", buffers));
  return AdoptDeviceBuffers(runtime, *kernels, std::move(buffers), stream, *w);
}

}  // namespace attention
}  // namespace tailor
