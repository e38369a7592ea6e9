// backends/cuda/generic_kernel_table.h — the generic CUDA kernels of
// background JIT: which template instantiations they are, and their source.
//
// A generic kernel is a specialized kernel's template with its shape read
// from the params at run time (kMoeRuntimeDim, kDecodeRuntimeDim): one
// kernel per (family, dtype) (per head dim for decode) serves every shape
// the specialized kernels of that family serve, on sm_80 and newer. In
// background JIT mode a call whose specialized kernel is still compiling
// runs on it (backends/cuda/generic_kernels.h).
//
//   family            kernels                       dtypes
//   moe.route         count+plan, fused,            (none: int32 ids)
//                     scatter with 1/2/4/8 warps
//   moe.pack          MoePack<T, runtime H>         bf16, f32
//   moe.grouped_gemm  MoeGroupedGemmMma (bf16,      bf16 (mma, simt), f32
//                     K % 8 == 0) and Simt, each
//                     with both epilogues; runtime
//                     N, K, tile rows (64-row CTAs)
//   moe.combine       MoeCombine<T, runtime H, k>   bf16, f32
//   attention.decode  DecodeSm80Kernel<T, D,        bf16, f16 x D 64/128/256
//                     runtime group, runtime page,
//                     2 stages> (cp.async; merges
//                     split pairs in the same launch)
//   attention.ragged  PrefillSm80Kernel<T, D,       bf16, f16 x D 64/128/256
//                     runtime pack, runtime page>
//                     (the portable kernel; runs
//                     either ragged kernel's plan)
//   attention.ragged_ PrefillMergeKernel<T, D,      bf16, f16 x D 64/128/256
//     merge           runtime tile rows>
//   moe.pack (FP8)    MoeFp8Pack<runtime H, mode>   bf16 -> e4m3: block,
//                                                   per tensor, per token
//   moe.grouped_gemm  MoeFp8GroupedGemmMma<runtime  e4m3: block, per tensor
//     (FP8)           N, K, tile rows, epilogue,    x none, silu_and_mul,
//                     mode> (mma.sync; serves the   quantizing silu_and_mul;
//                     Hopper FP8 keys too)          per channel x none,
//                                                   silu_and_mul
//
// Pure data and strings (an OpKind names each kernel's op): the build-time
// image builder (generic_image_builder.cc) links this file without the rest
// of the library.
#ifndef TAILOR_BACKENDS_CUDA_GENERIC_KERNEL_TABLE_H_
#define TAILOR_BACKENDS_CUDA_GENERIC_KERNEL_TABLE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "core/spec_key.h"

namespace tailor::cuda {

enum class GenericKernelId : int {
  kRouteCountPlan = 0,
  kRouteFused,
  kRouteScatter1,  // kRouteScatter1 + log2(warps)
  kRouteScatter2,
  kRouteScatter4,
  kRouteScatter8,
  kPackBf16,
  kPackF32,
  kCombineBf16,
  kCombineF32,
  kGemmMmaNone,  // bf16, K % 8 == 0
  kGemmMmaSiluAndMul,
  kGemmSimtBf16None,
  kGemmSimtBf16SiluAndMul,
  kGemmSimtF32None,
  kGemmSimtF32SiluAndMul,
  kDecodeBf16D64,  // kDecodeBf16D64 + log2(D / 64), + 3 for f16
  kDecodeBf16D128,
  kDecodeBf16D256,
  kDecodeF16D64,
  kDecodeF16D128,
  kDecodeF16D256,
  kRaggedBf16D64,  // as kDecodeBf16D64
  kRaggedBf16D128,
  kRaggedBf16D256,
  kRaggedF16D64,
  kRaggedF16D128,
  kRaggedF16D256,
  kRaggedMergeBf16D64,  // as kDecodeBf16D64
  kRaggedMergeBf16D128,
  kRaggedMergeBf16D256,
  kRaggedMergeF16D64,
  kRaggedMergeF16D128,
  kRaggedMergeF16D256,
  kFp8PackBlock,  // MoeFp8Pack<0, mode>
  kFp8PackPerTensor,
  kFp8PackPerChannel,  // per-token scales
  kFp8GemmBlockNone,   // MoeFp8GroupedGemmMma<0, 0, 0, epilogue, mode>
  kFp8GemmBlockSiluAndMul,
  kFp8GemmBlockQuant,  // the quantizing silu_and_mul epilogue
  kFp8GemmPerTensorNone,
  kFp8GemmPerTensorSiluAndMul,
  kFp8GemmPerTensorQuant,
  kFp8GemmPerChannelNone,
  kFp8GemmPerChannelSiluAndMul,
  kCount,
};
inline constexpr int kNumGenericKernels =
    static_cast<int>(GenericKernelId::kCount);

// Pipeline depth of the generic decode kernels: two stages fit wherever a
// specialized kernel (two stages or more) does.
inline constexpr int kGenericDecodeStages = 2;

struct GenericKernelInfo {
  // The op whose specialized kernels it stands in for: its run-time key
  // (GenericKernelKey) is a key of this op.
  tailor::internal::OpKind op;
  const char* entry;   // extern "C" name, e.g. "tailor_generic_moe_pack_bf16"
  const char* header;  // under templates/cuda/
  const char* kernel;  // the instantiation, in tailor::cuda
};

// The row of `id` (a value below kCount).
const GenericKernelInfo& GenericKernelInfoOf(GenericKernelId id);

// One translation unit with every generic kernel (the build-time image).
std::string GenericKernelsSource();

// One translation unit with the generic kernel `id` only (compiled at run
// time when the library was built without the image).
std::string GenericKernelSource(GenericKernelId id);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_GENERIC_KERNEL_TABLE_H_
