#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backend_registry.h"
#include "core/embedded_files.h"
#include "core/family_registry.h"
#include "core/logging.h"
#include "tailor/status.h"

namespace tailor::internal {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    const BackendOptions& options) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuBackend> backend,
                          cpu::CpuBackend::Create(options.cpu_threads));
  return std::unique_ptr<Backend>(std::move(backend));
}

namespace cpu {

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    int num_threads) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<OrcLoader> loader,
                          OrcLoader::Create());
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(std::move(loader), num_threads));
}

CpuBackend::CpuBackend(std::unique_ptr<OrcLoader> loader, int num_threads)
    : target_(GetHostTarget()),
      arch_(absl::StrCat(target_.triple.substr(0, target_.triple.find('-')),
                         "-", target_.cpu)),
      compiler_identity_(ClangCompilerIdentity(target_)),
      headers_hash_(HashEmbeddedFiles({"runtime/cpu/", "templates/cpu/"})),
      loader_(std::move(loader)),
      // The calling thread runs chunks too, so one worker fewer than threads.
      pool_((num_threads > 0 ? num_threads
                             : static_cast<int>(std::max(
                                   1u, std::thread::hardware_concurrency()))) -
            1),
      decode_kernels_(pool_.num_workers() + 1),
      ragged_kernels_(pool_.num_workers() + 1) {}

absl::Status CpuBackend::Supports(const SpecKey& key) const {
  if (key.backend != BackendKind::kCpu) {
    return absl::UnimplementedError(
        absl::StrCat("cpu backend cannot build ", key.ToString(),
                     ": key is for another backend"));
  }
  if (key.arch_name() != arch_) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu backend builds for ", arch_, ", not for ", key.arch_name()));
  }
  if (FindFamily(BackendKind::kCpu, key.op) == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu backend: no cpu kernel for ", GetOpInfo(key.op).name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CpuBackend::Compile(const SpecKey& key,
                                                const KernelSource& source) {
  CompilePhaseTimes times;
  absl::StatusOr<std::string> object =
      CompileToObject(source.code, target_, &times);
  Logger().debug(
      "compiled {}: {:.1f} ms CPU (frontend {:.1f}, optimize {:.1f}, codegen "
      "{:.1f})",
      key.ToString(), times.total_ms(), times.frontend_ms, times.optimize_ms,
      times.codegen_ms);
  if (!object.ok()) {
    return absl::Status(
        object.status().code(),
        absl::StrCat(key.ToString(), ": ", object.status().message()));
  }
  return object;
}

absl::StatusOr<std::shared_ptr<Kernel>> CpuBackend::Load(
    const SpecKey& key, const KernelSource& source, absl::string_view binary) {
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedObject> object,
                          loader_->Load(binary, source.entry));
  return std::shared_ptr<Kernel>(
      std::make_shared<CpuKernel>(std::move(object)));
}

absl::Status CpuBackend::Launch(const Kernel& kernel,
                                const LaunchConfig& config, const void* params,
                                size_t params_size) {
  CpuEntry entry = static_cast<const CpuKernel&>(kernel).entry();
  int64_t items = static_cast<int64_t>(config.grid.count());
  // block.x is a hint for the chunk size (items per task) on the CPU.
  int64_t min_chunk = std::max<uint32_t>(1, config.block.x);
  pool_.ParallelFor(items, min_chunk, [&](int64_t begin, int64_t end) {
    entry(params, begin, end);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::LaunchBatch(absl::Span<const LaunchRequest> requests) {
  // Requests' items laid end to end: request i owns [first[i], first[i+1]).
  constexpr size_t kMaxRequests = 64;
  if (requests.size() > kMaxRequests) return Backend::LaunchBatch(requests);
  std::array<int64_t, kMaxRequests + 1> first;
  first[0] = 0;
  int64_t min_chunk = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < requests.size(); ++i) {
    first[i + 1] =
        first[i] + static_cast<int64_t>(requests[i].config.grid.count());
    min_chunk = std::min<int64_t>(
        min_chunk, std::max<uint32_t>(1, requests[i].config.block.x));
  }
  pool_.ParallelFor(
      first[requests.size()], min_chunk, [&](int64_t begin, int64_t end) {
        for (size_t i = 0; i < requests.size() && begin < end; ++i) {
          int64_t lo = std::max(begin, first[i]),
                  hi = std::min(end, first[i + 1]);
          if (lo >= hi) continue;
          CpuEntry entry =
              static_cast<const CpuKernel&>(*requests[i].kernel).entry();
          entry(requests[i].params, lo - first[i], hi - first[i]);
        }
      });
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace tailor::internal
