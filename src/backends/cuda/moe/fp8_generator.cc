#include "backends/cuda/moe/fp8_generator.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::MoePackSpec;
using tailor::internal::SpecKey;

// Values of templates/cuda/moe/fp8_params.h and params.h (that header is
// device code; the generator only writes the numbers into the source).
constexpr int kBlock = 128;
constexpr int kSwapMaxRows = 32;
constexpr int kEpilogueSiluAndMulQuant = 2;

KernelSource Entry(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/cuda/", header, "\"\n",
          "TAILOR_CUDA_ENTRY(tailor_entry, (tailor::cuda::", kernel, "))\n"),
      .entry = "tailor_entry"};
}

absl::Status Invalid(absl::string_view field, absl::string_view rule,
                     int64_t got) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", rule, ", got ", got));
}

// The template argument of a scale mode: none for block mode (the
// templates' default, so block kernels keep their sources), else ", mode".
std::string ModeArgument(moe::ScaleMode mode) {
  return mode == moe::ScaleMode::kBlock
             ? ""
             : absl::StrCat(", ", static_cast<int>(mode));
}

// The flags and tile of the FP8 GEMMs (the mma.sync kernel has no flags).
absl::Status ExpectFp8GemmShape(const MoeGemmSpec& spec) {
  if (spec.tma_store || spec.cluster != 1 || spec.pipeline_checks) {
    return absl::InvalidArgumentError(
        "variant: the FP8 kernel has no TMA store, cluster or pipeline "
        "checks");
  }
  const bool gated = spec.epilogue == moe::Epilogue::kSiluAndMul;
  // Block mode's scale blocks; in every mode the kernels' 128-K stages and
  // 128-row W halves (mma.sync: 128-column quantized groups).
  if (spec.k % kBlock != 0) {
    return Invalid("k", "must be a multiple of 128 (block scales)", spec.k);
  }
  if (spec.n % (gated ? 2 * kBlock : kBlock) != 0) {
    return Invalid("n",
                   gated ? "must be a multiple of 256 (gate | up of whole "
                           "128 blocks)"
                         : "must be a multiple of 128 (block scales)",
                   spec.n);
  }
  if (spec.swap_ab && spec.tile_rows > kSwapMaxRows) {
    return Invalid("tile_rows", "swap-AB tiles have at most 32 rows",
                   spec.tile_rows);
  }
  const bool quantized_c = spec.dtype == DType::kF8E4M3;
  if (spec.dtype != DType::kBF16 && !quantized_c) {
    return Invalid("dtype (C)", "must be bf16 or f8e4m3",
                   static_cast<int>(spec.dtype));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KernelSource> GenerateFp8Pack(const MoePackSpec& spec) {
  if (spec.scale_mode != moe::ScaleMode::kBlock &&
      spec.scale_mode != moe::ScaleMode::kPerTensor &&
      spec.scale_mode != moe::ScaleMode::kPerChannel) {
    return Invalid("scale_mode",
                   "cuda's quantizing Pack is block (3), per channel (2, "
                   "per-token scales) or per tensor (1)",
                   static_cast<int>(spec.scale_mode));
  }
  if (spec.dtype != DType::kBF16) {
    return Invalid("dtype", "cuda's quantizing Pack reads bf16 (2)",
                   static_cast<int>(spec.dtype));
  }
  if (spec.hidden % kBlock != 0) {
    return Invalid("hidden", "must be a multiple of 128", spec.hidden);
  }
  return Entry("moe/fp8_pack.cuh",
               absl::StrCat("MoeFp8Pack<", spec.hidden,
                            ModeArgument(spec.scale_mode), ">"));
}

absl::StatusOr<KernelSource> GenerateFp8GroupedGemm(const MoeGemmSpec& spec) {
  if (spec.kernel != MoeGemmKernel::kHopper &&
      spec.kernel != MoeGemmKernel::kMatrixCore) {
    return Invalid("kernel",
                   "cuda's FP8 GEMMs are the mma.sync (1) and Hopper (2) "
                   "kernels",
                   static_cast<int>(spec.kernel));
  }
  TAILOR_RETURN_IF_ERROR(ExpectFp8GemmShape(spec));
  const int epilogue = spec.dtype == DType::kF8E4M3
                           ? kEpilogueSiluAndMulQuant
                           : static_cast<int>(spec.epilogue);
  if (spec.kernel == MoeGemmKernel::kMatrixCore) {
    return Entry("moe/fp8_grouped_gemm_sm80.cuh",
                 absl::StrCat("MoeFp8GroupedGemmMma<", spec.n, ", ", spec.k,
                              ", ", spec.tile_rows, ", ", epilogue,
                              ModeArgument(spec.scale_mode), ">"));
  }
  return Entry(
      "moe/fp8_grouped_gemm_sm90.cuh",
      absl::StrCat("MoeFp8GroupedGemmSm90<", spec.n, ", ", spec.k, ", ",
                   spec.tile_rows, ", ", epilogue, ", ", spec.swap_ab ? 1 : 0,
                   ModeArgument(spec.scale_mode), ">"));
}

SpecKey Fp8PackKey(const KeyTarget& target, int64_t hidden,
                   moe::ScaleMode mode) {
  return MoePackSpec{
      .dtype = DType::kBF16, .hidden = hidden, .scale_mode = mode}
      .ToKey(target);
}

SpecKey Fp8GemmKey(const KeyTarget& target, DType c_dtype, int64_t n, int64_t k,
                   int64_t tile_rows, moe::Epilogue epilogue, bool swap_ab,
                   moe::ScaleMode mode) {
  return MoeGemmSpec{.dtype = c_dtype,
                     .n = n,
                     .k = k,
                     .tile_rows = static_cast<int32_t>(tile_rows),
                     .epilogue = epilogue,
                     .kernel = MoeGemmKernel::kHopper,
                     .swap_ab = swap_ab,
                     .scale_mode = mode}
      .ToKey(target);
}

SpecKey Fp8PortableGemmKey(const KeyTarget& target, DType c_dtype, int64_t n,
                           int64_t k, int64_t tile_rows, moe::Epilogue epilogue,
                           moe::ScaleMode mode) {
  return MoeGemmSpec{.dtype = c_dtype,
                     .n = n,
                     .k = k,
                     .tile_rows = static_cast<int32_t>(tile_rows),
                     .epilogue = epilogue,
                     .kernel = MoeGemmKernel::kMatrixCore,
                     .scale_mode = mode}
      .ToKey(target);
}

}  // namespace tailor::cuda
