#include "core/kernel_cache.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "tailor/status.h"

#ifndef TAILOR_VERSION_STRING
#define TAILOR_VERSION_STRING "dev"
#endif

namespace tailor::internal {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

struct KernelCache::Entry {
  SpecKey key;
  bool ready = false;  // guarded by KernelCache::mu_
  absl::StatusOr<std::shared_ptr<Kernel>> result =
      absl::UnknownError("pending");
};

KernelCache::KernelCache(Backend& backend, Stats& stats, Config config)
    : backend_(backend), stats_(stats), config_(std::move(config)) {
  if (config_.capacity == 0) config_.capacity = 1;
  if (config_.compile_threads <= 0) config_.compile_threads = 1;
}

EntryIdentity KernelCache::IdentityFor(const SpecKey& key,
                                       const KernelSource& source) const {
  return EntryIdentity{
      .tailor_version = TAILOR_VERSION_STRING,
      .compiler = backend_.compiler_identity(),
      .arch = backend_.arch(),
      .spec = key.ToString(),
      .spec_hash = key.Hash(),
      .source_hash = Hasher().Add(source.code).Add(source.entry).Finish(),
      .headers_hash = backend_.headers_hash(),
  };
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::Get(
    const SpecKey& key, KernelGenerator generate) {
  stats_.Add(stats_.lookups);
  Hash128 hash = key.Hash();
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(hash);
    if (it != index_.end() && (*it->second)->key == key) {
      entry = *it->second;
      lru_.splice(lru_.begin(), lru_, it->second);  // no allocation
      if (entry->ready) {
        stats_.Add(stats_.memory_hits);
        return entry->result;
      }
      // Another thread is resolving this key: wait for it.
      stats_.Add(stats_.memory_hits);
      stats_.Add(stats_.single_flight_waits);
      mu_.Await(absl::Condition(
          +[](Entry* e) { return e->ready; }, entry.get()));
      return entry->result;
    }
    entry = std::make_shared<Entry>();
    entry->key = key;
    lru_.push_front(entry);
    index_[hash] = lru_.begin();
    ++resolving_;
  }

  absl::StatusOr<std::shared_ptr<Kernel>> result = Resolve(key, generate);

  absl::MutexLock lock(&mu_);
  entry->result = result;
  entry->ready = true;
  --resolving_;
  if (!result.ok()) {
    // Do not cache failures: the next Get tries again.
    auto it = index_.find(hash);
    if (it != index_.end() && *it->second == entry) {
      lru_.erase(it->second);
      index_.erase(it);
    }
  } else {
    EvictIfFull();
  }
  return result;
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::Resolve(
    const SpecKey& key, KernelGenerator generate) {
  // Every lookup ends as exactly one of memory hit, disk hit or miss, so
  // failures before the disk is consulted count as misses too.
  if (absl::Status supported = backend_.Supports(key); !supported.ok()) {
    stats_.Add(stats_.misses);
    return supported;
  }
  absl::StatusOr<KernelSource> generated = generate(key);
  if (!generated.ok()) {
    stats_.Add(stats_.misses);
    return generated.status();
  }
  const KernelSource& source = *generated;
  EntryIdentity id = IdentityFor(key, source);
  if (config_.disk.has_value()) {
    absl::StatusOr<std::shared_ptr<Kernel>> loaded =
        LoadFromDisk(key, source, id);
    if (loaded.ok()) return loaded;
  }
  stats_.Add(stats_.misses);
  if (config_.disable_jit) {
    return absl::FailedPreconditionError(
        absl::StrCat("TAILOR_DISABLE_JIT is set and kernel ", key.ToString(),
                     " is in neither the memory nor the disk cache",
                     config_.disk ? absl::StrCat(" (", config_.disk->dir(), ")")
                                  : std::string(" (disk cache off)"),
                     "; precompile it with tailor-warmup"));
  }
  return CompileAndStore(key, source, id);
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::LoadFromDisk(
    const SpecKey& key, const KernelSource& source, const EntryIdentity& id) {
  auto start = std::chrono::steady_clock::now();
  std::string stem = key.FileStem();
  ReadResult read = config_.disk->Read(stem, id);
  if (read.problem == EntryProblem::kMissing)
    return absl::NotFoundError("no disk entry");
  if (read.problem != EntryProblem::kNone) {
    bool corrupt = read.problem == EntryProblem::kCorrupt;
    stats_.Add(corrupt ? stats_.corrupt_entries : stats_.stale_entries);
    Logger().warn("disk entry for {} is {} ({}); recompiling", key.ToString(),
                  corrupt ? "corrupt" : "stale", read.detail);
    return absl::DataLossError(read.detail);
  }
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      backend_.Load(key, source, read.payload);
  if (!kernel.ok()) {
    stats_.Add(stats_.corrupt_entries);
    Logger().warn("disk entry for {} does not load ({}); recompiling",
                  key.ToString(), kernel.status().ToString());
    return kernel.status();
  }
  double seconds = SecondsSince(start);
  stats_.Add(stats_.disk_hits);
  stats_.disk_load_seconds.Observe(seconds);
  stats_.NoteSpecialization(key);
  Logger().info("kernel {} from disk in {:.3f} ms", key.ToString(),
                seconds * 1e3);
  return kernel;
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::CompileAndStore(
    const SpecKey& key, const KernelSource& source, const EntryIdentity& id) {
  {
    absl::MutexLock lock(&compile_mu_);
    compile_mu_.Await(absl::Condition(
        +[](KernelCache* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->compile_mu_) {
          return c->compiles_running_ < c->config_.compile_threads;
        },
        this));
    ++compiles_running_;
  }
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> binary = backend_.Compile(key, source);
  double seconds = SecondsSince(start);
  {
    absl::MutexLock lock(&compile_mu_);
    --compiles_running_;
  }
  if (!binary.ok()) {
    stats_.Add(stats_.compile_failures);
    Logger().error("kernel {} failed to compile: {}", key.ToString(),
                   binary.status().message());
    return binary.status();
  }
  stats_.Add(stats_.compiles);
  stats_.compile_seconds.Observe(seconds);
  stats_.NoteSpecialization(key);
  Logger().info("kernel {} compiled in {:.1f} ms", key.ToString(),
                seconds * 1e3);
  if (config_.disk.has_value()) {
    absl::Status written = config_.disk->Write(key.FileStem(), id, *binary);
    if (!written.ok()) {
      stats_.Add(stats_.disk_write_failures);
      Logger().warn("kernel {} not written to disk: {}", key.ToString(),
                    written.ToString());
    }
  }
  return backend_.Load(key, source, *binary);
}

void KernelCache::EvictIfFull() {
  while (index_.size() > config_.capacity) {
    // Evict the least recently used ready entry; pending ones stay.
    auto victim = lru_.end();
    for (auto it = std::prev(lru_.end());; --it) {
      if ((*it)->ready) {
        victim = it;
        break;
      }
      if (it == lru_.begin()) break;
    }
    if (victim == lru_.end()) return;
    index_.erase((*victim)->key.Hash());
    lru_.erase(victim);
    stats_.Add(stats_.memory_evictions);
  }
}

void KernelCache::PrepareFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  mu_.LockWhen(absl::Condition(
      +[](KernelCache* c)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->resolving_ == 0; },
      this));
}

void KernelCache::AfterForkInParent() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  mu_.Unlock();
}

void KernelCache::AfterForkInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Nothing was resolving: no entry is pending and no compile slot taken.
  mu_.Unlock();
}

void KernelCache::ClearMemory() {
  absl::MutexLock lock(&mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    if ((*it)->ready) {
      index_.erase((*it)->key.Hash());
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t KernelCache::memory_size() const {
  absl::MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace tailor::internal
