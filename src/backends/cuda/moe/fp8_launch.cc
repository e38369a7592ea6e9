// The FP8 (e4m3) launches, kernels built from their typed specs
// (backends/cuda/moe/fp8_generator.h):
//   Pack         bf16 hidden -> e4m3 rows and 1 x 128 scales in the layout
//                the GEMM's A-scale map loads (per tensor: a static scale;
//                per channel: per-token scales, a row's amax); sm_80+
//   GroupedGemm  every scale mode. sm_90a: tensor maps over e4m3 A and W
//                (and, in block mode, A's scales), the bf16 kernel's work
//                list and tile order; no split-K (a unit's partials would
//                need the FP8 kernel's own scratch sizing). Other devices
//                and moe.gemm=portable: the mma.sync kernel
//                (fp8_grouped_gemm_sm80.cuh), the same buffers.
// Background JIT: a cold key of either runs its generic kernel (runtime H;
// the portable GEMM with runtime N, K and tile rows, for Hopper keys too)
// from the same params while the specialized kernel compiles.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cuda/moe/fp8_generator.h"
#include "backends/cuda/moe/heuristics.h"
#include "backends/cuda/moe/kernels.h"
#include "backends/gpu/moe_launch.h"
#include "ops/moe/spec.h"
#include "tailor/status.h"
#include "templates/cuda/moe/fp8_params.h"

namespace tailor::cuda {
namespace {

using tailor::internal::GroupedGemmLaunch;
using tailor::internal::LaunchConfig;
using tailor::internal::OpKind;
using tailor::internal::PackLaunch;
using tailor::internal::SpecKey;

// A 2D e4m3 map over [rows, k] (K contiguous), boxes of 128 K x box_rows,
// 128-byte swizzle (fp8_params.h: a_map, w_map).
TensorMapSpec E4m3Rows(const void* data, int64_t rows, int64_t k,
                       uint32_t box_rows) {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kUint8,
      .rank = 2,
      .global_address = reinterpret_cast<uint64_t>(data),
      .global_dims = {static_cast<uint64_t>(k), static_cast<uint64_t>(rows)},
      .global_strides = {static_cast<uint64_t>(k)},
      .box_dims = {static_cast<uint32_t>(kMoeFp8Block), box_rows},
      .swizzle = TensorMapSwizzle::k128B,
      .l2_promotion = TensorMapL2Promotion::k256B};
}

// A's scales [K / 128, scale_rows] f32: boxes of one K block x the tile's
// rows plus the alignment shift (fp8_params.h: a_scale_map).
TensorMapSpec ScaleRows(const float* data, int64_t scale_rows, int64_t k,
                        int a_rows) {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kFloat32,
      .rank = 2,
      .global_address = reinterpret_cast<uint64_t>(data),
      .global_dims = {static_cast<uint64_t>(scale_rows),
                      static_cast<uint64_t>(k / kMoeFp8Block)},
      .global_strides = {static_cast<uint64_t>(scale_rows) * 4},
      .box_dims = {static_cast<uint32_t>(MoeFp8ScaleBoxRows(a_rows)), 1},
      .swizzle = TensorMapSwizzle::kNone,
      .l2_promotion = TensorMapL2Promotion::kNone};
}

const char* ScaleModeName(moe::ScaleMode mode) {
  return mode == moe::ScaleMode::kBlock        ? "block"
         : mode == moe::ScaleMode::kPerChannel ? "per_channel"
                                               : "per_tensor";
}

// What the FP8 kernel needs beyond the op front's rules.
absl::Status ExpectFp8Launch(const GroupedGemmLaunch& l) {
  if (l.dtype != DType::kBF16 && l.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "c: cuda's FP8 GEMM writes bf16 or f8e4m3, got ", DTypeName(l.dtype)));
  }
  const bool quantized = l.dtype == DType::kF8E4M3;
  if (l.scale_mode != moe::ScaleMode::kBlock) {
    if (quantized && (l.scale_mode != moe::ScaleMode::kPerTensor ||
                      l.c_static_scale == nullptr)) {
      return absl::InvalidArgumentError(
          "c: an f8e4m3 output takes block mode's scales or, per tensor, a "
          "static output scale");
    }
    return absl::OkStatus();
  }
  if (l.a_scale_rows % kMoeFp8ScaleRowAlign != 0 ||
      (quantized && l.c_scale_rows % kMoeFp8ScaleRowAlign != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        quantized && l.a_scale_rows % kMoeFp8ScaleRowAlign == 0
            ? "quant.c_scale"
            : "quant.a_scale",
        ": dims[1] (scale rows) must be a multiple of 4 on cuda (16-byte TMA "
        "rows), got ",
        quantized && l.a_scale_rows % kMoeFp8ScaleRowAlign == 0
            ? l.c_scale_rows
            : l.a_scale_rows));
  }
  return absl::OkStatus();
}

// The maps of A and W (over the buffers' reserved rows, the same every
// step) and of A's scales.
absl::Status EncodeFp8Maps(DescriptorPool& descriptors,
                           const GroupedGemmLaunch& l, int a_rows,
                           MoeFp8GemmSm90Params& p) {
  const int64_t rows = std::max(l.rows, l.row_capacity);
  TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes a,
                          descriptors.GetOrEncode(E4m3Rows(
                              l.a, rows, l.k, static_cast<uint32_t>(a_rows))));
  TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes w,
                          descriptors.GetOrEncode(E4m3Rows(
                              l.w, l.experts * l.n, l.k, kMoeSm90BoxRows)));
  std::memcpy(&p.a_map, a.bytes, sizeof(p.a_map));
  std::memcpy(&p.w_map, w.bytes, sizeof(p.w_map));
  if (l.scale_mode != moe::ScaleMode::kBlock) return absl::OkStatus();
  TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes scales,
                          descriptors.GetOrEncode(ScaleRows(
                              l.a_scales, l.a_scale_rows, l.k, a_rows)));
  std::memcpy(&p.a_scale_map, scales.bytes, sizeof(p.a_scale_map));
  return absl::OkStatus();
}

// The plan summary's record of a launch.
tailor::internal::GemmConfig Fp8Config(const GroupedGemmLaunch& l, bool swap_ab,
                                       int a_rows, int cta_rows, int ctas) {
  return {.kernel = swap_ab ? "cuda.sm90_tma_wgmma_fp8_swap_ab"
                            : "cuda.sm90_tma_wgmma_fp8",
          .n = l.n,
          .k = l.k,
          .cta_rows = swap_ab ? a_rows : cta_rows,
          .cta_cols = kMoeSm90WRows,
          .k_tile = kMoeFp8Block,
          .stages = MoeFp8Stages(a_rows),
          .ctas = ctas,
          .features = {{.key = "scale_mode",
                        .value = static_cast<int>(l.scale_mode),
                        .name = ScaleModeName(l.scale_mode)}}};
}

// The portable kernel's units of a launch (its plan's worst case): N tiles
// of 64 columns, or (quantized) 128-column scale groups, two N tiles each.
int64_t Fp8PortableUnits(const GroupedGemmLaunch& l) {
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t units = l.dtype == DType::kF8E4M3
                            ? l.n / 2 / kMoeFp8Block
                            : MoeGemmNTiles(/*mma=*/true, gated, l.n);
  return l.plan.max_work * units;
}

// What the quantizing Pack needs beyond the op front's rules.
absl::Status ExpectFp8Pack(const PackLaunch& l) {
  const bool block = l.scale_mode == moe::ScaleMode::kBlock;
  if (l.scale_mode == moe::ScaleMode::kPerTensor && l.static_scale == nullptr) {
    return absl::InvalidArgumentError(
        "quant.a1_scale: required in per-tensor mode (the static activation "
        "scale, [1] f32)");
  }
  if (l.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden: cuda's quantizing Pack reads bf16, got ", DTypeName(l.dtype)));
  }
  if (l.hidden_dim % kMoeFp8Block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden: dims[1] (H) must be a multiple of 128 in block "
                     "mode, got ",
                     l.hidden_dim));
  }
  if (block &&
      (l.scale_rows < l.rows || l.scale_rows % kMoeFp8ScaleRowAlign != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a_scale: dims[1] (scale rows) must be at least the ", l.rows,
        " rows and a multiple of 4 on cuda (16-byte TMA rows), got ",
        l.scale_rows));
  }
  return absl::OkStatus();
}

// The generic FP8 kernels (generic_kernel_table.h) of a Pack and a GEMM.
GenericKernelId GenericFp8PackId(moe::ScaleMode mode) {
  return mode == moe::ScaleMode::kBlock ? GenericKernelId::kFp8PackBlock
         : mode == moe::ScaleMode::kPerTensor
             ? GenericKernelId::kFp8PackPerTensor
             : GenericKernelId::kFp8PackPerChannel;
}

// Per channel has no quantizing epilogue (ExpectFp8Launch refuses it).
GenericKernelId GenericFp8GemmId(moe::ScaleMode mode, moe::Epilogue epilogue,
                                 bool quantized) {
  using Id = GenericKernelId;
  const int column = quantized                                ? 2
                     : epilogue == moe::Epilogue::kSiluAndMul ? 1
                                                              : 0;
  if (mode == moe::ScaleMode::kPerChannel) {
    return column == 0 ? Id::kFp8GemmPerChannelNone
                       : Id::kFp8GemmPerChannelSiluAndMul;
  }
  constexpr Id kIds[2][3] = {
      {Id::kFp8GemmBlockNone, Id::kFp8GemmBlockSiluAndMul,
       Id::kFp8GemmBlockQuant},
      {Id::kFp8GemmPerTensorNone, Id::kFp8GemmPerTensorSiluAndMul,
       Id::kFp8GemmPerTensorQuant}};
  return kIds[mode == moe::ScaleMode::kBlock ? 0 : 1][column];
}

}  // namespace

absl::Status CudaMoeKernels::Fp8Pack(tailor::internal::Engine& engine,
                                     const PackLaunch& l) {
  TAILOR_RETURN_IF_ERROR(ExpectFp8Pack(l));
  if (l.rows == 0) return absl::OkStatus();
  const SpecKey key = Fp8PackKey(engine.target(), l.hidden_dim, l.scale_mode);
  const MoeFp8PackParams p = {.hidden = l.hidden,
                              .permutation = l.permutation,
                              .a = l.a,
                              .a_scales = l.a_scales,
                              .static_scale = l.static_scale,
                              .rows = static_cast<int>(l.rows),
                              .tokens = static_cast<int>(l.tokens),
                              .topk = static_cast<int>(l.topk),
                              .hidden_dim = static_cast<int>(l.hidden_dim),
                              .scale_rows = static_cast<int>(l.scale_rows),
                              .rows_in_order = l.rows_in_order ? 1 : 0};
  // Per token, one CTA walks its row (the row's amax before any store).
  const int64_t groups = l.hidden_dim / kMoeFp8Block;
  const bool per_token = l.scale_mode == moe::ScaleMode::kPerChannel;
  LaunchConfig config;
  config.grid = {.x = static_cast<uint32_t>(l.rows),
                 .y = per_token ? 1u
                                : static_cast<uint32_t>(
                                      (groups + kMoeFp8PackGroupsPerBlock - 1) /
                                      kMoeFp8PackGroupsPerBlock)};
  config.block = {.x = static_cast<uint32_t>(kMoeFp8PackThreads)};
  config.stream = l.stream;
  config.overlap_predecessor = MoeOverlapsPredecessor(l.rows);
  return LaunchKernel(engine, key, &GenerateMoeKernel,
                      GenericFp8PackId(l.scale_mode), config, &p, sizeof(p));
}

absl::Status CudaMoeKernels::Fp8GroupedGemm(tailor::internal::Engine& engine,
                                            const GroupedGemmLaunch& l) {
  TAILOR_RETURN_IF_ERROR(ExpectFp8Launch(l));
  if (!hopper_) return PortableFp8GroupedGemm(engine, l);
  const GenericKernelId generic_id =
      GenericFp8GemmId(l.scale_mode, l.epilogue, l.dtype == DType::kF8E4M3);
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t max_tiles = l.plan.max_work * MoeSm90NTiles(gated, l.n);
  if (max_tiles == 0) return absl::OkStatus();
  const bool swap_ab = HopperSwapAB(swap_ab_, l.tile_rows);
  const int a_rows = MoeSm90ARows(static_cast<int>(l.tile_rows), swap_ab);
  const SpecKey key =
      Fp8GemmKey(engine.target(), l.dtype, l.n, l.k, l.tile_rows, l.epilogue,
                 swap_ab, l.scale_mode);
  TAILOR_ASSIGN_OR_RETURN(const SelectedKernel selected,
                          Select(engine, key, &GenerateMoeKernel, generic_id));
  if (selected.generic) {
    return PortableFp8Launch(engine, l, *selected.kernel, /*generic=*/true);
  }
  MoeFp8GemmSm90Params p = {};
  TAILOR_RETURN_IF_ERROR(EncodeFp8Maps(descriptors_, l, a_rows, p));
  p.w_scales = l.w_scales;
  if (l.scale_mode != moe::ScaleMode::kBlock) p.a_scales = l.a_scales;
  p.c_scale = l.c_static_scale;
  p.c = l.c;
  p.c_scales = l.c_scales;
  p.c_scale_rows = static_cast<int>(l.c_scale_rows);
  p.work = reinterpret_cast<const MoeWorkItem*>(l.plan.device_work);
  p.header = static_cast<MoeRouteHeader*>(l.plan.route_scratch);
  p.n = static_cast<int>(l.n);
  p.k = static_cast<int>(l.k);
  p.dynamic_schedule = dynamic_schedule_ ? 1 : 0;
  const int cta_rows = MoeSm90CtaRows(static_cast<int>(l.tile_rows));
  p.expert_groups = expert_groups_ >= 0
                        ? expert_groups_
                        : MoeSm90ExpertGroups(l.rows, l.experts, cta_rows,
                                              l.n * l.k, l2_bytes_);
  p.split_k = 0;
  p.max_work = static_cast<int>(l.plan.max_work);
  const int ctas = MoeSm90Ctas(max_tiles, l.k, multiprocessors_,
                               /*split_k=*/false, swap_ab);
  if (l.config != nullptr) {
    *l.config = Fp8Config(l, swap_ab, a_rows, cta_rows, ctas);
  }
  LaunchConfig config;
  config.grid = {.x = static_cast<uint32_t>(std::max(ctas, 1))};
  config.block = {.x = static_cast<uint32_t>(kMoeSm90Threads)};
  config.shared_bytes = static_cast<uint32_t>(MoeFp8SharedBytes(a_rows));
  config.stream = l.stream;
  config.overlap_predecessor = MoeOverlapsPredecessor(l.rows);
  return engine.Launch(key.op, *selected.kernel, config, p);
}

absl::Status CudaMoeKernels::PortableFp8GroupedGemm(
    tailor::internal::Engine& engine, const GroupedGemmLaunch& l) {
  if (Fp8PortableUnits(l) == 0) return absl::OkStatus();
  const SpecKey key = Fp8PortableGemmKey(engine.target(), l.dtype, l.n, l.k,
                                         l.tile_rows, l.epilogue, l.scale_mode);
  TAILOR_ASSIGN_OR_RETURN(const SelectedKernel selected,
                          Select(engine, key, &GenerateMoeKernel,
                                 GenericFp8GemmId(l.scale_mode, l.epilogue,
                                                  l.dtype == DType::kF8E4M3)));
  return PortableFp8Launch(engine, l, *selected.kernel, selected.generic);
}

absl::Status CudaMoeKernels::PortableFp8Launch(
    tailor::internal::Engine& engine, const GroupedGemmLaunch& l,
    const tailor::internal::Kernel& kernel, bool generic) {
  const bool quantized = l.dtype == DType::kF8E4M3;
  const int64_t max_tiles = Fp8PortableUnits(l);
  if (max_tiles == 0) return absl::OkStatus();
  const MoeFp8GemmParams p = {.gemm = gpu::MoePortableGemmParamsOf(l),
                              .a_scales = l.a_scales,
                              .w_scales = l.w_scales,
                              .c_scales = l.c_scales,
                              .c_scale = l.c_static_scale,
                              .a_scale_rows = static_cast<int>(l.a_scale_rows),
                              .c_scale_rows = static_cast<int>(l.c_scale_rows)};
  // As the bf16 mma.sync kernel: a persistent grid of 2 CTAs per SM.
  const int64_t ctas = std::min<int64_t>(max_tiles, 2 * multiprocessors_);
  // The generic kernel's CTA is 64 rows whatever the plan tile.
  const int tile_rows =
      generic ? kMoePortableMaxRows : static_cast<int>(l.tile_rows);
  if (l.config != nullptr) {
    *l.config = {
        .kernel = generic ? "cuda.generic_mma_fp8" : "cuda.sm80_mma_fp8",
        .n = l.n,
        .k = l.k,
        .cta_rows = MoeGemmCtaRows(tile_rows),
        .cta_cols = kMoeMmaWRows,
        .k_tile = kMoeFp8Block,
        .stages = MoeFp8MmaStages(quantized),
        .ctas = static_cast<int32_t>(ctas),
        .features = {{.key = "scale_mode",
                      .value = static_cast<int>(l.scale_mode),
                      .name = ScaleModeName(l.scale_mode)}}};
  }
  LaunchConfig config;
  config.grid = {.x = static_cast<uint32_t>(ctas)};
  config.block = {.x = static_cast<uint32_t>(kMoeMmaThreads)};
  config.shared_bytes =
      static_cast<uint32_t>(MoeFp8MmaSharedBytes(tile_rows, quantized));
  config.stream = l.stream;
  config.overlap_predecessor = MoeOverlapsPredecessor(l.rows);
  if (generic) {
    return engine.LaunchFallback(OpKind::kMoeGroupedGemm, kernel, config, &p,
                                 sizeof(p));
  }
  return engine.Launch(OpKind::kMoeGroupedGemm, kernel, config, p);
}

}  // namespace tailor::cuda
