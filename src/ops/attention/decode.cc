// The decode fronts: PlanDecode (the inspector: host lengths -> balanced
// work list, copied to the device workspace on device backends) and
// RunDecode (validates every argument, then hands pointers and strides to
// ops/attention/kernels.h).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/tensor_checks.h"
#include "ops/attention/checks.h"
#include "ops/attention/kernels.h"
#include "ops/attention/workspace.h"
#include "plan/decode_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

namespace tailor {
namespace attention {

using internal::DecodeDeviceBuffers;
using internal::DecodeKernels;
using internal::DecodePlanConfig;
using internal::DecodeShape;
using internal::DecodeWorkspaceImpl;

namespace {

absl::Status CheckHostLengths(const TensorRef& seq_lens) {
  TAILOR_RETURN_IF_ERROR(ExpectTensor("seq_lens", seq_lens, 1, DType::kI32));
  if (seq_lens.device.type != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_lens: must be in host memory (PlanDecode reads it "
                     "on the host), got ",
                     DeviceName(seq_lens.device)));
  }
  if (!seq_lens.is_contiguous()) {
    return absl::InvalidArgumentError("seq_lens: must be contiguous");
  }
  if (seq_lens.dims[0] > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_lens: dims[0] (B) must be <= ", kMaxBatch, ", got ",
                     seq_lens.dims[0]));
  }
  return absl::OkStatus();
}

// The device workspace of `w` on `device`, fit for plans of `batch`.
absl::StatusOr<DecodeDeviceBuffers*> DeviceBuffersFor(
    DecodeWorkspaceImpl& w, Device device, DecodeKernels& kernels,
    const DecodeShape& shape, const DecodePlanConfig& config, int64_t batch) {
  if (!w.device) {
    return absl::FailedPreconditionError(
        "ws: no device memory; call attention::ReserveDecodeWorkspace (or "
        "BindDecodeWorkspace) first");
  }
  if (!(w.device->device == device)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ws: reserved on ", DeviceName(w.device->device),
                     ", not on the runtime's ", DeviceName(device)));
  }
  const internal::DecodeCapacity need =
      internal::DecodeCapacityFor(shape, batch, config,
                                  kernels.ScratchBytes(plan::MaxDecodePartials(
                                      config.num_workers, config.head_group)));
  TAILOR_RETURN_IF_ERROR(internal::CheckDecodeFits(*w.device, need));
  return &*w.device;
}

// Copies the plan's work list, worker ranges and the launch flags after them
// into `d` on `stream`.
absl::Status Upload(Runtime& runtime, DecodeKernels& kernels,
                    const plan::DecodePlan& plan, const int32_t& launch_flags,
                    DecodeDeviceBuffers& d, void* stream) {
  const auto items = plan.items();
  if (!items.empty()) {
    TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
        internal::EngineOf(runtime), items.data(), d.at(d.items),
        items.size() * sizeof(plan::DecodeWorkItem), stream));
  }
  const auto first_items = plan.first_items();
  TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
      internal::EngineOf(runtime), first_items.data(), d.at(d.first_items),
      first_items.size() * sizeof(plan::DecodeWorkItem), stream));
  const auto begin = plan.worker_begin();
  TAILOR_RETURN_IF_ERROR(kernels.UploadPlan(
      internal::EngineOf(runtime), begin.data(), d.at(d.worker_begin),
      begin.size() * sizeof(int32_t), stream));
  return kernels.UploadPlan(
      internal::EngineOf(runtime), &launch_flags,
      static_cast<char*>(d.at(d.worker_begin)) + begin.size() * sizeof(int32_t),
      sizeof(int32_t), stream);
}

}  // namespace

absl::Status PlanDecode(Runtime& runtime, const PlanDecodeArgs& args,
                        DecodeWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.plan_decode"));
  TAILOR_ASSIGN_OR_RETURN(DecodeWorkspaceImpl * w, internal::ImplOf(ws));
  w->Invalidate();
  TAILOR_RETURN_IF_ERROR(CheckHostLengths(args.seq_lens));
  TAILOR_ASSIGN_OR_RETURN(
      DecodeShape shape,
      internal::CheckDecodeShape({.num_qo_heads = args.num_qo_heads,
                                  .num_kv_heads = args.num_kv_heads,
                                  .head_dim = args.head_dim,
                                  .page_size = args.page_size,
                                  .dtype = args.dtype},
                                 ""));
  const int64_t batch = args.seq_lens.dims[0];
  // The config follows the device workspace's batch bucket, not this plan's
  // B: every plan on the workspace launches the same grid and kernel, so a
  // captured graph replays any of them.
  const int64_t bucket = w->device ? w->device->capacity.batch : batch;
  TAILOR_ASSIGN_OR_RETURN(
      DecodePlanConfig config,
      kernels->PlanConfig(
          shape, bucket,
          absl::MakeConstSpan(args.seq_lens.as<int32_t>(), batch)));
  const Device device = runtime.device();
  DecodeDeviceBuffers* buffers = nullptr;
  if (device.type != DeviceType::kCpu) {
    TAILOR_ASSIGN_OR_RETURN(
        buffers, DeviceBuffersFor(*w, device, *kernels, shape, config, batch));
  }
  const plan::DecodePlanParams params =
      internal::DecodePlanParamsFor(shape, config);
  TAILOR_RETURN_IF_ERROR(plan::BuildDecodePlan(
      absl::MakeConstSpan(args.seq_lens.as<int32_t>(), batch), params,
      &w->plan));
  if (buffers != nullptr) {
    w->launch_flags =
        config.launch_flags |
        (w->plan.params().head_group > 1 ? config.head_group_flags : 0) |
        (w->plan.cluster_merges() ? config.cluster_flags : 0);
    TAILOR_RETURN_IF_ERROR(Upload(runtime, *kernels, w->plan, w->launch_flags,
                                  *buffers, args.stream));
  } else {
    const size_t partials = w->plan.num_partials();
    const size_t row = shape.group * shape.head_dim;
    if (w->partial_out.size() < partials * row) {
      w->partial_out.resize(partials * row);
    }
    if (w->partial_lse.size() < partials * shape.group) {
      w->partial_lse.resize(partials * shape.group);
    }
  }
  w->shape = shape;
  w->num_qo_heads = args.num_qo_heads;
  w->planned = true;
  return absl::OkStatus();
}

namespace {

internal::DecodeWorkRef WorkOf(DecodeWorkspaceImpl& w) {
  internal::DecodeWorkRef work;
  work.num_workers = w.plan.params().num_workers;
  work.cluster_workers = w.plan.params().cluster_workers;
  if (!w.device) {
    work.host_plan = &w.plan;
    work.partial_out = w.partial_out.data();
    work.partial_lse = w.partial_lse.data();
    return work;
  }
  DecodeDeviceBuffers& d = *w.device;
  work.items = static_cast<const plan::DecodeWorkItem*>(d.at(d.items));
  work.worker_begin = static_cast<const int32_t*>(d.at(d.worker_begin));
  work.first_items =
      static_cast<const plan::DecodeWorkItem*>(d.at(d.first_items));
  work.partial_out = static_cast<float*>(d.at(d.partial_out));
  work.partial_lse = static_cast<float*>(d.at(d.partial_lse));
  work.scratch = d.at(d.scratch);
  work.max_partials = d.capacity.partials;
  return work;
}

internal::DecodeLaunch LaunchOf(const RunDecodeArgs& args,
                                DecodeWorkspaceImpl& w) {
  internal::DecodeLaunch launch;
  launch.shape = w.shape;
  launch.q = args.q.data;
  launch.q_stride_b = args.q.strides[0];
  launch.q_stride_h = args.q.strides[1];
  launch.k_cache = args.k_cache.data;
  launch.v_cache = args.v_cache.data;
  for (int i = 0; i < 3; ++i) {
    launch.k_strides[i] = args.k_cache.strides[i];
    launch.v_strides[i] = args.v_cache.strides[i];
  }
  launch.num_pages = args.k_cache.dims[0];
  launch.block_table = args.block_table.as<int32_t>();
  launch.block_table_stride = args.block_table.strides[0];
  launch.max_pages = args.block_table.dims[1];
  launch.seq_lens = args.seq_lens.as<int32_t>();
  launch.out = args.out.data;
  launch.out_stride_b = args.out.strides[0];
  launch.out_stride_h = args.out.strides[1];
  if (args.lse.has_value()) {
    launch.lse = args.lse->as<float>();
    launch.lse_stride_b = args.lse->strides[0];
  }
  launch.sm_scale = args.sm_scale.value_or(
      1.0f / std::sqrt(static_cast<float>(w.shape.head_dim)));
  launch.soft_cap = args.logits_soft_cap;
  launch.work = WorkOf(w);
  launch.stream = args.stream;
  return launch;
}

}  // namespace

absl::Status RunDecode(Runtime& runtime, const RunDecodeArgs& args,
                       DecodeWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.run_decode"));
  TAILOR_ASSIGN_OR_RETURN(DecodeWorkspaceImpl * w, internal::ImplOf(ws));
  if (!w->planned) {
    return absl::FailedPreconditionError(
        "ws: not planned; call attention::PlanDecode first");
  }
  const Device device = runtime.device();
  if (!(ws.device() == device)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ws: planned on ", DeviceName(ws.device()),
                     ", not on the runtime's ", DeviceName(device)));
  }
  TAILOR_RETURN_IF_ERROR(internal::CheckRunDecodeArgs(
      args, w->shape, w->num_qo_heads, w->plan, device));
  if (device.type == DeviceType::kCpu) {  // device contents are checked there
    TAILOR_RETURN_IF_ERROR(
        internal::CheckRunDecodeContents(args, w->plan, w->shape.page_size));
  }
  w->last_num_pages = args.k_cache.dims[0];
  w->last_max_pages = args.block_table.dims[1];
  return kernels->Decode(internal::EngineOf(runtime), LaunchOf(args, *w));
}

}  // namespace attention
}  // namespace tailor
