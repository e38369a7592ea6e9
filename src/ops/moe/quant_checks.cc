#include "ops/moe/quant_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "ops/moe/checks.h"
#include "tailor/status.h"

namespace tailor::internal {

absl::Status ExpectFp8Operand(absl::string_view name, const TensorRef& t,
                              int rank, Device device) {
  if (t.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype must be f8e4m3 with a scale mode, got ",
                     DTypeName(t.dtype)));
  }
  TAILOR_RETURN_IF_ERROR(ExpectOperand(name, t, rank, DType::kF8E4M3, device));
  return ExpectDeviceAligned(name, t, device);
}

absl::Status ExpectScaleModeAndBlock(absl::string_view prefix,
                                     moe::ScaleMode mode,
                                     const moe::BlockShape& block_shape) {
  if (static_cast<int>(mode) > static_cast<int>(moe::ScaleMode::kBlock)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "mode: not a ScaleMode value: ", static_cast<int>(mode)));
  }
  if (block_shape.n != 128 || block_shape.k != 128) {
    if (mode != moe::ScaleMode::kBlock) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix,
          "block_shape: only used in block mode, leave it [128, 128]; "
          "got [",
          block_shape.n, ", ", block_shape.k, "]"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(prefix,
                     "block_shape: only [128, 128] (the checkpoints' block) "
                     "is supported, got [",
                     block_shape.n, ", ", block_shape.k, "]"));
  }
  return absl::OkStatus();
}

absl::Status ExpectScales(absl::string_view name, const TensorRef& t,
                          std::initializer_list<ScaleDim> dims, Device device) {
  if (t.data == nullptr && t.rank == 0) {  // left unset
    std::string shape;
    for (const ScaleDim& dim : dims) {
      absl::StrAppend(&shape, shape.empty() ? "" : ", ", dim.size);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": required, f32 [", shape, "]"));
  }
  TAILOR_RETURN_IF_ERROR(ExpectOperand(name, t, static_cast<int>(dims.size()),
                                       DType::kF32, device));
  int i = 0;
  for (const ScaleDim& dim : dims) {
    TAILOR_RETURN_IF_ERROR(ExpectDim(name, t, i++, dim.size, dim.what));
  }
  return absl::OkStatus();
}

absl::Status ExpectUnsetTensor(absl::string_view name, const TensorRef& t,
                               absl::string_view why) {
  if (t.data == nullptr && t.rank == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": must be unset ", why, ", got ", t.ShapeString()));
}

absl::Status ExpectWeightScales(absl::string_view scale, const TensorRef& t,
                                absl::string_view w, moe::ScaleMode mode,
                                int64_t experts, int64_t n, int64_t k,
                                Device device) {
  const std::string e = absl::StrCat("E = ", w, ".dims[0]");
  switch (mode) {
    case moe::ScaleMode::kPerTensor:
      return ExpectScales(scale, t, {{experts, e}}, device);
    case moe::ScaleMode::kPerChannel: {
      const std::string n_what = absl::StrCat("N = ", w, ".dims[1]");
      return ExpectScales(scale, t, {{experts, e}, {n, n_what}}, device);
    }
    default: {
      const std::string n_what =
          absl::StrCat("N/128 = ceil(", w, ".dims[1] / 128)");
      const std::string k_what =
          absl::StrCat("K/128 = ceil(", w, ".dims[2] / 128)");
      return ExpectScales(
          scale, t,
          {{experts, e}, {ScaleBlocks(n), n_what}, {ScaleBlocks(k), k_what}},
          device);
    }
  }
}

absl::Status ExpectGemmQuantMode(const moe::GemmQuantization& quant,
                                 const MoeKernels& kernels) {
  TAILOR_RETURN_IF_ERROR(
      ExpectScaleModeAndBlock("quant.", quant.mode, quant.block_shape));
  absl::Status supported = kernels.SupportsScaleMode(quant.mode);
  if (supported.ok()) return supported;
  return absl::Status(supported.code(),
                      absl::StrCat("quant.mode: ", supported.message()));
}

absl::Status ExpectFp8GemmOutput(const moe::GroupedGemmArgs& args,
                                 Device device) {
  if (args.c.dtype != DType::kF8E4M3) {
    return ExpectFloatOperand("c", args.c, 2, device);
  }
  if (args.quant.mode != moe::ScaleMode::kBlock ||
      args.epilogue != moe::Epilogue::kSiluAndMul) {
    return absl::InvalidArgumentError(
        "c: f8e4m3 (a quantized output) needs quant.mode kBlock and "
        "Epilogue::kSiluAndMul");
  }
  return ExpectFp8Operand("c", args.c, 2, device);
}

namespace {

// 1 x 128 scales [blocks, S], K-block major, S >= R rows (S is the row
// stride: a device backend may pad R for 16-byte TMA strides).
absl::Status ExpectBlockScaleRows(absl::string_view name, const TensorRef& t,
                                  int64_t blocks, absl::string_view blocks_what,
                                  int64_t rows, absl::string_view rows_of,
                                  Device device) {
  if (t.data == nullptr && t.rank == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": required, f32 [", blocks, ", S >= ", rows, "]"));
  }
  TAILOR_RETURN_IF_ERROR(ExpectOperand(name, t, 2, DType::kF32, device));
  TAILOR_RETURN_IF_ERROR(ExpectDim(name, t, 0, blocks, blocks_what));
  if (t.dims[1] < rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": dims[1] (scale rows) must be at least R = ", rows_of,
        ".dims[0] (", rows, "), got ", t.dims[1]));
  }
  return absl::OkStatus();
}

absl::Status ExpectActivationScales(absl::string_view name, const TensorRef& t,
                                    moe::ScaleMode mode, int64_t rows,
                                    int64_t k, Device device) {
  switch (mode) {
    case moe::ScaleMode::kPerTensor:
      return ExpectScales(name, t, {{1, "1 (per tensor)"}}, device);
    case moe::ScaleMode::kPerChannel:
      return ExpectScales(name, t, {{rows, "R = a.dims[0]"}}, device);
    default:
      return ExpectBlockScaleRows(name, t, ScaleBlocks(k),
                                  "K/128 = a.dims[1] / 128", rows, "a", device);
  }
}

}  // namespace

absl::Status ExpectGemmScales(const moe::GroupedGemmArgs& args, int64_t rows,
                              Device device) {
  const moe::GemmQuantization& q = args.quant;
  if (q.mode == moe::ScaleMode::kNone) {
    constexpr absl::string_view kWhy = "without a scale mode (quant.mode)";
    TAILOR_RETURN_IF_ERROR(ExpectUnsetTensor("quant.a_scale", q.a_scale, kWhy));
    TAILOR_RETURN_IF_ERROR(ExpectUnsetTensor("quant.w_scale", q.w_scale, kWhy));
    return ExpectUnsetTensor("quant.c_scale", q.c_scale, kWhy);
  }
  const int64_t k = args.a.dims[1], n = args.w.dims[1];
  if (q.mode == moe::ScaleMode::kBlock && k % 128 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a: dims[1] (K) must be a multiple of 128 in block mode (a 1 x 128 "
        "group never straddles two weight blocks), got ",
        k));
  }
  TAILOR_RETURN_IF_ERROR(ExpectActivationScales("quant.a_scale", q.a_scale,
                                                q.mode, rows, k, device));
  TAILOR_RETURN_IF_ERROR(ExpectWeightScales(
      "quant.w_scale", q.w_scale, "w", q.mode, args.w.dims[0], n, k, device));
  if (args.c.dtype != DType::kF8E4M3) {
    return ExpectUnsetTensor("quant.c_scale", q.c_scale, "unless c is f8e4m3");
  }
  return ExpectBlockScaleRows("quant.c_scale", q.c_scale, ScaleBlocks(n / 2),
                              "N/2/128 = ceil(c.dims[1] / 128)", rows, "c",
                              device);
}

absl::Status ExpectNoExpertsQuant(const moe::ExpertsQuantization& quant) {
  TAILOR_RETURN_IF_ERROR(
      ExpectScaleModeAndBlock("quant.", quant.mode, quant.block_shape));
  constexpr absl::string_view kWhy = "without a scale mode (quant.mode)";
  TAILOR_RETURN_IF_ERROR(
      ExpectUnsetTensor("quant.w13_scale", quant.w13_scale, kWhy));
  TAILOR_RETURN_IF_ERROR(
      ExpectUnsetTensor("quant.w2_scale", quant.w2_scale, kWhy));
  if (quant.a1_scale.has_value() || quant.a2_scale.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(quant.a1_scale ? "quant.a1_scale" : "quant.a2_scale",
                     ": must be unset ", kWhy));
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
