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
#include <cstdint>
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
struct Internals;  // tailor's own access to the insides (not installed)
}  // namespace internal

class Runtime {
 public:
  // Options::cache_max_bytes value that turns the disk size limit off.
  static constexpr uint64_t kNoCacheSizeLimit = ~uint64_t{0};

  // How a call meets a kernel that is not cached yet.
  enum class JitMode {
    kDefault = 0,  // $TAILOR_JIT_MODE ("blocking" | "background"), else
                   // blocking
    // The call compiles the kernel (or waits for the thread compiling it).
    kBlocking = 1,
    // The call runs at once on its op family's generic kernel (runtime
    // shapes, built into the library), and the specialized kernel is
    // compiled on the compile threads; later calls use it once it is ready.
    // A failed background compile is logged and counted once
    // (StatsSnapshot::background_compile_failures) and the generic kernel
    // keeps serving that key. Families without a generic kernel block as in
    // kBlocking. The CPU (MoE, paged decode) and CUDA (MoE route, pack,
    // grouped GEMM, combine; paged decode) kernels have one; HIP's do not
    // yet. CUDA's are compiled into the library when it is built with the
    // toolkit (loaded when the Runtime is created); a library built without
    // it compiles them with NVRTC, once per kernel and arch into the disk
    // cache, starting when the Runtime is created, and calls block until
    // they are ready.
    kBackground = 2,
  };

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
    // Size limit of the disk cache directory: past it, the least recently
    // used entries are evicted (approximately, ccache-style; every process
    // using the directory takes part). 0: $TAILOR_CACHE_MAX_SIZE ("512M",
    // "2G", ...; "0" means no limit), else 2 GiB. kNoCacheSizeLimit: none.
    uint64_t cache_max_bytes = 0;
    // Kernels kept in the memory cache (LRU); >= 1.
    size_t memory_cache_capacity = 4096;
    // Compiles that may run at once; 0 = number of hardware threads.
    int compile_threads = 0;
    // Worker threads of the CPU backend's grid executor; 0 = hardware threads.
    int cpu_threads = 0;
    // spdlog level name (trace, debug, info, warn, error, critical, off);
    // another name is InvalidArgument. Empty: $TAILOR_LOG_LEVEL, else
    // "info"; an unknown $TAILOR_LOG_LEVEL is logged as a warning and "info"
    // applies.
    std::string log_level;
    // When true (or $TAILOR_DISABLE_JIT=1), a kernel that is neither in
    // memory nor on disk is an error (FailedPrecondition naming the key)
    // instead of a compile.
    bool disable_jit = false;
    // See JitMode. With disable_jit too, background mode never compiles:
    // keys on disk are loaded in the background, the rest stay generic.
    JitMode jit_mode = JitMode::kDefault;
    // Serve this runtime's stats over HTTP (GET /metrics: Prometheus text,
    // /stats: JSON, /healthz) at "host:port" (":port" or "port": host
    // 127.0.0.1; port 0: a free port, see stats_address()). Runtimes given
    // the same address share one endpoint, each labelled by its device.
    // Empty: $TAILOR_STATS_ADDR, else no endpoint. An address given here
    // that cannot be served makes Create fail (InvalidArgument "stats_addr:
    // ..." when it does not parse, Unavailable when its port is taken); one
    // from $TAILOR_STATS_ADDR only logs a warning naming the variable, and
    // the runtime goes on without an endpoint. The endpoint answers from
    // snapshots on its own two threads; launching threads never wait for it.
    std::string stats_addr;
    // Experiment switches of the kernel families ("tuning keys"), e.g.
    // "moe.cluster=2,decode.stages=3": comma-separated key=value items,
    // each key declared by its family with the values it accepts (README,
    // tuning keys). Empty: $TAILOR_TUNING, else none. An unknown key or a
    // value its key does not accept (here or in $TAILOR_TUNING) makes
    // Create fail with InvalidArgument naming the key and the accepted
    // values. Keys of families or backends the runtime does not run are
    // accepted and have no effect. The active overrides appear in stats()
    // and in the MoE plan summary; give tailor-warmup the same text
    // (--tuning) so that it builds the kernels the server will use.
    std::string tuning;
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
  // Options::jit_mode resolved ($TAILOR_JIT_MODE for kDefault): kBlocking
  // or kBackground, never kDefault.
  JitMode jit_mode() const;

  // A consistent snapshot of the counters and histograms (and the active
  // tuning overrides).
  StatsSnapshot stats() const;
  // The active tuning overrides in canonical form (sorted by key,
  // "decode.stages=3,moe.cluster=2"); "" when none is set.
  std::string tuning() const;
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
  absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                          void* stream = nullptr);
  // Waits until `stream` has run everything enqueued on it (GPU backends;
  // OkStatus on the CPU, where every op is synchronous).
  absl::Status Synchronize(void* stream = nullptr);

  // The kernel specializations this runtime has used (every key it loaded
  // from disk or compiled; at most 65536), as a JSON document that
  // `tailor-warmup --from-history FILE` precompiles on another machine or
  // after an upgrade. Keys are sorted by their readable form:
  //   {"format": "tailor.history/1", "tailor_version": "0.1.0",
  //    "backend": "cpu", "arch": "x86_64-znver3",
  //    "specializations": [
  //      {"key": "moe.pack/cpu/x86_64-znver3/bf16/H=2048/b0/t0/m0n0k0",
  //       "op": "moe.pack", "dtypes": ["bf16"], "dims": [2048],
  //       "bucket_id": 0, "tail_class": 0,
  //       "tile": {"m": 0, "n": 0, "k": 0, "stages": 0, "warps": 0,
  //                "cluster": 0},
  //       "variant": 0}, ...]}
  // "key" is for people; readers rebuild keys from the other fields.
  std::string SpecializationHistoryJson() const;

 private:
  friend struct internal::Internals;
  explicit Runtime(std::unique_ptr<internal::Engine> engine);
  std::unique_ptr<internal::Engine> engine_;
  // Declared after engine_: detached (destroyed) before the engine goes.
  std::unique_ptr<internal::StatsAttachment> stats_endpoint_;
};

}  // namespace tailor

#endif  // TAILOR_RUNTIME_H_
