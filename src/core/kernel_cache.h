// core/kernel_cache.h — memory (bounded LRU) -> disk -> compile, single flight.
//
// Get(key) returns the loaded kernel for `key`:
//   1. memory: one hash lookup under a mutex; the warm path allocates nothing;
//   2. disk: the entry named by the key and everything the binary depends on
//      (DiskCache verifies it); a bad entry is counted and replaced;
//   3. compile: the backend compiles the generated source; the binary is
//      written to disk and loaded.
// Concurrent Gets of one key cause exactly one disk read or compile; the other
// callers wait for it and share the result (or its error). Failed lookups are
// not cached: a later Get tries again. With disable_jit, step 3 is replaced by
// FailedPrecondition naming the key.
//
// With a disk size limit (Config::disk_max_bytes), every entry written is
// counted and the least recently used entries are evicted past the limit
// (core/disk_eviction.h). Loading an entry from disk, and every
// kHitsPerTouch-th memory hit of a kernel, refreshes the entry's recency.
//
// TryGet serves background JIT: it never waits. A miss queues the key's
// resolve (disk, else compile) on the cache's compile workers (at most
// compile_threads, started on first use) and returns null, so that the
// caller runs its op family's generic kernel; later TryGets return the
// kernel once it is ready. Blocking Gets of a queued key wait for that one
// resolve (single flight holds across both). A background resolve that
// fails is counted (background_compile_failures) and logged once, and the
// key is not retried by TryGet: the generic kernel keeps serving it.
//
// Precompile and CheckOnDisk serve tailor-warmup: they make sure of (or look
// at) the disk entry of a key without loading anything into memory.
#ifndef TAILOR_CORE_KERNEL_CACHE_H_
#define TAILOR_CORE_KERNEL_CACHE_H_

#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "core/disk_cache.h"
#include "core/engine.h"
#include "core/stats.h"

namespace tailor::internal {

class KernelCache {
 public:
  struct Config {
    size_t capacity = 4096;
    bool disable_jit = false;
    int compile_threads = 1;
    std::optional<DiskCache> disk;
    uint64_t disk_max_bytes = 0;  // 0: no limit
  };

  // What Precompile found or did for one key.
  struct PrecompileResult {
    bool was_on_disk = false;    // a valid entry was there: nothing compiled
    double compile_seconds = 0;  // wall time of the compile, if one ran
    double compile_cpu_seconds = 0;  // CPU time of the compiling thread
    std::string entry_path;          // the disk entry
    // OK when the disk now holds the entry; otherwise why it does not (the
    // kernel compiled, but e.g. the disk is full).
    absl::Status persisted;
  };

  KernelCache(Backend& backend, Stats& stats, Config config);
  // Waits for the background resolve running on each worker; drops the
  // queued ones.
  ~KernelCache();

  absl::StatusOr<std::shared_ptr<Kernel>> Get(const SpecKey& key,
                                              KernelGenerator generate);

  // The kernel for `key` when memory holds it; else null at once, with a
  // resolve of `key` queued or already under way (see the file comment).
  // Never waits for a compile, a disk read or another thread's resolve.
  std::shared_ptr<Kernel> TryGet(const SpecKey& key,
                                 KernelGeneratorFn generate);

  // Makes sure the disk cache holds a valid entry for `key` without loading
  // it: reads and verifies an existing entry, else compiles and writes one.
  // Errors: the generator's or the compiler's (Internal with the compiler
  // log; Unimplemented when the backend cannot build the key);
  // FailedPrecondition without a disk cache, or with disable_jit and no
  // valid entry. A kernel that compiled but could not be written is no error
  // here: PrecompileResult::persisted says why.
  absl::StatusOr<PrecompileResult> Precompile(const SpecKey& key,
                                              KernelGenerator generate);

  // Whether the disk cache holds a valid entry for `key` (this build's
  // identity, checksums verified), reading it but neither loading nor
  // compiling anything. OK; NotFound when there is none; DataLoss (corrupt)
  // or FailedPrecondition (stale: another version, compiler or source) with
  // the reason; FailedPrecondition without a disk cache; the generator's or
  // the backend's error when the key cannot be built here.
  absl::Status CheckOnDisk(const SpecKey& key, KernelGenerator generate);

  // Drops every kernel from memory (disk entries stay). For tests and tools.
  void ClearMemory();
  size_t memory_size() const;
  const std::optional<DiskCache>& disk() const { return config_.disk; }

  // Around fork() (core/fork_handlers.h, called by the Engine): PrepareFork
  // waits until no lookup is resolving (no disk read, compile or load in
  // flight, so no entry is pending and LLVM holds no lock) and keeps new
  // ones out until the After* call, in both processes. The child starts its
  // own background compile workers on demand.
  void PrepareFork();
  void AfterForkInParent();
  void AfterForkInChild();

  // The identity a disk entry for `key` with `source` must carry.
  EntryIdentity IdentityFor(const SpecKey& key,
                            const KernelSource& source) const;

 private:
  struct Entry;
  using LruList = std::list<std::shared_ptr<Entry>>;

  struct BackgroundJob {
    std::shared_ptr<Entry> entry;
    KernelGeneratorFn generate;
  };

  struct Timing {
    double wall_seconds = 0;
    double cpu_seconds = 0;
  };

  // `disk_path` receives the key's disk entry path (empty without a disk).
  absl::StatusOr<std::shared_ptr<Kernel>> Resolve(const SpecKey& key,
                                                  KernelGenerator generate,
                                                  std::string& disk_path);
  // The source and entry identity of `key`, or why there is none.
  absl::Status Prepare(const SpecKey& key, KernelGenerator generate,
                       KernelSource& source, EntryIdentity& id);
  // Reads and verifies the disk entry; counts and logs a bad one.
  ReadResult ReadEntry(const SpecKey& key, const EntryIdentity& id);
  absl::StatusOr<std::shared_ptr<Kernel>> LoadFromDisk(
      const SpecKey& key, const KernelSource& source, const EntryIdentity& id);
  absl::StatusOr<std::shared_ptr<Kernel>> CompileAndStore(
      const SpecKey& key, const KernelSource& source, const EntryIdentity& id);
  // Compiles within the compile_threads limit; counts and logs.
  absl::StatusOr<std::string> CompileBinary(const SpecKey& key,
                                            const KernelSource& source,
                                            Timing& timing);
  // Writes the disk entry; counts a failure, applies the size limit.
  absl::Status StoreBinary(const SpecKey& key, const EntryIdentity& id,
                           absl::string_view binary);
  void EvictIfFull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes the outcome of resolving `entry` (Get's end and the workers'):
  // a failure leaves the index, so that the next Get tries again.
  void Publish(const std::shared_ptr<Entry>& entry,
               absl::StatusOr<std::shared_ptr<Kernel>> result,
               std::string disk_path) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `job`, starting a worker when fewer than compile_threads run.
  void Enqueue(BackgroundJob job);
  void BackgroundLoop();
  void RunBackground(const BackgroundJob& job);

  Backend& backend_;
  Stats& stats_;
  Config config_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Hash128, LruList::iterator> index_ ABSL_GUARDED_BY(mu_);
  LruList lru_ ABSL_GUARDED_BY(mu_);        // front = most recently used
  int resolving_ ABSL_GUARDED_BY(mu_) = 0;  // entries not ready yet

  // Keys whose background resolve failed: TryGet does not queue them again.
  absl::flat_hash_set<Hash128> background_failed_ ABSL_GUARDED_BY(mu_);

  absl::Mutex background_mu_;
  std::deque<BackgroundJob> background_queue_ ABSL_GUARDED_BY(background_mu_);
  std::vector<std::thread> background_workers_ ABSL_GUARDED_BY(background_mu_);
  bool background_stopping_ ABSL_GUARDED_BY(background_mu_) = false;

  absl::Mutex compile_mu_;
  int compiles_running_ ABSL_GUARDED_BY(compile_mu_) = 0;
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_KERNEL_CACHE_H_
