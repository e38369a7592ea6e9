// bench/attention_gpu/kernels_legacy.cu — the Hopper prefill kernel of the
// previous design, for A/B runs against the current one on the same data
// (kDesignLegacy in kernel_table.h).
//
// scripts/build-attention-dev unpacks templates/ and runtime/ of the commit
// it names as the previous design into build-attn-dev/legacy and compiles
// this file with that tree first on the include path; the namespace is
// renamed so that both designs link into one library. The previous design
// must take the same PrefillParams (dev_api.cc fills one struct for both):
// the build checks that prefill_params.h's struct did not change.
#define tailor tailor_legacy
#include "templates/cuda/attention/prefill_sm90.cuh"

namespace tlc = ::tailor_legacy::cuda;

#define TAD_LEGACY(NAME, TYPE, D, PACK, PAGE) \
  TAILOR_CUDA_ENTRY(NAME,                     \
                    (tlc::PrefillSm90Kernel<tlc::Half16::TYPE, D, PACK, PAGE>))

#define TAD_LEGACY_VARIANTS(X)                                 \
  X(tad_legacy_prefill_bf16_d128_p4_pg16, kBf16, 0, 128, 4, 16) \
  X(tad_legacy_prefill_bf16_d128_p8_pg16, kBf16, 0, 128, 8, 16)

#define TAD_DEFINE_LEGACY(NAME, TYPE, CODE, D, PACK, PAGE) \
  TAD_LEGACY(NAME, TYPE, D, PACK, PAGE)
TAD_LEGACY_VARIANTS(TAD_DEFINE_LEGACY)
#undef tailor

#include "bench/attention_gpu/kernel_table.h"

#define TAD_LEGACY_ROW(NAME, TYPE, CODE, D, PACK, PAGE)                   \
  {#NAME,                                                                 \
   reinterpret_cast<const void*>(&NAME),                                  \
   CODE,                                                                  \
   D,                                                                     \
   PACK,                                                                  \
   PAGE,                                                                  \
   tlc::PrefillSm90SharedBytes(D),                                        \
   NAME##_kernel::kThreads,                                               \
   ::tailor::attention_dev::kDesignLegacy},

namespace tailor::attention_dev {

const KernelRow* LegacyPrefillKernels(int* count) {
  static const KernelRow rows[] = {TAD_LEGACY_VARIANTS(TAD_LEGACY_ROW)};
  *count = static_cast<int>(sizeof(rows) / sizeof(rows[0]));
  return rows;
}

}  // namespace tailor::attention_dev
