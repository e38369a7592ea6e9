// moe::Experts with FP8 weights: Route -> quantizing Pack -> FP8 gate|up
// GEMM -> (requantize) -> FP8 down GEMM -> Combine, on the host workspace.
#include "ops/moe/experts_fp8.h"

#include <cstddef>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/moe/checks.h"
#include "ops/moe/kernels.h"
#include "ops/moe/quant_checks.h"
#include "ops/moe/workspace.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

using moe::ScaleMode;

struct Fp8Dims {
  int64_t tokens = 0;        // T
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I
  int64_t experts = 0;       // E
};

absl::string_view ModeName(ScaleMode mode) {
  return mode == ScaleMode::kBlock        ? "block mode"
         : mode == ScaleMode::kPerChannel ? "per-channel mode"
                                          : "per-tensor mode";
}

// H and I are K of a GEMM: whole 128-element groups in block mode.
absl::Status ExpectBlockAligned(const Fp8Dims& d) {
  if (d.hidden % 128 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden: dims[1] (H) must be a multiple of 128 in block mode, got ",
        d.hidden));
  }
  if (d.intermediate % 128 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("w13: dims[1] / 2 (I) must be a multiple of 128 in "
                     "block mode, got ",
                     d.intermediate));
  }
  return absl::OkStatus();
}

absl::Status ValidateFp8Weights(const moe::ExpertsArgs& args, Device dev,
                                Fp8Dims& d) {
  TAILOR_RETURN_IF_ERROR(ExpectFp8Operand("w13", args.w13, 3, dev));
  d.experts = args.w13.dims[0];
  TAILOR_RETURN_IF_ERROR(ExpectExpertCount("w13: dims[0] (E)", d.experts));
  if (args.w13.dims[1] % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "w13: dims[1] (2I, gate | up) must be even, got ", args.w13.dims[1]));
  }
  d.intermediate = args.w13.dims[1] / 2;
  TAILOR_RETURN_IF_ERROR(
      ExpectModelDim("w13: dims[1] / 2 (I)", d.intermediate));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w13", args.w13, 2, d.hidden, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectFp8Operand("w2", args.w2, 3, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 0, d.experts, "E = w13.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 1, d.hidden, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w2", args.w2, 2, d.intermediate, "I = w13.dims[1] / 2"));
  const ScaleMode mode = args.quant.mode;
  if (mode == ScaleMode::kBlock) TAILOR_RETURN_IF_ERROR(ExpectBlockAligned(d));
  TAILOR_RETURN_IF_ERROR(
      ExpectWeightScales("quant.w13_scale", args.quant.w13_scale, "w13", mode,
                         d.experts, 2 * d.intermediate, d.hidden, dev));
  return ExpectWeightScales("quant.w2_scale", args.quant.w2_scale, "w2", mode,
                            d.experts, d.hidden, d.intermediate, dev);
}

// Static activation scales: [1] each in per-tensor mode, unset otherwise
// (the activations are quantized dynamically there).
absl::Status ValidateActivationScales(const moe::ExpertsQuantization& q,
                                      Device dev) {
  for (const auto& [name, scale] : {std::pair{"quant.a1_scale", &q.a1_scale},
                                    std::pair{"quant.a2_scale", &q.a2_scale}}) {
    if (q.mode != ScaleMode::kPerTensor) {
      if (!scale->has_value()) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": must be unset in ", ModeName(q.mode),
          " (activations are quantized dynamically, ",
          q.mode == ScaleMode::kBlock ? "1 x 128 groups)" : "per token)"));
    }
    if (!scale->has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name,
                       ": required in per-tensor mode (the static activation "
                       "scale, [1] f32)"));
    }
    TAILOR_RETURN_IF_ERROR(
        ExpectScales(name, **scale, {{1, "1 (per tensor)"}}, dev));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fp8Dims> ValidateFp8Experts(const moe::ExpertsArgs& args,
                                           const MoeKernels& kernels,
                                           Device dev) {
  const moe::ExpertsQuantization& q = args.quant;
  TAILOR_RETURN_IF_ERROR(
      ExpectScaleModeAndBlock("quant.", q.mode, q.block_shape));
  absl::Status supported = kernels.SupportsScaleMode(q.mode);
  if (!supported.ok()) {
    return absl::Status(supported.code(),
                        absl::StrCat("quant.mode: ", supported.message()));
  }
  Fp8Dims d;
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("hidden", args.hidden, 2, dev));
  d.tokens = args.hidden.dims[0];
  d.hidden = args.hidden.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("hidden: dims[1] (H)", d.hidden));
  TAILOR_RETURN_IF_ERROR(ValidateFp8Weights(args, dev, d));
  TAILOR_RETURN_IF_ERROR(ValidateActivationScales(q, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectExpertsRoutingAndOut(args, dev, d.tokens, d.hidden));
  return d;
}

// The host intermediates of one step (grown to fit).
struct Fp8Rows {
  uint8_t* a;               // [R, H] e4m3 packed input
  float* a_scales;          // [H/128, R] | [R] | unused
  void* gate_up;            // [R, I] dtype: gemm1's output before requantizing
  uint8_t* h;               // [R, I] e4m3 down-projection input
  float* h_scales;          // [I/128, R] | [R] | unused
  void* down;               // [R, H] dtype: gemm2's output
  const int32_t* identity;  // [R] (requantizing Pack)
};

Fp8Rows GrowFp8Rows(const Fp8Dims& d, ScaleMode mode, DType dtype,
                    MoeWorkspace& w) {
  const auto r = static_cast<size_t>(w.num_rows);
  const auto h = static_cast<size_t>(d.hidden);
  const auto i = static_cast<size_t>(d.intermediate);
  const bool block = mode == ScaleMode::kBlock;
  const size_t element = DTypeSize(dtype);
  GrowTo(w.fp8_rows_h, r * h);
  GrowTo(w.fp8_rows_i, r * i);
  GrowTo(w.fp8_scales_h, block ? ScaleBlocks(d.hidden) * r : r);
  GrowTo(w.fp8_scales_i, block ? ScaleBlocks(d.intermediate) * r : r);
  GrowTo(w.rows_h, r * h * element);
  if (!block) {
    GrowTo(w.rows_i, r * i * element);
    if (w.identity.size() < r) {
      const size_t from = w.identity.size();
      w.identity.resize(r);
      std::iota(w.identity.begin() + from, w.identity.end(),
                static_cast<int32_t>(from));
    }
  }
  return Fp8Rows{.a = w.fp8_rows_h.data(),
                 .a_scales = w.fp8_scales_h.data(),
                 .gate_up = w.rows_i.data(),
                 .h = w.fp8_rows_i.data(),
                 .h_scales = w.fp8_scales_i.data(),
                 .down = w.rows_h.data(),
                 .identity = w.identity.data()};
}

}  // namespace

absl::Status Fp8Experts(Runtime& runtime, const moe::ExpertsArgs& args,
                        moe::Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          MoeKernelsOf(runtime, "moe.experts"));
  const Device dev = runtime.device();
  TAILOR_ASSIGN_OR_RETURN(const Fp8Dims d,
                          ValidateFp8Experts(args, *kernels, dev));
  TAILOR_RETURN_IF_ERROR(moe::Route(runtime,
                                    {.topk_ids = args.topk_ids,
                                     .num_experts = d.experts,
                                     .expert_map = args.expert_map,
                                     .valid_tokens = args.valid_tokens,
                                     .policy = args.policy,
                                     .stream = args.stream},
                                    ws));
  MoeWorkspace& w = *WorkspaceImplOf(ws);
  if (w.device) {
    return absl::UnimplementedError(
        "moe.experts: FP8 runs on host workspaces only");
  }
  const ScaleMode mode = args.quant.mode;
  const DType dtype = args.hidden.dtype;
  const Fp8Rows rows = GrowFp8Rows(d, mode, dtype, w);
  Engine& engine = EngineOf(runtime);
  const MoePlanRef plan = PlanRefOf(w);
  const bool block = mode == ScaleMode::kBlock;
  TAILOR_RETURN_IF_ERROR(kernels->Pack(
      engine,
      {.dtype = dtype,
       .hidden_dim = d.hidden,
       .rows = w.num_rows,
       .tokens = d.tokens,
       .topk = w.topk,
       .hidden = args.hidden.data,
       .permutation = ws.permutation().as<int32_t>(),
       .a = rows.a,
       .scale_mode = mode,
       .a_scales = rows.a_scales,
       .static_scale =
           args.quant.a1_scale ? args.quant.a1_scale->as<float>() : nullptr,
       .scale_rows = w.num_rows}));
  GemmConfig gate_up, down;
  TAILOR_RETURN_IF_ERROR(kernels->GroupedGemm(
      engine, {.dtype = block ? DType::kF8E4M3 : dtype,
               .n = 2 * d.intermediate,
               .k = d.hidden,
               .tile_rows = w.tile_rows,
               .epilogue = moe::Epilogue::kSiluAndMul,
               .plan = plan,
               .a = rows.a,
               .w = args.w13.data,
               .c = block ? static_cast<void*>(rows.h) : rows.gate_up,
               .rows = w.num_rows,
               .experts = d.experts,
               .config = &gate_up,
               .scale_mode = mode,
               .a_scales = rows.a_scales,
               .a_scale_rows = w.num_rows,
               .w_scales = args.quant.w13_scale.as<float>(),
               .c_scales = block ? rows.h_scales : nullptr,
               .c_scale_rows = block ? w.num_rows : 0}));
  w.RecordGemm(gate_up);
  if (!block) {  // requantize gemm1's rows (in expert order: identity)
    TAILOR_RETURN_IF_ERROR(kernels->Pack(
        engine,
        {.dtype = dtype,
         .hidden_dim = d.intermediate,
         .rows = w.num_rows,
         .tokens = w.num_rows,
         .topk = 1,
         .hidden = rows.gate_up,
         .permutation = rows.identity,
         .a = rows.h,
         .scale_mode = mode,
         .a_scales = rows.h_scales,
         .static_scale =
             args.quant.a2_scale ? args.quant.a2_scale->as<float>() : nullptr,
         .scale_rows = w.num_rows}));
  }
  TAILOR_RETURN_IF_ERROR(kernels->GroupedGemm(
      engine, {.dtype = dtype,
               .n = d.hidden,
               .k = d.intermediate,
               .tile_rows = w.tile_rows,
               .epilogue = moe::Epilogue::kNone,
               .plan = plan,
               .a = rows.h,
               .w = args.w2.data,
               .c = rows.down,
               .rows = w.num_rows,
               .experts = d.experts,
               .config = &down,
               .scale_mode = mode,
               .a_scales = rows.h_scales,
               .a_scale_rows = w.num_rows,
               .w_scales = args.quant.w2_scale.as<float>()}));
  w.RecordGemm(down);
  return kernels->Combine(engine, {.dtype = dtype,
                                   .hidden_dim = d.hidden,
                                   .tokens = d.tokens,
                                   .topk = w.topk,
                                   .rows = w.num_rows,
                                   .c = rows.down,
                                   .weights = args.topk_weights.as<float>(),
                                   .inverse = ws.inverse().as<int32_t>(),
                                   .out = args.out.data});
}

}  // namespace tailor::internal
