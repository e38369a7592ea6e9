// The decode fronts, thin wrappers over the ragged decode rows
// (ops/attention/ragged_decode.h): PlanDecode checks its arguments and plans
// the ragged step q_indptr = 0..B, kv_lens = seq_lens (all decode rows);
// RunDecode checks its arguments and launches the decode kernel over it
// with the caller's seq_lens.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "core/tensor_checks.h"
#include "ops/attention/checks.h"
#include "ops/attention/kernels.h"
#include "ops/attention/ragged_decode.h"
#include "ops/attention/ragged_workspace.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

namespace tailor {
namespace attention {

using internal::DecodeKernels;
using internal::DecodeShape;
using internal::RaggedWorkspaceImpl;

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

// FailedPrecondition unless `w` holds device memory on `device`.
absl::Status CheckDeviceStorage(const RaggedWorkspaceImpl& w, Device device) {
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
  return absl::OkStatus();
}

}  // namespace

absl::Status PlanDecode(Runtime& runtime, const PlanDecodeArgs& args,
                        DecodeWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.plan_decode"));
  TAILOR_ASSIGN_OR_RETURN(internal::DecodeWorkspaceImpl * impl,
                          internal::ImplOf(ws));
  impl->Invalidate();
  TAILOR_RETURN_IF_ERROR(CheckHostLengths(args.seq_lens));
  TAILOR_ASSIGN_OR_RETURN(
      DecodeShape shape,
      internal::CheckDecodeShape({.num_qo_heads = args.num_qo_heads,
                                  .num_kv_heads = args.num_kv_heads,
                                  .head_dim = args.head_dim,
                                  .page_size = args.page_size,
                                  .dtype = args.dtype},
                                 ""));
  RaggedWorkspaceImpl& w = impl->ragged;
  if (runtime.device().type != DeviceType::kCpu) {
    TAILOR_RETURN_IF_ERROR(CheckDeviceStorage(w, runtime.device()));
  }
  // The ragged step q_indptr = 0..B, kv_lens = seq_lens: every sequence is
  // a decode row, row b of q / out / lse.
  const int32_t batch = static_cast<int32_t>(args.seq_lens.dims[0]);
  internal::RaggedDecodeRows& rows = w.decode;
  rows.shape = shape;
  rows.seqs.resize(batch);
  std::iota(rows.seqs.begin(), rows.seqs.end(), 0);
  rows.kv_lens.assign(args.seq_lens.as<int32_t>(),
                      args.seq_lens.as<int32_t>() + batch);
  TAILOR_RETURN_IF_ERROR(
      internal::PlanDecodeRows(runtime, *kernels, w, args.stream));
  w.shape = {.dtype = args.dtype,
             .head_dim = args.head_dim,
             .num_qo_heads = args.num_qo_heads,
             .num_kv_heads = args.num_kv_heads,
             .page_size = args.page_size};
  w.planned = true;
  return absl::OkStatus();
}

absl::Status RunDecode(Runtime& runtime, const RunDecodeArgs& args,
                       DecodeWorkspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(
      DecodeKernels * kernels,
      internal::DecodeKernelsOf(runtime, "attention.run_decode"));
  TAILOR_ASSIGN_OR_RETURN(internal::DecodeWorkspaceImpl * impl,
                          internal::ImplOf(ws));
  RaggedWorkspaceImpl& w = impl->ragged;
  if (!w.planned) {
    return absl::FailedPreconditionError(
        "ws: not planned; call attention::PlanDecode first");
  }
  const Device device = runtime.device();
  if (!(ws.device() == device)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ws: planned on ", DeviceName(ws.device()),
                     ", not on the runtime's ", DeviceName(device)));
  }
  const internal::RaggedDecodeRows& rows = w.decode;
  TAILOR_RETURN_IF_ERROR(internal::CheckRunDecodeArgs(
      args, rows.shape, w.shape.num_qo_heads, rows.plan, device));
  if (device.type == DeviceType::kCpu) {  // device contents are checked there
    TAILOR_RETURN_IF_ERROR(internal::CheckRunDecodeContents(
        args, rows.plan, rows.shape.page_size));
  }
  w.last_num_pages = args.k_cache.dims[0];
  w.last_max_pages = args.block_table.dims[1];
  // The caller's seq_lens (the kernel checks them against the plan), no
  // q_rows: one launch of the decode kernel.
  internal::DecodeLaunch launch = internal::DecodeLaunchOf(args, rows.shape);
  launch.seq_lens = args.seq_lens.as<int32_t>();
  return internal::RunDecodeRows(runtime, *kernels, launch, w);
}

}  // namespace attention
}  // namespace tailor
