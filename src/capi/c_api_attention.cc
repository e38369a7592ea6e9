// The C ABI's paged-decode entries: tailor/ops/attention.h from C.
#include <optional>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "capi/c_api_internal.h"
#include "ops/attention/ragged_workspace.h"
#include "tailor/c_api.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

struct tailor_attention_decode_workspace {
  tailor::attention::DecodeWorkspace workspace;
};

namespace tailor::capi {

absl::StatusOr<DType> ToAttentionDType(absl::string_view name, int32_t dtype) {
  if (dtype == 0) return DType::kBF16;
  if (dtype < TAILOR_DTYPE_F32 || dtype > TAILOR_DTYPE_F64) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a tailor_dtype value (1..7), got ", dtype));
  }
  return static_cast<DType>(dtype);
}

namespace {

namespace attention = ::tailor::attention;

absl::StatusOr<attention::DecodeLimits> ToLimits(
    const tailor_attention_decode_limits* in) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("limits", in));
  TAILOR_ASSIGN_OR_RETURN(DType dtype,
                          ToAttentionDType("limits.dtype", in->dtype));
  return attention::DecodeLimits{.max_batch = in->max_batch,
                                 .num_qo_heads = in->num_qo_heads,
                                 .num_kv_heads = in->num_kv_heads,
                                 .head_dim = in->head_dim,
                                 .page_size = in->page_size,
                                 .dtype = dtype};
}

absl::StatusOr<attention::DecodeWorkspace*> WorkspaceOf(
    tailor_attention_decode_workspace* handle) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", handle));
  return &handle->workspace;
}

absl::StatusOr<attention::PlanDecodeArgs> ToPlanArgs(
    const tailor_attention_decode_plan_args& in) {
  attention::PlanDecodeArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.seq_lens, ToTensorRef("seq_lens", in.seq_lens));
  out.page_size = in.page_size;
  out.num_qo_heads = in.num_qo_heads;
  out.num_kv_heads = in.num_kv_heads;
  out.head_dim = in.head_dim;
  TAILOR_ASSIGN_OR_RETURN(out.dtype, ToAttentionDType("dtype", in.dtype));
  out.stream = in.stream;
  return out;
}

absl::StatusOr<attention::RunDecodeArgs> ToRunArgs(
    const tailor_attention_decode_run_args& in) {
  attention::RunDecodeArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.q, ToTensorRef("q", in.q));
  TAILOR_ASSIGN_OR_RETURN(out.k_cache, ToTensorRef("k_cache", in.k_cache));
  TAILOR_ASSIGN_OR_RETURN(out.v_cache, ToTensorRef("v_cache", in.v_cache));
  TAILOR_ASSIGN_OR_RETURN(out.block_table,
                          ToTensorRef("block_table", in.block_table));
  TAILOR_ASSIGN_OR_RETURN(out.seq_lens, ToTensorRef("seq_lens", in.seq_lens));
  TAILOR_ASSIGN_OR_RETURN(out.out, ToTensorRef("out", in.out));
  if (in.lse != nullptr) {
    TAILOR_ASSIGN_OR_RETURN(out.lse, ToTensorRef("lse", *in.lse));
  }
  if (in.sm_scale != 0) out.sm_scale = in.sm_scale;  // 0: 1 / sqrt(D)
  out.logits_soft_cap = in.logits_soft_cap;
  out.stream = in.stream;
  return out;
}

}  // namespace
}  // namespace tailor::capi

using tailor::capi::ExpectNonNull;
using tailor::capi::Guard;
using tailor::capi::RuntimeOf;
namespace attention = tailor::attention;

extern "C" {

tailor_status tailor_attention_decode_workspace_create(
    tailor_attention_decode_workspace** out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    *out = new tailor_attention_decode_workspace();
    return absl::OkStatus();
  });
}

void tailor_attention_decode_workspace_destroy(
    tailor_attention_decode_workspace* ws) {
  Guard([&]() -> absl::Status {
    delete ws;
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_decode_workspace_reserve(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    tailor_attention_decode_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return attention::ReserveDecodeWorkspace(*rt, cpp, *w);
  });
}

tailor_status tailor_attention_decode_workspace_bytes(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    int64_t* bytes) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("bytes", bytes));
    TAILOR_ASSIGN_OR_RETURN(*bytes, attention::DecodeWorkspaceBytes(*rt, cpp));
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_decode_workspace_bind(
    tailor_runtime* runtime, const tailor_attention_decode_limits* limits,
    void* memory, int64_t bytes, tailor_attention_decode_workspace* ws,
    void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return attention::BindDecodeWorkspace(*rt, cpp, memory, bytes, *w, stream);
  });
}

tailor_status tailor_attention_decode_workspace_take_errors(
    tailor_runtime* runtime, tailor_attention_decode_workspace* ws,
    void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return w->TakeErrors(*rt, stream);
  });
}

tailor_status tailor_attention_decode_workspace_get_info(
    const tailor_attention_decode_workspace* ws,
    tailor_attention_decode_workspace_info* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    const attention::DecodeWorkspace& w = ws->workspace;
    const attention::DecodePlanSummary plan = w.plan();
    *out = {};
    out->planned = w.planned() ? 1 : 0;
    out->batch = w.batch();
    out->capacity_bytes = static_cast<int64_t>(w.CapacityBytes());
    out->workers = plan.workers;
    out->busy_workers = plan.busy_workers;
    out->items = plan.items;
    out->split_pairs = plan.split_pairs;
    out->partials = plan.partials;
    out->tokens = plan.tokens;
    out->max_worker_cost = plan.max_worker_cost;
    out->mean_worker_cost = plan.mean_worker_cost;
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_decode_plan(
    tailor_runtime* runtime, const tailor_attention_decode_plan_args* args,
    tailor_attention_decode_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    absl::Status status = [&]() -> absl::Status {
      TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
      TAILOR_ASSIGN_OR_RETURN(attention::PlanDecodeArgs cpp,
                              tailor::capi::ToPlanArgs(*args));
      return attention::PlanDecode(*rt, cpp, *w);
    }();
    // As attention::PlanDecode: a failed call leaves `ws` not planned, also
    // when the C arguments were rejected before PlanDecode ran.
    if (!status.ok() && tailor::internal::WorkspaceImplOf(*w) != nullptr)
      tailor::internal::WorkspaceImplOf(*w)->Invalidate();
    return status;
  });
}

tailor_status tailor_attention_decode_run(
    tailor_runtime* runtime, const tailor_attention_decode_run_args* args,
    tailor_attention_decode_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    TAILOR_ASSIGN_OR_RETURN(attention::DecodeWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    TAILOR_ASSIGN_OR_RETURN(attention::RunDecodeArgs cpp,
                            tailor::capi::ToRunArgs(*args));
    return attention::RunDecode(*rt, cpp, *w);
  });
}

}  // extern "C"
