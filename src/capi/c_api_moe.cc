// The C ABI's MoE entries: workspaces and the ops of tailor/ops/moe.h.
#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "capi/c_api_internal.h"
#include "ops/moe/workspace.h"
#include "tailor/c_api.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor::capi {
namespace {

// The C enums below are checked here, before the cast to the C++ enum's
// uint8_t could turn an out-of-range value into a valid one.
absl::StatusOr<moe::RoutingPolicy> ToPolicy(
    const tailor_moe_routing_policy& in) {
  if (in.tail < TAILOR_MOE_TAIL_NEXT_POWER_OF_TWO ||
      in.tail > TAILOR_MOE_TAIL_FULL_TILE) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy.tail: not a TailPolicy value: ", in.tail));
  }
  return moe::RoutingPolicy{.tile_rows = in.tile_rows,
                            .tail = static_cast<moe::TailPolicy>(in.tail)};
}

absl::StatusOr<moe::WorkspaceLimits> ToLimits(
    const tailor_moe_workspace_limits* in) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("limits", in));
  const int32_t dtype = in->dtype == 0 ? TAILOR_DTYPE_BF16 : in->dtype;
  if (dtype != TAILOR_DTYPE_BF16 && dtype != TAILOR_DTYPE_F32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.dtype: must be TAILOR_DTYPE_BF16 or TAILOR_DTYPE_F32, got ",
        in->dtype));
  }
  TAILOR_ASSIGN_OR_RETURN(moe::RoutingPolicy policy, ToPolicy(in->policy));
  return moe::WorkspaceLimits{.max_tokens = in->max_tokens,
                              .topk = in->topk,
                              .num_experts = in->num_experts,
                              .hidden = in->hidden,
                              .intermediate = in->intermediate,
                              .dtype = static_cast<DType>(dtype),
                              .policy = policy};
}

absl::StatusOr<std::optional<TensorRef>> ToOptionalTensor(
    absl::string_view name, const tailor_tensor* t) {
  if (t == nullptr) return std::nullopt;
  TAILOR_ASSIGN_OR_RETURN(TensorRef ref, ToTensorRef(name, *t));
  return std::optional<TensorRef>(ref);
}

absl::StatusOr<moe::Workspace*> WorkspaceOf(tailor_moe_workspace* handle) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", handle));
  return &handle->workspace;
}

absl::StatusOr<moe::RouteArgs> ToRouteArgs(const tailor_moe_route_args& in) {
  moe::RouteArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.topk_ids, ToTensorRef("topk_ids", in.topk_ids));
  out.num_experts = in.num_experts;
  TAILOR_ASSIGN_OR_RETURN(out.expert_map,
                          ToOptionalTensor("expert_map", in.expert_map));
  TAILOR_ASSIGN_OR_RETURN(out.valid_tokens,
                          ToOptionalTensor("valid_tokens", in.valid_tokens));
  TAILOR_ASSIGN_OR_RETURN(out.policy, ToPolicy(in.policy));
  out.stream = in.stream;
  return out;
}

absl::StatusOr<moe::ExpertsArgs> ToExpertsArgs(
    const tailor_moe_experts_args& in) {
  if (in.activation != TAILOR_MOE_ACTIVATION_SILU) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation: only TAILOR_MOE_ACTIVATION_SILU is supported, got ",
        in.activation));
  }
  moe::ExpertsArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.hidden, ToTensorRef("hidden", in.hidden));
  TAILOR_ASSIGN_OR_RETURN(out.w13, ToTensorRef("w13", in.w13));
  TAILOR_ASSIGN_OR_RETURN(out.w2, ToTensorRef("w2", in.w2));
  TAILOR_ASSIGN_OR_RETURN(out.topk_weights,
                          ToTensorRef("topk_weights", in.topk_weights));
  TAILOR_ASSIGN_OR_RETURN(out.topk_ids, ToTensorRef("topk_ids", in.topk_ids));
  TAILOR_ASSIGN_OR_RETURN(out.expert_map,
                          ToOptionalTensor("expert_map", in.expert_map));
  TAILOR_ASSIGN_OR_RETURN(out.valid_tokens,
                          ToOptionalTensor("valid_tokens", in.valid_tokens));
  out.activation = moe::Activation::kSilu;
  TAILOR_ASSIGN_OR_RETURN(out.policy, ToPolicy(in.policy));
  TAILOR_ASSIGN_OR_RETURN(out.out, ToTensorRef("out", in.out));
  out.stream = in.stream;
  return out;
}

// ---- FP8 quantization args ----------------------------------------------

// A scale tensor: unset (NULL data, rank 0) stays an empty view.
absl::StatusOr<TensorRef> ToScaleTensor(absl::string_view name,
                                        const tailor_tensor& t) {
  if (t.data == nullptr && t.rank == 0) return TensorRef{};
  return ToTensorRef(name, t);
}

absl::StatusOr<moe::ScaleMode> ToScaleMode(int32_t mode) {
  if (mode < TAILOR_MOE_SCALE_NONE || mode > TAILOR_MOE_SCALE_BLOCK) {
    return absl::InvalidArgumentError(
        absl::StrCat("quant.mode: not a tailor_moe_scale_mode value: ", mode));
  }
  return static_cast<moe::ScaleMode>(mode);
}

// {0, 0}: the default [128, 128].
moe::BlockShape ToBlockShape(const int64_t (&shape)[2]) {
  if (shape[0] == 0 && shape[1] == 0) return {};
  return {.n = shape[0], .k = shape[1]};
}

absl::StatusOr<moe::ExpertsQuantization> ToExpertsQuant(
    const tailor_moe_experts_quantization& in) {
  moe::ExpertsQuantization out;
  TAILOR_ASSIGN_OR_RETURN(out.mode, ToScaleMode(in.mode));
  TAILOR_ASSIGN_OR_RETURN(out.w13_scale,
                          ToScaleTensor("quant.w13_scale", in.w13_scale));
  TAILOR_ASSIGN_OR_RETURN(out.w2_scale,
                          ToScaleTensor("quant.w2_scale", in.w2_scale));
  TAILOR_ASSIGN_OR_RETURN(out.a1_scale,
                          ToOptionalTensor("quant.a1_scale", in.a1_scale));
  TAILOR_ASSIGN_OR_RETURN(out.a2_scale,
                          ToOptionalTensor("quant.a2_scale", in.a2_scale));
  out.block_shape = ToBlockShape(in.block_shape);
  return out;
}

absl::StatusOr<moe::GemmQuantization> ToGemmQuant(
    const tailor_moe_gemm_quantization& in) {
  moe::GemmQuantization out;
  TAILOR_ASSIGN_OR_RETURN(out.mode, ToScaleMode(in.mode));
  TAILOR_ASSIGN_OR_RETURN(out.a_scale,
                          ToScaleTensor("quant.a_scale", in.a_scale));
  TAILOR_ASSIGN_OR_RETURN(out.w_scale,
                          ToScaleTensor("quant.w_scale", in.w_scale));
  TAILOR_ASSIGN_OR_RETURN(out.c_scale,
                          ToScaleTensor("quant.c_scale", in.c_scale));
  out.block_shape = ToBlockShape(in.block_shape);
  return out;
}

// `text` into the C field `out` of `size` bytes, NUL-terminated; zero-filled
// first, so the NUL follows what was kept.
void CopyText(absl::string_view text, char* out, size_t size) {
  std::memset(out, 0, size);
  std::memcpy(out, text.data(), std::min(text.size(), size - 1));
}

// The first whole entries of a features text that fit `size` bytes with a
// NUL (c_api.h: a longer text keeps its first whole entries).
absl::string_view WholeEntries(absl::string_view features, size_t size) {
  if (features.size() < size) return features;
  const size_t comma = features.substr(0, size).rfind(',');
  return comma == absl::string_view::npos ? "" : features.substr(0, comma);
}

// The C record of `g`; a kernel name longer than the C field is cut to its
// first TAILOR_MOE_GEMM_KERNEL_SIZE - 1 bytes (c_api.h).
tailor_moe_gemm_choice ToGemmChoice(const moe::GemmChoice& g) {
  tailor_moe_gemm_choice out = {};
  CopyText(g.kernel, out.kernel, sizeof(out.kernel));
  out.n = g.n;
  out.k = g.k;
  out.cta_rows = g.cta_rows;
  out.cta_cols = g.cta_cols;
  out.k_tile = g.k_tile;
  out.stages = g.stages;
  out.ctas = g.ctas;
  const absl::string_view kept = WholeEntries(g.features, sizeof(out.features));
  CopyText(kept, out.features, sizeof(out.features));
  out.features_cut = kept.size() < g.features.size() ? 1 : 0;
  return out;
}

}  // namespace
}  // namespace tailor::capi

using tailor::capi::ExpectNonNull;
using tailor::capi::Guard;
using tailor::capi::RuntimeOf;
using tailor::capi::ToTensorRef;
namespace moe = tailor::moe;

extern "C" {

tailor_status tailor_moe_workspace_create(tailor_moe_workspace** out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    *out = new tailor_moe_workspace();
    return absl::OkStatus();
  });
}

void tailor_moe_workspace_destroy(tailor_moe_workspace* ws) {
  Guard([&]() -> absl::Status {
    delete ws;
    return absl::OkStatus();
  });
}

tailor_status tailor_moe_workspace_reserve(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    tailor_moe_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(moe::WorkspaceLimits cpp_limits,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    return moe::ReserveWorkspace(*rt, cpp_limits, *w);
  });
}

tailor_status tailor_moe_workspace_bytes(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    int64_t* bytes) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(moe::WorkspaceLimits cpp_limits,
                            tailor::capi::ToLimits(limits));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("bytes", bytes));
    TAILOR_ASSIGN_OR_RETURN(*bytes, moe::WorkspaceBytes(*rt, cpp_limits));
    return absl::OkStatus();
  });
}

tailor_status tailor_moe_workspace_bind(
    tailor_runtime* runtime, const tailor_moe_workspace_limits* limits,
    void* memory, int64_t bytes, tailor_moe_workspace* ws, void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(moe::WorkspaceLimits cpp_limits,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    return moe::BindWorkspace(*rt, cpp_limits, memory, bytes, *w, stream);
  });
}

tailor_status tailor_moe_workspace_take_errors(tailor_runtime* runtime,
                                               tailor_moe_workspace* ws,
                                               void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    return w->TakeErrors(*rt, stream);
  });
}

tailor_status tailor_moe_workspace_get_info(const tailor_moe_workspace* ws,
                                            tailor_moe_workspace_info* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    const moe::Workspace& w = ws->workspace;
    using tailor::capi::FromTensorRef;
    *out = {};
    out->routed = w.routed() ? 1 : 0;
    out->num_tokens = w.num_tokens();
    out->topk = w.topk();
    out->num_experts = w.num_experts();
    out->num_rows = w.num_rows();
    out->capacity_bytes = static_cast<int64_t>(w.CapacityBytes());
    out->counts = FromTensorRef(w.counts());
    out->offsets = FromTensorRef(w.offsets());
    out->permutation = FromTensorRef(w.permutation());
    out->inverse = FromTensorRef(w.inverse());
    const moe::PlanSummary plan = w.plan();
    out->tile_rows = plan.tile_rows;
    out->core_tiles = plan.core_tiles;
    out->tail_pieces = plan.tail_pieces;
    out->variants = plan.variants;
    out->useful_rows = plan.useful_rows;
    out->executed_rows = plan.executed_rows;
    return absl::OkStatus();
  });
}

tailor_status tailor_moe_workspace_gemm_count(const tailor_moe_workspace* ws,
                                              int32_t* count) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("count", count));
    *count = static_cast<int32_t>(ws->workspace.plan().gemms.size());
    return absl::OkStatus();
  });
}

tailor_status tailor_moe_workspace_get_gemm(const tailor_moe_workspace* ws,
                                            int32_t index,
                                            tailor_moe_gemm_choice* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    const moe::PlanSummary plan = ws->workspace.plan();
    const int64_t count = static_cast<int64_t>(plan.gemms.size());
    if (index < 0 || index >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("index: must be in [0, ", count,
                       ") (the GEMM records of ws), got ", index));
    }
    *out = tailor::capi::ToGemmChoice(plan.gemms[index]);
    return absl::OkStatus();
  });
}

tailor_status tailor_moe_route(tailor_runtime* runtime,
                               const tailor_moe_route_args* args,
                               tailor_moe_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    absl::Status status = [&]() -> absl::Status {
      TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
      TAILOR_ASSIGN_OR_RETURN(moe::RouteArgs cpp,
                              tailor::capi::ToRouteArgs(*args));
      return moe::Route(*rt, cpp, *w);
    }();
    // As moe::Route: a failed call leaves `ws` not routed, also when the C
    // arguments were rejected before moe::Route ran.
    if (!status.ok() && tailor::internal::WorkspaceImplOf(*w) != nullptr)
      tailor::internal::WorkspaceImplOf(*w)->Invalidate();
    return status;
  });
}

tailor_status tailor_moe_pack(tailor_runtime* runtime,
                              const tailor_moe_pack_args* args) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    moe::PackArgs cpp;
    TAILOR_ASSIGN_OR_RETURN(cpp.hidden, ToTensorRef("hidden", args->hidden));
    TAILOR_ASSIGN_OR_RETURN(cpp.permutation,
                            ToTensorRef("permutation", args->permutation));
    cpp.topk = args->topk;
    TAILOR_ASSIGN_OR_RETURN(cpp.a, ToTensorRef("a", args->a));
    cpp.stream = args->stream;
    return moe::Pack(*rt, cpp);
  });
}

tailor_status tailor_moe_grouped_gemm(tailor_runtime* runtime,
                                      const tailor_moe_grouped_gemm_args* args,
                                      const tailor_moe_workspace* ws) {
  return tailor_moe_grouped_gemm_quantized(runtime, args, nullptr, ws);
}

tailor_status tailor_moe_grouped_gemm_quantized(
    tailor_runtime* runtime, const tailor_moe_grouped_gemm_args* args,
    const tailor_moe_gemm_quantization* quant, const tailor_moe_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    if (args->epilogue != TAILOR_MOE_EPILOGUE_NONE &&
        args->epilogue != TAILOR_MOE_EPILOGUE_SILU_AND_MUL) {
      return absl::InvalidArgumentError(
          absl::StrCat("epilogue: not an Epilogue value: ", args->epilogue));
    }
    moe::GroupedGemmArgs cpp;
    if (quant != nullptr) {
      TAILOR_ASSIGN_OR_RETURN(cpp.quant, tailor::capi::ToGemmQuant(*quant));
    }
    TAILOR_ASSIGN_OR_RETURN(cpp.a, ToTensorRef("a", args->a));
    TAILOR_ASSIGN_OR_RETURN(cpp.w, ToTensorRef("w", args->w));
    TAILOR_ASSIGN_OR_RETURN(cpp.c, ToTensorRef("c", args->c));
    cpp.epilogue = static_cast<moe::Epilogue>(args->epilogue);
    cpp.stream = args->stream;
    return moe::GroupedGemm(*rt, cpp, ws->workspace);
  });
}

tailor_status tailor_moe_combine(tailor_runtime* runtime,
                                 const tailor_moe_combine_args* args) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    moe::CombineArgs cpp;
    TAILOR_ASSIGN_OR_RETURN(cpp.c, ToTensorRef("c", args->c));
    TAILOR_ASSIGN_OR_RETURN(cpp.topk_weights,
                            ToTensorRef("topk_weights", args->topk_weights));
    TAILOR_ASSIGN_OR_RETURN(cpp.inverse, ToTensorRef("inverse", args->inverse));
    TAILOR_ASSIGN_OR_RETURN(cpp.out, ToTensorRef("out", args->out));
    cpp.stream = args->stream;
    return moe::Combine(*rt, cpp);
  });
}

tailor_status tailor_moe_experts(tailor_runtime* runtime,
                                 const tailor_moe_experts_args* args,
                                 tailor_moe_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    TAILOR_ASSIGN_OR_RETURN(moe::ExpertsArgs cpp,
                            tailor::capi::ToExpertsArgs(*args));
    return moe::Experts(*rt, cpp, *w);
  });
}

tailor_status tailor_moe_experts_quantized(
    tailor_runtime* runtime, const tailor_moe_experts_args* args,
    const tailor_moe_experts_quantization* quant, tailor_moe_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    TAILOR_ASSIGN_OR_RETURN(moe::Workspace * w, tailor::capi::WorkspaceOf(ws));
    TAILOR_ASSIGN_OR_RETURN(moe::ExpertsArgs cpp,
                            tailor::capi::ToExpertsArgs(*args));
    if (quant != nullptr) {
      TAILOR_ASSIGN_OR_RETURN(cpp.quant, tailor::capi::ToExpertsQuant(*quant));
    }
    return moe::Experts(*rt, cpp, *w);
  });
}

}  // extern "C"
