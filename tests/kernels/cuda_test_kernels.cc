#include "kernels/cuda_test_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/family_registry.h"
#include "kernels/test_op_kinds.h"
#include "tailor/status.h"
#include "tailor/tensor.h"
#include "templates/cuda/tma_test_params.h"

namespace tailor::cuda {
namespace {

using tailor::internal::FamilyDescriptor;
using tailor::internal::KernelSource;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

constexpr uint32_t kKnownVariantBits = kTmaPatchReplaceStride | kTmaPatchOnly;

absl::Status ValidateTmaKey(const SpecKey& key, bool patch) {
  const DType dtype = key.dtypes[0];
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtypes[0]: must be bf16, f16 or f32 for ",
                     std::string(GetOpInfo(key.op).name), ", got ",
                     static_cast<int>(dtype)));
  }
  const int64_t cols = key.dims[0];
  const int64_t row_bytes = cols * static_cast<int64_t>(DTypeSize(dtype));
  if (cols < 1 || cols > 256 || row_bytes % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dims[0] (cols): must be in [1, 256] with cols * element "
                     "bytes a multiple of 16 "
                     "(TMA box rules), got ",
                     cols));
  }
  if (key.tile.m < 1 || key.tile.m > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tile.m (tile rows): must be in [1, 256] (TMA box rule), got ",
        key.tile.m));
  }
  if (TmaTestTileBytes(key) > kMaxTmaTestTileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tile.m * cols * element bytes: must be <= ", kMaxTmaTestTileBytes,
        " (shared memory), got ", TmaTestTileBytes(key)));
  }
  const uint32_t allowed = patch ? kKnownVariantBits : 0;
  if ((key.variant & ~allowed) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variant: unknown bits 0x", absl::Hex(key.variant & ~allowed), " for ",
        std::string(GetOpInfo(key.op).name)));
  }
  return absl::OkStatus();
}

std::string Wrapper(absl::string_view entry, absl::string_view params_type,
                    absl::string_view body, int max_threads) {
  std::string bounds =
      max_threads > 0 ? absl::StrCat("__launch_bounds__(", max_threads, ") ")
                      : "";
  return absl::StrCat(
      "extern \"C\" __global__ void ", bounds, std::string(entry),
      "(const __grid_constant__ tailor::cuda::", std::string(params_type),
      " params) {\n  ", std::string(body), "(params);\n}\n");
}

KernelSource GenerateTmaTest(const SpecKey& key) {
  const bool patch = key.op == tailor::internal::kTmaPatchTestOp;
  const std::string entry =
      patch ? "tailor_tma_patch_test" : "tailor_tma_copy_test";
  const std::string args = absl::StrCat(DTypeSize(key.dtypes[0]), ", ",
                                        key.dims[0], ", ", key.tile.m);
  const std::string body =
      patch ? absl::StrCat("tailor::cuda::TmaPatchTest<", args, ", ",
                           key.variant, "u>")
            : absl::StrCat("tailor::cuda::TmaCopyTest<", args, ">");
  const std::string header = patch ? "templates/cuda/tma_patch_test.cuh"
                                   : "templates/cuda/tma_copy_test.cuh";
  return KernelSource{
      .code = absl::StrCat(
          "#include \"", header, "\"\n",
          Wrapper(entry, patch ? "TmaPatchTestParams" : "TmaCopyTestParams",
                  body, kTmaTestBlockThreads)),
      .entry = entry};
}

// The CUDA test families, registered before any Runtime exists: the plain
// test kernels (sm_70), TMA copies (sm_90) and TMA descriptor patches
// (sm_90a: tensormap.replace).
constexpr OpKind kPlainOps[] = {tailor::internal::kTestEmptyOp,
                                tailor::internal::kTestAxpyOp};
constexpr OpKind kCopyOps[] = {tailor::internal::kTmaCopyTestOp};
constexpr OpKind kPatchOps[] = {tailor::internal::kTmaPatchTestOp};
const FamilyDescriptor kCudaTestFamilies[] = {
    {.name = "test",
     .backend = BackendKind::kCuda,
     .ops = kPlainOps,
     .generate = &GenerateCudaTestKernel,
     .min_compute_capability = 70},
    {.name = "tma_copy_test",
     .backend = BackendKind::kCuda,
     .ops = kCopyOps,
     .generate = &GenerateCudaTestKernel,
     .min_compute_capability = 90},
    {.name = "tma_patch_test",
     .backend = BackendKind::kCuda,
     .ops = kPatchOps,
     .generate = &GenerateCudaTestKernel,
     .min_compute_capability = 90,
     .arch_specific = true},
};
const bool kRegistered = [] {
  for (const FamilyDescriptor& family : kCudaTestFamilies) {
    tailor::internal::RegisterFamily(&family);
  }
  return true;
}();

}  // namespace

int64_t TmaTestTileBytes(const SpecKey& key) {
  return int64_t{key.tile.m} * key.dims[0] *
         static_cast<int64_t>(DTypeSize(key.dtypes[0]));
}

uint32_t TmaTestSharedBytesFor(const SpecKey& key) {
  return TmaTestSharedBytes(static_cast<unsigned>(TmaTestTileBytes(key)));
}

absl::StatusOr<KernelSource> GenerateCudaTestKernel(const SpecKey& key) {
  using tailor::internal::kTestAxpyOp;
  using tailor::internal::kTestEmptyOp;
  using tailor::internal::kTmaCopyTestOp;
  using tailor::internal::kTmaPatchTestOp;
  if (key.op == kTestEmptyOp) {
    return KernelSource{
        .code = absl::StrCat("#include \"templates/cuda/test_kernels.cuh\"\n",
                             Wrapper("tailor_test_empty", "TestEmptyParams",
                                     "tailor::cuda::TestEmpty", 0)),
        .entry = "tailor_test_empty"};
  }
  if (key.op == kTestAxpyOp) {
    const int64_t unroll = key.dims[0];
    if (unroll < 1 || unroll > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("dims[0] (unroll): must be in [1, 16], got ", unroll));
    }
    return KernelSource{
        .code = absl::StrCat(
            "#include \"templates/cuda/test_kernels.cuh\"\n",
            Wrapper("tailor_test_axpy", "TestAxpyParams",
                    absl::StrCat("tailor::cuda::TestAxpy<", unroll, ">"), 0)),
        .entry = "tailor_test_axpy"};
  }
  if (key.op == kTmaPatchTestOp || key.op == kTmaCopyTestOp) {
    TAILOR_RETURN_IF_ERROR(ValidateTmaKey(key, key.op == kTmaPatchTestOp));
    return GenerateTmaTest(key);
  }
  return absl::UnimplementedError(
      absl::StrCat("cuda test kernels: no generator for ",
                   std::string(GetOpInfo(key.op).name)));
}

}  // namespace tailor::cuda
