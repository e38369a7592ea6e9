// tailor/runtime.h — the entry point: one Runtime per device.
//
// A Runtime owns a backend (CPU via Clang + LLVM ORC, CUDA via NVRTC + the
// driver API), a kernel cache (memory LRU -> disk -> compile, single flight)
// and the stats. It is thread-safe: many server threads may launch ops on one
// Runtime at once. Ops (tailor/ops/*.h) take a Runtime& as first argument.
//
// Example:
//   tailor::Runtime::Options options;
//   options.backend = tailor::BackendKind::kCpu;
//   absl::StatusOr<std::unique_ptr<tailor::Runtime>> runtime =
//       tailor::Runtime::Create(options);
//   if (!runtime.ok()) return runtime.status();
//   ... tailor::moe::Experts(**runtime, params) ...
//   std::cout << (*runtime)->stats().ToJson();
#ifndef TAILOR_RUNTIME_H_
#define TAILOR_RUNTIME_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tailor/stats.h"
#include "tailor/tensor.h"

namespace tailor {

// Values are stable: they are part of cache keys.
enum class BackendKind : uint8_t { kAuto = 0, kCpu = 1, kCuda = 2, kHip = 3 };
absl::string_view BackendName(
    BackendKind kind);  // "auto", "cpu", "cuda", "hip"

namespace internal {
class Engine;
class StatsAttachment;
}  // namespace internal

class Runtime {
 public:
  struct Options {
    // kAuto picks the first available of cuda, hip, cpu.
    BackendKind backend = BackendKind::kAuto;
    // Device ordinal for GPU backends; must be 0 for the CPU backend.
    int device_index = 0;
    // Disk cache directory. Empty: $TAILOR_CACHE_DIR, else
    // $XDG_CACHE_HOME/tailor, else $HOME/.cache/tailor. The directory is
    // created 0700; one that is group/world-writable or owned by another user
    // is refused with a warning and the runtime works from memory only.
    std::string cache_dir;
    // Disables the disk cache entirely (memory cache only).
    bool disable_disk_cache = false;
    // Kernels kept in the memory cache (LRU); >= 1.
    size_t memory_cache_capacity = 4096;
    // Compiles that may run at once; 0 = number of hardware threads.
    int compile_threads = 0;
    // Worker threads of the CPU backend's grid executor; 0 = hardware threads.
    int cpu_threads = 0;
    // spdlog level name (trace, debug, info, warn, error, off). Empty:
    // $TAILOR_LOG_LEVEL, else "info".
    std::string log_level;
    // When true (or $TAILOR_DISABLE_JIT=1), a kernel that is neither in
    // memory nor on disk is an error (FailedPrecondition naming the key)
    // instead of a compile.
    bool disable_jit = false;
    // Serve this runtime's stats over HTTP (GET /metrics: Prometheus text,
    // /stats: JSON, /healthz) at "host:port" (":port" or "port": host
    // 127.0.0.1; port 0: a free port, see stats_address()). Runtimes given
    // the same address share one endpoint, each labelled by its device.
    // Empty: $TAILOR_STATS_ADDR, else no endpoint. The endpoint answers from
    // snapshots on its own two threads; launching threads never wait for it.
    std::string stats_addr;
  };

  // Validates `options`, resolves the backend and opens the cache.
  // InvalidArgument for bad options; Unavailable when an explicitly requested
  // backend cannot run here (e.g. kCuda without a driver or device).
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      const Options& options);
  // Same as Create(Options{}).
  static absl::StatusOr<std::unique_ptr<Runtime>> Create();

  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  BackendKind backend() const;
  // Where the backend's tensors live: Device{} (the host) for the CPU
  // backend, {DeviceType::kCuda, device_index} for CUDA. Op arguments must
  // live there.
  Device device() const;
  // Target the kernels are built for: "x86_64-znver3", "sm_90a", ...
  const std::string& arch() const;
  // The disk cache directory in use; empty when the disk cache is off.
  const std::string& cache_dir() const;

  // A consistent snapshot of the counters and histograms.
  StatsSnapshot stats() const;
  // Where this runtime's stats endpoint listens ("127.0.0.1:9464", port
  // resolved); empty without one.
  std::string stats_address() const;

  // ---- memory on device(), for C++ callers without an allocator of their
  // own (tools, examples, servers without torch) ---------------------------
  // `bytes` of memory where op tensors live: device memory on GPU backends
  // (cuMemAlloc), host memory on the CPU; freed when the last copy of the
  // handle goes. ResourceExhausted when the device is out of memory.
  absl::StatusOr<std::shared_ptr<void>> Allocate(size_t bytes);
  // Copies `bytes` between host memory and memory on device(), enqueued on
  // `stream` (CUstream; null: the legacy default stream), and waits for the
  // stream. On the CPU a plain copy.
  absl::Status CopyToDevice(void* device_dst, const void* host_src,
                            size_t bytes, void* stream = nullptr);
  absl::Status CopyToHost(void* host_dst, const void* device_src,
                          size_t bytes, void* stream = nullptr);
  // Waits until `stream` has run everything enqueued on it (GPU backends;
  // OkStatus on the CPU, where every op is synchronous).
  absl::Status Synchronize(void* stream = nullptr);

  // For tailor's own op fronts and tools; not a stable API.
  internal::Engine& engine() { return *engine_; }

 private:
  explicit Runtime(std::unique_ptr<internal::Engine> engine);
  std::unique_ptr<internal::Engine> engine_;
  // Declared after engine_: detached (destroyed) before the engine goes.
  std::unique_ptr<internal::StatsAttachment> stats_endpoint_;
};

}  // namespace tailor

#endif  // TAILOR_RUNTIME_H_
