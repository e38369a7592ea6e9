// moe::Experts: vLLM's fused_experts as Route -> Pack -> GroupedGemm
// (+silu_and_mul) -> GroupedGemm -> Combine, intermediates in the Workspace.
#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/moe/checks.h"
#include "ops/moe/experts_fp8.h"
#include "ops/moe/kernels.h"
#include "ops/moe/quant_checks.h"
#include "ops/moe/workspace.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor {
namespace moe {
namespace {

using internal::ExpectDim;
using internal::ExpectFloatOperand;
using internal::ExpectModelDim;
using internal::ExpectOperand;
using internal::ExpectSameDType;

struct ExpertsDims {
  int64_t tokens = 0;        // T
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I
  int64_t experts = 0;       // E (local)
};

absl::Status ValidateWeights(const ExpertsArgs& args, Device dev,
                             ExpertsDims& d) {
  const DType dtype = args.hidden.dtype;
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("w13", args.w13, 3, dev));
  TAILOR_RETURN_IF_ERROR(ExpectSameDType("w13", args.w13, "hidden", dtype));
  d.experts = args.w13.dims[0];
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertCount("w13: dims[0] (E)", d.experts));
  if (args.w13.dims[1] % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "w13: dims[1] (2I, gate | up) must be even, got ", args.w13.dims[1]));
  }
  d.intermediate = args.w13.dims[1] / 2;
  TAILOR_RETURN_IF_ERROR(
      ExpectModelDim("w13: dims[1] / 2 (I)", d.intermediate));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w13", args.w13, 2, d.hidden, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("w2", args.w2, 3, dev));
  TAILOR_RETURN_IF_ERROR(ExpectSameDType("w2", args.w2, "hidden", dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 0, d.experts, "E = w13.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 1, d.hidden, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 2, d.intermediate, "I = w13.dims[1] / 2"));
  return absl::OkStatus();
}

absl::StatusOr<ExpertsDims> ValidateExperts(const ExpertsArgs& args,
                                            Device dev) {
  ExpertsDims d = {};
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("hidden", args.hidden, 2, dev));
  d.tokens = args.hidden.dims[0];
  d.hidden = args.hidden.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("hidden: dims[1] (H)", d.hidden));
  TAILOR_RETURN_IF_ERROR(internal::ExpectNoExpertsQuant(args.quant));
  TAILOR_RETURN_IF_ERROR(ValidateWeights(args, dev, d));
  TAILOR_RETURN_IF_ERROR(
      internal::ExpectExpertsRoutingAndOut(args, dev, d.tokens, d.hidden));
  return d;
}

// The intermediate row buffers of `w` for this call: host vectors (grown
// to fit) or the device workspace's (checked to fit).
struct RowBuffers {
  void* h;  // [R, H]
  void* i;  // [R, I]
};
absl::StatusOr<RowBuffers> IntermediateRows(const ExpertsDims& d, DType dtype,
                                            internal::MoeWorkspace& w) {
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  if (!w.device) {
    internal::GrowTo(w.rows_h, static_cast<size_t>(w.num_rows * d.hidden) *
                                   static_cast<size_t>(element));
    internal::GrowTo(w.rows_i,
                     static_cast<size_t>(w.num_rows * d.intermediate) *
                         static_cast<size_t>(element));
    return RowBuffers{w.rows_h.data(), w.rows_i.data()};
  }
  internal::MoeDeviceBuffers& b = *w.device;
  TAILOR_RETURN_IF_ERROR(internal::CheckFits(b, {.assignments = w.num_rows,
                                                 .experts = w.num_experts,
                                                 .hidden = d.hidden,
                                                 .intermediate = d.intermediate,
                                                 .element_bytes = element,
                                                 .tile_rows = w.tile_rows}));
  return RowBuffers{b.at(b.rows_h), b.at(b.rows_i)};
}

}  // namespace

namespace {

absl::Status ExpertsUnguarded(Runtime& runtime, const ExpertsArgs& args,
                              Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(internal::MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.experts"));
  const Device dev = runtime.device();
  TAILOR_ASSIGN_OR_RETURN(ExpertsDims d, ValidateExperts(args, dev));
  // Route validates the ids, the map and the policy before any kernel runs.
  TAILOR_RETURN_IF_ERROR(Route(runtime,
                               {.topk_ids = args.topk_ids,
                                .num_experts = d.experts,
                                .expert_map = args.expert_map,
                                .valid_tokens = args.valid_tokens,
                                .policy = args.policy,
                                .stream = args.stream},
                               ws));
  internal::MoeWorkspace& w = *internal::WorkspaceImplOf(ws);
  const DType dtype = args.hidden.dtype;
  TAILOR_ASSIGN_OR_RETURN(RowBuffers rows, IntermediateRows(d, dtype, w));
  internal::Engine& engine = internal::EngineOf(runtime);
  const internal::MoePlanRef plan = internal::PlanRefOf(w);
  TAILOR_RETURN_IF_ERROR(
      kernels->Pack(engine, {.dtype = dtype,
                             .hidden_dim = d.hidden,
                             .rows = w.num_rows,
                             .tokens = d.tokens,
                             .topk = w.topk,
                             .hidden = args.hidden.data,
                             .permutation = ws.permutation().as<int32_t>(),
                             .a = rows.h,
                             .stream = args.stream}));
  // The device workspace's row buffers hold its reserved T * k rows: the
  // GEMMs may describe them whole, the same for every step.
  const int64_t row_capacity = w.device ? w.device->capacity.assignments : 0;
  internal::GemmConfig gate_up, down;
  TAILOR_RETURN_IF_ERROR(
      kernels->GroupedGemm(engine, {.dtype = dtype,
                                    .n = 2 * d.intermediate,
                                    .k = d.hidden,
                                    .tile_rows = w.tile_rows,
                                    .epilogue = Epilogue::kSiluAndMul,
                                    .plan = plan,
                                    .a = rows.h,
                                    .w = args.w13.data,
                                    .c = rows.i,
                                    .rows = w.num_rows,
                                    .row_capacity = row_capacity,
                                    .experts = d.experts,
                                    .stream = args.stream,
                                    .config = &gate_up}));
  w.RecordGemm(gate_up);
  // The packed input is dead now: gemm2 writes over it.
  TAILOR_RETURN_IF_ERROR(
      kernels->GroupedGemm(engine, {.dtype = dtype,
                                    .n = d.hidden,
                                    .k = d.intermediate,
                                    .tile_rows = w.tile_rows,
                                    .epilogue = Epilogue::kNone,
                                    .plan = plan,
                                    .a = rows.i,
                                    .w = args.w2.data,
                                    .c = rows.h,
                                    .rows = w.num_rows,
                                    .row_capacity = row_capacity,
                                    .experts = d.experts,
                                    .stream = args.stream,
                                    .config = &down}));
  w.RecordGemm(down);
  return kernels->Combine(engine, {.dtype = dtype,
                                   .hidden_dim = d.hidden,
                                   .tokens = d.tokens,
                                   .topk = w.topk,
                                   .rows = w.num_rows,
                                   .c = rows.h,
                                   .weights = args.topk_weights.as<float>(),
                                   .inverse = ws.inverse().as<int32_t>(),
                                   .out = args.out.data,
                                   .stream = args.stream});
}

}  // namespace

absl::Status Experts(Runtime& runtime, const ExpertsArgs& args, Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc("moe.experts", [&] {
    if (args.quant.mode != ScaleMode::kNone) {
      return internal::Fp8Experts(runtime, args, ws);
    }
    return ExpertsUnguarded(runtime, args, ws);
  });
}

}  // namespace moe
}  // namespace tailor
