// bench/fp8/moe_fp8_kernels.cu — the FP8 MoE kernels of the GPU harness,
// compiled ahead of time with nvcc (sm_90a cubin) instead of the runtime's
// NVRTC: runtime N and K (kMoeRuntimeDim), one kernel per tile shape and
// epilogue. moe_fp8_host.cc loads the cubin and launches them.
#include "templates/cuda/moe/fp8_grouped_gemm_sm90.cuh"
#include "templates/cuda/moe/fp8_pack.cuh"

#define FP8_GEMM(NAME, ROWS, EPILOGUE, SWAP)                              \
  TAILOR_CUDA_ENTRY(NAME, (tailor::cuda::MoeFp8GroupedGemmSm90<           \
                              0, 0, ROWS, tailor::cuda::EPILOGUE, SWAP>))

#define FP8_GEMMS(SUFFIX, EPILOGUE)                          \
  FP8_GEMM(tailor_fp8_gemm_128_##SUFFIX, 128, EPILOGUE, 0) \
  FP8_GEMM(tailor_fp8_gemm_64_##SUFFIX, 64, EPILOGUE, 0)   \
  FP8_GEMM(tailor_fp8_gemm_s32_##SUFFIX, 32, EPILOGUE, 1)  \
  FP8_GEMM(tailor_fp8_gemm_s16_##SUFFIX, 16, EPILOGUE, 1)  \
  FP8_GEMM(tailor_fp8_gemm_s8_##SUFFIX, 8, EPILOGUE, 1)

FP8_GEMMS(plain, kMoeEpilogueNone)
FP8_GEMMS(silu, kMoeEpilogueSiluAndMul)
FP8_GEMMS(quant, kMoeEpilogueSiluAndMulQuant)

TAILOR_CUDA_ENTRY(tailor_fp8_pack, (tailor::cuda::MoeFp8Pack<0>))

// The A/B of the consumers' waves in turns (kOrderedWaves; by default on for
// the 64-row tile only): the 128-row tile with turns, the 64-row one without.
#define FP8_GEMM_WAVES(NAME, ROWS, EPILOGUE, TURNS)                          \
  TAILOR_CUDA_ENTRY(NAME, (tailor::cuda::MoeFp8GroupedGemmSm90<              \
                              0, 0, ROWS, tailor::cuda::EPILOGUE, 0,         \
                              tailor::cuda::kMoeFp8BlockScaled, TURNS>))
FP8_GEMM_WAVES(tailor_fp8_gemm_128t_plain, 128, kMoeEpilogueNone, true)
FP8_GEMM_WAVES(tailor_fp8_gemm_128t_silu, 128, kMoeEpilogueSiluAndMul, true)
FP8_GEMM_WAVES(tailor_fp8_gemm_128t_quant, 128, kMoeEpilogueSiluAndMulQuant, true)
FP8_GEMM_WAVES(tailor_fp8_gemm_64u_plain, 64, kMoeEpilogueNone, false)
FP8_GEMM_WAVES(tailor_fp8_gemm_64u_silu, 64, kMoeEpilogueSiluAndMul, false)
FP8_GEMM_WAVES(tailor_fp8_gemm_64u_quant, 64, kMoeEpilogueSiluAndMulQuant, false)
