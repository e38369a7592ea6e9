#include "ops/moe/spec.h"

#include "absl/strings/str_cat.h"
#include "core/spec_fields.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// The grouped GEMM's variant: the epilogue in the low byte, then the
// Hopper kernel's flags.
constexpr uint32_t kEpilogueMask = 0xffu;
constexpr uint32_t kGemmPipelineChecks = 1u << 8;
constexpr uint32_t kGemmTmaStore = 1u << 9;
constexpr uint32_t kGemmSwapAB = 1u << 10;
constexpr uint32_t kGemmPingPong = 1u << 13;
constexpr uint32_t kGemmFlags =
    kGemmPipelineChecks | kGemmTmaStore | kGemmSwapAB | kGemmPingPong;
// FP8 GEMMs: the scale mode in bits 11-12 (0 for every bf16 / f32 key).
constexpr int kGemmScaleShift = 11;
constexpr uint32_t kGemmScaleMask = 3u << kGemmScaleShift;
constexpr int kLastScaleMode = static_cast<int>(moe::ScaleMode::kBlock);

absl::Status ExpectDtype(absl::string_view field, DType dtype) {
  return ExpectSpecRange(field, static_cast<int>(dtype),
                         static_cast<int>(DType::kF32),
                         static_cast<int>(DType::kF64));
}

absl::Status ExpectSame(absl::string_view field, DType got, DType want) {
  if (got == want) return absl::OkStatus();
  return SpecFieldError(field, absl::StrCat("must be ", DTypeName(want)),
                        static_cast<int>(got));
}

// A quantized output or activation: f32, bf16 or (`allow_fp8`) f8e4m3.
absl::Status ExpectQuantOuterDtype(absl::string_view field, DType dtype,
                                   bool allow_fp8) {
  if (dtype == DType::kF32 || dtype == DType::kBF16 ||
      (allow_fp8 && dtype == DType::kF8E4M3)) {
    return absl::OkStatus();
  }
  return SpecFieldError(
      field, allow_fp8 ? "must be f32, bf16 or f8e4m3" : "must be f32 or bf16",
      static_cast<int>(dtype));
}

// The GEMM kernels `backend` has (see spec.h).
absl::Status ExpectGemmKernel(BackendKind backend, int32_t kernel) {
  const int32_t most = backend == BackendKind::kCuda  ? 2
                       : backend == BackendKind::kHip ? 1
                                                      : 0;
  return ExpectSpecRange(
      absl::StrCat("kernel (tile.n) on ", BackendName(backend)), kernel, 0,
      most);
}

// An FP8 key's kernel and dtypes: the CPU's kernel or CUDA's kHopper or
// kMatrixCore, f8e4m3 operands and an f32, bf16 or f8e4m3 C.
absl::Status ExpectFp8GemmFields(const SpecKey& key, MoeGemmKernel kernel,
                                 moe::ScaleMode mode) {
  const bool has_fp8 = key.backend == BackendKind::kCpu ||
                       (key.backend == BackendKind::kCuda &&
                        (kernel == MoeGemmKernel::kHopper ||
                         kernel == MoeGemmKernel::kMatrixCore));
  if (!has_fp8) {
    return SpecFieldError("scale_mode (variant bits 11-12)",
                          "FP8 kernels are the cpu's and cuda's Hopper and "
                          "mma.sync kernels",
                          static_cast<int>(mode));
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectSame("dtype (dtypes[0], A)", key.dtypes[0], DType::kF8E4M3));
  return ExpectQuantOuterDtype("dtypes[3] (C)", key.dtypes[3], true);
}

// Hopper's flags and cluster, after the kernel is known to be kHopper.
absl::Status DecodeHopperFields(const SpecKey& key, MoeGemmSpec& spec) {
  spec.pipeline_checks = (key.variant & kGemmPipelineChecks) != 0;
  spec.tma_store = (key.variant & kGemmTmaStore) != 0;
  spec.swap_ab = (key.variant & kGemmSwapAB) != 0;
  const int32_t cluster = key.tile.cluster;
  if (cluster != 0 && cluster != 2 && cluster != 4) {
    return SpecFieldError("cluster (tile.cluster)", "must be 0 (none), 2 or 4",
                          cluster);
  }
  spec.cluster = cluster == 0 ? 1 : cluster;
  if ((key.variant & kGemmPingPong) == 0) return absl::OkStatus();
  // The ping-pong kernel splits 128-row CTA tiles between its consumers.
  if (spec.quantized() || spec.swap_ab || spec.cluster != 1 ||
      spec.tile_rows <= 64) {
    return SpecFieldError("variant",
                          "ping-pong consumers (bit 13) need tile_rows > 64, "
                          "no swap-AB, no cluster and no scale mode",
                          key.variant);
  }
  spec.consumers = MoeGemmConsumers::kPingPong;
  return absl::OkStatus();
}

}  // namespace

// ---- moe.route --------------------------------------------------------------

SpecKey MoeRouteSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kMoeRoute);
  key.variant = static_cast<uint32_t>(kernel);
  if (kernel == MoeRouteKernel::kScatter) key.dims = {scatter_warps};
  return key;
}

absl::StatusOr<MoeRouteSpec> MoeRouteSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kMoeRoute));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("kernel (variant)", key.variant, 0, 2));
  MoeRouteSpec spec = {.kernel = static_cast<MoeRouteKernel>(key.variant)};
  const bool scatter = spec.kernel == MoeRouteKernel::kScatter;
  TAILOR_RETURN_IF_ERROR(ExpectUnusedSpecFieldsZero(
      key, {.dims = scatter ? 1 : 0, .variant = true}));
  if (scatter) {
    TAILOR_RETURN_IF_ERROR(
        ExpectSpecRange("scatter_warps (dims[0])", key.dims[0], 1, 32));
    spec.scatter_warps = static_cast<int32_t>(key.dims[0]);
  }
  return spec;
}

// ---- moe.pack ---------------------------------------------------------------

SpecKey MoePackSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kMoePack);
  key.dtypes = {dtype};
  key.dims = {hidden};
  if (scale_mode != moe::ScaleMode::kNone) {
    key.dtypes[1] = DType::kF8E4M3;
    key.variant = static_cast<uint32_t>(scale_mode);
  }
  return key;
}

absl::StatusOr<MoePackSpec> MoePackSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kMoePack));
  const bool quantizing = key.variant != 0;
  TAILOR_RETURN_IF_ERROR(ExpectUnusedSpecFieldsZero(
      key, {.dtypes = quantizing ? 2 : 1, .dims = 1, .variant = true}));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("scale_mode (variant)", key.variant, 0, kLastScaleMode));
  if (quantizing) {
    TAILOR_RETURN_IF_ERROR(
        ExpectQuantOuterDtype("dtype (dtypes[0])", key.dtypes[0], false));
    TAILOR_RETURN_IF_ERROR(
        ExpectSame("dtypes[1] (a)", key.dtypes[1], DType::kF8E4M3));
  } else {
    TAILOR_RETURN_IF_ERROR(ExpectDtype("dtype (dtypes[0])", key.dtypes[0]));
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("hidden (dims[0])", key.dims[0], 1, int64_t{1} << 30));
  return MoePackSpec{.dtype = key.dtypes[0],
                     .hidden = key.dims[0],
                     .scale_mode = static_cast<moe::ScaleMode>(key.variant)};
}

// ---- moe.grouped_gemm -------------------------------------------------------

SpecKey MoeGemmSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kMoeGroupedGemm);
  key.dtypes = {operand_dtype(), operand_dtype(), DType::kF32};
  if (quantized()) key.dtypes[3] = dtype;
  key.dims = {n, k};
  key.tile.m = tile_rows;
  key.tile.n = static_cast<int32_t>(kernel);
  key.tail_class = tail_class;
  key.variant = static_cast<uint32_t>(epilogue) |
                (pipeline_checks ? kGemmPipelineChecks : 0u) |
                (tma_store ? kGemmTmaStore : 0u) |
                (swap_ab ? kGemmSwapAB : 0u) |
                static_cast<uint32_t>(scale_mode) << kGemmScaleShift |
                (consumers == MoeGemmConsumers::kPingPong ? kGemmPingPong : 0u);
  if (cluster > 1) key.tile.cluster = cluster;
  return key;
}

absl::StatusOr<MoeGemmSpec> MoeGemmSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kMoeGroupedGemm));
  TAILOR_RETURN_IF_ERROR(ExpectGemmKernel(key.backend, key.tile.n));
  const auto kernel = static_cast<MoeGemmKernel>(key.tile.n);
  const bool hopper = kernel == MoeGemmKernel::kHopper;
  const auto scale_mode = static_cast<moe::ScaleMode>(
      (key.variant & kGemmScaleMask) >> kGemmScaleShift);
  const bool quantized = scale_mode != moe::ScaleMode::kNone;
  TAILOR_RETURN_IF_ERROR(ExpectUnusedSpecFieldsZero(
      key, {.dtypes = quantized ? 4 : 3,
            .dims = 2,
            .tail_class = key.backend == BackendKind::kCpu,
            .tile_m = true,
            .tile_n = true,
            .tile_cluster = hopper,
            .variant = true}));
  if (quantized) {
    TAILOR_RETURN_IF_ERROR(ExpectFp8GemmFields(key, kernel, scale_mode));
  } else {
    TAILOR_RETURN_IF_ERROR(ExpectDtype("dtype (dtypes[0])", key.dtypes[0]));
  }
  TAILOR_RETURN_IF_ERROR(
      ExpectSame("dtypes[1] (W)", key.dtypes[1], key.dtypes[0]));
  TAILOR_RETURN_IF_ERROR(
      ExpectSame("dtypes[2] (accumulator)", key.dtypes[2], DType::kF32));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("n (dims[0])", key.dims[0], 1, int64_t{1} << 30));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("k (dims[1])", key.dims[1], 1, int64_t{1} << 30));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("tile_rows (tile.m)", key.tile.m, 1, moe::kMaxTileRows));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("tail_class", key.tail_class, 0, moe::kMaxTileRows));
  const uint32_t flags = key.variant & ~kEpilogueMask & ~kGemmScaleMask;
  if ((flags & ~kGemmFlags) != 0 || (!hopper && flags != 0)) {
    return SpecFieldError(
        "variant", "flags (bits 8-10, 13) belong to the Hopper kernel only",
        key.variant);
  }
  TAILOR_RETURN_IF_ERROR(ExpectSpecRange("epilogue (variant & 0xff)",
                                         key.variant & kEpilogueMask, 0, 1));
  MoeGemmSpec spec = {
      .dtype = quantized ? key.dtypes[3] : key.dtypes[0],
      .n = key.dims[0],
      .k = key.dims[1],
      .tile_rows = key.tile.m,
      .tail_class = key.tail_class,
      .epilogue = static_cast<moe::Epilogue>(key.variant & kEpilogueMask),
      .kernel = kernel,
      .scale_mode = scale_mode};
  if (hopper) TAILOR_RETURN_IF_ERROR(DecodeHopperFields(key, spec));
  // A quantized C: block mode's epilogue; on cuda also per tensor's (a
  // static output scale, moe::Experts on a device).
  const bool static_quant = scale_mode == moe::ScaleMode::kPerTensor &&
                            key.backend == BackendKind::kCuda;
  if (spec.dtype == DType::kF8E4M3 &&
      ((scale_mode != moe::ScaleMode::kBlock && !static_quant) ||
       spec.epilogue != moe::Epilogue::kSiluAndMul)) {
    return SpecFieldError(
        "dtypes[3] (C)",
        "f8e4m3 only with silu_and_mul, in block mode (cuda: or per tensor)",
        static_cast<int>(spec.dtype));
  }
  return spec;
}

// ---- moe.combine ------------------------------------------------------------

SpecKey MoeCombineSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kMoeCombine);
  key.dtypes = {dtype, DType::kF32, dtype};
  key.dims = {hidden, topk};
  return key;
}

absl::StatusOr<MoeCombineSpec> MoeCombineSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kMoeCombine));
  TAILOR_RETURN_IF_ERROR(
      ExpectUnusedSpecFieldsZero(key, {.dtypes = 3, .dims = 2}));
  TAILOR_RETURN_IF_ERROR(ExpectDtype("dtype (dtypes[0])", key.dtypes[0]));
  TAILOR_RETURN_IF_ERROR(
      ExpectSame("dtypes[1] (weights)", key.dtypes[1], DType::kF32));
  TAILOR_RETURN_IF_ERROR(
      ExpectSame("dtypes[2] (out)", key.dtypes[2], key.dtypes[0]));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("hidden (dims[0])", key.dims[0], 1, int64_t{1} << 30));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("topk (dims[1])", key.dims[1], 1, 1024));
  return MoeCombineSpec{
      .dtype = key.dtypes[0], .hidden = key.dims[0], .topk = key.dims[1]};
}

}  // namespace tailor::internal
