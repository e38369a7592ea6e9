#include "backends/cuda/generic_kernel_table.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tailor::cuda {
namespace {

using tailor::internal::OpKind;

// Indexed by GenericKernelId. The instantiations name every runtime dim as
// 0 (kMoeRuntimeDim, kDecodeRuntimeDim, kPrefillRuntimeDim) and the decode
// depth as kGenericDecodeStages (2).
constexpr GenericKernelInfo kTable[kNumGenericKernels] = {
    {OpKind::kMoeRoute, "tailor_generic_moe_route_count_plan", "moe/route.cuh",
     "MoeRouteCountPlan"},
    {OpKind::kMoeRoute, "tailor_generic_moe_route_fused", "moe/route.cuh",
     "MoeRouteFused"},
    {OpKind::kMoeRoute, "tailor_generic_moe_route_scatter1", "moe/route.cuh",
     "MoeRouteScatter<1>"},
    {OpKind::kMoeRoute, "tailor_generic_moe_route_scatter2", "moe/route.cuh",
     "MoeRouteScatter<2>"},
    {OpKind::kMoeRoute, "tailor_generic_moe_route_scatter4", "moe/route.cuh",
     "MoeRouteScatter<4>"},
    {OpKind::kMoeRoute, "tailor_generic_moe_route_scatter8", "moe/route.cuh",
     "MoeRouteScatter<8>"},
    {OpKind::kMoePack, "tailor_generic_moe_pack_bf16", "moe/pack.cuh",
     "MoePack<tailor::cuda::bf16, 0>"},
    {OpKind::kMoePack, "tailor_generic_moe_pack_f32", "moe/pack.cuh",
     "MoePack<float, 0>"},
    {OpKind::kMoeCombine, "tailor_generic_moe_combine_bf16", "moe/combine.cuh",
     "MoeCombine<tailor::cuda::bf16, 0, 0>"},
    {OpKind::kMoeCombine, "tailor_generic_moe_combine_f32", "moe/combine.cuh",
     "MoeCombine<float, 0, 0>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_mma",
     "moe/grouped_gemm_sm80.cuh", "MoeGroupedGemmMma<0, 0, 0, 0>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_mma_silu",
     "moe/grouped_gemm_sm80.cuh", "MoeGroupedGemmMma<0, 0, 0, 1>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_simt_bf16",
     "moe/grouped_gemm_sm80.cuh",
     "MoeGroupedGemmSimt<tailor::cuda::bf16, 0, 0, 0, 0>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_simt_bf16_silu",
     "moe/grouped_gemm_sm80.cuh",
     "MoeGroupedGemmSimt<tailor::cuda::bf16, 0, 0, 0, 1>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_simt_f32",
     "moe/grouped_gemm_sm80.cuh", "MoeGroupedGemmSimt<float, 0, 0, 0, 0>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_gemm_simt_f32_silu",
     "moe/grouped_gemm_sm80.cuh", "MoeGroupedGemmSimt<float, 0, 0, 0, 1>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_bf16_d64",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kBf16, 64, 0, 0, 2>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_bf16_d128",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kBf16, 128, 0, 0, 2>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_bf16_d256",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kBf16, 256, 0, 0, 2>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_f16_d64",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kF16, 64, 0, 0, 2>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_f16_d128",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kF16, 128, 0, 0, 2>"},
    {OpKind::kAttentionDecode, "tailor_generic_decode_f16_d256",
     "attention/decode_sm80.cuh",
     "DecodeSm80Kernel<tailor::cuda::Half16::kF16, 256, 0, 0, 2>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_bf16_d64",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kBf16, 64, 0, 0>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_bf16_d128",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kBf16, 128, 0, 0>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_bf16_d256",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kBf16, 256, 0, 0>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_f16_d64",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kF16, 64, 0, 0>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_f16_d128",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kF16, 128, 0, 0>"},
    {OpKind::kAttentionRagged, "tailor_generic_ragged_f16_d256",
     "attention/prefill_sm80.cuh",
     "PrefillSm80Kernel<tailor::cuda::Half16::kF16, 256, 0, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_bf16_d64",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kBf16, 64, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_bf16_d128",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kBf16, 128, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_bf16_d256",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kBf16, 256, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_f16_d64",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kF16, 64, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_f16_d128",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kF16, 128, 0>"},
    {OpKind::kAttentionRaggedMerge, "tailor_generic_ragged_merge_f16_d256",
     "attention/prefill_merge.cuh",
     "PrefillMergeKernel<tailor::cuda::Half16::kF16, 256, 0>"},
    {OpKind::kMoePack, "tailor_generic_moe_fp8_pack_block", "moe/fp8_pack.cuh",
     "MoeFp8Pack<0, tailor::cuda::kMoeFp8BlockScaled>"},
    {OpKind::kMoePack, "tailor_generic_moe_fp8_pack_per_tensor",
     "moe/fp8_pack.cuh", "MoeFp8Pack<0, tailor::cuda::kMoeFp8PerTensor>"},
    {OpKind::kMoePack, "tailor_generic_moe_fp8_pack_per_token",
     "moe/fp8_pack.cuh", "MoeFp8Pack<0, tailor::cuda::kMoeFp8PerChannel>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_block",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 0, tailor::cuda::kMoeFp8BlockScaled>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_block_silu",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 1, tailor::cuda::kMoeFp8BlockScaled>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_block_silu_quant",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 2, tailor::cuda::kMoeFp8BlockScaled>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_per_tensor",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 0, tailor::cuda::kMoeFp8PerTensor>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_per_tensor_silu",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 1, tailor::cuda::kMoeFp8PerTensor>"},
    {OpKind::kMoeGroupedGemm,
     "tailor_generic_moe_fp8_gemm_per_tensor_silu_quant",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 2, tailor::cuda::kMoeFp8PerTensor>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_per_channel",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 0, tailor::cuda::kMoeFp8PerChannel>"},
    {OpKind::kMoeGroupedGemm, "tailor_generic_moe_fp8_gemm_per_channel_silu",
     "moe/fp8_grouped_gemm_sm80.cuh",
     "MoeFp8GroupedGemmMma<0, 0, 0, 1, tailor::cuda::kMoeFp8PerChannel>"},
};

std::string EntryLine(const GenericKernelInfo& info) {
  return absl::StrCat("TAILOR_CUDA_ENTRY(", info.entry,
                      ", (tailor::cuda::", info.kernel, "))\n");
}

}  // namespace

const GenericKernelInfo& GenericKernelInfoOf(GenericKernelId id) {
  return kTable[static_cast<int>(id)];
}

std::string GenericKernelsSource() {
  std::string includes, entries;
  for (const GenericKernelInfo& info : kTable) {
    const std::string include =
        absl::StrCat("#include \"templates/cuda/", info.header, "\"\n");
    if (includes.find(include) == std::string::npos) includes += include;
    entries += EntryLine(info);
  }
  return includes + entries;
}

std::string GenericKernelSource(GenericKernelId id) {
  const GenericKernelInfo& info = GenericKernelInfoOf(id);
  return absl::StrCat("#include \"templates/cuda/", info.header, "\"\n",
                      EntryLine(info));
}

}  // namespace tailor::cuda
