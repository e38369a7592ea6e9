// moe::Experts: vLLM's fused_experts as Route -> Pack -> GroupedGemm
// (+silu_and_mul) -> GroupedGemm -> Combine, intermediates in the Workspace.
#include "absl/strings/str_cat.h"
#include "ops/moe_checks.h"
#include "ops/moe_kernels.h"
#include "ops/moe_workspace.h"
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

absl::Status ValidateWeights(const ExpertsArgs& args, ExpertsDims& d) {
  const DType dtype = args.hidden.dtype;
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("w13", args.w13, 3));
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
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("w2", args.w2, 3));
  TAILOR_RETURN_IF_ERROR(ExpectSameDType("w2", args.w2, "hidden", dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 0, d.experts, "E = w13.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 1, d.hidden, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 2, d.intermediate, "I = w13.dims[1] / 2"));
  return absl::OkStatus();
}

absl::Status ValidateRoutingAndOut(const ExpertsArgs& args,
                                   const ExpertsDims& d) {
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("topk_ids", args.topk_ids, 2, DType::kI32));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("topk_ids", args.topk_ids, 0, d.tokens, "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("topk_weights", args.topk_weights, 2, DType::kF32));
  TAILOR_RETURN_IF_ERROR(ExpectDim("topk_weights", args.topk_weights, 0,
                                   d.tokens, "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(ExpectDim("topk_weights", args.topk_weights, 1,
                                   args.topk_ids.dims[1],
                                   "k = topk_ids.dims[1]"));
  if (args.activation != Activation::kSilu) {
    return absl::InvalidArgumentError(
        absl::StrCat("activation: only Activation::kSilu is supported, got ",
                     static_cast<int>(args.activation)));
  }
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("out", args.out, 2));
  TAILOR_RETURN_IF_ERROR(
      ExpectSameDType("out", args.out, "hidden", args.hidden.dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 0, d.tokens, "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 1, d.hidden, "H = hidden.dims[1]"));
  // In place (out == hidden) is fine: Pack reads hidden before Combine writes.
  if (args.out.data != args.hidden.data) {
    TAILOR_RETURN_IF_ERROR(
        internal::ExpectDisjoint("out", args.out, "hidden", args.hidden));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertsDims> ValidateExperts(const ExpertsArgs& args) {
  ExpertsDims d = {};
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("hidden", args.hidden, 2));
  d.tokens = args.hidden.dims[0];
  d.hidden = args.hidden.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("hidden: dims[1] (H)", d.hidden));
  TAILOR_RETURN_IF_ERROR(ValidateWeights(args, d));
  TAILOR_RETURN_IF_ERROR(ValidateRoutingAndOut(args, d));
  return d;
}

absl::Status ExpertsUnguarded(Runtime& runtime, const ExpertsArgs& args,
                              Workspace& ws) {
  TAILOR_RETURN_IF_ERROR(internal::RequireCpuBackend(runtime, "moe.experts"));
  TAILOR_ASSIGN_OR_RETURN(ExpertsDims d, ValidateExperts(args));
  // Route validates the ids, the map and the policy before any kernel runs.
  TAILOR_RETURN_IF_ERROR(Route(runtime,
                               {.topk_ids = args.topk_ids,
                                .num_experts = d.experts,
                                .expert_map = args.expert_map,
                                .policy = args.policy},
                               ws));
  internal::MoeWorkspace& w = *ws.impl();
  const DType dtype = args.hidden.dtype;
  const size_t element = DTypeSize(dtype);
  internal::GrowTo(w.rows_h,
                   static_cast<size_t>(w.num_rows * d.hidden) * element);
  internal::GrowTo(w.rows_i,
                   static_cast<size_t>(w.num_rows * d.intermediate) * element);

  internal::Engine& engine = runtime.engine();
  TAILOR_RETURN_IF_ERROR(
      internal::LaunchPack(engine, {.dtype = dtype,
                                    .hidden_dim = d.hidden,
                                    .rows = w.num_rows,
                                    .topk = w.topk,
                                    .hidden = args.hidden.data,
                                    .permutation = w.permutation.data(),
                                    .a = w.rows_h.data()}));
  TAILOR_RETURN_IF_ERROR(
      internal::LaunchGroupedGemm(engine, {.dtype = dtype,
                                           .n = 2 * d.intermediate,
                                           .k = d.hidden,
                                           .epilogue = Epilogue::kSiluAndMul,
                                           .plan = &w.plan,
                                           .a = w.rows_h.data(),
                                           .w = args.w13.data,
                                           .c = w.rows_i.data()}));
  // The packed input is dead now: gemm2 writes over it.
  TAILOR_RETURN_IF_ERROR(
      internal::LaunchGroupedGemm(engine, {.dtype = dtype,
                                           .n = d.hidden,
                                           .k = d.intermediate,
                                           .epilogue = Epilogue::kNone,
                                           .plan = &w.plan,
                                           .a = w.rows_i.data(),
                                           .w = args.w2.data,
                                           .c = w.rows_h.data()}));
  return internal::LaunchCombine(engine,
                                 {.dtype = dtype,
                                  .hidden_dim = d.hidden,
                                  .tokens = d.tokens,
                                  .topk = w.topk,
                                  .c = w.rows_h.data(),
                                  .weights = args.topk_weights.as<float>(),
                                  .inverse = w.inverse.data(),
                                  .out = args.out.data});
}

}  // namespace

absl::Status Experts(Runtime& runtime, const ExpertsArgs& args, Workspace& ws) {
  return internal::ResourceExhaustedOnBadAlloc(
      "moe.experts", [&] { return ExpertsUnguarded(runtime, args, ws); });
}

}  // namespace moe
}  // namespace tailor
