// bench/attention_gpu/kernels.cu — the Hopper ragged-attention kernels the
// development library (dev_api.h) runs, instantiated from the templates the
// library's JIT would compile (templates/cuda/attention/prefill_sm90.cuh,
// prefill_merge.cuh), one entry per variant, and a table to find them.
//
// Built by scripts/build-attention-dev with nvcc for sm_90a; with
// -DTAILOR_PIPELINE_CHECKS=1 (the checked library) only the variants of
// TAILOR_ATTENTION_DEV_FEW are built.
#include "bench/attention_gpu/kernel_table.h"
#include "templates/cuda/attention/prefill_merge.cuh"
#include "templates/cuda/attention/prefill_sm90.cuh"

namespace tc = ::tailor::cuda;

#define TAD_PREFILL(NAME, TYPE, D, PACK, PAGE) \
  TAILOR_CUDA_ENTRY(NAME, (tc::PrefillSm90Kernel<tc::Half16::TYPE, D, PACK, PAGE>))
#define TAD_MERGE(NAME, TYPE, D) \
  TAILOR_CUDA_ENTRY(NAME, (tc::PrefillMergeKernel<tc::Half16::TYPE, D>))

// dtype codes: 0 bf16, 1 f16 (TadDType).
#define TAD_VARIANTS_FEW(X)                      \
  X(tad_prefill_bf16_d128_p4_pg16, kBf16, 0, 128, 4, 16)  \
  X(tad_prefill_bf16_d128_p8_pg16, kBf16, 0, 128, 8, 16)

#ifndef TAILOR_ATTENTION_DEV_FEW
#define TAD_VARIANTS(X)                                     \
  TAD_VARIANTS_FEW(X)                                       \
  X(tad_prefill_bf16_d128_p1_pg16, kBf16, 0, 128, 1, 16)    \
  X(tad_prefill_bf16_d128_p2_pg16, kBf16, 0, 128, 2, 16)    \
  X(tad_prefill_bf16_d128_p16_pg16, kBf16, 0, 128, 16, 16)  \
  X(tad_prefill_bf16_d128_p4_pg8, kBf16, 0, 128, 4, 8)      \
  X(tad_prefill_bf16_d128_p4_pg32, kBf16, 0, 128, 4, 32)    \
  X(tad_prefill_bf16_d128_p4_pg64, kBf16, 0, 128, 4, 64)    \
  X(tad_prefill_bf16_d128_p4_pg128, kBf16, 0, 128, 4, 128)  \
  X(tad_prefill_bf16_d128_p4_pg256, kBf16, 0, 128, 4, 256)  \
  X(tad_prefill_f16_d128_p4_pg16, kF16, 1, 128, 4, 16)      \
  X(tad_prefill_f16_d128_p8_pg16, kF16, 1, 128, 8, 16)      \
  X(tad_prefill_bf16_d64_p4_pg16, kBf16, 0, 64, 4, 16)      \
  X(tad_prefill_bf16_d64_p8_pg16, kBf16, 0, 64, 8, 16)      \
  X(tad_prefill_bf16_d256_p4_pg16, kBf16, 0, 256, 4, 16)    \
  X(tad_prefill_bf16_d256_p8_pg16, kBf16, 0, 256, 8, 16)
#define TAD_MERGES(X)                       \
  X(tad_merge_bf16_d64, kBf16, 0, 64)       \
  X(tad_merge_bf16_d128, kBf16, 0, 128)     \
  X(tad_merge_bf16_d256, kBf16, 0, 256)     \
  X(tad_merge_f16_d128, kF16, 1, 128)
#else
#define TAD_VARIANTS(X) TAD_VARIANTS_FEW(X)
#define TAD_MERGES(X) X(tad_merge_bf16_d128, kBf16, 0, 128)
#endif

#define TAD_DEFINE_PREFILL(NAME, TYPE, CODE, D, PACK, PAGE) \
  TAD_PREFILL(NAME, TYPE, D, PACK, PAGE)
#define TAD_DEFINE_MERGE(NAME, TYPE, CODE, D) TAD_MERGE(NAME, TYPE, D)
TAD_VARIANTS(TAD_DEFINE_PREFILL)
TAD_MERGES(TAD_DEFINE_MERGE)

#define TAD_PREFILL_ROW(NAME, TYPE, CODE, D, PACK, PAGE)                  \
  {#NAME, reinterpret_cast<const void*>(&NAME), CODE, D, PACK, PAGE,     \
   tc::PrefillSm90SharedBytes(D), NAME##_kernel::kThreads, kDesignCurrent},
#define TAD_MERGE_ROW(NAME, TYPE, CODE, D) \
  {#NAME, reinterpret_cast<const void*>(&NAME), CODE, D, 0, 0, 0, 128, 0},

namespace tailor::attention_dev {

const KernelRow* PrefillKernels(int* count) {
  static const KernelRow rows[] = {
      TAD_VARIANTS(TAD_PREFILL_ROW)};
  *count = static_cast<int>(sizeof(rows) / sizeof(rows[0]));
  return rows;
}

const KernelRow* MergeKernels(int* count) {
  static const KernelRow rows[] = {TAD_MERGES(TAD_MERGE_ROW)};
  *count = static_cast<int>(sizeof(rows) / sizeof(rows[0]));
  return rows;
}

}  // namespace tailor::attention_dev
