// The decode fronts: PlanDecode (the inspector: host lengths -> balanced
// work list, copied to the device workspace on device backends) and
// RunDecode (validates every argument, then hands pointers and strides to
// ops/attention/kernels.h).
#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/tensor_checks.h"
#include "ops/attention/checks.h"
#include "ops/attention/decode_launch.h"
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
    w->launch_flags = internal::DecodeLaunchFlagsOf(config, w->plan);
    TAILOR_RETURN_IF_ERROR(
        internal::UploadDecodeWork(*kernels, internal::EngineOf(runtime),
                                   {.items = w->plan.items(),
                                    .first_items = w->plan.first_items(),
                                    .worker_begin = w->plan.worker_begin(),
                                    .launch_flags = &w->launch_flags},
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

// The launch of `args` over the plan of `w`: on the host its vectors, on
// a device its uploaded block.
internal::DecodeLaunch LaunchOf(const RunDecodeArgs& args,
                                DecodeWorkspaceImpl& w) {
  internal::DecodeLaunch launch = internal::DecodeLaunchOf(args, w.shape);
  launch.seq_lens = args.seq_lens.as<int32_t>();
  if (w.device) {
    launch.work = internal::DeviceDecodeWork(*w.device, w.plan.params());
    return launch;
  }
  internal::DecodeWorkRef& work = launch.work;
  work.num_workers = w.plan.params().num_workers;
  work.cluster_workers = w.plan.params().cluster_workers;
  work.host_plan = &w.plan;
  work.partial_out = w.partial_out.data();
  work.partial_lse = w.partial_lse.data();
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
