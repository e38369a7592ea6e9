// ops/moe/quant_checks.h — argument checks of the FP8 (e4m3) MoE fronts:
// operand dtypes, scale-tensor shapes per scale mode, the block shape.
//
// Each returns InvalidArgument naming the argument and the rule, e.g.
// "quant.w13_scale: dims[1] must equal 2I/128 = ceil(w13.dims[1] / 128)
// (4), got 3". They read shapes and metadata only, never tensor contents.
#ifndef TAILOR_OPS_MOE_QUANT_CHECKS_H_
#define TAILOR_OPS_MOE_QUANT_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ops/moe/kernels.h"
#include "tailor/ops/moe.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// ceil(x / 128): scale blocks along a dim of x elements.
inline int64_t ScaleBlocks(int64_t x) { return (x + 127) / 128; }

// The e4m3 operand `name`: f8e4m3, `rank` dims, contiguous, on `device`,
// and there 16-byte aligned (TMA loads it, or the epilogue stores 8-byte
// vectors of it).
absl::Status ExpectFp8Operand(absl::string_view name, const TensorRef& t,
                              int rank, Device device);

// `mode` is a ScaleMode value, and `block_shape` is [128, 128] in block
// mode (the names are prefixed by `prefix`, e.g. "quant.").
absl::Status ExpectScaleModeAndBlock(absl::string_view prefix,
                                     moe::ScaleMode mode,
                                     const moe::BlockShape& block_shape);

// The f32 scale tensor `name` of exactly `dims` (`what` names each dim's
// rule, e.g. "E = w13.dims[0]"), contiguous, on `device`.
struct ScaleDim {
  int64_t size = 0;
  absl::string_view what;
};
absl::Status ExpectScales(absl::string_view name, const TensorRef& t,
                          std::initializer_list<ScaleDim> dims, Device device);

// A tensor that must be left unset (empty view) in this mode.
absl::Status ExpectUnsetTensor(absl::string_view name, const TensorRef& t,
                               absl::string_view why);

// The weight scales of `mode` for W [E, N, K] named `w` (the scale named
// `scale`): [E], [E, N] or [E, N/128, K/128].
absl::Status ExpectWeightScales(absl::string_view scale, const TensorRef& t,
                                absl::string_view w, moe::ScaleMode mode,
                                int64_t experts, int64_t n, int64_t k,
                                Device device);

// ---- GroupedGemm -------------------------------------------------------------
// quant.mode and quant.block_shape, and (a mode set) that `kernels` runs it.
absl::Status ExpectGemmQuantMode(const moe::GemmQuantization& quant,
                                 const MoeKernels& kernels);
// c of an FP8 GroupedGemm: bf16 | f32, or f8e4m3 (block mode, kSiluAndMul).
absl::Status ExpectFp8GemmOutput(const moe::GroupedGemmArgs& args,
                                 Device device);
// The scale tensors of args.quant (all unset without a mode) against a, w
// and c, whose shapes are checked; K a multiple of 128 in block mode.
absl::Status ExpectGemmScales(const moe::GroupedGemmArgs& args, int64_t rows,
                              Device device);

// ---- Experts ------------------------------------------------------------------
// A bf16 / f32 Experts (quant.mode kNone): every quant tensor unset and the
// block shape left at its default.
absl::Status ExpectNoExpertsQuant(const moe::ExpertsQuantization& quant);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_QUANT_CHECKS_H_
