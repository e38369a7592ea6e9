#include "backends/cpu/attention/ragged_kernels.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "ops/attention/ragged_spec.h"
#include "tailor/status.h"
#include "templates/cpu/attention/ragged_params.h"

namespace tailor::internal::cpu {
namespace {

using kernels::RaggedMergeParams;
using kernels::RaggedParams;

// The templates read the host plan's items and merge groups as their own.
static_assert(sizeof(kernels::RaggedWorkItem) ==
              sizeof(plan::AttentionWorkItem));
static_assert(offsetof(kernels::RaggedWorkItem, q_token) ==
              offsetof(plan::AttentionWorkItem, q_token));
static_assert(offsetof(kernels::RaggedWorkItem, kv_end) ==
              offsetof(plan::AttentionWorkItem, kv_end));
static_assert(offsetof(kernels::RaggedWorkItem, partial) ==
              offsetof(plan::AttentionWorkItem, partial));
static_assert(sizeof(kernels::RaggedMergeGroup) ==
              sizeof(plan::AttentionMergeGroup));
static_assert(offsetof(kernels::RaggedMergeGroup, first_partial) ==
              offsetof(plan::AttentionMergeGroup, first_partial));
static_assert(offsetof(kernels::RaggedMergeGroup, pieces) ==
              offsetof(plan::AttentionMergeGroup, pieces));

// KV positions per step of ragged.h: pieces start on them.
constexpr int32_t kKvBlock = 16;
// What an item costs besides its KV positions (query load, output write).
constexpr int32_t kItemCost = 32;
constexpr int32_t kWorkersPerThread = 2;

absl::string_view KernelTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::kernels::bf16"
                               : "tailor::kernels::f16";
}

KernelSource EntryFor(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code =
          absl::StrCat("#include \"templates/cpu/attention/", header, "\"\n",
                       "TAILOR_CPU_ENTRY((tailor::kernels::", kernel, "))\n"),
      .entry = "tailor_entry"};
}

int32_t HeadPackOf(int64_t group) {
  int32_t pack = 1;
  while (pack < 16 && group % (pack * 2) == 0) pack *= 2;
  return pack;
}

RaggedParams ParamsOf(const RaggedLaunch& l) {
  return RaggedParams{.q = l.q,
                      .q_stride_token = l.q_stride_token,
                      .q_stride_head = l.q_stride_head,
                      .k_cache = l.k_cache,
                      .v_cache = l.v_cache,
                      .k_stride_page = l.k_strides[0],
                      .k_stride_token = l.k_strides[1],
                      .k_stride_head = l.k_strides[2],
                      .v_stride_page = l.v_strides[0],
                      .v_stride_token = l.v_strides[1],
                      .v_stride_head = l.v_strides[2],
                      .block_table = l.block_table,
                      .block_table_stride = l.block_table_stride,
                      .page_indptr = l.page_indptr,
                      .num_pages = l.num_pages,
                      .out = l.out,
                      .out_stride_token = l.out_stride_token,
                      .out_stride_head = l.out_stride_head,
                      .lse = l.lse,
                      .lse_stride_token = l.lse_stride_token,
                      .sm_scale = l.sm_scale,
                      .soft_cap = l.soft_cap,
                      .causal = l.shape.causal ? 1 : 0,
                      .window_left = static_cast<int32_t>(l.shape.window_left),
                      .group = static_cast<int32_t>(l.shape.group()),
                      .items = reinterpret_cast<const kernels::RaggedWorkItem*>(
                          l.work.host_plan->items().data()),
                      .worker_begin = l.work.host_plan->worker_begin().data(),
                      .partial_out = l.work.partial_out,
                      .partial_lse = l.work.partial_lse};
}

}  // namespace

absl::StatusOr<KernelSource> GenerateRaggedKernel(const SpecKey& key) {
  if (key.op == OpKind::kAttentionRaggedMerge) {
    TAILOR_ASSIGN_OR_RETURN(RaggedMergeSpec spec,
                            RaggedMergeSpec::FromKey(key));
    if (spec.tile_rows != kernels::kRaggedTileRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("key.tile.m (tile rows): the cpu templates tile by ",
                       kernels::kRaggedTileRows, ", got ", spec.tile_rows));
    }
    return EntryFor(
        "ragged_merge.h",
        absl::StrCat("RaggedMergeKernel<", KernelTypeName(spec.dtype), ", ",
                     spec.head_dim, ", ", spec.head_pack, ">"));
  }
  TAILOR_ASSIGN_OR_RETURN(RaggedKernelSpec spec,
                          RaggedKernelSpec::FromKey(key));
  if (spec.tile_rows != kernels::kRaggedTileRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("key.tile.m (tile rows): the cpu templates tile by ",
                     kernels::kRaggedTileRows, ", got ", spec.tile_rows));
  }
  return EntryFor("ragged.h", absl::StrCat("RaggedAttentionKernel<",
                                           KernelTypeName(spec.dtype), ", ",
                                           spec.head_dim, ", ", spec.head_pack,
                                           ", ", spec.page_size, ">"));
}

absl::StatusOr<RaggedPlanConfig> CpuRaggedKernels::PlanConfig(
    const RaggedShape& shape) {
  return RaggedPlanConfig{
      .head_pack = HeadPackOf(shape.group()),
      .tile_rows = kernels::kRaggedTileRows,
      .kv_block = kKvBlock,
      .num_workers = std::max(1, num_threads_ * kWorkersPerThread),
      .item_cost = kItemCost,
      .masked_block_extra = 0,
      .min_piece_blocks = 4,
      .max_pieces = 16};
}

absl::StatusOr<std::vector<KernelJob>> RaggedLayerKernels(
    const KeyTarget& target, const RaggedShape& shape, int num_threads) {
  CpuRaggedKernels kernels(num_threads);
  TAILOR_ASSIGN_OR_RETURN(RaggedPlanConfig config, kernels.PlanConfig(shape));
  return std::vector<KernelJob>{
      {RaggedKernelSpecFor(shape, config).Key(target), &GenerateRaggedKernel},
      {RaggedMergeSpecFor(shape, config).Key(target), &GenerateRaggedKernel}};
}

absl::Status CpuRaggedKernels::Run(Engine& engine, const RaggedLaunch& launch) {
  const plan::AttentionPlan* plan = launch.work.host_plan;
  if (plan == nullptr) {
    return absl::InternalError(
        "attention.ragged: the cpu backend needs a host plan");
  }
  if (plan->items().empty()) return absl::OkStatus();
  const SpecKey key =
      RaggedKernelSpecFor(launch.shape, launch.config).Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> kernel,
      engine.GetKernel(key,
                       engine.GeneratorFor(key.op, &GenerateRaggedKernel)));
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(plan->params().num_workers);
  config.block.x = 1;  // the plan balanced the workers: one per chunk
  TAILOR_RETURN_IF_ERROR(
      engine.Launch(key.op, *kernel, config, ParamsOf(launch)));
  if (plan->merge_groups().empty()) return absl::OkStatus();
  const SpecKey merge_key =
      RaggedMergeSpecFor(launch.shape, launch.config).Key(engine.target());
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> merge,
      engine.GetKernel(
          merge_key, engine.GeneratorFor(merge_key.op, &GenerateRaggedKernel)));
  const RaggedMergeParams params = {
      .groups = reinterpret_cast<const kernels::RaggedMergeGroup*>(
          plan->merge_groups().data()),
      .partial_out = launch.work.partial_out,
      .partial_lse = launch.work.partial_lse,
      .out = launch.out,
      .out_stride_token = launch.out_stride_token,
      .out_stride_head = launch.out_stride_head,
      .lse = launch.lse,
      .lse_stride_token = launch.lse_stride_token};
  LaunchConfig merge_config;
  merge_config.grid.x = static_cast<uint32_t>(plan->merge_groups().size());
  merge_config.block.x = 1;
  return engine.Launch(merge_key.op, *merge, merge_config, params);
}

}  // namespace tailor::internal::cpu
