// backends/cpu/cpu_backend.h — the embedded default backend: no GPU needed.
//
// Compile: Clang libraries -> LLVM IR -> -O2 pipeline (host CPU) -> object
//          file (clang_compiler.h).
// Load:    ORC LLJIT, one JITDylib per kernel.
// Launch:  the kernel's entry runs the grid's work items on a thread pool and
//          returns when they are done (the CPU "stream" is synchronous).
#ifndef TAILOR_BACKENDS_CPU_CPU_BACKEND_H_
#define TAILOR_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "backends/cpu/clang_compiler.h"
#include "backends/cpu/attention/decode_kernels.h"
#include "backends/cpu/attention/ragged_kernels.h"
#include "backends/cpu/moe/kernels.h"
#include "backends/cpu/orc_loader.h"
#include "core/backend.h"
#include "core/thread_pool.h"

namespace tailor::internal::cpu {

class CpuKernel : public Kernel {
 public:
  explicit CpuKernel(std::unique_ptr<LoadedObject> object)
      : object_(std::move(object)), entry_(object_->entry()) {}
  // A kernel built into the library (the generic kernels, moe_generic.h).
  explicit CpuKernel(CpuEntry builtin) : entry_(builtin) {}
  CpuEntry entry() const { return entry_; }

 private:
  std::unique_ptr<LoadedObject> object_;  // null for built-in kernels
  CpuEntry entry_;
};

class CpuBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(int num_threads);

  BackendKind kind() const override { return BackendKind::kCpu; }
  Device device() const override { return Device{}; }
  const std::string& arch() const override { return arch_; }
  const std::string& compiler_identity() const override {
    return compiler_identity_;
  }
  const Hash128& headers_hash() const override { return headers_hash_; }
  absl::Status Supports(const SpecKey& key) const override;
  absl::StatusOr<std::string> Compile(const SpecKey& key,
                                      const KernelSource& source) override;
  absl::StatusOr<std::shared_ptr<Kernel>> Load(
      const SpecKey& key, const KernelSource& source,
      absl::string_view binary) override;
  absl::Status Launch(const Kernel& kernel, const LaunchConfig& config,
                      const void* params, size_t params_size) override;
  // All requests' work items as one parallel loop (see Backend).
  absl::Status LaunchBatch(absl::Span<const LaunchRequest> requests) override;
  MoeKernels* moe_kernels() override { return &moe_kernels_; }
  DecodeKernels* decode_kernels() override { return &decode_kernels_; }
  RaggedKernels* ragged_kernels() override { return &ragged_kernels_; }

 private:
  CpuBackend(std::unique_ptr<OrcLoader> loader, int num_threads);

  const HostTarget& target_;
  std::string arch_;
  std::string compiler_identity_;
  Hash128 headers_hash_;
  std::unique_ptr<OrcLoader> loader_;
  ThreadPool pool_;
  CpuMoeKernels moe_kernels_;
  CpuDecodeKernels decode_kernels_;
  CpuRaggedKernels ragged_kernels_;
};

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_CPU_BACKEND_H_
