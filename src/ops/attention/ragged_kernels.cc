#include "ops/attention/ragged_kernels.h"

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/backend.h"

namespace tailor::internal {
namespace {

absl::Status HostBackend(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      what, ": this backend keeps ragged workspaces in host memory"));
}

}  // namespace

absl::Status RaggedKernels::InitScratch(Engine&, void*, void*) {
  return HostBackend("attention.ragged scratch");
}

absl::Status RaggedKernels::UploadPlan(Engine&, const void*, void*, size_t,
                                       void*) {
  return HostBackend("attention.plan_ragged upload");
}

absl::StatusOr<RaggedErrors> RaggedKernels::TakeErrors(Engine&, void*, void*) {
  return HostBackend("attention.ragged errors");
}

absl::StatusOr<RaggedKernels*> RaggedKernelsOf(Runtime& runtime,
                                               absl::string_view op) {
  RaggedKernels* kernels =
      internal::EngineOf(runtime).backend().ragged_kernels();
  if (kernels == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": the ", BackendName(runtime.backend()),
                     " backend has no ragged attention kernels"));
  }
  return kernels;
}

plan::AttentionPlanParams RaggedPlanParamsFor(const RaggedShape& shape,
                                              const RaggedPlanConfig& config) {
  return {.num_qo_heads = static_cast<int32_t>(shape.num_qo_heads),
          .num_kv_heads = static_cast<int32_t>(shape.num_kv_heads),
          .head_pack = config.head_pack,
          .tile_rows = config.tile_rows,
          .kv_block = config.kv_block,
          .num_workers = config.num_workers,
          .causal = shape.causal,
          .window_left = static_cast<int32_t>(shape.window_left),
          .item_cost = config.item_cost,
          .masked_block_extra = config.masked_block_extra,
          .min_piece_blocks = config.min_piece_blocks,
          .max_pieces = config.max_pieces,
          .skip_decode_rows = config.decode_rows};
}

}  // namespace tailor::internal
