// core/backend.h — the one interface every backend implements.
//
// A backend turns generated kernel source into a binary (object file, cubin,
// code object), loads a binary into a callable Kernel, and launches a Kernel
// over a grid. Backends live in src/backends/<name>/, one folder each, and are
// registered in core/backend_registry.cc (one line per backend).
//
// The kernel ABI is the same on every backend: a kernel takes exactly one
// argument, a trivially-copyable params struct defined beside its template,
// passed by value (CUDA: `__grid_constant__ const Params`; CPU: a pointer to
// it plus a range of work items). Launch copies nothing it does not need.
#ifndef TAILOR_CORE_BACKEND_H_
#define TAILOR_CORE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/spec_key.h"
#include "tailor/stats.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// What a generator emits for one SpecKey: includes plus one explicit
// instantiation. `entry` is the symbol the backend looks up after loading.
struct KernelSource {
  std::string code;
  std::string entry;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

struct LaunchConfig {
  Dim3 grid = {};             // CPU: work items = grid.count()
  Dim3 block = {};            // GPU threads per block; CPU: min items per chunk
  Dim3 cluster = {};          // GPU thread-block cluster; {1,1,1} = none
  uint32_t shared_bytes = 0;  // dynamic shared memory
  void* stream = nullptr;     // CUstream / hipStream_t; CPU runs synchronously
  // The kernel waits for its predecessors itself before it touches global
  // memory (TAILOR_CUDA_ENTRY's WaitForPrerequisiteGrids), so it may start
  // while the previous kernel on the stream finishes (programmatic dependent
  // launch, sm_90+). Set it only for kernels built with that entry.
  bool overlap_predecessor = false;
};

class DecodeKernels;  // ops/attention/kernels.h
class RaggedKernels;  // ops/attention/ragged_kernels.h
class Engine;         // core/engine.h
class Kernel;
class MoeKernels;  // ops/moe/kernels.h

// One launch of a batch (Backend::LaunchBatch).
struct LaunchRequest {
  const Kernel* kernel = nullptr;
  LaunchConfig config = {};
  const void* params = nullptr;
  size_t params_size = 0;
};

// A loaded kernel. Backends subclass it; the cache shares it (shared_ptr),
// so an evicted kernel stays valid until its last launch returns.
class Kernel {
 public:
  virtual ~Kernel() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  // Where this backend's tensors live: {kCpu, 0} for host-memory backends,
  // {kCuda, ordinal} for a CUDA device.
  virtual Device device() const = 0;
  // Exact target of the binaries: "x86_64-znver3", "sm_90a". Part of keys.
  virtual const std::string& arch() const = 0;
  // Compiler name, version and flags; part of every disk entry's identity.
  virtual const std::string& compiler_identity() const = 0;
  // Hash of every runtime/ and templates/ file this backend's kernels may
  // include (computed once). Part of every disk entry's identity.
  virtual const Hash128& headers_hash() const = 0;

  // OkStatus if this backend can build `key`; Unimplemented otherwise, so the
  // op front can pick another path.
  virtual absl::Status Supports(const SpecKey& key) const = 0;

  // Compiles `source` to a binary. Internal with the compiler's log attached
  // when the source does not compile.
  virtual absl::StatusOr<std::string> Compile(const SpecKey& key,
                                              const KernelSource& source) = 0;

  // Loads a binary made by Compile (possibly by another process).
  virtual absl::StatusOr<std::shared_ptr<Kernel>> Load(
      const SpecKey& key, const KernelSource& source,
      absl::string_view binary) = 0;

  // Launches `kernel` with one params struct of `params_size` bytes. No
  // allocation, no host sync on GPU backends.
  virtual absl::Status Launch(const Kernel& kernel, const LaunchConfig& config,
                              const void* params, size_t params_size) = 0;

  // (optional) Launches kernels that are independent of each other (no
  // request reads what another writes), e.g. the core and tail variants of
  // one grouped GEMM. The CPU backend runs all their work items as one
  // parallel loop, so that small launches overlap instead of leaving threads
  // idle. Defaults to Launch() on each request, in order.
  virtual absl::Status LaunchBatch(absl::Span<const LaunchRequest> requests) {
    for (const LaunchRequest& r : requests) {
      absl::Status s = Launch(*r.kernel, r.config, r.params, r.params_size);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // (optional) Adds backend-owned counters to a stats snapshot's
  // backend_counters, named "<backend>.<counter>" (e.g. the CUDA descriptor
  // pool's cuda.descriptor_encodes). Defaults to adding nothing.
  virtual void AddCounters(StatsSnapshot& snapshot) const {}

  // ---- device memory (optional: device-memory backends) --------------------
  // Workspaces of device backends are sized once by the library through
  // these slots (or bound to memory the caller passes); nothing allocates
  // while running.

  // (optional) `bytes` of device memory, freed when the last reference goes
  // (the allocation keeps the device context alive). Defaults to
  // Unimplemented.
  virtual absl::StatusOr<std::shared_ptr<void>> AllocateDevice(size_t bytes);
  // (optional) Enqueues a fill of `bytes` device bytes at `dst` with `value`
  // on `stream`. Defaults to Unimplemented.
  virtual absl::Status FillDevice(void* dst, uint8_t value, size_t bytes,
                                  void* stream);
  // (optional) Copies `bytes` from device `src` to host `dst` on `stream`
  // and waits for the stream (with `bytes` 0: only waits). Defaults to
  // Unimplemented.
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes,
                                  void* stream);
  // (optional) Copies `bytes` from host `src` to device `dst` on `stream`
  // and waits for the stream. Defaults to Unimplemented.
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes,
                                    void* stream);

  // ---- op families (optional) ----------------------------------------------
  // The kernels of each op family this backend implements, next to its
  // templates; null (the default) when it has none, and the op front says
  // Unimplemented.
  virtual MoeKernels* moe_kernels() { return nullptr; }
  virtual DecodeKernels* decode_kernels() { return nullptr; }
  virtual RaggedKernels* ragged_kernels() { return nullptr; }

  // (optional) Called once when a Runtime in background JIT mode is created
  // on this backend: make the op families' generic kernels available (load
  // them, or queue their compiles on `engine`). Defaults to nothing (the
  // CPU's generic kernels are built into the library as host code).
  virtual void PrepareBackgroundJit(Engine& engine) {}
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_BACKEND_H_
