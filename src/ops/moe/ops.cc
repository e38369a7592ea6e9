// The executor fronts: Pack, GroupedGemm, Combine and their composition
// Experts. Each validates every argument, then hands pointers to
// ops/moe/kernels.h.
#include <limits>

#include "absl/strings/str_cat.h"
#include "api/internals.h"
#include "ops/moe/checks.h"
#include "ops/moe/kernels.h"
#include "ops/moe/quant_checks.h"
#include "ops/moe/workspace.h"
#include "tailor/ops/moe.h"
#include "tailor/status.h"

namespace tailor {
namespace moe {

using internal::ExpectDim;
using internal::ExpectDisjoint;
using internal::ExpectFloatOperand;
using internal::ExpectModelDim;
using internal::ExpectOperand;
using internal::ExpectSameDType;
using internal::MoeWorkspace;

namespace {

absl::StatusOr<const MoeWorkspace*> RoutedWorkspace(const Workspace& ws,
                                                    Device device) {
  if (!ws.routed()) {
    return absl::FailedPreconditionError(
        "ws: not routed; call moe::Route or moe::PlanRows first");
  }
  if (!(ws.device() == device)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ws: routed on ", DeviceName(ws.device()),
                     ", not on the runtime's ", DeviceName(device)));
  }
  return internal::WorkspaceImplOf(ws);
}

// Entries of the [R] permutation must name assignments in [0, limit).
absl::Status ValidatePermutation(const TensorRef& permutation, int64_t limit) {
  const int32_t* entries = permutation.as<int32_t>();
  for (int64_t r = 0; r < permutation.dims[0]; ++r) {
    if (entries[r] < 0 || entries[r] >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("permutation[", r, "]: assignment ", entries[r],
                       " is outside [0, ", limit, ") (T * topk)"));
    }
  }
  return absl::OkStatus();
}

// Entries of the [T, k] inverse must be rows in [-1, rows).
absl::Status ValidateInverse(const TensorRef& inverse, int64_t rows) {
  const int32_t* entries = inverse.as<int32_t>();
  const int64_t k = inverse.dims[1];
  for (int64_t i = 0; i < inverse.numel(); ++i) {
    if (entries[i] < -1 || entries[i] >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("inverse[", i / k, ",", i % k, "]: row ", entries[i],
                       " is outside [-1, ", rows, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateEpilogue(Epilogue epilogue, int64_t n) {
  if (epilogue != Epilogue::kNone && epilogue != Epilogue::kSiluAndMul) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epilogue: not an Epilogue value: ", static_cast<int>(epilogue)));
  }
  if (epilogue == Epilogue::kSiluAndMul && n % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("w: dims[1] (N) must be even for Epilogue::kSiluAndMul "
                     "(gate | up), got ",
                     n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Pack(Runtime& runtime, const PackArgs& args) {
  TAILOR_ASSIGN_OR_RETURN(internal::MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.pack"));
  const Device dev = runtime.device();
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("hidden", args.hidden, 2, dev));
  const int64_t tokens = args.hidden.dims[0];
  const int64_t hidden_dim = args.hidden.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("hidden: dims[1] (H)", hidden_dim));
  TAILOR_RETURN_IF_ERROR(internal::ExpectTopk("topk", tokens, args.topk));
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("permutation", args.permutation, 1, DType::kI32, dev));
  const int64_t rows = args.permutation.dims[0];
  if (rows > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("permutation: dims[0] must be <= 2147483647, got ", rows));
  }
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("a", args.a, 2, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectSameDType("a", args.a, "hidden", args.hidden.dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("a", args.a, 0, rows, "R = permutation.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("a", args.a, 1, hidden_dim, "H = hidden.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectDisjoint("a", args.a, "hidden", args.hidden));
  if (dev.type == DeviceType::kCpu) {  // device entries are checked there
    TAILOR_RETURN_IF_ERROR(
        ValidatePermutation(args.permutation, tokens * args.topk));
  }
  return kernels->Pack(internal::EngineOf(runtime),
                       {.dtype = args.hidden.dtype,
                        .hidden_dim = hidden_dim,
                        .rows = rows,
                        .tokens = tokens,
                        .topk = args.topk,
                        .hidden = args.hidden.data,
                        .permutation = args.permutation.as<int32_t>(),
                        .a = args.a.data,
                        .stream = args.stream});
}

namespace {

// The operands a [R, K], w [E, N, K] and c of a GroupedGemm (a and w e4m3
// with a scale mode, else bf16 | f32), their shapes against the workspace
// and the epilogue; sets n and k.
absl::Status ValidateGemmOperands(const GroupedGemmArgs& args,
                                  const MoeWorkspace& w, Device dev, int64_t& n,
                                  int64_t& k) {
  const bool fp8 = args.quant.mode != ScaleMode::kNone;
  TAILOR_RETURN_IF_ERROR(fp8 ? internal::ExpectFp8Operand("a", args.a, 2, dev)
                             : ExpectFloatOperand("a", args.a, 2, dev));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("a", args.a, 0, w.num_rows, "R = ws.num_rows()"));
  k = args.a.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("a: dims[1] (K)", k));
  TAILOR_RETURN_IF_ERROR(fp8 ? internal::ExpectFp8Operand("w", args.w, 3, dev)
                             : ExpectFloatOperand("w", args.w, 3, dev));
  TAILOR_RETURN_IF_ERROR(ExpectSameDType("w", args.w, "a", args.a.dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("w", args.w, 0, w.num_experts, "E = ws.num_experts()"));
  TAILOR_RETURN_IF_ERROR(ExpectDim("w", args.w, 2, k, "K = a.dims[1]"));
  n = args.w.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("w: dims[1] (N)", n));
  TAILOR_RETURN_IF_ERROR(ValidateEpilogue(args.epilogue, n));
  const bool gated = args.epilogue == Epilogue::kSiluAndMul;
  if (fp8) {
    TAILOR_RETURN_IF_ERROR(internal::ExpectFp8GemmOutput(args, dev));
  } else {
    TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("c", args.c, 2, dev));
    TAILOR_RETURN_IF_ERROR(ExpectSameDType("c", args.c, "a", args.a.dtype));
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("c", args.c, 0, w.num_rows, "R = ws.num_rows()"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("c", args.c, 1, gated ? n / 2 : n,
                gated ? "N / 2 = w.dims[1] / 2" : "N = w.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectDisjoint("c", args.c, "a", args.a));
  return ExpectDisjoint("c", args.c, "w", args.w);
}

}  // namespace

absl::Status GroupedGemm(Runtime& runtime, const GroupedGemmArgs& args,
                         const Workspace& ws) {
  TAILOR_ASSIGN_OR_RETURN(internal::MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.grouped_gemm"));
  const Device dev = runtime.device();
  TAILOR_ASSIGN_OR_RETURN(const MoeWorkspace* w, RoutedWorkspace(ws, dev));
  TAILOR_RETURN_IF_ERROR(internal::ExpectGemmQuantMode(args.quant, *kernels));
  int64_t n = 0, k = 0;
  TAILOR_RETURN_IF_ERROR(ValidateGemmOperands(args, *w, dev, n, k));
  TAILOR_RETURN_IF_ERROR(internal::ExpectGemmScales(args, w->num_rows, dev));
  // Block scales' row stride: their dims[1] (>= R).
  const bool block = args.quant.mode == ScaleMode::kBlock;
  const bool quantized_c = args.c.dtype == DType::kF8E4M3;
  internal::GemmConfig config;
  TAILOR_RETURN_IF_ERROR(kernels->GroupedGemm(
      internal::EngineOf(runtime),
      {.dtype = args.c.dtype,
       .n = n,
       .k = k,
       .tile_rows = w->tile_rows,
       .epilogue = args.epilogue,
       .plan = internal::PlanRefOf(*w),
       .a = args.a.data,
       .w = args.w.data,
       .c = args.c.data,
       .rows = args.a.dims[0],
       .experts = args.w.dims[0],
       .stream = args.stream,
       .config = &config,
       .scale_mode = args.quant.mode,
       .a_scales = args.quant.a_scale.as<float>(),
       .a_scale_rows = block ? args.quant.a_scale.dims[1] : 0,
       .w_scales = args.quant.w_scale.as<float>(),
       .c_scales = args.quant.c_scale.as<float>(),
       .c_scale_rows = quantized_c ? args.quant.c_scale.dims[1] : 0}));
  w->RecordGemm(config);
  return absl::OkStatus();
}

absl::Status Combine(Runtime& runtime, const CombineArgs& args) {
  TAILOR_ASSIGN_OR_RETURN(internal::MoeKernels * kernels,
                          internal::MoeKernelsOf(runtime, "moe.combine"));
  const Device dev = runtime.device();
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("c", args.c, 2, dev));
  const int64_t rows = args.c.dims[0];
  const int64_t hidden_dim = args.c.dims[1];
  TAILOR_RETURN_IF_ERROR(ExpectModelDim("c: dims[1] (H)", hidden_dim));
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("topk_weights", args.topk_weights, 2, DType::kF32, dev));
  const int64_t tokens = args.topk_weights.dims[0];
  const int64_t k = args.topk_weights.dims[1];
  TAILOR_RETURN_IF_ERROR(internal::ExpectTopk("topk_weights", tokens, k));
  TAILOR_RETURN_IF_ERROR(
      ExpectOperand("inverse", args.inverse, 2, DType::kI32, dev));
  TAILOR_RETURN_IF_ERROR(ExpectDim("inverse", args.inverse, 0, tokens,
                                   "T = topk_weights.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("inverse", args.inverse, 1, k, "k = topk_weights.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectFloatOperand("out", args.out, 2, dev));
  TAILOR_RETURN_IF_ERROR(ExpectSameDType("out", args.out, "c", args.c.dtype));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 0, tokens, "T = topk_weights.dims[0]"));
  TAILOR_RETURN_IF_ERROR(
      ExpectDim("out", args.out, 1, hidden_dim, "H = c.dims[1]"));
  TAILOR_RETURN_IF_ERROR(ExpectDisjoint("out", args.out, "c", args.c));
  if (dev.type == DeviceType::kCpu) {  // device entries are checked there
    TAILOR_RETURN_IF_ERROR(ValidateInverse(args.inverse, rows));
  }
  return kernels->Combine(internal::EngineOf(runtime),
                          {.dtype = args.c.dtype,
                           .hidden_dim = hidden_dim,
                           .tokens = tokens,
                           .topk = k,
                           .rows = rows,
                           .c = args.c.data,
                           .weights = args.topk_weights.as<float>(),
                           .inverse = args.inverse.as<int32_t>(),
                           .out = args.out.data,
                           .stream = args.stream});
}

}  // namespace moe
}  // namespace tailor
