// Built instead of the CPU backend when TAILOR_ENABLE_CPU_JIT=OFF (e.g. the
// GPU test bundle, which must not depend on LLVM).
#include "backends/cpu/attention/decode_kernels.h"
#include "backends/cpu/attention/ragged_kernels.h"
#include "backends/cpu/moe/kernels.h"
#include "core/backend_registry.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const BackendOptions&) {
  return absl::UnavailableError(
      "cpu backend: not built (TAILOR_ENABLE_CPU_JIT=OFF)");
}

// Warm-up lists CPU keys through these; this build has no CPU kernels.
namespace cpu {
namespace {

absl::Status NoCpuKernels() {
  return absl::UnavailableError(
      "cpu kernels: not built (TAILOR_ENABLE_CPU_JIT=OFF)");
}

}  // namespace

absl::StatusOr<std::vector<KernelJob>> MoeLayerKernels(const KeyTarget&,
                                                       const MoeLayerShape&) {
  return NoCpuKernels();
}

absl::StatusOr<std::vector<KernelJob>> DecodeLayerKernels(const KeyTarget&,
                                                          const DecodeShape&) {
  return NoCpuKernels();
}

absl::StatusOr<std::vector<KernelJob>> RaggedLayerKernels(const KeyTarget&,
                                                          const RaggedShape&,
                                                          int) {
  return NoCpuKernels();
}

absl::StatusOr<KernelSource> GenerateMoeKernel(const SpecKey&) {
  return NoCpuKernels();
}

absl::StatusOr<KernelSource> GenerateDecodeKernel(const SpecKey&) {
  return NoCpuKernels();
}

absl::StatusOr<KernelSource> GenerateRaggedKernel(const SpecKey&) {
  return NoCpuKernels();
}

}  // namespace cpu
}  // namespace tailor::internal
