#include "ops/moe/checks.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "core/tensor_checks.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor::internal {

absl::Status ExpectOperand(absl::string_view name, const TensorRef& t, int rank,
                           DType dtype, Device device) {
  TAILOR_RETURN_IF_ERROR(ExpectTensor(name, t, rank, dtype));
  int64_t elements = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (__builtin_mul_overflow(elements, t.dims[i], &elements)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": element count of ", t.ShapeString(), " overflows int64"));
    }
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": must be contiguous (row-major), got ", t.ShapeString()));
  }
  if (!(t.device == device)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": must be on ", DeviceName(device),
                     " (the runtime's device), got ", DeviceName(t.device)));
  }
  return absl::OkStatus();
}

absl::Status ExpectDeviceAligned(absl::string_view name, const TensorRef& t,
                                 Device device) {
  constexpr uintptr_t kVectorBytes = 16;
  if (device.type != DeviceType::kCpu &&
      reinterpret_cast<uintptr_t>(t.data) % kVectorBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": data must be 16-byte aligned on ", DeviceName(device)));
  }
  return absl::OkStatus();
}

absl::Status ExpectFloatOperand(absl::string_view name, const TensorRef& t,
                                int rank, Device device) {
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": dtype must be bf16 or f32, got ", DTypeName(t.dtype)));
  }
  TAILOR_RETURN_IF_ERROR(ExpectOperand(name, t, rank, t.dtype, device));
  return ExpectDeviceAligned(name, t, device);
}

absl::StatusOr<plan::PlanParams> ResolvePolicy(const moe::RoutingPolicy& policy,
                                               int32_t default_tile_rows,
                                               int32_t max_tile_rows,
                                               absl::string_view prefix) {
  const int32_t tile_rows =
      policy.tile_rows == 0 ? default_tile_rows : policy.tile_rows;
  if (tile_rows < 1 || tile_rows > max_tile_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "policy.tile_rows: must be in [1, ", max_tile_rows,
                     "] (or 0: the backend's choice), got ", policy.tile_rows));
  }
  plan::PlanParams params{.tile_rows = tile_rows, .tail_policy = {}};
  switch (policy.tail) {
    case moe::TailPolicy::kNextPowerOfTwo:
      params.tail_policy = plan::BucketPolicy::NextPowerOfTwo();
      return params;
    case moe::TailPolicy::kExact:
      params.tail_policy = plan::BucketPolicy::Exact();
      return params;
    case moe::TailPolicy::kFullTile: {
      TAILOR_ASSIGN_OR_RETURN(params.tail_policy,
                              plan::BucketPolicy::MultipleOf(tile_rows));
      return params;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      prefix,
      "policy.tail: not a TailPolicy value: ", static_cast<int>(policy.tail)));
}

absl::Status ExpectDim(absl::string_view name, const TensorRef& t, int dim,
                       int64_t expected, absl::string_view what) {
  if (t.dims[dim] != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dims[", dim, "] must equal ", what, " (",
                     expected, "), got ", t.dims[dim]));
  }
  return absl::OkStatus();
}

absl::Status ExpectSameDType(absl::string_view name, const TensorRef& t,
                             absl::string_view other, DType dtype) {
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype must match ", other, " (", DTypeName(dtype),
                     "), got ", DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

absl::Status ExpectModelDim(absl::string_view name, int64_t value) {
  if (value < 1 || value > moe::kMaxModelDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": must be in [1, ", moe::kMaxModelDim,
                     "] (compiled into kernels), got ", value));
  }
  return absl::OkStatus();
}

absl::Status ExpectTopk(absl::string_view name, int64_t tokens, int64_t topk) {
  if (topk < 1 || topk > moe::kMaxTopk) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": k must be in [1, ", moe::kMaxTopk, "], got ", topk));
  }
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  if (tokens > kMaxIndex / topk) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": T * k = ", tokens, " * ", topk, " exceeds ",
                     kMaxIndex, " (row indices are int32)"));
  }
  return absl::OkStatus();
}

absl::Status ExpectDisjoint(absl::string_view name, const TensorRef& t,
                            absl::string_view other_name,
                            const TensorRef& other) {
  if (t.empty() || other.empty()) return absl::OkStatus();
  auto begin = [](const TensorRef& x) {
    return reinterpret_cast<uintptr_t>(x.data);
  };
  auto end = [&](const TensorRef& x) {
    return begin(x) + static_cast<uintptr_t>(x.numel()) * DTypeSize(x.dtype);
  };
  if (begin(t) < end(other) && begin(other) < end(t)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": must not overlap ", other_name, " in memory"));
  }
  return absl::OkStatus();
}

absl::Status ExpectExpertCount(absl::string_view name, int64_t experts) {
  if (experts < 1 || experts > moe::kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": must be in [1, ", moe::kMaxExperts, "], got ", experts));
  }
  return absl::OkStatus();
}

absl::Status ExpectTopkOfExperts(absl::string_view topk_name, int64_t topk,
                                 absl::string_view experts_name,
                                 int64_t experts) {
  if (topk > experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        topk_name, ": must be at most ", experts_name, " (", experts,
        "): a token is routed to k distinct experts, got ", topk));
  }
  return absl::OkStatus();
}

absl::Status ExpectExpertsRoutingAndOut(const moe::ExpertsArgs& args,
                                        Device dev, int64_t tokens,
                                        int64_t hidden) {
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("topk_ids", args.topk_ids, 2, DType::kI32, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("topk_ids", args.topk_ids, 0, tokens, "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("topk_weights", args.topk_weights, 2, DType::kF32, dev));
  TAILOR_RETURN_IF_ERROR(ExpectDim("topk_weights", args.topk_weights, 0, tokens,
                                   "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(ExpectDim("topk_weights", args.topk_weights, 1,
                                   args.topk_ids.dims[1],
                                   "k = topk_ids.dims[1]"));
  if (args.activation != moe::Activation::kSilu) {
    return absl::InvalidArgumentError(
        absl::StrCat("activation: only Activation::kSilu is supported, got ",
                     static_cast<int>(args.activation)));
  }
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("out", args.out, 2, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectSameDType("out", args.out, "hidden", args.hidden.dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 0, tokens, "T = hidden.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 1, hidden, "H = hidden.dims[1]"));
  // In place (out == hidden) is fine: Pack reads hidden before Combine writes.
  if (args.out.data != args.hidden.data) {
    TAILOR_RETURN_IF_ERROR(
        ExpectDisjoint("out", args.out, "hidden", args.hidden));
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
