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
#ifndef TAILOR_CORE_KERNEL_CACHE_H_
#define TAILOR_CORE_KERNEL_CACHE_H_

#include <list>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
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
  };

  KernelCache(Backend& backend, Stats& stats, Config config);

  absl::StatusOr<std::shared_ptr<Kernel>> Get(const SpecKey& key,
                                              KernelGenerator generate);

  // Drops every kernel from memory (disk entries stay). For tests and tools.
  void ClearMemory();
  size_t memory_size() const;
  const std::optional<DiskCache>& disk() const { return config_.disk; }

  // Around fork() (core/fork_handlers.h, called by the Engine): PrepareFork
  // waits until no lookup is resolving (no disk read, compile or load in
  // flight, so no entry is pending and LLVM holds no lock) and keeps new
  // ones out until the After* call, in both processes.
  void PrepareFork();
  void AfterForkInParent();
  void AfterForkInChild();

  // The identity a disk entry for `key` with `source` must carry.
  EntryIdentity IdentityFor(const SpecKey& key,
                            const KernelSource& source) const;

 private:
  struct Entry;
  using LruList = std::list<std::shared_ptr<Entry>>;

  absl::StatusOr<std::shared_ptr<Kernel>> Resolve(const SpecKey& key,
                                                  KernelGenerator generate);
  absl::StatusOr<std::shared_ptr<Kernel>> LoadFromDisk(
      const SpecKey& key, const KernelSource& source, const EntryIdentity& id);
  absl::StatusOr<std::shared_ptr<Kernel>> CompileAndStore(
      const SpecKey& key, const KernelSource& source, const EntryIdentity& id);
  void EvictIfFull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend& backend_;
  Stats& stats_;
  Config config_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Hash128, LruList::iterator> index_ ABSL_GUARDED_BY(mu_);
  LruList lru_ ABSL_GUARDED_BY(mu_);        // front = most recently used
  int resolving_ ABSL_GUARDED_BY(mu_) = 0;  // entries not ready yet

  absl::Mutex compile_mu_;
  int compiles_running_ ABSL_GUARDED_BY(compile_mu_) = 0;
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_KERNEL_CACHE_H_
