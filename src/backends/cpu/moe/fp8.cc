#include "backends/cpu/moe/fp8.h"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/moe/kernels.h"
#include "tailor/status.h"
#include "templates/cpu/moe/fp8_params.h"

namespace tailor::internal::cpu {
namespace {

using kernels::MoeFp8GroupedGemmParams;
using kernels::MoeFp8PackParams;
using kernels::MoeWorkItem;

constexpr uint32_t kRowsPerChunk = 32;
constexpr int64_t kMinMacsPerChunk = int64_t{1} << 16;

// C's element type in the template (e4m3 output: the template ignores T).
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

// GemmChoice::features' value of the scale mode.
const char* ScaleModeName(moe::ScaleMode mode) {
  switch (mode) {
    case moe::ScaleMode::kPerTensor:
      return "per_tensor";
    case moe::ScaleMode::kPerChannel:
      return "per_channel";
    case moe::ScaleMode::kBlock:
      return "block";
    default:
      return "none";
  }
}

// The template's activation quantization for a scale mode.
int PackMode(moe::ScaleMode mode) {
  switch (mode) {
    case moe::ScaleMode::kPerTensor:
      return kernels::kMoeFp8PackStatic;
    case moe::ScaleMode::kPerChannel:
      return kernels::kMoeFp8PackPerToken;
    default:
      return kernels::kMoeFp8PackGroups;
  }
}

// The template's scale mode.
int GemmMode(moe::ScaleMode mode) {
  switch (mode) {
    case moe::ScaleMode::kPerTensor:
      return kernels::kMoeFp8ScalePerTensor;
    case moe::ScaleMode::kPerChannel:
      return kernels::kMoeFp8ScalePerChannel;
    default:
      return kernels::kMoeFp8ScaleBlock;
  }
}

// The template's epilogue: an e4m3 C is the quantizing silu_and_mul.
int GemmEpilogue(moe::Epilogue epilogue, DType c) {
  if (c == DType::kF8E4M3) return kernels::kMoeEpilogueSiluAndMulQuant;
  return static_cast<int>(epilogue);
}

absl::StatusOr<std::shared_ptr<Kernel>> Fp8KernelFor(
    Engine& engine, const SpecKey& key, KernelGeneratorFn generate) {
  return engine.GetKernel(key, engine.GeneratorFor(key.op, generate));
}

// The plan summary's record of a launch (the N tile of its epilogue).
GemmConfig Fp8Config(const GroupedGemmLaunch& launch, int tile_n) {
  return {.kernel = "cpu",
          .n = launch.n,
          .k = launch.k,
          .cta_rows = static_cast<int32_t>(launch.tile_rows),
          .cta_cols = tile_n,
          .k_tile = kernels::kMoeFp8Block,
          .features = {{.key = "scale_mode",
                        .value = static_cast<int64_t>(launch.scale_mode),
                        .name = ScaleModeName(launch.scale_mode)}}};
}

// The params of the launch of one plan variant (its work items).
MoeFp8GroupedGemmParams Fp8Params(const GroupedGemmLaunch& launch,
                                  const plan::PiecewisePlan& plan,
                                  const plan::VariantRange& range) {
  return {.a = static_cast<const uint8_t*>(launch.a),
          .a_scales = launch.a_scales,
          .w = static_cast<const uint8_t*>(launch.w),
          .w_scales = launch.w_scales,
          .c = launch.c,
          .c_scales = launch.c_scales,
          .work = reinterpret_cast<const MoeWorkItem*>(plan.work().data() +
                                                       range.begin),
          .num_work = range.size(),
          .a_scale_rows = launch.a_scale_rows,
          .c_scale_rows = launch.c_scale_rows};
}

MoeGemmSpec SpecOf(const GroupedGemmLaunch& launch, int32_t tail_class) {
  return MoeGemmSpec{.dtype = launch.dtype,
                     .n = launch.n,
                     .k = launch.k,
                     .tile_rows = static_cast<int32_t>(launch.tile_rows),
                     .tail_class = tail_class,
                     .epilogue = launch.epilogue,
                     .scale_mode = launch.scale_mode};
}

}  // namespace

KernelSource GenerateFp8Pack(const MoePackSpec& spec) {
  return EntryFor(
      "moe/fp8_pack.h",
      absl::StrCat("MoeFp8PackKernel<", KernelTypeName(spec.dtype), ", ",
                   spec.hidden, ", ", PackMode(spec.scale_mode), ">"));
}

KernelSource GenerateFp8GroupedGemm(const MoeGemmSpec& spec) {
  return EntryFor(
      "moe/fp8_grouped_gemm.h",
      absl::StrCat("MoeFp8GroupedGemmKernel<", KernelTypeName(spec.dtype), ", ",
                   spec.n, ", ", spec.k, ", ", spec.tile_rows, ", ",
                   spec.tail_class, ", ",
                   GemmEpilogue(spec.epilogue, spec.dtype), ", ",
                   GemmMode(spec.scale_mode), ">"));
}

absl::Status Fp8Pack(Engine& engine, const PackLaunch& launch,
                     KernelGeneratorFn generate) {
  if (launch.rows == 0) return absl::OkStatus();
  const SpecKey key = MoePackSpec{.dtype = launch.dtype,
                                  .hidden = launch.hidden_dim,
                                  .scale_mode = launch.scale_mode}
                          .ToKey(engine.target());
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          Fp8KernelFor(engine, key, generate));
  const MoeFp8PackParams params = {.hidden = launch.hidden,
                                   .permutation = launch.permutation,
                                   .a = static_cast<uint8_t*>(launch.a),
                                   .a_scales = launch.a_scales,
                                   .static_scale = launch.static_scale,
                                   .topk = launch.topk,
                                   .tokens = launch.tokens,
                                   .scale_rows = launch.scale_rows};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.rows);  // R < 2^31
  config.block.x = kRowsPerChunk;
  return engine.Launch(key.op, *kernel, config, params);
}

absl::Status Fp8GroupedGemm(Engine& engine, const GroupedGemmLaunch& launch,
                            KernelGeneratorFn generate) {
  const plan::PiecewisePlan& plan = *launch.plan.host;
  const bool quantized = launch.dtype == DType::kF8E4M3;
  const int tile_n =
      quantized ? kernels::kMoeFp8GemmQuantTileN : kernels::kMoeFp8GemmTileN;
  if (launch.config != nullptr) *launch.config = Fp8Config(launch, tile_n);
  const bool gated = launch.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t out_cols = gated ? launch.n / 2 : launch.n;
  const int64_t out_per_tile = gated ? tile_n / 2 : tile_n;
  const auto n_tiles =
      static_cast<uint32_t>((out_cols + out_per_tile - 1) / out_per_tile);
  // As the bf16 launch: the variants write disjoint rows, so they go out as
  // batches of independent launches sharing one parallel loop.
  constexpr size_t kBatch = 16;
  std::array<std::shared_ptr<Kernel>, kBatch> kernels;
  std::array<MoeFp8GroupedGemmParams, kBatch> params;
  std::array<LaunchRequest, kBatch> requests;
  size_t pending = 0;
  for (const plan::VariantRange& range : plan.variants()) {
    if (range.size() == 0) continue;
    const SpecKey key = SpecOf(launch, range.tail_class).ToKey(engine.target());
    TAILOR_ASSIGN_OR_RETURN(kernels[pending],
                            Fp8KernelFor(engine, key, generate));
    params[pending] = Fp8Params(launch, plan, range);
    LaunchRequest& request = requests[pending];
    request = {.kernel = kernels[pending].get(),
               .params = &params[pending],
               .params_size = sizeof(MoeFp8GroupedGemmParams)};
    request.config.grid = {.x = static_cast<uint32_t>(range.size()),
                           .y = n_tiles};
    const int64_t rows =
        range.tail_class != 0 ? range.tail_class : plan.tile_rows();
    request.config.block.x = static_cast<uint32_t>(
        std::max<int64_t>(1, kMinMacsPerChunk / (rows * tile_n * launch.k)));
    if (++pending == kBatch) {
      TAILOR_RETURN_IF_ERROR(engine.LaunchBatch(
          OpKind::kMoeGroupedGemm, absl::MakeSpan(requests.data(), pending)));
      pending = 0;
    }
  }
  if (pending == 0) return absl::OkStatus();
  return engine.LaunchBatch(OpKind::kMoeGroupedGemm,
                            absl::MakeSpan(requests.data(), pending));
}

}  // namespace tailor::internal::cpu
