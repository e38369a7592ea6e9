// backends/cuda/moe/fp8_generator.h — the sources of the FP8 (e4m3) MoE
// kernels on CUDA from their typed specs: the Hopper GEMM on sm_90a, the
// mma.sync GEMM and the Pack on sm_80+
// (templates/cuda/moe/fp8_{pack,grouped_gemm_sm90,grouped_gemm_sm80}.cuh).
//
// moe::GroupedGemm reaches the GEMM and moe::Experts both kernels
// (moe/fp8_launch.cc).
#ifndef TAILOR_BACKENDS_CUDA_MOE_FP8_GENERATOR_H_
#define TAILOR_BACKENDS_CUDA_MOE_FP8_GENERATOR_H_

#include "absl/status/statusor.h"
#include "core/engine.h"
#include "ops/moe/spec.h"

namespace tailor::cuda {

// MoeFp8Pack<H[, mode]>: bf16 hidden quantized in 1 x 128 groups (block
// mode), per row (per channel: per-token scales) or by a static scale (per
// tensor). InvalidArgument naming the field for another scale mode or dtype,
// or H % 128 != 0.
absl::StatusOr<tailor::internal::KernelSource> GenerateFp8Pack(
    const tailor::internal::MoePackSpec& spec);

// Kernel kHopper: MoeFp8GroupedGemmSm90<N, K, tile_rows, epilogue,
// swap_ab[, mode]>; kMatrixCore: MoeFp8GroupedGemmMma<N, K, tile_rows,
// epilogue[, mode]> (fp8_grouped_gemm_sm80.cuh, sm_80+). Every scale mode
// (block mode is the templates' default argument), K % 128 == 0 and N % 128
// == 0 (gated: N % 256 == 0), C bf16 or (silu_and_mul, block or per tensor)
// e4m3, tile_rows in [1, 128] (swap-AB: [1, 32]), no TMA store, cluster or
// pipeline checks. InvalidArgument naming the field otherwise.
absl::StatusOr<tailor::internal::KernelSource> GenerateFp8GroupedGemm(
    const tailor::internal::MoeGemmSpec& spec);

// ---- keys: the launches (moe/fp8_launch.cc) and warm-up (MoeLayerKernels)
// build them here ----------------------------------------------------------

// The quantizing Pack of bf16 hidden rows of H elements in `mode`.
tailor::internal::SpecKey Fp8PackKey(const tailor::internal::KeyTarget& target,
                                     int64_t hidden, moe::ScaleMode mode);

// The Hopper FP8 GEMM writing `c_dtype` (bf16; f8e4m3: the quantizing
// silu_and_mul epilogue) for plan tiles of `tile_rows` rows.
tailor::internal::SpecKey Fp8GemmKey(const tailor::internal::KeyTarget& target,
                                     DType c_dtype, int64_t n, int64_t k,
                                     int64_t tile_rows, moe::Epilogue epilogue,
                                     bool swap_ab, moe::ScaleMode mode);

// The portable (mma.sync, sm_80+) FP8 GEMM: as Fp8GemmKey, kernel
// kMatrixCore, no Hopper flags.
tailor::internal::SpecKey Fp8PortableGemmKey(
    const tailor::internal::KeyTarget& target, DType c_dtype, int64_t n,
    int64_t k, int64_t tile_rows, moe::Epilogue epilogue, moe::ScaleMode mode);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_MOE_FP8_GENERATOR_H_
