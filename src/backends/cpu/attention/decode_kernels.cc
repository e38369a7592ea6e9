#include "backends/cpu/attention/decode_kernels.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/attention/decode_generic.h"
#include "ops/attention/decode_spec.h"
#include "tailor/status.h"
#include "templates/cpu/attention/decode_params.h"

namespace tailor::internal::cpu {
namespace {

using kernels::DecodeMergeParams;
using kernels::DecodeParams;

// The templates read the host plan's items and merge groups as their own.
static_assert(sizeof(kernels::DecodeWorkItem) == sizeof(plan::DecodeWorkItem));
static_assert(offsetof(kernels::DecodeWorkItem, seq) ==
              offsetof(plan::DecodeWorkItem, seq));
static_assert(offsetof(kernels::DecodeWorkItem, kv_head) ==
              offsetof(plan::DecodeWorkItem, kv_head));
static_assert(offsetof(kernels::DecodeWorkItem, kv_begin) ==
              offsetof(plan::DecodeWorkItem, kv_begin));
static_assert(offsetof(kernels::DecodeWorkItem, kv_end) ==
              offsetof(plan::DecodeWorkItem, kv_end));
static_assert(offsetof(kernels::DecodeWorkItem, seq_len) ==
              offsetof(plan::DecodeWorkItem, seq_len));
static_assert(offsetof(kernels::DecodeWorkItem, partial) ==
              offsetof(plan::DecodeWorkItem, partial));
static_assert(offsetof(kernels::DecodeWorkItem, first_partial) ==
              offsetof(plan::DecodeWorkItem, first_partial));
static_assert(offsetof(kernels::DecodeWorkItem, pieces) ==
              offsetof(plan::DecodeWorkItem, pieces));
static_assert(sizeof(kernels::DecodeMergeGroup) ==
              sizeof(plan::DecodeMergeGroup));
static_assert(offsetof(kernels::DecodeMergeGroup, first_partial) ==
              offsetof(plan::DecodeMergeGroup, first_partial));
static_assert(offsetof(kernels::DecodeMergeGroup, pieces) ==
              offsetof(plan::DecodeMergeGroup, pieces));

// Tokens per softmax step of decode_attention.h: pieces start on them.
constexpr int32_t kTileTokens = 16;
// What an item costs besides its tokens (query load, output write).
constexpr int32_t kItemCostTokens = 16;
constexpr int32_t kWorkersPerThread = 2;

absl::string_view KernelTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::kernels::bf16"
                               : "tailor::kernels::f16";
}

KernelSource EntryFor(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code =
          absl::StrCat("#include \"templates/cpu/", header, "\"\n",
                       "TAILOR_CPU_ENTRY((tailor::kernels::", kernel, "))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> GenerateAttention(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const DecodeSpec spec, DecodeSpec::FromKey(key));
  if (!(spec == DecodeSpec{.dtype = spec.dtype,
                           .head_dim = spec.head_dim,
                           .group = spec.group,
                           .page_size = spec.page_size})) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tile, variant: the cpu decode kernel has none (all 0), got ",
        key.ToString()));
  }
  return EntryFor(
      "attention/decode.h",
      absl::StrCat("DecodeAttentionKernel<", KernelTypeName(spec.dtype), ", ",
                   spec.head_dim, ", ", spec.group, ", ", spec.page_size, ">"));
}

absl::StatusOr<KernelSource> GenerateMerge(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const DecodeMergeSpec spec,
                          DecodeMergeSpec::FromKey(key));
  return EntryFor("attention/decode_merge.h",
                  absl::StrCat("DecodeMergeKernel<", KernelTypeName(spec.dtype),
                               ", ", spec.head_dim, ", ", spec.group, ">"));
}

DecodeParams ParamsOf(const DecodeLaunch& l) {
  return DecodeParams{.q = l.q,
                      .q_stride_b = l.q_stride_b,
                      .q_stride_h = l.q_stride_h,
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
                      .num_pages = l.num_pages,
                      .out = l.out,
                      .out_stride_b = l.out_stride_b,
                      .out_stride_h = l.out_stride_h,
                      .lse = l.lse,
                      .lse_stride_b = l.lse_stride_b,
                      .sm_scale = l.sm_scale,
                      .soft_cap = l.soft_cap,
                      .items = reinterpret_cast<const kernels::DecodeWorkItem*>(
                          l.work.host_plan->items().data()),
                      .worker_begin = l.work.host_plan->worker_begin().data(),
                      .partial_out = l.work.partial_out,
                      .partial_lse = l.work.partial_lse};
}

}  // namespace

SpecKey DecodeAttentionKey(const KeyTarget& target, const DecodeShape& shape) {
  return DecodeSpec{.dtype = shape.dtype,
                    .head_dim = shape.head_dim,
                    .group = shape.group,
                    .page_size = shape.page_size}
      .ToKey(target);
}

SpecKey DecodeMergeKey(const KeyTarget& target, const DecodeShape& shape) {
  return DecodeMergeSpec{
      .dtype = shape.dtype, .head_dim = shape.head_dim, .group = shape.group}
      .ToKey(target);
}

absl::StatusOr<KernelSource> GenerateDecodeKernel(const SpecKey& key) {
  switch (key.op) {
    case OpKind::kAttentionDecode:
      return GenerateAttention(key);
    case OpKind::kAttentionDecodeMerge:
      return GenerateMerge(key);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("key.op: ", GetOpInfo(key.op).name,
                       " is not a cpu attention.decode kernel"));
  }
}

absl::StatusOr<std::vector<KernelJob>> DecodeLayerKernels(
    const KeyTarget& target, const DecodeShape& shape) {
  if (shape.dtype != DType::kBF16 && shape.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: paged decode takes bf16 or f16, got ", DTypeName(shape.dtype)));
  }
  return std::vector<KernelJob>{
      {DecodeAttentionKey(target, shape), &GenerateDecodeKernel},
      {DecodeMergeKey(target, shape), &GenerateDecodeKernel}};
}

absl::StatusOr<DecodePlanConfig> CpuDecodeKernels::PlanConfig(
    const DecodeShape& shape, int64_t /*bucket*/,
    absl::Span<const int32_t> /*seq_lens*/) {
  return DecodePlanConfig{
      .num_workers = std::max(1, num_threads_ * kWorkersPerThread),
      .tile_tokens = kTileTokens,
      .item_cost_tokens = kItemCostTokens};
}

absl::StatusOr<std::shared_ptr<Kernel>> CpuDecodeKernels::KernelFor(
    Engine& engine, const SpecKey& key, const DecodeShape& shape) {
  const KernelGeneratorFn generate =
      engine.GeneratorFor(key.op, &GenerateDecodeKernel);
  if (engine.background_jit() &&
      GenericDecodeServes(shape.head_dim, shape.group)) {
    return engine.TryGetKernel(key, generate);
  }
  return engine.GetKernel(key, generate);
}

absl::Status CpuDecodeKernels::Decode(Engine& engine,
                                      const DecodeLaunch& launch) {
  const plan::DecodePlan* plan = launch.work.host_plan;
  if (plan == nullptr) {
    return absl::InternalError(
        "attention.decode: the cpu backend needs a host plan");
  }
  if (launch.page_indptr != nullptr) {
    return absl::InternalError(
        "attention.decode: the cpu kernel has no page_indptr (ragged decode "
        "rows)");
  }
  if (launch.q_rows != nullptr) {
    return absl::InternalError(
        "attention.decode: the cpu kernel has no q_rows (ragged decode rows)");
  }
  if (plan->items().empty()) return absl::OkStatus();
  const DecodeShape& shape = launch.shape;
  const SpecKey key = DecodeAttentionKey(engine.target(), shape);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          KernelFor(engine, key, shape));
  const DecodeParams params = ParamsOf(launch);
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(plan->params().num_workers);
  config.block.x = 1;  // the plan balanced the workers: one per chunk
  if (kernel != nullptr) {
    TAILOR_RETURN_IF_ERROR(engine.Launch(key.op, *kernel, config, params));
  } else {  // background JIT, not compiled yet: the generic kernel
    const GenericDecodeParams generic = {
        .base = params,
        .dtype = shape.dtype,
        .head_dim = static_cast<int32_t>(shape.head_dim),
        .group = static_cast<int32_t>(shape.group),
        .page_size = static_cast<int32_t>(shape.page_size)};
    TAILOR_RETURN_IF_ERROR(
        engine.LaunchFallback(key.op, GenericDecodeAttentionKernel(), config,
                              &generic, sizeof(generic)));
  }
  if (plan->merge_groups().empty()) return absl::OkStatus();
  return Merge(engine, launch);
}

absl::Status CpuDecodeKernels::Merge(Engine& engine,
                                     const DecodeLaunch& launch) {
  const plan::DecodePlan& plan = *launch.work.host_plan;
  const SpecKey key = DecodeMergeKey(engine.target(), launch.shape);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> merge,
                          KernelFor(engine, key, launch.shape));
  const DecodeMergeParams params = {
      .groups = reinterpret_cast<const kernels::DecodeMergeGroup*>(
          plan.merge_groups().data()),
      .partial_out = launch.work.partial_out,
      .partial_lse = launch.work.partial_lse,
      .out = launch.out,
      .out_stride_b = launch.out_stride_b,
      .out_stride_h = launch.out_stride_h,
      .lse = launch.lse,
      .lse_stride_b = launch.lse_stride_b};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(plan.merge_groups().size());
  config.block.x = 4;
  if (merge != nullptr) return engine.Launch(key.op, *merge, config, params);
  const GenericDecodeMergeParams generic = {
      .base = params,
      .dtype = launch.shape.dtype,
      .head_dim = static_cast<int32_t>(launch.shape.head_dim),
      .group = static_cast<int32_t>(launch.shape.group)};
  return engine.LaunchFallback(key.op, GenericDecodeMergeKernel(), config,
                               &generic, sizeof(generic));
}

}  // namespace tailor::internal::cpu
