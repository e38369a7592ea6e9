#include "backends/cuda/moe/kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/moe/fp8_generator.h"
#include "backends/cuda/moe/heuristics.h"
#include "backends/gpu/error_words.h"
#include "backends/gpu/moe_launch.h"
#include "ops/moe/spec.h"
#include "tailor/status.h"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {
namespace {

using tailor::internal::CombineLaunch;
using tailor::internal::Decide;
using tailor::internal::DeviceRouteLaunch;
using tailor::internal::Engine;
using tailor::internal::GroupedGemmLaunch;
using tailor::internal::Kernel;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::LaunchConfig;
using tailor::internal::MoeCombineSpec;
using tailor::internal::MoeGemmKernel;
using tailor::internal::MoeGemmSpec;
using tailor::internal::MoePackSpec;
using tailor::internal::MoeRouteKernel;
using tailor::internal::MoeRouteSpec;
using tailor::internal::OpKind;
using tailor::internal::PackLaunch;
using tailor::internal::RouteErrors;
using tailor::internal::SpecKey;

// The device work list is the host planner's: one layout.
static_assert(sizeof(MoeWorkItem) == sizeof(plan::WorkItem));
static_assert(offsetof(MoeWorkItem, row_begin) ==
              offsetof(plan::WorkItem, row_begin));
static_assert(offsetof(MoeWorkItem, rows) == offsetof(plan::WorkItem, rows));
static_assert(offsetof(MoeWorkItem, group) == offsetof(plan::WorkItem, group));
static_assert(offsetof(MoeWorkItem, tail_class) ==
              offsetof(plan::WorkItem, tail_class));
static_assert(kMoeMaxTileRows == moe::kMaxTileRows);
static_assert(CudaMoeKernels::kMaxTileRows == kMoeMaxTileRows);
static_assert(kMoeSm90MaxRows == CudaMoeKernels::kMaxTileRows,
              "one Hopper CTA tile holds any plan tile");
static_assert(sizeof(MoeRouteHeader) <= kMoeRouteHeaderBytes);

// The route kernels' ids in MoeRouteSpec are the device's.
static_assert(static_cast<unsigned>(MoeRouteKernel::kCountPlan) ==
              kMoeRouteCountPlan);
static_assert(static_cast<unsigned>(MoeRouteKernel::kFused) == kMoeRouteFused);
static_assert(static_cast<unsigned>(MoeRouteKernel::kScatter) ==
              kMoeRouteScatter);

// A 2D bf16 TMA map over a [rows, k] row-major matrix, boxes of 64 K x
// `box_rows` rows, 128-byte swizzle (moe_params.h: MoeGroupedGemmSm90Params).
TensorMapSpec Bf16Rows(const void* data, int64_t rows, int64_t k,
                       uint32_t box_rows) {
  return TensorMapSpec{
      .data_type = TensorMapDataType::kBfloat16,
      .rank = 2,
      .global_address = reinterpret_cast<uint64_t>(data),
      .global_dims = {static_cast<uint64_t>(k), static_cast<uint64_t>(rows)},
      .global_strides = {static_cast<uint64_t>(k) * 2},
      .box_dims = {kMoeSm90KTile, box_rows},
      .swizzle = TensorMapSwizzle::k128B,
      .l2_promotion = TensorMapL2Promotion::k256B};
}

// The static half of HopperStoresByTma (what warm-up can know): the plan
// tile is the CTA tile and C's rows are whole 16-byte vectors.
bool HopperTmaStoreShape(bool enabled, int64_t tile_rows,
                         moe::Epilogue epilogue, int64_t n) {
  const int64_t out_n = epilogue == moe::Epilogue::kSiluAndMul ? n / 2 : n;
  return enabled && tile_rows == MoeSm90CtaRows(static_cast<int>(tile_rows)) &&
         out_n % 8 == 0;
}

// Persistent grids: CTAs per multiprocessor of each GEMM kernel.
constexpr int kMmaCtasPerSm = 2;   // its __launch_bounds__ minimum
constexpr int kSimtCtasPerSm = 4;  // 256 threads, 8 KiB shared

absl::string_view KernelTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::cuda::bf16" : "float";
}

KernelSource Entry(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code = absl::StrCat(
          "#include \"templates/cuda/", header, "\"\n",
          "TAILOR_CUDA_ENTRY(tailor_entry, (tailor::cuda::", kernel, "))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> GenerateRoute(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeRouteSpec spec, MoeRouteSpec::FromKey(key));
  switch (spec.kernel) {
    case MoeRouteKernel::kCountPlan:
      return Entry("moe/route.cuh", "MoeRouteCountPlan");
    case MoeRouteKernel::kFused:
      return Entry("moe/route.cuh", "MoeRouteFused");
    case MoeRouteKernel::kScatter:
      break;
  }
  return Entry("moe/route.cuh",
               absl::StrCat("MoeRouteScatter<", spec.scatter_warps, ">"));
}

absl::StatusOr<KernelSource> GeneratePack(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoePackSpec spec, MoePackSpec::FromKey(key));
  if (spec.scale_mode != moe::ScaleMode::kNone) return GenerateFp8Pack(spec);
  return Entry("moe/pack.cuh",
               absl::StrCat("MoePack<", KernelTypeName(spec.dtype), ", ",
                            spec.hidden, ">"));
}

absl::StatusOr<KernelSource> GenerateGroupedGemm(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeGemmSpec spec, MoeGemmSpec::FromKey(key));
  if (spec.quantized()) return GenerateFp8GroupedGemm(spec);
  const std::string shape =
      absl::StrCat(spec.n, ", ", spec.k, ", ", spec.tile_rows, ", ",
                   static_cast<int>(spec.epilogue));
  switch (spec.kernel) {
    case MoeGemmKernel::kHopper: {
      const bool pingpong =
          spec.consumers == tailor::internal::MoeGemmConsumers::kPingPong;
      KernelSource source =
          pingpong
              ? Entry("moe/sm90/kernel_pingpong.cuh",
                      absl::StrCat("MoeGroupedGemmSm90PingPong<", shape, ", ",
                                   spec.tma_store ? 1 : 0, ">"))
              : Entry("moe/sm90/kernel.cuh",
                      absl::StrCat("MoeGroupedGemmSm90<", shape, ", ",
                                   spec.tma_store ? 1 : 0, ", ", spec.cluster,
                                   ", ", spec.swap_ab ? 1 : 0, ">"));
      if (spec.pipeline_checks) {
        source.code = "#define TAILOR_PIPELINE_CHECKS 1\n" + source.code;
      }
      return source;
    }
    case MoeGemmKernel::kMatrixCore:
      return Entry("moe/grouped_gemm_sm80.cuh",
                   absl::StrCat("MoeGroupedGemmMma<", shape, ">"));
    case MoeGemmKernel::kSimt:
      break;
  }
  return Entry("moe/grouped_gemm_sm80.cuh",
               absl::StrCat("MoeGroupedGemmSimt<", KernelTypeName(spec.dtype),
                            ", ", shape, ">"));
}

absl::StatusOr<KernelSource> GenerateCombine(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeCombineSpec spec,
                          MoeCombineSpec::FromKey(key));
  return Entry("moe/combine.cuh",
               absl::StrCat("MoeCombine<", KernelTypeName(spec.dtype), ", ",
                            spec.hidden, ", ", spec.topk, ">"));
}

// ---- the generic kernels of each launch (background JIT) -----------------

GenericKernelId Shifted(GenericKernelId first, int by) {
  return static_cast<GenericKernelId>(static_cast<int>(first) + by);
}

GenericKernelId GenericRouteId(unsigned variant, int warps) {
  if (variant == kMoeRouteCountPlan) return GenericKernelId::kRouteCountPlan;
  if (variant == kMoeRouteFused) return GenericKernelId::kRouteFused;
  const int log2_warps = warps >= 8 ? 3 : warps >= 4 ? 2 : warps >= 2 ? 1 : 0;
  return Shifted(GenericKernelId::kRouteScatter1, log2_warps);
}

GenericKernelId GenericGemmId(DType dtype, int64_t k, moe::Epilogue epilogue) {
  const int gated = epilogue == moe::Epilogue::kSiluAndMul ? 1 : 0;
  if (MoeGemmUsesMma(dtype == DType::kBF16, k)) {
    return Shifted(GenericKernelId::kGemmMmaNone, gated);
  }
  return Shifted(dtype == DType::kBF16 ? GenericKernelId::kGemmSimtBf16None
                                       : GenericKernelId::kGemmSimtF32None,
                 gated);
}

// `step_rows`: the step's rows (T * k), for MoeOverlapsPredecessor. Every
// MoE kernel is built with TAILOR_CUDA_ENTRY, which waits for its
// predecessors before it reads or writes, so any may overlap them.
LaunchConfig Config(uint32_t grid_x, uint32_t grid_y, uint32_t threads,
                    uint32_t shared_bytes, void* stream, int64_t step_rows) {
  LaunchConfig config;
  config.grid = {.x = grid_x, .y = grid_y};
  config.block = {.x = threads};
  config.shared_bytes = shared_bytes;
  config.stream = stream;
  config.overlap_predecessor = MoeOverlapsPredecessor(step_rows);
  return config;
}

// Lanes of a warp (runtime/cuda/lanes.cuh, kLanes): the Route's scatter
// blocks are whole warps.
constexpr int kWarpLanes = 32;

// ---- keys: the launches and MoeLayerKernels build them here ---------------

SpecKey RouteKey(const KeyTarget& target, unsigned variant, int warps) {
  const auto kernel = static_cast<MoeRouteKernel>(variant);
  return MoeRouteSpec{
      .kernel = kernel,
      .scatter_warps = kernel == MoeRouteKernel::kScatter ? warps : 0}
      .ToKey(target);
}

SpecKey PackKey(const KeyTarget& target, DType dtype, int64_t hidden) {
  return MoePackSpec{.dtype = dtype, .hidden = hidden}.ToKey(target);
}

// moe.expert_groups: the raster group bounds it forces (kMoeGroups*), or
// -1 (auto: MoeSm90ExpertGroups decides).
int ForcedExpertGroups(MoeExpertGroups groups) {
  switch (groups) {
    case MoeExpertGroups::kFixed:
      return kMoeGroupsFixed;
    case MoeExpertGroups::kForward:
      return kMoeGroupsForward;
    case MoeExpertGroups::kBack:
      return kMoeGroupsBack;
    case MoeExpertGroups::kAuto:
      break;
  }
  return -1;
}

// The grouped-GEMM kernel a launch of (dtype, k, tile_rows) runs on a device
// with (`hopper`) or without the Hopper kernel enabled.
MoeGemmKernel GemmKernelFor(bool hopper, DType dtype, int64_t k,
                            int64_t tile_rows) {
  if (hopper && dtype == DType::kBF16 && k % 8 == 0 &&
      tile_rows <= kMoeSm90MaxRows) {
    return MoeGemmKernel::kHopper;
  }
  return MoeGemmUsesMma(dtype == DType::kBF16, k) ? MoeGemmKernel::kMatrixCore
                                                  : MoeGemmKernel::kSimt;
}

// The spec of a grouped-GEMM launch of `kernel`; the Hopper fields are kept
// for the Hopper kernel only (the others have none).
MoeGemmSpec GemmSpec(DType dtype, int64_t n, int64_t k, int64_t tile_rows,
                     moe::Epilogue epilogue, MoeGemmKernel kernel) {
  return MoeGemmSpec{.dtype = dtype,
                     .n = n,
                     .k = k,
                     .tile_rows = static_cast<int32_t>(tile_rows),
                     .epilogue = epilogue,
                     .kernel = kernel};
}

MoeGemmSpec HopperGemmSpec(MoeGemmSpec spec, bool pipeline_checks,
                           bool tma_store, int cluster, bool swap_ab,
                           bool pingpong = false) {
  if (spec.kernel != MoeGemmKernel::kHopper) return spec;
  spec.pipeline_checks = pipeline_checks;
  spec.tma_store = tma_store;
  spec.swap_ab = swap_ab;
  spec.cluster = cluster;
  if (pingpong) spec.consumers = tailor::internal::MoeGemmConsumers::kPingPong;
  return spec;
}

SpecKey CombineKey(const KeyTarget& target, DType dtype, int64_t hidden,
                   int64_t topk) {
  return MoeCombineSpec{.dtype = dtype, .hidden = hidden, .topk = topk}.ToKey(
      target);
}

bool HopperGemmEnabled(absl::string_view arch, const MoeTuning& tuning) {
  return arch == "sm_90a" && !tuning.portable_gemm;
}

// The FP8 kernels' devices: sm_80 and newer (mma.sync; e4m3 converted in
// registers where the device has no FP8 instructions). `what` names the
// arch in the message (device, target).
absl::Status ExpectFp8Arch(absl::string_view arch, absl::string_view what) {
  absl::string_view digits = arch;
  int number = 0;
  if (absl::ConsumePrefix(&digits, "sm_")) {
    absl::ConsumeSuffix(&digits, "a");
    if (!absl::SimpleAtoi(digits, &number)) number = 0;
  }
  if (number >= 80) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("FP8 (e4m3) MoE on cuda needs sm_80 or newer (mma.sync); ",
                   what, " is ", arch));
}

}  // namespace

absl::StatusOr<HopperGemmMaps> EncodeHopperGemmMaps(DescriptorPool& descriptors,
                                                    const GroupedGemmLaunch& l,
                                                    int a_rows,
                                                    bool tma_store) {
  // A and C over the buffers' reserved rows: the same maps every step.
  const int64_t rows = std::max(l.rows, l.row_capacity);
  HopperGemmMaps maps;
  TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes a,
                          descriptors.GetOrEncode(Bf16Rows(
                              l.a, rows, l.k, static_cast<uint32_t>(a_rows))));
  TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes w,
                          descriptors.GetOrEncode(Bf16Rows(
                              l.w, l.experts * l.n, l.k, kMoeSm90BoxRows)));
  std::memcpy(&maps.a, a.bytes, sizeof(maps.a));
  std::memcpy(&maps.w, w.bytes, sizeof(maps.w));
  if (!HopperTmaStoreShape(tma_store, l.tile_rows, l.epilogue, l.n) ||
      reinterpret_cast<uintptr_t>(l.c) % 16 != 0) {
    return maps;
  }
  // {64 columns, 64 rows} boxes over C. A map the checker refuses leaves
  // every tile on the register stores.
  const int64_t out_n =
      l.epilogue == moe::Epilogue::kSiluAndMul ? l.n / 2 : l.n;
  absl::StatusOr<TensorMapBytes> c =
      descriptors.GetOrEncode(Bf16Rows(l.c, rows, out_n, 64));
  if (!c.ok()) return maps;
  std::memcpy(&maps.c, c->bytes, sizeof(maps.c));
  maps.tma_store = true;
  return maps;
}

absl::Status CudaMoeKernels::SupportsScaleMode(moe::ScaleMode mode) const {
  if (mode == moe::ScaleMode::kNone) return absl::OkStatus();
  return ExpectFp8Arch(backend_.arch(), "device");
}

absl::StatusOr<std::vector<tailor::internal::KernelJob>> MoeLayerKernels(
    const KeyTarget& target, const tailor::internal::MoeLayerShape& layer,
    const MoeTuning& tuning) {
  const bool hopper = HopperGemmEnabled(target.arch, tuning);
  const bool fp8 = layer.scale_mode != moe::ScaleMode::kNone;
  if (fp8) TAILOR_RETURN_IF_ERROR(ExpectFp8Arch(target.arch, "target"));
  if (fp8 && layer.scale_mode != moe::ScaleMode::kBlock) {
    return absl::UnimplementedError(
        "FP8 (e4m3) MoE layers on cuda: block mode only");
  }
  // tile_rows 0: the cost model's choices (DefaultTileRows) on this arch.
  const bool swap_ab = tuning.swap_ab;
  std::vector<int64_t> tiles = {layer.policy.tile_rows};
  if (layer.policy.tile_rows == 0) {
    tiles = {64};
    if (hopper) tiles.push_back(128);
    if (hopper && swap_ab) {
      tiles.push_back(kMoeSwapSmallTile);
      tiles.push_back(kMoeSwapLargeTile);
    }
  }
  if (tiles[0] < 1 || tiles[0] > CudaMoeKernels::kMaxTileRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.tile_rows: must be in [1, ", CudaMoeKernels::kMaxTileRows,
        "] (or 0: the backend's choice), got ", layer.policy.tile_rows));
  }
  const bool checks = tuning.pipeline_checks;
  const int cluster = tuning.cluster;
  // Full tiles leave by TMA stores unless C is misaligned at run time (or
  // its map is refused): warm-up lists the TMA-store variant then.
  const bool tma_store_enabled = tuning.tma_store;
  const int warps = MoeScatterWarps(layer.experts);
  std::vector<tailor::internal::KernelJob> jobs;
  auto add = [&jobs](SpecKey key) {
    jobs.push_back({std::move(key), &GenerateMoeKernel});
  };
  if (warps == kMoeRouteCountThreads / 32) {
    add(RouteKey(target, kMoeRouteFused, warps));
  }
  add(RouteKey(target, kMoeRouteCountPlan, warps));
  add(RouteKey(target, kMoeRouteScatter, warps));
  add(fp8 ? Fp8PackKey(target, layer.hidden, layer.scale_mode)
          : PackKey(target, layer.dtype, layer.hidden));
  for (int64_t tile_rows : tiles) {
    for (const auto& [n, k, epilogue] :
         {std::tuple{2 * layer.intermediate, layer.hidden,
                     moe::Epilogue::kSiluAndMul},
          std::tuple{layer.hidden, layer.intermediate, moe::Epilogue::kNone}}) {
      if (fp8) {  // Experts' FP8 GEMMs: gate|up quantizes its output
        const DType c_dtype = epilogue == moe::Epilogue::kSiluAndMul
                                  ? DType::kF8E4M3
                                  : layer.dtype;
        add(hopper
                ? Fp8GemmKey(target, c_dtype, n, k, tile_rows, epilogue,
                             HopperSwapAB(swap_ab, tile_rows), layer.scale_mode)
                : Fp8PortableGemmKey(target, c_dtype, n, k, tile_rows, epilogue,
                                     layer.scale_mode));
        continue;
      }
      const MoeGemmSpec gemm =
          GemmSpec(layer.dtype, n, k, tile_rows, epilogue,
                   GemmKernelFor(hopper, layer.dtype, k, tile_rows));
      const bool swap = HopperSwapAB(swap_ab, tile_rows);
      const bool tma_store =
          !swap &&
          HopperTmaStoreShape(tma_store_enabled, tile_rows, epilogue, n);
      add(HopperGemmSpec(gemm, checks, tma_store, /*cluster=*/1, swap)
              .ToKey(target));
      // Ping-pong consumers: only forced (moe.consumers=pingpong); the cost
      // model never picks them, so warm-up lists them only then.
      const int cta_rows = MoeSm90CtaRows(static_cast<int>(tile_rows));
      if (gemm.kernel == MoeGemmKernel::kHopper &&
          tuning.pingpong == tailor::internal::Switch::kOn &&
          MoeSm90PingPongFits(cta_rows, swap,
                              HopperClusterFor(cluster, cta_rows))) {
        add(HopperGemmSpec(gemm, checks, tma_store, /*cluster=*/1, swap,
                           /*pingpong=*/true)
                .ToKey(target));
      }
      // Forced clusters: the 128-row launches run them.
      if (gemm.kernel == MoeGemmKernel::kHopper &&
          HopperClusterFor(cluster,
                           MoeSm90CtaRows(static_cast<int>(tile_rows))) > 1) {
        add(HopperGemmSpec(gemm, checks, tma_store, cluster, /*swap_ab=*/false)
                .ToKey(target));
      }
    }
  }
  add(CombineKey(target, layer.dtype, layer.hidden, layer.topk));
  return jobs;
}

absl::StatusOr<KernelSource> GenerateMoeKernel(const SpecKey& key) {
  switch (key.op) {
    case OpKind::kMoeRoute:
      return GenerateRoute(key);
    case OpKind::kMoePack:
      return GeneratePack(key);
    case OpKind::kMoeGroupedGemm:
      return GenerateGroupedGemm(key);
    case OpKind::kMoeCombine:
      return GenerateCombine(key);
    default:
      return absl::UnimplementedError(absl::StrCat(
          "cuda moe kernels: no generator for ", GetOpInfo(key.op).name));
  }
}

// ---- Route ------------------------------------------------------------------

int64_t CudaMoeKernels::RouteScratchBytes(int64_t max_assignments,
                                          int64_t num_experts) const {
  const int64_t segments =
      (max_assignments + kMoeRouteSegment - 1) / kMoeRouteSegment;
  return kMoeRouteHeaderBytes + SplitScratchBytes() +
         4 * num_experts * std::max<int64_t>(1, segments);
}

// The Hopper GEMM's split-K area, between the route header and the
// histogram: one partial slot per SM (moe_params.h, MoeSm90Splits).
int64_t CudaMoeKernels::SplitScratchBytes() const {
  return hopper_ ? MoeSm90SplitScratchBytes(multiprocessors_) : 0;
}

int64_t CudaMoeKernels::MaxDeviceRouteExperts() const {
  return kMoeMaxDeviceExperts;
}

absl::Status CudaMoeKernels::InitRouteScratch(Engine&, void* route_scratch,
                                              void* stream) {
  char* header = static_cast<char*>(route_scratch);
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(header, 0xff, gpu::kRouteHeaderErrorBytes, stream));
  TAILOR_RETURN_IF_ERROR(backend_.FillDevice(
      header + gpu::kRouteHeaderErrorBytes, 0,
      gpu::kRouteHeaderBytesUsed - gpu::kRouteHeaderErrorBytes, stream));
  if (SplitScratchBytes() == 0) return absl::OkStatus();
  return backend_.FillDevice(header + kMoeRouteHeaderBytes, 0,
                             MoeSm90SplitArrivalBytes(multiprocessors_),
                             stream);
}

absl::Status CudaMoeKernels::Route(Engine& engine, const DeviceRouteLaunch& l) {
  const int64_t assignments = l.tokens * l.topk;
  MoeRouteParams p = gpu::MoeRouteParamsOf(
      l, reinterpret_cast<int*>(static_cast<char*>(l.route_scratch) +
                                kMoeRouteHeaderBytes + SplitScratchBytes()));
  const int warps = MoeScatterWarps(l.experts);
  const gpu::MoeRouteKernels kernels =
      gpu::PlanMoeRoute(assignments, l.experts, kWarpLanes, warps);
  const KeyTarget target = engine.target();
  for (int i = 0; i < kernels.count; ++i) {
    const gpu::MoeRouteKernel& k = kernels.kernel[i];
    TAILOR_RETURN_IF_ERROR(
        LaunchKernel(engine, RouteKey(target, k.variant, warps), GenerateRoute,
                     GenericRouteId(k.variant, warps),
                     Config(k.shape.grid_x, k.shape.grid_y, k.shape.threads,
                            k.shape.shared_bytes, l.stream, assignments),
                     &p, sizeof(p)));
  }
  return absl::OkStatus();
}

absl::StatusOr<RouteErrors> CudaMoeKernels::TakeRouteErrors(Engine&,
                                                            void* route_scratch,
                                                            void* stream) {
  uint64_t words[2];
  TAILOR_RETURN_IF_ERROR(
      backend_.CopyToHost(words, route_scratch, sizeof(words), stream));
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(route_scratch, 0xff, sizeof(words), stream));
  return gpu::MoeRouteErrorsOf(words);
}

// ---- executors --------------------------------------------------------------

absl::Status CudaMoeKernels::Pack(Engine& engine, const PackLaunch& l) {
  if (l.scale_mode != moe::ScaleMode::kNone) return Fp8Pack(engine, l);
  if (l.rows_in_order) {
    return absl::UnimplementedError(
        "rows_in_order: only cuda's quantizing Pack reads rows in order");
  }
  if (l.rows == 0) return absl::OkStatus();
  const SpecKey key = PackKey(engine.target(), l.dtype, l.hidden_dim);
  const MoePackParams p = gpu::MoePackParamsOf(l);
  const gpu::LaunchShape shape = gpu::MoePackShape(l);
  return LaunchKernel(engine, key, GeneratePack,
                      l.dtype == DType::kBF16 ? GenericKernelId::kPackBf16
                                              : GenericKernelId::kPackF32,
                      Config(shape.grid_x, shape.grid_y, shape.threads,
                             shape.shared_bytes, l.stream, l.rows),
                      &p, sizeof(p));
}

CudaMoeKernels::CudaMoeKernels(CudaBackend& backend, int multiprocessors,
                               int64_t l2_bytes, bool hopper,
                               DescriptorPool& descriptors,
                               CudaGenericKernels& generics,
                               const MoeTuning& tuning)
    : backend_(backend),
      multiprocessors_(multiprocessors),
      l2_bytes_(l2_bytes),
      hopper_(hopper && !tuning.portable_gemm),
      pipeline_checks_(tuning.pipeline_checks),
      tma_store_(tuning.tma_store),
      dynamic_schedule_(tuning.dynamic_schedule),
      split_k_(tuning.split_k),
      swap_ab_(tuning.swap_ab),
      cluster_(tuning.cluster),
      expert_groups_(ForcedExpertGroups(tuning.expert_groups)),
      w_evict_first_(tuning.w_evict_first),
      prefetch_w_(tuning.prefetch_w),
      wave_sync_(tuning.wave_sync),
      pingpong_(tuning.pingpong),
      descriptors_(descriptors),
      generics_(generics) {}

int32_t CudaMoeKernels::DefaultTileRows(int64_t assignments, int64_t experts,
                                        int64_t max_expert_rows) const {
  return MoeDefaultTileRows(hopper_, swap_ab_, assignments, experts,
                            max_expert_rows);
}

absl::StatusOr<SelectedKernel> CudaMoeKernels::Select(
    Engine& engine, const SpecKey& key,
    tailor::internal::KernelGeneratorFn generate, GenericKernelId id) {
  return generics_.Select(engine, key, engine.GeneratorFor(key.op, generate),
                          id);
}

absl::Status CudaMoeKernels::LaunchKernel(
    Engine& engine, const SpecKey& key,
    tailor::internal::KernelGeneratorFn generate, GenericKernelId id,
    const LaunchConfig& config, const void* params, size_t params_size) {
  TAILOR_ASSIGN_OR_RETURN(SelectedKernel selected,
                          Select(engine, key, generate, id));
  if (selected.generic) {
    return engine.LaunchFallback(key.op, *selected.kernel, config, params,
                                 params_size);
  }
  return engine.Launch(key.op, *selected.kernel, config, params, params_size);
}

absl::StatusOr<CudaMoeKernels::HopperVariant> CudaMoeKernels::HopperParams(
    const GroupedGemmLaunch& l, int64_t max_tiles,
    MoeGroupedGemmSm90Params& p) {
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  HopperVariant v;
  v.cta_rows = MoeSm90CtaRows(static_cast<int>(l.tile_rows));
  v.swap_ab = HopperSwapAB(swap_ab_, l.tile_rows);
  v.cluster = HopperClusterFor(cluster_, v.cta_rows);
  v.pingpong = MoeSm90PingPongFits(v.cta_rows, v.swap_ab, v.cluster) &&
               pingpong_ == tailor::internal::Switch::kOn;
  // Ping-pong: a stage holds one consumer's half of the plan tile.
  v.a_rows = v.pingpong
                 ? kMoeSm90PingPongARows
                 : MoeSm90ARows(static_cast<int>(l.tile_rows), v.swap_ab);
  TAILOR_ASSIGN_OR_RETURN(const HopperGemmMaps maps,
                          EncodeHopperGemmMaps(descriptors_, l, v.a_rows,
                                               tma_store_ && !v.swap_ab));
  p.a_map = maps.a;
  p.w_map = maps.w;
  p.c_map = maps.c;
  v.tma_store = maps.tma_store;
  p.c = l.c;
  p.work = reinterpret_cast<const MoeWorkItem*>(l.plan.device_work);
  p.header = static_cast<MoeRouteHeader*>(l.plan.route_scratch);
  // The schedule: the cost model's rules, unless a knob overrides them.
  p.dynamic_schedule = dynamic_schedule_ ? 1 : 0;
  p.wave_sync = Decide(wave_sync_, MoeSm90WaveSync(v.cta_rows, v.swap_ab, l.k));
  p.split_k = split_k_ && !v.pingpong ? 1 : 0;  // ping-pong never splits K
  char* split_area =
      static_cast<char*>(l.plan.route_scratch) + kMoeRouteHeaderBytes;
  p.split_arrivals = reinterpret_cast<int*>(split_area);
  p.partials = reinterpret_cast<float*>(
      split_area + MoeSm90SplitArrivalBytes(multiprocessors_));
  const int64_t expert_w_bytes =
      l.n * l.k * static_cast<int64_t>(DTypeSize(l.dtype));
  p.expert_groups = expert_groups_ >= 0
                        ? expert_groups_
                        : MoeSm90ExpertGroups(l.rows, l.experts, v.cta_rows,
                                              expert_w_bytes, l2_bytes_);
  p.w_evict_first =
      v.cluster == 1 &&
      Decide(w_evict_first_, MoeSm90EvictFirstW(l.rows, l.tile_rows, l.experts,
                                                expert_w_bytes, l2_bytes_));
  p.max_work = static_cast<int>(l.plan.max_work);
  const bool prefetch_w =
      v.cluster == 1 &&
      Decide(prefetch_w_, MoeSm90PrefetchWEarly(l.rows, l.tile_rows, l.experts,
                                                expert_w_bytes, l2_bytes_));
  p.prefetch_w_kblocks = prefetch_w ? kMoeSm90PrefetchWKBlocks : 0;
  if (v.cluster > 1) {
    TAILOR_ASSIGN_OR_RETURN(const int max_clusters, MaxClusters(v.cluster));
    v.ctas = static_cast<uint32_t>(MoeSm90ClusterCtas(
        l.plan.max_work, MoeSm90NTiles(gated, l.n), v.cluster, max_clusters));
  } else {
    v.ctas = static_cast<uint32_t>(MoeSm90Ctas(max_tiles, l.k, multiprocessors_,
                                               p.split_k != 0, v.swap_ab));
  }
  return v;
}

absl::StatusOr<int> CudaMoeKernels::MaxClusters(int cluster) {
  if (cluster == 2) return multiprocessors_ / 2;
  std::call_once(quads_query_, [this] {
    const int shared = std::max(MoeSm90SharedBytes(kMoeSm90MaxRows, false),
                                MoeSm90SharedBytes(kMoeSm90MaxRows, true));
    absl::StatusOr<std::vector<int>> counts =
        backend_.MaxActiveClusters({4}, kMoeSm90Threads, shared);
    max_quads_ = counts.ok() ? absl::StatusOr<int>((*counts)[0])
                             : absl::StatusOr<int>(counts.status());
    if (max_quads_.ok() && *max_quads_ < 1) {
      max_quads_ = absl::FailedPreconditionError(
          "moe.grouped_gemm: the device runs no cluster of 4 CTAs");
    }
  });
  return max_quads_;
}

namespace {

// The raster group bounds of a launch (params expert_groups) by name, for
// GemmChoice::features.
const char* ExpertGroupsName(int expert_groups) {
  switch (expert_groups) {
    case kMoeGroupsForward:
      return "forward";
    case kMoeGroupsBack:
      return "back";
    default:
      return "fixed";
  }
}

}  // namespace

tailor::internal::GemmConfig CudaMoeKernels::HopperConfig(
    const GroupedGemmLaunch& l, const HopperVariant& v,
    const MoeGroupedGemmSm90Params& p) const {
  return {.kernel = v.swap_ab    ? "cuda.sm90_tma_wgmma_swap_ab"
                    : v.pingpong ? "cuda.sm90_tma_wgmma_pingpong"
                                 : "cuda.sm90_tma_wgmma",
          .n = l.n,
          .k = l.k,
          .cta_rows = v.a_rows,
          .cta_cols = kMoeSm90WRows,
          .k_tile = kMoeSm90KTile,
          .stages = MoeSm90Stages(v.a_rows, v.tma_store),
          .ctas = static_cast<int32_t>(v.ctas),
          .features = {
              {.key = "tma_store", .value = v.tma_store},
              {.key = "split_k", .value = p.split_k != 0 && v.cluster == 1},
              {.key = "cluster", .value = v.cluster},
              {.key = "w_evict_first", .value = p.w_evict_first != 0},
              {.key = "wave_sync", .value = p.wave_sync != 0},
              {.key = "expert_groups",
               .value = p.expert_groups,
               .name = ExpertGroupsName(p.expert_groups)},
              {.key = "pingpong", .value = v.pingpong}}};
}

absl::Status CudaMoeKernels::HopperGroupedGemm(Engine& engine,
                                               const GroupedGemmLaunch& l) {
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t max_tiles = l.plan.max_work * MoeSm90NTiles(gated, l.n);
  if (max_tiles == 0) return absl::OkStatus();
  MoeGroupedGemmSm90Params p = {};
  TAILOR_ASSIGN_OR_RETURN(const HopperVariant v, HopperParams(l, max_tiles, p));
  const SpecKey key =
      HopperGemmSpec(GemmSpec(l.dtype, l.n, l.k, l.tile_rows, l.epilogue,
                              MoeGemmKernel::kHopper),
                     pipeline_checks_, v.tma_store, v.cluster, v.swap_ab,
                     v.pingpong)
          .ToKey(engine.target());
  TAILOR_ASSIGN_OR_RETURN(SelectedKernel selected,
                          Select(engine, key, GenerateGroupedGemm,
                                 GenericGemmId(l.dtype, l.k, l.epilogue)));
  if (selected.generic) {
    return PortableGroupedGemm(engine, l, *selected.kernel, /*generic=*/true);
  }
  if (l.config != nullptr) *l.config = HopperConfig(l, v, p);
  LaunchConfig config =
      Config(v.ctas, 1, kMoeSm90Threads,
             MoeSm90SharedBytes(v.a_rows, v.tma_store), l.stream, l.rows);
  config.cluster = {.x = static_cast<uint32_t>(v.cluster)};
  return engine.Launch(key.op, *selected.kernel, config, p);
}

absl::Status CudaMoeKernels::GroupedGemm(Engine& engine,
                                         const GroupedGemmLaunch& l) {
  if (l.plan.device_work == nullptr) {
    return absl::InternalError(
        "moe.grouped_gemm: the cuda backend needs a device plan");
  }
  if (l.scale_mode != moe::ScaleMode::kNone) return Fp8GroupedGemm(engine, l);
  const MoeGemmKernel kernel =
      GemmKernelFor(hopper_, l.dtype, l.k, l.tile_rows);
  if (kernel == MoeGemmKernel::kHopper) return HopperGroupedGemm(engine, l);
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const bool mma = kernel == MoeGemmKernel::kMatrixCore;
  if (l.plan.max_work * MoeGemmNTiles(mma, gated, l.n) == 0) {
    return absl::OkStatus();
  }
  const SpecKey key =
      GemmSpec(l.dtype, l.n, l.k, l.tile_rows, l.epilogue, kernel)
          .ToKey(engine.target());
  TAILOR_ASSIGN_OR_RETURN(SelectedKernel selected,
                          Select(engine, key, GenerateGroupedGemm,
                                 GenericGemmId(l.dtype, l.k, l.epilogue)));
  return PortableGroupedGemm(engine, l, *selected.kernel, selected.generic);
}

absl::Status CudaMoeKernels::PortableGroupedGemm(Engine& engine,
                                                 const GroupedGemmLaunch& l,
                                                 const Kernel& kernel,
                                                 bool generic) {
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const bool mma = MoeGemmUsesMma(l.dtype == DType::kBF16, l.k);
  const int64_t max_tiles = l.plan.max_work * MoeGemmNTiles(mma, gated, l.n);
  if (max_tiles == 0) return absl::OkStatus();
  MoeGroupedGemmParams p = gpu::MoePortableGemmParamsOf(l);
  const int64_t resident =
      int64_t{multiprocessors_} * (mma ? kMmaCtasPerSm : kSimtCtasPerSm);
  const uint32_t ctas = static_cast<uint32_t>(std::min(max_tiles, resident));
  // The generic kernel's CTA is 64 rows whatever the plan tile.
  const int cta_tile =
      generic ? kMoePortableMaxRows : static_cast<int>(l.tile_rows);
  if (l.config != nullptr) {
    const char* name = mma ? (generic ? "cuda.generic_mma" : "cuda.sm80_mma")
                           : (generic ? "cuda.generic_simt" : "cuda.simt");
    *l.config = {.kernel = name,
                 .n = l.n,
                 .k = l.k,
                 .cta_rows = MoeGemmCtaRows(cta_tile),
                 .cta_cols = mma ? kMoeMmaWRows : kMoeSimtWRows,
                 .k_tile = mma ? kMoeMmaKTile : 0,
                 .stages = mma ? kMoeMmaStages : 0,
                 .ctas = static_cast<int32_t>(ctas)};
  }
  const LaunchConfig config =
      Config(ctas, 1, mma ? kMoeMmaThreads : kMoeSimtThreads,
             mma ? MoeMmaSharedBytes(cta_tile) : 0, l.stream, l.rows);
  if (generic) {
    return engine.LaunchFallback(OpKind::kMoeGroupedGemm, kernel, config, &p,
                                 sizeof(p));
  }
  return engine.Launch(OpKind::kMoeGroupedGemm, kernel, config, p);
}

absl::Status CudaMoeKernels::Combine(Engine& engine, const CombineLaunch& l) {
  if (l.tokens == 0) return absl::OkStatus();
  const SpecKey key =
      CombineKey(engine.target(), l.dtype, l.hidden_dim, l.topk);
  const MoeCombineParams p = gpu::MoeCombineParamsOf(l);
  const gpu::LaunchShape shape = gpu::MoeCombineShape(l);
  return LaunchKernel(engine, key, GenerateCombine,
                      l.dtype == DType::kBF16 ? GenericKernelId::kCombineBf16
                                              : GenericKernelId::kCombineF32,
                      Config(shape.grid_x, shape.grid_y, shape.threads,
                             shape.shared_bytes, l.stream, l.rows),
                      &p, sizeof(p));
}

}  // namespace tailor::cuda
