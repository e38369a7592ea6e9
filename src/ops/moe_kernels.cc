#include "ops/moe_kernels.h"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// ---- host mirrors of the templates' Params (keep layouts identical) ---------

struct PackParams {  // templates/cpu/moe_pack.h
  const void* hidden;
  const int32_t* permutation;
  void* a;
  int64_t topk;
};

struct GroupedGemmParams {  // templates/cpu/moe_grouped_gemm.h
  const void* a;
  const void* w;
  void* c;
  const plan::WorkItem* work;
  int64_t num_work;
};

struct CombineParams {  // templates/cpu/moe_combine.h
  const void* c;
  const float* weights;
  const int32_t* inverse;
  void* out;
};

// Rows (or tokens) per thread-pool chunk for the memory-bound kernels, so
// that tiny launches run inline on the calling thread.
constexpr uint32_t kRowsPerChunk = 32;
// Least multiply-adds per thread-pool chunk of a GEMM launch: waking a
// worker costs microseconds, so small launches (decode steps, small dims)
// stay on fewer threads.
constexpr int64_t kMinMacsPerChunk = int64_t{1} << 16;

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
  return EntryFor("moe_pack.h",
                  absl::StrCat("MoePackKernel<", KernelTypeName(key.dtypes[0]),
                               ", ", key.dims[0], ">"));
}

absl::StatusOr<KernelSource> GenerateGroupedGemm(const SpecKey& key) {
  return EntryFor(
      "moe_grouped_gemm.h",
      absl::StrCat("MoeGroupedGemmKernel<", KernelTypeName(key.dtypes[0]), ", ",
                   key.dims[0], ", ", key.dims[1], ", ", key.tile.m, ", ",
                   key.tail_class, ", ", key.variant, ">"));
}

absl::StatusOr<KernelSource> GenerateCombine(const SpecKey& key) {
  return EntryFor(
      "moe_combine.h",
      absl::StrCat("MoeCombineKernel<", KernelTypeName(key.dtypes[0]), ", ",
                   key.dims[0], ", ", key.dims[1], ">"));
}

}  // namespace

SpecKey PackKey(const KeyTarget& target, DType dtype, int64_t hidden_dim) {
  SpecKey key = target.MakeKey(OpKind::kMoePack);
  key.dtypes = {dtype};
  key.dims = {hidden_dim};
  return key;
}

SpecKey GroupedGemmKey(const KeyTarget& target, const GroupedGemmShape& shape,
                       int32_t tail_class) {
  SpecKey key = target.MakeKey(OpKind::kMoeGroupedGemm);
  key.dtypes = {shape.dtype, shape.dtype, DType::kF32};
  key.dims = {shape.n, shape.k};
  key.tile.m = shape.tile_rows;
  key.tail_class = tail_class;
  key.variant = static_cast<uint32_t>(shape.epilogue);
  return key;
}

SpecKey CombineKey(const KeyTarget& target, DType dtype, int64_t hidden_dim,
                   int64_t topk) {
  SpecKey key = target.MakeKey(OpKind::kMoeCombine);
  key.dtypes = {dtype, DType::kF32, dtype};
  key.dims = {hidden_dim, topk};
  return key;
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
          "key.op: ", GetOpInfo(key.op).name, " is not a moe.* kernel"));
  }
}

absl::Status LaunchPack(Engine& engine, const PackLaunch& launch) {
  if (launch.rows == 0) return absl::OkStatus();
  SpecKey key = PackKey(engine.target(), launch.dtype, launch.hidden_dim);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          engine.GetKernel(key, GeneratePack));
  PackParams params = {.hidden = launch.hidden,
                       .permutation = launch.permutation,
                       .a = launch.a,
                       .topk = launch.topk};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.rows);  // R < 2^31
  config.block.x = kRowsPerChunk;
  return engine.Launch(key.op, *kernel, config, params);
}

SpecKey GroupedGemmKey(const Engine& engine, const GroupedGemmLaunch& launch,
                       int32_t tail_class) {
  return GroupedGemmKey(
      engine.target(),
      {.dtype = launch.dtype,
       .n = launch.n,
       .k = launch.k,
       .tile_rows = static_cast<int32_t>(launch.plan->tile_rows()),
       .epilogue = launch.epilogue},
      tail_class);
}

absl::Status LaunchGroupedGemm(Engine& engine,
                               const GroupedGemmLaunch& launch) {
  const bool gated = launch.epilogue == moe::Epilogue::kSiluAndMul;
  const int64_t out_cols = gated ? launch.n / 2 : launch.n;
  const int64_t out_per_tile =
      gated ? kGroupedGemmTileN / 2 : kGroupedGemmTileN;
  const uint32_t n_tiles =
      static_cast<uint32_t>((out_cols + out_per_tile - 1) / out_per_tile);
  // The variants write disjoint rows of C, so they go out as batches of
  // independent launches: on the CPU their work items share one parallel
  // loop and the small tail launches overlap the core instead of running
  // after it on idle threads. Fixed-size batches: no allocation.
  constexpr size_t kBatch = 16;
  std::array<std::shared_ptr<Kernel>, kBatch> kernels;
  std::array<GroupedGemmParams, kBatch> params;
  std::array<LaunchRequest, kBatch> requests;
  size_t pending = 0;
  for (const plan::VariantRange& range : launch.plan->variants()) {
    if (range.size() == 0) continue;
    SpecKey key = GroupedGemmKey(engine, launch, range.tail_class);
    TAILOR_ASSIGN_OR_RETURN(kernels[pending],
                            engine.GetKernel(key, GenerateGroupedGemm));
    params[pending] = {.a = launch.a,
                       .w = launch.w,
                       .c = launch.c,
                       .work = launch.plan->work().data() + range.begin,
                       .num_work = range.size()};
    // Item = n_tile * num_work + work index (see the template).
    LaunchRequest& request = requests[pending];
    request = {.kernel = kernels[pending].get(),
               .params = &params[pending],
               .params_size = sizeof(GroupedGemmParams)};
    request.config.grid = {.x = static_cast<uint32_t>(range.size()),
                           .y = n_tiles};
    const int64_t rows =
        range.tail_class != 0 ? range.tail_class : launch.plan->tile_rows();
    const int64_t macs_per_item = rows * kGroupedGemmTileN * launch.k;
    request.config.block.x = static_cast<uint32_t>(
        std::max<int64_t>(1, kMinMacsPerChunk / macs_per_item));
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

absl::Status LaunchCombine(Engine& engine, const CombineLaunch& launch) {
  if (launch.tokens == 0) return absl::OkStatus();
  SpecKey key =
      CombineKey(engine.target(), launch.dtype, launch.hidden_dim, launch.topk);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          engine.GetKernel(key, GenerateCombine));
  CombineParams params = {.c = launch.c,
                          .weights = launch.weights,
                          .inverse = launch.inverse,
                          .out = launch.out};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(launch.tokens);  // T < 2^31
  config.block.x = kRowsPerChunk;
  return engine.Launch(key.op, *kernel, config, params);
}

}  // namespace tailor::internal
