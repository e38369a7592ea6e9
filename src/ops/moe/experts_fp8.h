// ops/moe/experts_fp8.h — moe::Experts with FP8 (e4m3) weights: the
// quantizing Pack, the FP8 grouped GEMMs and Combine (see
// ExpertsQuantization in tailor/ops/moe.h).
#ifndef TAILOR_OPS_MOE_EXPERTS_FP8_H_
#define TAILOR_OPS_MOE_EXPERTS_FP8_H_

#include "absl/status/status.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"

namespace tailor::internal {

// moe::Experts for args.quant.mode != kNone: validates every argument
// (named InvalidArgument), then Route -> quantizing Pack -> gate|up GEMM
// (block mode: its silu_and_mul output quantized in 1 x 128 groups; per
// tensor: a requantizing Pack over its f32 output, on a device the epilogue
// by a2_scale; per channel: its output in the activation dtype, then a
// per-token requantizing Pack, one launch more) -> down GEMM -> Combine.
// On a device workspace: every mode, bf16 hidden, the intermediates in its
// reserved buffers, whose sizes are the bf16 path's (FailedPrecondition
// when they do not fit). Per channel that holds the bf16 gate|up rows too,
// in the hidden rows after the e4m3 input: H > 2 * I on a workspace reserved
// for this H (MoePerTokenFp8Rows), else FailedPrecondition naming the rule
// and the numbers before Route writes anything. The next step, a per-channel
// mode needing no extra room: the gate|up epilogue reduces each row's amax
// atomically and the down GEMM's loader quantizes (no bf16 rows).
// Unimplemented on backends without FP8 kernels.
absl::Status Fp8Experts(Runtime& runtime, const moe::ExpertsArgs& args,
                        moe::Workspace& ws);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_EXPERTS_FP8_H_
