// ops/moe/checks.h — argument checks shared by the moe:: op fronts.
//
// Each returns InvalidArgument with a message that starts with the argument's
// name and states the rule, e.g. "w: dims[2] must equal K = a.dims[1] (64), got
// 32". They only read shapes and metadata, never tensor contents.
#ifndef TAILOR_OPS_MOE_CHECKS_H_
#define TAILOR_OPS_MOE_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor_checks.h"
#include "plan/piecewise_plan.h"
#include "tailor/ops/moe.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// ValidateTensor, exactly `rank` dims, dtype `dtype`, contiguous, on
// `device` (the runtime's), and an element count that fits int64.
absl::Status ExpectOperand(absl::string_view name, const TensorRef& t, int rank,
                           DType dtype, Device device);

// On a GPU: data 16-byte aligned (the kernels move 16-byte vectors, TMA
// boxes start on 16 bytes).
absl::Status ExpectDeviceAligned(absl::string_view name, const TensorRef& t,
                                 Device device);

// ExpectOperand for an activation or weight: dtype bf16 or f32, and
// ExpectDeviceAligned.
absl::Status ExpectFloatOperand(absl::string_view name, const TensorRef& t,
                                int rank, Device device);

// The tile rows and tail policy of `policy`; a tile_rows of 0 resolves to
// `default_tile_rows` (the backend's choice), others must be in [1,
// max_tile_rows] (the backend's limit). InvalidArgument naming
// "policy.tile_rows" or "policy.tail" (prefixed by `prefix`, e.g.
// "limits.") for values out of range.
absl::StatusOr<plan::PlanParams> ResolvePolicy(const moe::RoutingPolicy& policy,
                                               int32_t default_tile_rows,
                                               int32_t max_tile_rows,
                                               absl::string_view prefix = "");

// t.dims[dim] == expected; `what` says where `expected` comes from, e.g.
// "K = a.dims[1]".
absl::Status ExpectDim(absl::string_view name, const TensorRef& t, int dim,
                       int64_t expected, absl::string_view what);

// t.dtype == `dtype` of the tensor named `other`.
absl::Status ExpectSameDType(absl::string_view name, const TensorRef& t,
                             absl::string_view other, DType dtype);

// A compiled-in model dim (H, I, N, K): in [1, moe::kMaxModelDim].
absl::Status ExpectModelDim(absl::string_view name, int64_t value);

// k: in [1, moe::kMaxTopk]; T * k must fit int32 (row indices).
absl::Status ExpectTopk(absl::string_view name, int64_t tokens, int64_t topk);

// The memory of contiguous tensors `t` and `other` does not intersect.
absl::Status ExpectDisjoint(absl::string_view name, const TensorRef& t,
                            absl::string_view other_name,
                            const TensorRef& other);

// E (local experts, or the expert_map length): in [1, moe::kMaxExperts].
absl::Status ExpectExpertCount(absl::string_view name, int64_t experts);

// A model's routing: every token picks k distinct experts of the model's E,
// so k <= E (besides ExpectTopk's range). `topk_name` and `experts_name`
// name the two in the message. The serving profile (warmup/profile.h)
// checks its moe sections with it.
absl::Status ExpectTopkOfExperts(absl::string_view topk_name, int64_t topk,
                                 absl::string_view experts_name,
                                 int64_t experts);

// Experts' topk_ids [T, k] i32, topk_weights [T, k] f32, activation and out
// [T, H] (dtype of hidden; in place on hidden, or disjoint from it).
absl::Status ExpectExpertsRoutingAndOut(const moe::ExpertsArgs& args,
                                        Device dev, int64_t tokens,
                                        int64_t hidden);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_CHECKS_H_
