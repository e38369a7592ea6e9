// The C ABI's ragged-attention entries: tailor/ops/attention.h's
// PlanRagged / PlanRaggedFlashInfer / RunRagged and the RaggedWorkspace
// verbs from C.
#include <optional>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "capi/c_api_internal.h"
#include "ops/attention/ragged_workspace.h"
#include "tailor/c_api.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

struct tailor_attention_ragged_workspace {
  tailor::attention::RaggedWorkspace workspace;
};

namespace tailor::capi {
namespace {

namespace attention = ::tailor::attention;

// C++'s (causal, window_left) of a tailor_attention_mask and its window.
struct MaskFields {
  bool causal = true;
  int64_t window_left = -1;
};

absl::StatusOr<MaskFields> ToMask(absl::string_view prefix, int32_t mask,
                                  int64_t window_left) {
  if (mask < TAILOR_ATTENTION_MASK_CAUSAL ||
      mask > TAILOR_ATTENTION_MASK_WINDOW) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "mask: not a tailor_attention_mask value (0..2), got ", mask));
  }
  if (mask == TAILOR_ATTENTION_MASK_WINDOW) {
    if (window_left < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix,
          "window_left: must be >= 0 with TAILOR_ATTENTION_MASK_WINDOW, "
          "got ",
          window_left));
    }
    return MaskFields{.causal = true, .window_left = window_left};
  }
  if (window_left != 0) {  // a window set without its mask is a mistake
    return absl::InvalidArgumentError(
        absl::StrCat(prefix,
                     "window_left: must be 0 unless mask is "
                     "TAILOR_ATTENTION_MASK_WINDOW, got ",
                     window_left));
  }
  return MaskFields{.causal = mask == TAILOR_ATTENTION_MASK_CAUSAL};
}

absl::StatusOr<attention::RaggedLimits> ToLimits(
    const tailor_attention_ragged_limits* in) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("limits", in));
  TAILOR_ASSIGN_OR_RETURN(DType dtype,
                          ToAttentionDType("limits.dtype", in->dtype));
  TAILOR_ASSIGN_OR_RETURN(MaskFields mask,
                          ToMask("limits.", in->mask, in->window_left));
  return attention::RaggedLimits{.max_batch = in->max_batch,
                                 .max_tokens = in->max_tokens,
                                 .num_qo_heads = in->num_qo_heads,
                                 .num_kv_heads = in->num_kv_heads,
                                 .head_dim = in->head_dim,
                                 .page_size = in->page_size,
                                 .dtype = dtype,
                                 .causal = mask.causal,
                                 .window_left = mask.window_left};
}

absl::StatusOr<attention::RaggedWorkspace*> WorkspaceOf(
    tailor_attention_ragged_workspace* handle) {
  TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", handle));
  return &handle->workspace;
}

// Copies the layer fields (both plan argument structs have them, in C and
// in C++) of `in` into `out`.
template <typename CArgs, typename PlanArgs>
absl::Status FillLayer(const CArgs& in, PlanArgs& out) {
  TAILOR_ASSIGN_OR_RETURN(out.dtype, ToAttentionDType("dtype", in.dtype));
  TAILOR_ASSIGN_OR_RETURN(MaskFields mask, ToMask("", in.mask, in.window_left));
  out.page_size = in.page_size;
  out.num_qo_heads = in.num_qo_heads;
  out.num_kv_heads = in.num_kv_heads;
  out.head_dim = in.head_dim;
  out.causal = mask.causal;
  out.window_left = mask.window_left;
  return absl::OkStatus();
}

absl::StatusOr<attention::PlanRaggedArgs> ToPlanArgs(
    const tailor_attention_ragged_plan_args& in) {
  attention::PlanRaggedArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.q_indptr, ToTensorRef("q_indptr", in.q_indptr));
  TAILOR_ASSIGN_OR_RETURN(out.kv_lens, ToTensorRef("kv_lens", in.kv_lens));
  TAILOR_RETURN_IF_ERROR(FillLayer(in, out));
  out.stream = in.stream;
  return out;
}

absl::StatusOr<attention::PlanRaggedFlashInferArgs> ToPlanArgs(
    const tailor_attention_ragged_plan_flashinfer_args& in) {
  attention::PlanRaggedFlashInferArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.qo_indptr,
                          ToTensorRef("qo_indptr", in.qo_indptr));
  TAILOR_ASSIGN_OR_RETURN(out.kv_indptr,
                          ToTensorRef("kv_indptr", in.kv_indptr));
  TAILOR_ASSIGN_OR_RETURN(out.kv_last_page_len,
                          ToTensorRef("kv_last_page_len", in.kv_last_page_len));
  TAILOR_RETURN_IF_ERROR(FillLayer(in, out));
  out.stream = in.stream;
  return out;
}

absl::StatusOr<std::optional<TensorRef>> OptionalTensor(
    absl::string_view name, const tailor_tensor* t) {
  if (t == nullptr) return std::nullopt;
  TAILOR_ASSIGN_OR_RETURN(TensorRef ref, ToTensorRef(name, *t));
  return ref;
}

absl::StatusOr<attention::RunRaggedArgs> ToRunArgs(
    const tailor_attention_ragged_run_args& in) {
  attention::RunRaggedArgs out;
  TAILOR_ASSIGN_OR_RETURN(out.q, ToTensorRef("q", in.q));
  TAILOR_ASSIGN_OR_RETURN(out.k_cache, ToTensorRef("k_cache", in.k_cache));
  TAILOR_ASSIGN_OR_RETURN(out.v_cache, ToTensorRef("v_cache", in.v_cache));
  TAILOR_ASSIGN_OR_RETURN(out.block_table,
                          ToTensorRef("block_table", in.block_table));
  TAILOR_ASSIGN_OR_RETURN(out.page_indptr,
                          OptionalTensor("page_indptr", in.page_indptr));
  TAILOR_ASSIGN_OR_RETURN(out.kv_lens, OptionalTensor("kv_lens", in.kv_lens));
  TAILOR_ASSIGN_OR_RETURN(out.out, ToTensorRef("out", in.out));
  TAILOR_ASSIGN_OR_RETURN(out.lse, OptionalTensor("lse", in.lse));
  if (in.sm_scale != 0) out.sm_scale = in.sm_scale;  // 0: 1 / sqrt(D)
  out.logits_soft_cap = in.logits_soft_cap;
  out.stream = in.stream;
  return out;
}

// Runs a plan front behind the boundary; as the C++ fronts do, any error
// (also one in the C arguments, before the front ran) leaves `ws` not
// planned.
template <typename CArgs, typename Front>
tailor_status PlanEntry(tailor_runtime* runtime, const CArgs* args,
                        tailor_attention_ragged_workspace* ws, Front front) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(Runtime * rt, RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedWorkspace * w, WorkspaceOf(ws));
    absl::Status status = [&]() -> absl::Status {
      TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
      TAILOR_ASSIGN_OR_RETURN(auto cpp, ToPlanArgs(*args));
      return front(*rt, cpp, *w);
    }();
    if (!status.ok() && internal::WorkspaceImplOf(*w) != nullptr) {
      internal::WorkspaceImplOf(*w)->Invalidate();
    }
    return status;
  });
}

}  // namespace
}  // namespace tailor::capi

using tailor::capi::ExpectNonNull;
using tailor::capi::Guard;
using tailor::capi::RuntimeOf;
namespace attention = tailor::attention;

extern "C" {

tailor_status tailor_attention_ragged_workspace_create(
    tailor_attention_ragged_workspace** out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    *out = new tailor_attention_ragged_workspace();
    return absl::OkStatus();
  });
}

void tailor_attention_ragged_workspace_destroy(
    tailor_attention_ragged_workspace* ws) {
  Guard([&]() -> absl::Status {
    delete ws;
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_ragged_workspace_reserve(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    tailor_attention_ragged_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return attention::ReserveRaggedWorkspace(*rt, cpp, *w);
  });
}

tailor_status tailor_attention_ragged_workspace_bytes(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    int64_t* bytes) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("bytes", bytes));
    TAILOR_ASSIGN_OR_RETURN(*bytes, attention::RaggedWorkspaceBytes(*rt, cpp));
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_ragged_workspace_bind(
    tailor_runtime* runtime, const tailor_attention_ragged_limits* limits,
    void* memory, int64_t bytes, tailor_attention_ragged_workspace* ws,
    void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedLimits cpp,
                            tailor::capi::ToLimits(limits));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return attention::BindRaggedWorkspace(*rt, cpp, memory, bytes, *w, stream);
  });
}

tailor_status tailor_attention_ragged_workspace_take_errors(
    tailor_runtime* runtime, tailor_attention_ragged_workspace* ws,
    void* stream) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    return w->TakeErrors(*rt, stream);
  });
}

tailor_status tailor_attention_ragged_workspace_get_info(
    const tailor_attention_ragged_workspace* ws,
    tailor_attention_ragged_workspace_info* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    const attention::RaggedWorkspace& w = ws->workspace;
    const attention::RaggedPlanSummary plan = w.plan();
    *out = {};
    out->planned = w.planned() ? 1 : 0;
    out->workers = plan.workers;
    out->batch = w.batch();
    out->total_q = w.total_q();
    out->capacity_bytes = static_cast<int64_t>(w.CapacityBytes());
    out->tiles = plan.tiles;
    out->items = plan.items;
    out->tail_tiles = plan.tail_tiles;
    out->masked_tiles = plan.masked_tiles;
    out->split_tiles = plan.split_tiles;
    out->partials = plan.partials;
    out->busy_workers = plan.busy_workers;
    out->tile_rows = plan.tile_rows;
    out->head_pack = plan.head_pack;
    out->max_worker_cost = plan.max_worker_cost;
    out->mean_worker_cost = plan.mean_worker_cost;
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_ragged_workspace_get_decode_info(
    const tailor_attention_ragged_workspace* ws,
    tailor_attention_ragged_decode_info* out) {
  return Guard([&]() -> absl::Status {
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("ws", ws));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("out", out));
    const attention::RaggedPlanSummary plan = ws->workspace.plan();
    *out = {};
    out->seqs = plan.decode_seqs;
    out->items = plan.decode_items;
    return absl::OkStatus();
  });
}

tailor_status tailor_attention_ragged_plan(
    tailor_runtime* runtime, const tailor_attention_ragged_plan_args* args,
    tailor_attention_ragged_workspace* ws) {
  return tailor::capi::PlanEntry(
      runtime, args, ws,
      [](tailor::Runtime& rt, const attention::PlanRaggedArgs& cpp,
         attention::RaggedWorkspace& w) {
        return attention::PlanRagged(rt, cpp, w);
      });
}

tailor_status tailor_attention_ragged_plan_flashinfer(
    tailor_runtime* runtime,
    const tailor_attention_ragged_plan_flashinfer_args* args,
    tailor_attention_ragged_workspace* ws) {
  return tailor::capi::PlanEntry(
      runtime, args, ws,
      [](tailor::Runtime& rt, const attention::PlanRaggedFlashInferArgs& cpp,
         attention::RaggedWorkspace& w) {
        return attention::PlanRaggedFlashInfer(rt, cpp, w);
      });
}

tailor_status tailor_attention_ragged_run(
    tailor_runtime* runtime, const tailor_attention_ragged_run_args* args,
    tailor_attention_ragged_workspace* ws) {
  return Guard([&]() -> absl::Status {
    TAILOR_ASSIGN_OR_RETURN(tailor::Runtime * rt,
                            RuntimeOf("runtime", runtime));
    TAILOR_RETURN_IF_ERROR(ExpectNonNull("args", args));
    TAILOR_ASSIGN_OR_RETURN(attention::RaggedWorkspace * w,
                            tailor::capi::WorkspaceOf(ws));
    TAILOR_ASSIGN_OR_RETURN(attention::RunRaggedArgs cpp,
                            tailor::capi::ToRunArgs(*args));
    return attention::RunRagged(*rt, cpp, *w);
  });
}

}  // extern "C"
