#include "kernels/test_ops.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "api/internals.h"
#include "core/engine.h"
#include "core/family_registry.h"
#include "core/tensor_checks.h"
#include "kernels/test_op_kinds.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

// Host mirrors of the template params (templates/cpu/test_kernels.h).
struct AxpyParams {
  const float* x;
  float* y;
  int64_t n;
  float a;
};
struct EmptyParams {
  int64_t unused;
};

absl::StatusOr<KernelSource> GenerateEmpty(const SpecKey&) {
  return KernelSource{.code =
                          "#include \"templates/cpu/test_kernels.h\"\n"
                          "TAILOR_CPU_ENTRY((tailor::kernels::EmptyKernel))\n",
                      .entry = "tailor_entry"};
}

absl::StatusOr<KernelSource> GenerateAxpy(const SpecKey& key) {
  return KernelSource{
      .code = absl::StrCat("#include \"templates/cpu/test_kernels.h\"\n"
                           "TAILOR_CPU_ENTRY((tailor::kernels::AxpyKernel<",
                           key.tile.m, ">))\n"),
      .entry = "tailor_entry"};
}

// The CPU test family: its generator, registered with the family registry
// before any Runtime exists.
absl::StatusOr<KernelSource> GenerateCpuTestKernel(const SpecKey& key) {
  if (key.op == kTestEmptyOp) return GenerateEmpty(key);
  if (key.op == kTestAxpyOp) return GenerateAxpy(key);
  return absl::InvalidArgumentError(absl::StrCat(
      "key.op: ", GetOpInfo(key.op).name, " is not a cpu test kernel"));
}

constexpr OpKind kCpuTestOps[] = {kTestEmptyOp, kTestAxpyOp};
const FamilyDescriptor kCpuTestFamily = {.name = "test",
                                         .backend = BackendKind::kCpu,
                                         .ops = kCpuTestOps,
                                         .generate = &GenerateCpuTestKernel};
const bool kRegistered = [] {
  RegisterFamily(&kCpuTestFamily);
  return true;
}();

absl::Status RequireCpu(Runtime& runtime, absl::string_view op) {
  if (runtime.backend() != BackendKind::kCpu) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": only the cpu backend has this kernel"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Axpy(Runtime& runtime, float a, const TensorRef& x,
                  const TensorRef& y, int block) {
  TAILOR_RETURN_IF_ERROR(RequireCpu(runtime, "test.axpy"));
  TAILOR_RETURN_IF_ERROR(ExpectTensor("x", x, 1, DType::kF32));
  TAILOR_RETURN_IF_ERROR(ExpectTensor("y", y, 1, DType::kF32));
  if (x.dims[0] != y.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "y: dims[0] must equal x.dims[0] (", x.dims[0], "), got ", y.dims[0]));
  }
  if (!x.is_contiguous() || !y.is_contiguous()) {
    return absl::InvalidArgumentError("x, y: must be contiguous (stride 1)");
  }
  if (block < 8 || block > 65536 || block % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block: must be a multiple of 8 in [8, 65536], got ", block));
  }
  if ((x.dims[0] + block - 1) / block > int64_t{UINT32_MAX}) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: dims[0] / block must fit a 32-bit grid, got ",
                     x.dims[0], " / ", block));
  }
  Engine& engine = tailor::internal::EngineOf(runtime);
  SpecKey key = engine.MakeKey(kTestAxpyOp);
  key.dtypes = {DType::kF32, DType::kF32};
  key.tile.m = block;
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          engine.GetKernel(key, GenerateAxpy));
  AxpyParams params = {
      .x = x.as<float>(), .y = y.as<float>(), .n = x.dims[0], .a = a};
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>((x.dims[0] + block - 1) / block);
  return engine.Launch(key.op, *kernel, config, params);
}

absl::Status LaunchEmpty(Runtime& runtime, int64_t items) {
  TAILOR_RETURN_IF_ERROR(RequireCpu(runtime, "test.empty"));
  if (items < 0 || items > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("items: must be in [0, 2^31], got ", items));
  }
  Engine& engine = tailor::internal::EngineOf(runtime);
  SpecKey key = engine.MakeKey(kTestEmptyOp);
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          engine.GetKernel(key, GenerateEmpty));
  LaunchConfig config;
  config.grid.x = static_cast<uint32_t>(items);
  return engine.Launch(key.op, *kernel, config, EmptyParams{});
}

}  // namespace tailor::internal
