#include "backends/hip/moe/kernels.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/gpu/error_words.h"
#include "backends/gpu/moe_launch.h"
#include "tailor/status.h"
#include "templates/hip/moe/params.h"

namespace tailor::hip {

using ::tailor::gpu::kMoeMaxTileRows;
using ::tailor::gpu::kMoeRouteHeaderBytes;
using ::tailor::gpu::kMoeRouteSegment;
using ::tailor::internal::CombineLaunch;
using ::tailor::internal::DeviceRouteLaunch;
using ::tailor::internal::Engine;
using ::tailor::internal::GroupedGemmLaunch;
using ::tailor::internal::Kernel;
using ::tailor::internal::KernelSource;
using ::tailor::internal::KeyTarget;
using ::tailor::internal::LaunchConfig;
using ::tailor::internal::MoeCombineSpec;
using ::tailor::internal::MoeGemmKernel;
using ::tailor::internal::MoeGemmSpec;
using ::tailor::internal::MoePackSpec;
using ::tailor::internal::MoeRouteKernel;
using ::tailor::internal::MoeRouteSpec;
using ::tailor::internal::OpKind;
using ::tailor::internal::PackLaunch;
using ::tailor::internal::RouteErrors;
using ::tailor::internal::SpecKey;

static_assert(sizeof(MoeWorkItem) == sizeof(tailor::plan::WorkItem));
static_assert(HipMoeKernels::kMaxTileRows == kMoeMaxTileRows);
static_assert(sizeof(MoeRouteHeader) <= kMoeRouteHeaderBytes);

namespace {

// Persistent grids: CTAs per CU of each GEMM kernel.
// MFMA: 48 KiB of LDS (64-row tiles) of a CU's 64 KiB: one CTA per CU.
constexpr int kMfmaCtasPerCu = 1;
constexpr int kSimtCtasPerCu = 4;

absl::string_view KernelTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::cuda::bf16" : "float";
}

// "includes plus one extern "C" wrapper" (runtime/hip/entry.h).
KernelSource Entry(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code = absl::StrCat("#include \"templates/hip/", header, "\"\n",
                           "TAILOR_HIP_ENTRY(tailor_entry, (", kernel, "))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> GenerateRoute(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeRouteSpec spec, MoeRouteSpec::FromKey(key));
  switch (spec.kernel) {
    case MoeRouteKernel::kCountPlan:
      return Entry("moe/route.h", "tailor::cuda::MoeRouteCountPlan");
    case MoeRouteKernel::kFused:
      return Entry("moe/route.h", "tailor::cuda::MoeRouteFused");
    case MoeRouteKernel::kScatter:
      break;
  }
  return Entry("moe/route.h", absl::StrCat("tailor::cuda::MoeRouteScatter<",
                                           spec.scatter_warps, ">"));
}

absl::StatusOr<KernelSource> GeneratePack(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoePackSpec spec, MoePackSpec::FromKey(key));
  return Entry("moe/pack.h", absl::StrCat("tailor::cuda::MoePack<",
                                          KernelTypeName(spec.dtype), ", ",
                                          spec.hidden, ">"));
}

absl::StatusOr<KernelSource> GenerateGroupedGemm(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeGemmSpec spec, MoeGemmSpec::FromKey(key));
  const std::string shape =
      absl::StrCat(spec.n, ", ", spec.k, ", ", spec.tile_rows, ", ",
                   static_cast<int>(spec.epilogue), ">");
  if (spec.kernel == MoeGemmKernel::kMatrixCore) {
    return Entry("moe/grouped_gemm.h",
                 absl::StrCat("tailor::hip::MoeGroupedGemmMfma<", shape));
  }
  return Entry(
      "moe/grouped_gemm.h",
      absl::StrCat("tailor::hip::MoeGroupedGemmSimtHip<",
                   spec.dtype == DType::kBF16 ? "true" : "false", ", ", shape));
}

absl::StatusOr<KernelSource> GenerateCombine(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeCombineSpec spec,
                          MoeCombineSpec::FromKey(key));
  return Entry(
      "moe/combine.h",
      absl::StrCat("tailor::cuda::MoeCombine<", KernelTypeName(spec.dtype),
                   ", ", spec.hidden, ", ", spec.topk, ">"));
}

absl::Status LaunchKernel(
    Engine& engine, const SpecKey& key,
    absl::StatusOr<KernelSource> (*generate)(const SpecKey&),
    const LaunchConfig& config, const void* params, size_t params_size) {
  TAILOR_ASSIGN_OR_RETURN(
      std::shared_ptr<Kernel> kernel,
      engine.GetKernel(key, engine.GeneratorFor(key.op, generate)));
  return engine.Launch(key.op, *kernel, config, params, params_size);
}

LaunchConfig Config(uint32_t grid_x, uint32_t grid_y, uint32_t threads,
                    uint32_t lds_bytes, void* stream) {
  LaunchConfig config;
  config.grid = {.x = grid_x, .y = grid_y};
  config.block = {.x = threads};
  config.shared_bytes = lds_bytes;
  config.stream = stream;
  return config;
}

LaunchConfig ConfigOf(const gpu::LaunchShape& shape, void* stream) {
  return Config(shape.grid_x, shape.grid_y, shape.threads, shape.shared_bytes,
                stream);
}

}  // namespace

absl::StatusOr<KernelSource> GenerateHipMoeKernel(const SpecKey& key) {
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
          "hip moe kernels: no generator for ", GetOpInfo(key.op).name));
  }
}

HipGemmPlan PlanHipGroupedGemm(const GroupedGemmLaunch& l,
                               const KeyTarget& target, int compute_units,
                               bool has_mfma_bf16) {
  const bool gated = l.epilogue == moe::Epilogue::kSiluAndMul;
  const bool mfma =
      has_mfma_bf16 && HipGemmUsesMfma(l.dtype == DType::kBF16, l.k);
  const int64_t max_tiles = l.plan.max_work * HipGemmNTiles(mfma, gated, l.n);
  const MoeGemmSpec spec = {
      .dtype = l.dtype,
      .n = l.n,
      .k = l.k,
      .tile_rows = static_cast<int32_t>(l.tile_rows),
      .epilogue = l.epilogue,
      .kernel = mfma ? MoeGemmKernel::kMatrixCore : MoeGemmKernel::kSimt};
  const int64_t resident =
      compute_units > 0
          ? int64_t{compute_units} * (mfma ? kMfmaCtasPerCu : kSimtCtasPerCu)
          : max_tiles;
  const uint32_t ctas = static_cast<uint32_t>(std::min(max_tiles, resident));
  return HipGemmPlan{
      .spec = spec,
      .key = spec.ToKey(target),
      .config = Config(
          ctas, 1, mfma ? kHipMfmaThreads : kHipSimtThreads,
          mfma ? HipMfmaLdsBytes(static_cast<int>(l.tile_rows)) : 0, l.stream)};
}

// ---- Route ------------------------------------------------------------------

std::vector<HipLaunchPlan> PlanHipRoute(int64_t assignments, int64_t experts,
                                        const KeyTarget& target, void* stream) {
  const gpu::MoeRouteKernels kernels = gpu::PlanMoeRoute(
      assignments, experts, kHipWaveLanes, HipRouteScatterWaves(experts));
  std::vector<HipLaunchPlan> launches;
  for (int i = 0; i < kernels.count; ++i) {
    const gpu::MoeRouteKernel& k = kernels.kernel[i];
    const auto kernel = static_cast<MoeRouteKernel>(k.variant);
    const MoeRouteSpec spec = {
        .kernel = kernel,
        .scatter_warps =
            kernel == MoeRouteKernel::kScatter ? k.scatter_warps : 0};
    launches.push_back({spec.ToKey(target), ConfigOf(k.shape, stream)});
  }
  return launches;
}

int64_t HipMoeKernels::RouteScratchBytes(int64_t max_assignments,
                                         int64_t num_experts) const {
  const int64_t segments =
      (max_assignments + kMoeRouteSegment - 1) / kMoeRouteSegment;
  return kMoeRouteHeaderBytes +
         4 * num_experts * std::max<int64_t>(1, segments);
}

int64_t HipMoeKernels::MaxDeviceRouteExperts() const {
  return kHipMaxDeviceExperts;
}

absl::Status HipMoeKernels::InitRouteScratch(Engine&, void* route_scratch,
                                             void* stream) {
  char* header = static_cast<char*>(route_scratch);
  TAILOR_RETURN_IF_ERROR(
      backend_.FillDevice(header, 0xff, gpu::kRouteHeaderErrorBytes, stream));
  return backend_.FillDevice(
      header + gpu::kRouteHeaderErrorBytes, 0,
      gpu::kRouteHeaderBytesUsed - gpu::kRouteHeaderErrorBytes, stream);
}

absl::Status HipMoeKernels::Route(Engine& engine, const DeviceRouteLaunch& l) {
  const MoeRouteParams p = gpu::MoeRouteParamsOf(
      l, reinterpret_cast<int*>(static_cast<char*>(l.route_scratch) +
                                kMoeRouteHeaderBytes));
  for (const HipLaunchPlan& launch :
       PlanHipRoute(l.tokens * l.topk, l.experts, engine.target(), l.stream)) {
    TAILOR_RETURN_IF_ERROR(LaunchKernel(engine, launch.key, GenerateRoute,
                                        launch.config, &p, sizeof(p)));
  }
  return absl::OkStatus();
}

absl::StatusOr<RouteErrors> HipMoeKernels::TakeRouteErrors(Engine&,
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

absl::Status HipMoeKernels::Pack(Engine& engine, const PackLaunch& l) {
  if (l.rows_in_order) {
    return absl::UnimplementedError(
        "rows_in_order: only cuda's quantizing Pack reads rows in order");
  }
  if (l.rows == 0) return absl::OkStatus();
  const SpecKey key =
      MoePackSpec{.dtype = l.dtype, .hidden = l.hidden_dim}.ToKey(
          engine.target());
  const MoePackParams p = gpu::MoePackParamsOf(l);
  return LaunchKernel(engine, key, GeneratePack,
                      ConfigOf(gpu::MoePackShape(l), l.stream), &p, sizeof(p));
}

absl::Status HipMoeKernels::GroupedGemm(Engine& engine,
                                        const GroupedGemmLaunch& l) {
  if (l.plan.device_work == nullptr) {
    return absl::InternalError(
        "moe.grouped_gemm: the hip backend needs a device plan");
  }
  const HipGemmPlan plan =
      PlanHipGroupedGemm(l, engine.target(), compute_units_, has_mfma_bf16_);
  if (plan.config.grid.x == 0) return absl::OkStatus();
  if (l.config != nullptr) {
    *l.config = {.kernel = plan.spec.kernel == MoeGemmKernel::kMatrixCore
                               ? "hip.mfma"
                               : "hip.simt",
                 .n = l.n,
                 .k = l.k,
                 .cta_rows = static_cast<int32_t>(l.tile_rows),
                 .ctas = static_cast<int32_t>(plan.config.grid.x)};
  }
  const MoeGroupedGemmParams p = gpu::MoePortableGemmParamsOf(l);
  return LaunchKernel(engine, plan.key, GenerateGroupedGemm, plan.config, &p,
                      sizeof(p));
}

absl::Status HipMoeKernels::Combine(Engine& engine, const CombineLaunch& l) {
  if (l.tokens == 0) return absl::OkStatus();
  const SpecKey key =
      MoeCombineSpec{.dtype = l.dtype, .hidden = l.hidden_dim, .topk = l.topk}
          .ToKey(engine.target());
  const MoeCombineParams p = gpu::MoeCombineParamsOf(l);
  return LaunchKernel(engine, key, GenerateCombine,
                      ConfigOf(gpu::MoeCombineShape(l), l.stream), &p,
                      sizeof(p));
}

}  // namespace tailor::hip
