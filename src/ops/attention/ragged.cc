// The ragged-attention fronts: PlanRagged / PlanRaggedFlashInfer (the
// inspector: host metadata -> the plan of query tiles, copied to the device
// workspace on device backends) and RunRagged (validates every argument,
// then hands pointers and strides to ops/attention/ragged_kernels.h).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/attention/checks.h"
#include "ops/attention/ragged_checks.h"
#include "ops/attention/ragged_decode.h"
#include "ops/attention/ragged_kernels.h"
#include "ops/attention/ragged_workspace.h"
#include "plan/attention_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

namespace tailor {
namespace attention {

using internal::RaggedDeviceBuffers;
using internal::RaggedKernels;
using internal::RaggedPlanConfig;
using internal::RaggedShape;
using internal::RaggedWorkspaceImpl;

namespace {

// Copies the plan's work list, worker ranges, merge groups and their count
// into `d` on `stream`.
absl::Status Upload(Runtime& runtime, RaggedKernels& kernels,
                    RaggedWorkspaceImpl& w, RaggedDeviceBuffers& d,
                    void* stream) {
  internal::Engine& engine = internal::EngineOf(runtime);
  const plan::AttentionPlan& plan = w.plan;
  if (!plan.items().empty()) {
    TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
        engine, plan.items().data(), d.at(d.items),
        plan.items().size() * sizeof(plan::AttentionWorkItem), stream));
  }
  TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
      engine, plan.worker_begin().data(), d.at(d.worker_begin),
      plan.worker_begin().size() * sizeof(int32_t), stream));
  if (!plan.merge_groups().empty()) {
    TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
        engine, plan.merge_groups().data(), d.at(d.merge_groups),
        plan.merge_groups().size() * sizeof(plan::AttentionMergeGroup),
        stream));
  }
  w.num_merges = static_cast<int32_t>(plan.merge_groups().size());
  return kernels.UploadPlan(engine, &w.num_merges, d.at(d.num_merges),
                            sizeof(int32_t), stream);
}

// The plan of (q_lens, kv_lens) for `shape` into `w` (the common half of
// both plan fronts).
absl::Status PlanInto(Runtime& runtime, RaggedKernels& kernels,
                      const RaggedShape& shape,
                      absl::Span<const int32_t> q_lens,
                      absl::Span<const int32_t> kv_lens, void* stream,
                      RaggedWorkspaceImpl& w) {
  TAILOR_ASSIGN_OR_RETURN(RaggedPlanConfig config, kernels.PlanConfig(shape));
  const bool on_device = runtime.device().type != DeviceType::kCpu;
  if (on_device) {
    if (!w.device || !(w.device->device == runtime.device())) {
      return absl::FailedPreconditionError(
          "ws: no device memory on the runtime's device; call "
          "attention::ReserveRaggedWorkspace first");
    }
    int64_t total_q = 0;
    for (int32_t q : q_lens) total_q += q;
    TAILOR_RETURN_IF_ERROR(internal::CheckRaggedFits(
        *w.device, internal::RaggedCapacityFor(
                       shape, config, static_cast<int64_t>(q_lens.size()),
                       total_q, kernels.ScratchBytes())));
  }
  // Where q_len = 1 rows run (ragged_decode.h): where the backend asks, on
  // the decode kernel if the reservation holds its block for this shape.
  config.decode_rows = config.decode_rows && on_device &&
                       w.device->capacity.decode.batch > 0 &&
                       internal::RaggedDecodeShapeOf(shape).has_value();
  TAILOR_RETURN_IF_ERROR(plan::BuildAttentionPlan(
      q_lens, kv_lens, internal::RaggedPlanParamsFor(shape, config), &w.plan));
  w.shape = shape;
  w.config = config;
  if (on_device) {
    TAILOR_RETURN_IF_ERROR(Upload(runtime, kernels, w, *w.device, stream));
    if (config.decode_rows) {
      TAILOR_RETURN_IF_ERROR(
          internal::PlanRaggedDecodeRows(runtime, shape, w, stream));
    }
  } else {
    const size_t partials = w.plan.num_partials();
    const size_t rows = config.tile_rows;
    if (w.partial_out.size() < partials * rows * shape.head_dim) {
      w.partial_out.resize(partials * rows * shape.head_dim);
    }
    if (w.partial_lse.size() < partials * rows) {
      w.partial_lse.resize(partials * rows);
    }
  }
  w.planned = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status PlanRagged(Runtime& runtime, const PlanRaggedArgs& args,
                        RaggedWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.plan_ragged"));
  TAILOR_ASSIGN_OR_RETURN(RaggedWorkspaceImpl * w, internal::ImplOf(ws));
  w->Invalidate();
  constexpr absl::string_view kOp = "PlanRagged";
  TAILOR_RETURN_IF_ERROR(
      internal::CheckHostVector("q_indptr", args.q_indptr, kOp));
  TAILOR_RETURN_IF_ERROR(
      internal::CheckHostVector("kv_lens", args.kv_lens, kOp));
  TAILOR_ASSIGN_OR_RETURN(
      RaggedShape shape,
      internal::CheckRaggedShape({.num_qo_heads = args.num_qo_heads,
                                  .num_kv_heads = args.num_kv_heads,
                                  .head_dim = args.head_dim,
                                  .page_size = args.page_size,
                                  .dtype = args.dtype,
                                  .causal = args.causal,
                                  .window_left = args.window_left},
                                 ""));
  TAILOR_RETURN_IF_ERROR(
      internal::QueryLengthsOf("q_indptr", args.q_indptr, w->q_lens));
  TAILOR_RETURN_IF_ERROR(internal::ExpectDims(
      "kv_lens", args.kv_lens, 0, static_cast<int64_t>(w->q_lens.size()),
      "the batch (q_indptr.dims[0] - 1)"));
  const auto kv_lens =
      absl::MakeConstSpan(args.kv_lens.as<int32_t>(), args.kv_lens.dims[0]);
  return PlanInto(runtime, *kernels, shape, w->q_lens, kv_lens, args.stream,
                  *w);
}

absl::Status PlanRaggedFlashInfer(Runtime& runtime,
                                  const PlanRaggedFlashInferArgs& args,
                                  RaggedWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.plan_ragged"));
  TAILOR_ASSIGN_OR_RETURN(RaggedWorkspaceImpl * w, internal::ImplOf(ws));
  w->Invalidate();
  constexpr absl::string_view kOp = "PlanRaggedFlashInfer";
  TAILOR_RETURN_IF_ERROR(
      internal::CheckHostVector("qo_indptr", args.qo_indptr, kOp));
  TAILOR_RETURN_IF_ERROR(
      internal::CheckHostVector("kv_indptr", args.kv_indptr, kOp));
  TAILOR_RETURN_IF_ERROR(internal::CheckHostVector("kv_last_page_len",
                                                   args.kv_last_page_len, kOp));
  TAILOR_ASSIGN_OR_RETURN(
      RaggedShape shape,
      internal::CheckRaggedShape({.num_qo_heads = args.num_qo_heads,
                                  .num_kv_heads = args.num_kv_heads,
                                  .head_dim = args.head_dim,
                                  .page_size = args.page_size,
                                  .dtype = args.dtype,
                                  .causal = args.causal,
                                  .window_left = args.window_left},
                                 ""));
  TAILOR_RETURN_IF_ERROR(
      internal::QueryLengthsOf("qo_indptr", args.qo_indptr, w->q_lens));
  TAILOR_RETURN_IF_ERROR(internal::KvLengthsFromPages(
      args.kv_indptr, args.kv_last_page_len, shape.page_size,
      static_cast<int64_t>(w->q_lens.size()), w->kv_lens));
  return PlanInto(runtime, *kernels, shape, w->q_lens, w->kv_lens, args.stream,
                  *w);
}

namespace {

internal::RaggedWorkRef WorkOf(RaggedWorkspaceImpl& w) {
  internal::RaggedWorkRef work;
  work.host_plan = &w.plan;
  if (!w.device) {
    work.partial_out = w.partial_out.data();
    work.partial_lse = w.partial_lse.data();
    return work;
  }
  RaggedDeviceBuffers& d = *w.device;
  work.items = static_cast<const plan::AttentionWorkItem*>(d.at(d.items));
  work.worker_begin = static_cast<const int32_t*>(d.at(d.worker_begin));
  work.merge_groups =
      static_cast<const plan::AttentionMergeGroup*>(d.at(d.merge_groups));
  work.num_merge_groups = static_cast<const int32_t*>(d.at(d.num_merges));
  work.partial_out = static_cast<float*>(d.at(d.partial_out));
  work.partial_lse = static_cast<float*>(d.at(d.partial_lse));
  work.scratch = d.at(d.scratch);
  work.max_partials = d.capacity.partials;
  return work;
}

internal::RaggedLaunch LaunchOf(const RunRaggedArgs& args,
                                RaggedWorkspaceImpl& w) {
  internal::RaggedLaunch launch;
  launch.shape = w.shape;
  launch.config = w.config;
  launch.q = args.q.data;
  launch.q_rows = args.q.dims[0];
  launch.q_stride_token = args.q.strides[0];
  launch.q_stride_head = args.q.strides[1];
  internal::CopyPagedCacheArgs(args, launch);
  if (args.page_indptr.has_value()) {
    launch.page_indptr = args.page_indptr->as<int32_t>();
  }
  if (args.kv_lens.has_value()) launch.kv_lens = args.kv_lens->as<int32_t>();
  launch.out = args.out.data;
  launch.out_stride_token = args.out.strides[0];
  launch.out_stride_head = args.out.strides[1];
  if (args.lse.has_value()) {
    launch.lse = args.lse->as<float>();
    launch.lse_stride_token = args.lse->strides[0];
  }
  launch.sm_scale = args.sm_scale.value_or(
      1.0f / std::sqrt(static_cast<float>(w.shape.head_dim)));
  launch.soft_cap = args.logits_soft_cap;
  launch.work = WorkOf(w);
  launch.stream = args.stream;
  return launch;
}

}  // namespace

absl::Status RunRagged(Runtime& runtime, const RunRaggedArgs& args,
                       RaggedWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      RaggedKernels * kernels,
      internal::RaggedKernelsOf(runtime, "attention.run_ragged"));
  TAILOR_ASSIGN_OR_RETURN(RaggedWorkspaceImpl * w, internal::ImplOf(ws));
  if (!w->planned) {
    return absl::FailedPreconditionError(
        "ws: not planned; call attention::PlanRagged first");
  }
  const Device device = runtime.device();
  if (!(ws.device() == device)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ws: planned on ", DeviceName(ws.device()),
                     ", not on the runtime's ", DeviceName(device)));
  }
  TAILOR_RETURN_IF_ERROR(
      internal::CheckRunRaggedArgs(args, w->shape, w->plan, device));
  if (device.type == DeviceType::kCpu) {  // device contents are checked there
    TAILOR_RETURN_IF_ERROR(
        internal::CheckRunRaggedContents(args, w->plan, w->shape.page_size));
  }
  w->last_num_pages = args.k_cache.dims[0];
  w->last_max_pages = args.block_table.dims[args.block_table.rank - 1];
  w->last_page_indptr = args.page_indptr.has_value();
  internal::Engine& engine = internal::EngineOf(runtime);
  if (!w->config.decode_rows) return kernels->Run(engine, LaunchOf(args, *w));
  // Tiles and decode rows: a part with no work is launched only where a
  // graph may replay this run with a plan that has some, or the first time
  // (which loads its kernels before any capture).
  const bool may_replay = kernels->MayReplay(engine, args.stream);
  if (may_replay || !w->tiles_launched || !w->plan.items().empty()) {
    TAILOR_RETURN_IF_ERROR(kernels->Run(engine, LaunchOf(args, *w)));
    w->tiles_launched = true;
  }
  if (may_replay || !w->decode_launched || !w->decode.items.empty()) {
    TAILOR_RETURN_IF_ERROR(internal::RunRaggedDecodeRows(runtime, args, *w));
    w->decode_launched = true;
  }
  return absl::OkStatus();
}

}  // namespace attention
}  // namespace tailor
