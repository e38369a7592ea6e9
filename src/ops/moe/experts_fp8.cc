// moe::Experts with FP8 weights: Route -> quantizing Pack -> FP8 gate|up
// GEMM -> (requantize) -> FP8 down GEMM -> Combine, on a host workspace
// (buffers grown to fit) or a reserved device workspace (the intermediates
// in its row buffers, no allocation, no sync).
//
// The down projection's input by mode: block and (on a device) per tensor,
// the gate|up epilogue quantizes its silu_and_mul output itself. Per
// channel (per-token activation scales, vLLM's use_fp8_w8a8 with
// per-channel weights), a row's scale needs the amax of all I columns,
// which span the gate|up GEMM's N tiles: the GEMM writes the silu_and_mul in
// the activation dtype (vLLM's intermediate_cache2) and a per-token
// quantizing Pack over those rows in order reads it back, one launch more
// than the fused epilogues. On a device those bf16 rows live in the
// workspace's hidden rows after the e4m3 input (bf16 steps' workspace sizes
// stay as they are), so per channel runs there only where H > 2 * I
// (MoePerTokenFp8Rows; FailedPrecondition before Route otherwise). The next
// step is a per-channel mode that needs no extra room: the gate|up
// epilogue max-reduces each row's amax atomically and the down GEMM's
// loader quantizes, dropping the bf16 rows, the launch and the round trip.
#include "ops/moe/experts_fp8.h"

#include <cstddef>
#include <numeric>
#include <optional>

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

// The intermediates of one step: host vectors (grown to fit) or views of
// the device workspace's row buffers (ops/moe/device_workspace.h).
struct Fp8Rows {
  uint8_t* a;           // [R, H] e4m3 packed input
  float* a_scales;      // [H/128, S] | [R] | unused
  void* gate_up;        // [R, I] gate_up_dtype: gemm1's output,
                        // requantized
  DType gate_up_dtype;  // f32; per channel: the activation dtype
  uint8_t* h;           // [R, I] e4m3 down-projection input
  float* h_scales;      // [I/128, S] | [R] | unused
  void* down;           // [R, H] dtype: gemm2's output
  // [R] (requantizing Pack); null on a device, whose Pack reads the rows in
  // order (PackLaunch::rows_in_order).
  const int32_t* identity;
  int64_t scale_rows;  // S >= R: the block scales' row stride
  // Rows the buffers hold when more than R (a device workspace's reserved
  // T * k: the GEMMs describe them whole, the same every step); else 0.
  int64_t row_capacity;
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
    GrowTo(w.rows_i, r * i * sizeof(float));
    if (w.identity.size() < r) {
      const size_t from = w.identity.size();
      w.identity.resize(r);
      std::iota(w.identity.begin() + from, w.identity.end(),
                static_cast<int32_t>(from));
    }
  }
  // Per channel the intermediate is in the activation dtype (as vLLM and
  // the device); per tensor in f32 (as the device's quantizing epilogue).
  const DType gate_up_dtype =
      mode == ScaleMode::kPerChannel ? dtype : DType::kF32;
  return Fp8Rows{.a = w.fp8_rows_h.data(),
                 .a_scales = w.fp8_scales_h.data(),
                 .gate_up = w.rows_i.data(),
                 .gate_up_dtype = gate_up_dtype,
                 .h = w.fp8_rows_i.data(),
                 .h_scales = w.fp8_scales_i.data(),
                 .down = w.rows_h.data(),
                 .identity = w.identity.data(),
                 .scale_rows = w.num_rows,
                 .row_capacity = 0};
}

// A device step's intermediates, in the reserved row buffers (block and
// per-tensor mode: rows_h and rows_i, per tensor no scale buffer is used;
// per channel: PerTokenFp8RowsOf).
absl::StatusOr<Fp8Rows> DeviceFp8Rows(const Fp8Dims& d, ScaleMode mode,
                                      MoeWorkspace& w) {
  const MoeDeviceBuffers& b = *w.device;
  TAILOR_RETURN_IF_ERROR(CheckFits(b, {.assignments = w.num_rows,
                                       .experts = w.num_experts,
                                       .hidden = d.hidden,
                                       .intermediate = d.intermediate,
                                       .element_bytes = 2,
                                       .tile_rows = w.tile_rows}));
  if (mode == ScaleMode::kPerChannel) {
    TAILOR_ASSIGN_OR_RETURN(const MoePerTokenFp8Rows p,
                            PerTokenFp8RowsOf(b, d.hidden, d.intermediate));
    return Fp8Rows{.a = p.a,
                   .a_scales = p.a_scales,
                   .gate_up = p.gate_up,
                   .gate_up_dtype = DType::kBF16,
                   .h = p.h,
                   .h_scales = p.h_scales,
                   .down = b.at(b.rows_h),
                   .identity = nullptr,
                   .scale_rows = p.rows,
                   .row_capacity = p.rows};
  }
  const MoeFp8DeviceRows f = Fp8DeviceRowsOf(b, d.hidden, d.intermediate);
  return Fp8Rows{.a = f.a,
                 .a_scales = f.a_scales,
                 .gate_up = nullptr,
                 .gate_up_dtype = DType::kF32,
                 .h = f.h,
                 .h_scales = f.h_scales,
                 .down = b.at(b.rows_h),
                 .identity = nullptr,
                 .scale_rows = f.scale_rows,
                 .row_capacity = f.rows};
}

// What a device step needs beyond the host's rules, checked before Route
// writes anything.
absl::Status ExpectDeviceFp8Step(const moe::ExpertsArgs& args,
                                 const Fp8Dims& d) {
  if (args.hidden.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden: FP8 Experts on a device takes bf16 activations (the "
        "quantizing Pack reads bf16), got ",
        DTypeName(args.hidden.dtype)));
  }
  // The kernels' K blocks and N tiles (block mode checked this already).
  if (d.hidden % 128 != 0 || d.intermediate % 128 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        d.hidden % 128 != 0 ? "hidden: dims[1] (H)" : "w13: dims[1] / 2 (I)",
        " must be a multiple of 128 for FP8 Experts on a device, got ",
        d.hidden % 128 != 0 ? d.hidden : d.intermediate));
  }
  return absl::OkStatus();
}

// Per channel on a device: the step's bf16 gate|up rows fit the reserved
// hidden rows (PerTokenFp8RowsOf's rule), checked before Route writes
// anything. A step beyond its reservation reports the limit it exceeds
// first; a workspace not reserved on this device is Route's to report.
absl::Status ExpectPerChannelRoom(const Fp8Dims& d, Device device,
                                  const moe::Workspace& ws) {
  const MoeWorkspace* w = WorkspaceImplOf(ws);
  if (w == nullptr || !w->device || !(w->device->device == device)) {
    return absl::OkStatus();
  }
  TAILOR_RETURN_IF_ERROR(CheckFits(*w->device, {.hidden = d.hidden,
                                                .intermediate = d.intermediate,
                                                .element_bytes = 2}));
  return PerTokenFp8RowsOf(*w->device, d.hidden, d.intermediate).status();
}

// One FP8 step's launches over routed workspace `w`.
struct Fp8Step {
  MoeKernels& kernels;
  Engine& engine;
  const moe::ExpertsArgs& args;
  const Fp8Dims& d;
  MoeWorkspace& w;
  const Fp8Rows& rows;
  MoePlanRef plan;

  ScaleMode mode() const { return args.quant.mode; }
  bool block() const { return mode() == ScaleMode::kBlock; }
  DType dtype() const { return args.hidden.dtype; }
  static const float* Scale(const std::optional<TensorRef>& t) {
    return t ? t->as<float>() : nullptr;
  }

  // The quantizing Pack of `rows` rows of `x` [., dim] through
  // `permutation` into e4m3 `q` and its scales, on the step's stream (a
  // launch on the legacy stream escapes a caller's graph capture) with the
  // scale row stride the GEMMs read (a device workspace pads it to its
  // reserved rows, rounded up to 4). `rows_in_order`: row r reads x[r].
  absl::Status Quantize(const void* x, DType x_dtype, int64_t dim,
                        int64_t tokens, int64_t topk,
                        const int32_t* permutation, uint8_t* q, float* scales,
                        const float* static_scale, bool rows_in_order = false) {
    return kernels.Pack(engine, {.dtype = x_dtype,
                                 .hidden_dim = dim,
                                 .rows = w.num_rows,
                                 .tokens = tokens,
                                 .topk = topk,
                                 .hidden = x,
                                 .permutation = permutation,
                                 .a = q,
                                 .stream = args.stream,
                                 .scale_mode = mode(),
                                 .a_scales = scales,
                                 .static_scale = static_scale,
                                 .scale_rows = rows.scale_rows,
                                 .rows_in_order = rows_in_order});
  }

  // e4m3 a [R, K] x w -> c (`c_dtype`; e4m3 with 1 x 128 scales when so).
  absl::Status Gemm(int64_t n, int64_t k, moe::Epilogue epilogue,
                    const uint8_t* a, const float* a_scales,
                    const TensorRef& weights, const TensorRef& w_scales,
                    DType c_dtype, void* c, float* c_scales,
                    const float* c_static_scale = nullptr) {
    GemmConfig config;
    TAILOR_RETURN_IF_ERROR(kernels.GroupedGemm(
        engine, {.dtype = c_dtype,
                 .n = n,
                 .k = k,
                 .tile_rows = w.tile_rows,
                 .epilogue = epilogue,
                 .plan = plan,
                 .a = a,
                 .w = weights.data,
                 .c = c,
                 .rows = w.num_rows,
                 .row_capacity = rows.row_capacity,
                 .experts = d.experts,
                 .stream = args.stream,
                 .config = &config,
                 .scale_mode = mode(),
                 .a_scales = a_scales,
                 .a_scale_rows = rows.scale_rows,
                 .w_scales = w_scales.as<float>(),
                 .c_scales = c_scales,
                 .c_scale_rows = c_scales != nullptr ? rows.scale_rows : 0,
                 .c_static_scale = c_static_scale}));
    w.RecordGemm(config);
    return absl::OkStatus();
  }

  // The requantizing Pack of gate|up's rows (in expert order already): on
  // the host through the identity permutation, on a device in order over
  // the Route's permutation (it marks the rows in use).
  absl::Status Requantize(const int32_t* permutation) {
    const float* a2 = Scale(args.quant.a2_scale);
    if (rows.identity != nullptr) {
      return Quantize(rows.gate_up, rows.gate_up_dtype, d.intermediate,
                      w.num_rows, 1, rows.identity, rows.h, rows.h_scales, a2);
    }
    return Quantize(rows.gate_up, rows.gate_up_dtype, d.intermediate, d.tokens,
                    w.topk, permutation, rows.h, rows.h_scales, a2,
                    /*rows_in_order=*/true);
  }

  // Pack -> gate|up (block, and per tensor on a device: the quantizing
  // epilogue; else gate_up rows and a requantizing Pack) -> down.
  absl::Status Run(const int32_t* permutation) {
    const moe::ExpertsQuantization& q = args.quant;
    // Per tensor, the GEMMs read the static scales the Pack divided by.
    const bool per_tensor = mode() == ScaleMode::kPerTensor;
    const float* a_scales = per_tensor ? Scale(q.a1_scale) : rows.a_scales;
    const float* h_scales = per_tensor ? Scale(q.a2_scale) : rows.h_scales;
    TAILOR_RETURN_IF_ERROR(Quantize(args.hidden.data, dtype(), d.hidden,
                                    d.tokens, w.topk, permutation, rows.a,
                                    rows.a_scales, Scale(q.a1_scale)));
    const int64_t n1 = 2 * d.intermediate;
    if (block()) {
      TAILOR_RETURN_IF_ERROR(Gemm(n1, d.hidden, moe::Epilogue::kSiluAndMul,
                                  rows.a, a_scales, args.w13, q.w13_scale,
                                  DType::kF8E4M3, rows.h, rows.h_scales));
    } else if (rows.gate_up == nullptr) {  // a device: a2 is static
      TAILOR_RETURN_IF_ERROR(Gemm(n1, d.hidden, moe::Epilogue::kSiluAndMul,
                                  rows.a, a_scales, args.w13, q.w13_scale,
                                  DType::kF8E4M3, rows.h, nullptr, h_scales));
    } else {  // gate_up rows (Fp8Rows::gate_up_dtype), then quantized
      TAILOR_RETURN_IF_ERROR(Gemm(n1, d.hidden, moe::Epilogue::kSiluAndMul,
                                  rows.a, a_scales, args.w13, q.w13_scale,
                                  rows.gate_up_dtype, rows.gate_up, nullptr));
      TAILOR_RETURN_IF_ERROR(Requantize(permutation));
    }
    return Gemm(d.hidden, d.intermediate, moe::Epilogue::kNone, rows.h,
                h_scales, args.w2, q.w2_scale, dtype(), rows.down, nullptr);
  }
};

}  // namespace

absl::Status Fp8Experts(Runtime& runtime, const moe::ExpertsArgs& args,
                        moe::Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(MoeKernels * kernels,
                          MoeKernelsOf(runtime, "moe.experts"));
  const Device dev = runtime.device();
  TAILOR_ASSIGN_OR_RETURN(const Fp8Dims d,
                          ValidateFp8Experts(args, *kernels, dev));
  const bool on_device = dev.type != DeviceType::kCpu;
  if (on_device) {
    TAILOR_RETURN_IF_ERROR(ExpectDeviceFp8Step(args, d));
    if (args.quant.mode == ScaleMode::kPerChannel) {
      TAILOR_RETURN_IF_ERROR(ExpectPerChannelRoom(d, dev, ws));
    }
  }
  TAILOR_RETURN_IF_ERROR(moe::Route(runtime,
                                    {.topk_ids = args.topk_ids,
                                     .num_experts = d.experts,
                                     .expert_map = args.expert_map,
                                     .valid_tokens = args.valid_tokens,
                                     .policy = args.policy,
                                     .stream = args.stream},
                                    ws));
  MoeWorkspace& w = *WorkspaceImplOf(ws);
  Fp8Rows rows = {};
  if (on_device) {
    TAILOR_ASSIGN_OR_RETURN(rows, DeviceFp8Rows(d, args.quant.mode, w));
  } else {
    rows = GrowFp8Rows(d, args.quant.mode, args.hidden.dtype, w);
  }
  Engine& engine = EngineOf(runtime);
  Fp8Step step = {.kernels = *kernels,
                  .engine = engine,
                  .args = args,
                  .d = d,
                  .w = w,
                  .rows = rows,
                  .plan = PlanRefOf(w)};
  TAILOR_RETURN_IF_ERROR(step.Run(ws.permutation().as<int32_t>()));
  return kernels->Combine(engine, {.dtype = args.hidden.dtype,
                                   .hidden_dim = d.hidden,
                                   .tokens = d.tokens,
                                   .topk = w.topk,
                                   .rows = w.num_rows,
                                   .c = rows.down,
                                   .weights = args.topk_weights.as<float>(),
                                   .inverse = ws.inverse().as<int32_t>(),
                                   .out = args.out.data,
                                   .stream = args.stream});
}

}  // namespace tailor::internal
