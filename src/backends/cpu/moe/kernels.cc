#include "backends/cpu/moe/kernels.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/moe/fp8.h"
#include "backends/cpu/moe/generic.h"
#include "core/stats.h"
#include "ops/moe/checks.h"
#include "ops/moe/spec.h"
#include "tailor/status.h"
#include "templates/cpu/moe/params.h"

namespace tailor::internal::cpu {
namespace {

using kernels::MoeCombineParams;
using kernels::MoeGroupedGemmParams;
using kernels::MoePackParams;
using kernels::MoeWorkItem;

// The templates read the host plan's work items as MoeWorkItem.
static_assert(sizeof(MoeWorkItem) == sizeof(plan::WorkItem));
static_assert(offsetof(MoeWorkItem, row_begin) ==
              offsetof(plan::WorkItem, row_begin));
static_assert(offsetof(MoeWorkItem, rows) == offsetof(plan::WorkItem, rows));
static_assert(offsetof(MoeWorkItem, group) == offsetof(plan::WorkItem, group));
static_assert(offsetof(MoeWorkItem, tail_class) ==
              offsetof(plan::WorkItem, tail_class));

// Rows (or tokens) per thread-pool chunk for the memory-bound kernels, so
// that tiny launches run inline on the calling thread.
constexpr uint32_t kRowsPerChunk = 32;
// Least multiply-adds per thread-pool chunk of a GEMM launch: waking a
// worker costs microseconds, so small launches (decode steps, small dims)
// stay on fewer threads.
constexpr int64_t kMinMacsPerChunk = int64_t{1} << 16;
constexpr int kTileN = kernels::kMoeGroupedGemmTileN;

// The kernel-side spelling of an element type.
absl::string_view KernelTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "tailor::kernels::bf16" : "float";
}

KernelSource EntryFor(absl::string_view header, const std::string& kernel) {
  return KernelSource{
      .code =
          absl::StrCat("#include \"templates/cpu/", header, "\"\n",
                       "TAILOR_CPU_ENTRY((tailor::kernels::", kernel, "))\n"),
      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> GeneratePack(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoePackSpec spec, MoePackSpec::FromKey(key));
  if (spec.scale_mode != moe::ScaleMode::kNone) return GenerateFp8Pack(spec);
  return EntryFor("moe/pack.h",
                  absl::StrCat("MoePackKernel<", KernelTypeName(spec.dtype),
                               ", ", spec.hidden, ">"));
}

absl::StatusOr<KernelSource> GenerateGroupedGemm(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeGemmSpec spec, MoeGemmSpec::FromKey(key));
  if (spec.kernel != MoeGemmKernel::kSimt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel (tile.n): the cpu has one grouped-GEMM kernel (0), got ",
        static_cast<int>(spec.kernel)));
  }
  if (spec.quantized()) return GenerateFp8GroupedGemm(spec);
  return EntryFor(
      "moe/grouped_gemm.h",
      absl::StrCat("MoeGroupedGemmKernel<", KernelTypeName(spec.dtype), ", ",
                   spec.n, ", ", spec.k, ", ", spec.tile_rows, ", ",
                   spec.tail_class, ", ", static_cast<int>(spec.epilogue),
                   ">"));
}

absl::StatusOr<KernelSource> GenerateCombine(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const MoeCombineSpec spec,
                          MoeCombineSpec::FromKey(key));
  return EntryFor("moe/combine.h",
                  absl::StrCat("MoeCombineKernel<", KernelTypeName(spec.dtype),
                               ", ", spec.hidden, ", ", spec.topk, ">"));
}

absl::Status RequireHostPlan(const MoePlanRef& plan) {
  if (plan.host == nullptr) {
    return absl::InternalError(
        "moe.grouped_gemm: the cpu backend needs a host plan");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Kernel>> CpuMoeKernels::KernelFor(
    Engine& engine, const SpecKey& key, KernelGeneratorFn library) {
  const KernelGeneratorFn generate = engine.GeneratorFor(key.op, library);
  if (engine.background_jit()) return engine.TryGetKernel(key, generate);
  return engine.GetKernel(key, generate);
}

absl::Status CpuMoeKernels::Pack(Engine& engine, const PackLaunch& launch) {
  if (launch.rows_in_order) {
    return absl::UnimplementedError(
        "rows_in_order: only cuda's quantizing Pack reads rows in order");
  }
  if (launch.scale_mode != moe::ScaleMode::kNone) {
    return Fp8Pack(engine, launch, &GeneratePack);
  }
  if (launch.rows == 0) return absl::OkStatus();
  const SpecKey key = PackKey(engine.target(), launch.dtype, launch.hidden_dim);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          KernelFor(engine, key, &GeneratePack));
  MoePackParams params = {.hidden = launch.hidden,
                          .permutation = launch.permutation,
                          .a = launch.a,
                          .topk = launch.topk};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.rows);  // R < 2^31
  config.block.x = kRowsPerChunk;
  if (kernel == nullptr) {
    const GenericPackParams generic = {
        .base = params, .dtype = launch.dtype, .hidden = launch.hidden_dim};
    return engine.LaunchFallback(key.op, GenericPackKernel(), config, &generic,
                                 sizeof(generic));
  }
  return engine.Launch(key.op, *kernel, config, params);
}

SpecKey PackKey(const KeyTarget& target, DType dtype, int64_t hidden_dim) {
  return MoePackSpec{.dtype = dtype, .hidden = hidden_dim}.ToKey(target);
}

SpecKey GroupedGemmKey(const KeyTarget& target, const GroupedGemmLaunch& launch,
                       int32_t tail_class) {
  return MoeGemmSpec{.dtype = launch.dtype,
                     .n = launch.n,
                     .k = launch.k,
                     .tile_rows = static_cast<int32_t>(launch.tile_rows),
                     .tail_class = tail_class,
                     .epilogue = launch.epilogue,
                     .scale_mode = launch.scale_mode}
      .ToKey(target);
}

SpecKey GroupedGemmKey(const Engine& engine, const GroupedGemmLaunch& launch,
                       int32_t tail_class) {
  return GroupedGemmKey(engine.target(), launch, tail_class);
}

SpecKey CombineKey(const KeyTarget& target, DType dtype, int64_t hidden_dim,
                   int64_t topk) {
  return MoeCombineSpec{.dtype = dtype, .hidden = hidden_dim, .topk = topk}
      .ToKey(target);
}

absl::StatusOr<KernelSource> GenerateMoeKernel(const SpecKey& key) {
  switch (key.op) {
    case OpKind::kMoePack:
      return GeneratePack(key);
    case OpKind::kMoeGroupedGemm:
      return GenerateGroupedGemm(key);
    case OpKind::kMoeCombine:
      return GenerateCombine(key);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "key.op: ", GetOpInfo(key.op).name, " is not a cpu moe.* kernel"));
  }
}

absl::StatusOr<std::vector<int32_t>> TailClassesOf(
    const moe::RoutingPolicy& policy) {
  const CpuMoeKernels backend;
  TAILOR_ASSIGN_OR_RETURN(
      plan::PlanParams params,
      ResolvePolicy(policy, backend.DefaultTileRows(0, 0, 0),
                    backend.MaxTileRows()));
  std::vector<int32_t> classes = {0};
  for (int64_t rows = 1; rows < params.tile_rows; ++rows) {
    TAILOR_ASSIGN_OR_RETURN(int32_t tail_class,
                            plan::TailClassOf(rows, params));
    if (std::find(classes.begin(), classes.end(), tail_class) == classes.end())
      classes.push_back(tail_class);
  }
  std::sort(classes.begin() + 1, classes.end());
  return classes;
}

absl::StatusOr<std::vector<KernelJob>> MoeLayerKernels(
    const KeyTarget& target, const MoeLayerShape& layer) {
  TAILOR_ASSIGN_OR_RETURN(std::vector<int32_t> classes,
                          TailClassesOf(layer.policy));
  const int32_t tile_rows =
      layer.policy.tile_rows != 0
          ? layer.policy.tile_rows
          : CpuMoeKernels().DefaultTileRows(0, layer.experts, 0);
  const moe::ScaleMode mode = layer.scale_mode;
  // Block mode quantizes gemm1's output in its epilogue; the other modes
  // requantize it with a Pack over I.
  const bool quantizing_epilogue = mode == moe::ScaleMode::kBlock;
  const bool requantizing =
      mode != moe::ScaleMode::kNone && !quantizing_epilogue;
  const GroupedGemmLaunch gate_up = {.dtype = quantizing_epilogue
                                                  ? DType::kF8E4M3
                                              : requantizing ? DType::kF32
                                                             : layer.dtype,
                                     .n = 2 * layer.intermediate,
                                     .k = layer.hidden,
                                     .tile_rows = tile_rows,
                                     .epilogue = moe::Epilogue::kSiluAndMul,
                                     .scale_mode = mode};
  const GroupedGemmLaunch down = {.dtype = layer.dtype,
                                  .n = layer.hidden,
                                  .k = layer.intermediate,
                                  .tile_rows = tile_rows,
                                  .epilogue = moe::Epilogue::kNone,
                                  .scale_mode = mode};
  std::vector<KernelJob> jobs = {
      {MoePackSpec{
           .dtype = layer.dtype, .hidden = layer.hidden, .scale_mode = mode}
           .ToKey(target),
       &GenerateMoeKernel}};
  if (requantizing) {  // gemm1's f32 rows
    jobs.push_back({MoePackSpec{.dtype = DType::kF32,
                                .hidden = layer.intermediate,
                                .scale_mode = mode}
                        .ToKey(target),
                    &GenerateMoeKernel});
  }
  for (const GroupedGemmLaunch* gemm : {&gate_up, &down}) {
    for (int32_t tail_class : classes) {
      jobs.push_back(
          {GroupedGemmKey(target, *gemm, tail_class), &GenerateMoeKernel});
    }
  }
  jobs.push_back({CombineKey(target, layer.dtype, layer.hidden, layer.topk),
                  &GenerateMoeKernel});
  return jobs;
}

absl::Status CpuMoeKernels::GroupedGemm(Engine& engine,
                                        const GroupedGemmLaunch& launch) {
  TAILOR_RETURN_IF_ERROR(RequireHostPlan(launch.plan));
  if (launch.scale_mode != moe::ScaleMode::kNone) {
    return Fp8GroupedGemm(engine, launch, &GenerateGroupedGemm);
  }
  const plan::PiecewisePlan& plan = *launch.plan.host;
  if (launch.config != nullptr) {
    *launch.config = {.kernel = "cpu",
                      .n = launch.n,
                      .k = launch.k,
                      .cta_rows = static_cast<int32_t>(launch.tile_rows),
                      .cta_cols = kTileN};
  }
  const bool gated = launch.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t out_cols = gated ? launch.n / 2 : launch.n;
  const int64_t out_per_tile = gated ? kTileN / 2 : kTileN;
  const uint32_t n_tiles =
      static_cast<uint32_t>((out_cols + out_per_tile - 1) / out_per_tile);
  // The variants write disjoint rows of C, so they go out as batches of
  // independent launches: their work items share one parallel loop and the
  // small tail launches overlap the core instead of running after it on
  // idle threads. Fixed-size batches: no allocation.
  constexpr size_t kBatch = 16;
  std::array<std::shared_ptr<Kernel>, kBatch> kernels;
  std::array<MoeGroupedGemmParams, kBatch> params;
  std::array<GenericGemmParams, kBatch> generic;  // background JIT fallbacks
  size_t fallbacks = 0;
  std::array<LaunchRequest, kBatch> requests;
  size_t pending = 0;
  for (const plan::VariantRange& range : plan.variants()) {
    if (range.size() == 0) continue;
    SpecKey key = GroupedGemmKey(engine, launch, range.tail_class);
    TAILOR_ASSIGN_OR_RETURN(kernels[pending],
                            KernelFor(engine, key, &GenerateGroupedGemm));
    params[pending] = {.a = launch.a,
                       .w = launch.w,
                       .c = launch.c,
                       .work = reinterpret_cast<const MoeWorkItem*>(
                           plan.work().data() + range.begin),
                       .num_work = range.size()};
    // Item = n_tile * num_work + work index (see the template).
    LaunchRequest& request = requests[pending];
    request = {.kernel = kernels[pending].get(),
               .params = &params[pending],
               .params_size = sizeof(MoeGroupedGemmParams)};
    if (kernels[pending] == nullptr) {  // not compiled yet: the generic one
      generic[pending] = {.base = params[pending],
                          .dtype = launch.dtype,
                          .n = launch.n,
                          .k = launch.k,
                          .gated = gated};
      request.kernel = &GenericGemmKernel();
      request.params = &generic[pending];
      request.params_size = sizeof(GenericGemmParams);
      ++fallbacks;
    }
    request.config.grid = {.x = static_cast<uint32_t>(range.size()),
                           .y = n_tiles};
    const int64_t rows =
        range.tail_class != 0 ? range.tail_class : plan.tile_rows();
    const int64_t macs_per_item = rows * kTileN * launch.k;
    request.config.block.x = static_cast<uint32_t>(
        std::max<int64_t>(1, kMinMacsPerChunk / macs_per_item));
    if (++pending == kBatch) {
      engine.stats().Add(engine.stats().fallback_launches, fallbacks);
      fallbacks = 0;
      TAILOR_RETURN_IF_ERROR(engine.LaunchBatch(
          OpKind::kMoeGroupedGemm, absl::MakeSpan(requests.data(), pending)));
      pending = 0;
    }
  }
  if (pending == 0) return absl::OkStatus();
  engine.stats().Add(engine.stats().fallback_launches, fallbacks);
  return engine.LaunchBatch(OpKind::kMoeGroupedGemm,
                            absl::MakeSpan(requests.data(), pending));
}

absl::Status CpuMoeKernels::Combine(Engine& engine,
                                    const CombineLaunch& launch) {
  if (launch.tokens == 0) return absl::OkStatus();
  const SpecKey key =
      CombineKey(engine.target(), launch.dtype, launch.hidden_dim, launch.topk);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          KernelFor(engine, key, &GenerateCombine));
  MoeCombineParams params = {.c = launch.c,
                             .weights = launch.weights,
                             .inverse = launch.inverse,
                             .out = launch.out};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.tokens);  // T < 2^31
  config.block.x = kRowsPerChunk;
  if (kernel == nullptr) {
    const GenericCombineParams generic = {.base = params,
                                          .dtype = launch.dtype,
                                          .hidden = launch.hidden_dim,
                                          .topk = launch.topk};
    return engine.LaunchFallback(key.op, GenericCombineKernel(), config,
                                 &generic, sizeof(generic));
  }
  return engine.Launch(key.op, *kernel, config, params);
}

}  // namespace tailor::internal::cpu
