// bench/attention_gpu/decode_kernels.cu — tailor's Hopper decode kernel
// (templates/cuda/attention/decode_sm90.cuh) in the development library,
// so that the decode rows of a mixed batch can run on it beside the
// prefill kernel (dev_api.h, tad_decode_*), on the same data.
//
// Variants: bf16, D 128, pages of 16, groups 4 (Qwen3-30B) and 8 (Llama-3),
// each at the depth one CTA an SM fits and the depth two fit (the decode
// family's rule, DecodeStagesFor, on the 227 KB of an H100 / H200).
#include "bench/attention_gpu/kernel_table.h"
#include "templates/cuda/attention/decode_sm90.cuh"

namespace tc = ::tailor::cuda;

#define TAD_DECODE_VARIANTS(X)                          \
  X(tad_decode_bf16_d128_g4_pg16_s4, kBf16, 0, 128, 4, 16, 4) \
  X(tad_decode_bf16_d128_g4_pg16_s2, kBf16, 0, 128, 4, 16, 2) \
  X(tad_decode_bf16_d128_g8_pg16_s4, kBf16, 0, 128, 8, 16, 4) \
  X(tad_decode_bf16_d128_g8_pg16_s2, kBf16, 0, 128, 8, 16, 2)

#define TAD_DEFINE_DECODE(NAME, TYPE, CODE, D, GROUP, PAGE, STAGES) \
  TAILOR_CUDA_ENTRY(                                                \
      NAME, (tc::DecodeSm90Kernel<tc::Half16::TYPE, D, GROUP, PAGE, STAGES>))
TAD_DECODE_VARIANTS(TAD_DEFINE_DECODE)

#define TAD_DECODE_ROW(NAME, TYPE, CODE, D, GROUP, PAGE, STAGES)          \
  {#NAME,  reinterpret_cast<const void*>(&NAME),                          \
   CODE,   D,                                                             \
   GROUP,  PAGE,                                                          \
   tc::DecodeSharedBytes(D, GROUP, STAGES), NAME##_kernel::kThreads,       \
   STAGES},

namespace tailor::attention_dev {

const KernelRow* DecodeKernels(int* count) {
  static const KernelRow rows[] = {TAD_DECODE_VARIANTS(TAD_DECODE_ROW)};
  *count = static_cast<int>(sizeof(rows) / sizeof(rows[0]));
  return rows;
}

}  // namespace tailor::attention_dev
