#include "core/kernel_cache.h"

#include <sys/stat.h>
#include <time.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/disk_eviction.h"
#include "core/fork_handlers.h"
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

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

struct KernelCache::Entry {
  SpecKey key;
  bool ready = false;  // guarded by KernelCache::mu_
  absl::StatusOr<std::shared_ptr<Kernel>> result =
      absl::UnknownError("pending");
  std::string disk_path;  // set before ready; empty without a disk
  uint32_t hits = 0;      // guarded by KernelCache::mu_
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
  bool touch_due = false;  // a memory hit whose disk entry needs a touch
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(hash);
    if (it != index_.end() && (*it->second)->key == key) {
      entry = *it->second;
      lru_.splice(lru_.begin(), lru_, it->second);  // no allocation
      stats_.Add(stats_.memory_hits);
      if (!entry->ready) {
        // Another thread is resolving this key: wait for it.
        stats_.Add(stats_.single_flight_waits);
        mu_.Await(absl::Condition(
            +[](Entry* e) { return e->ready; }, entry.get()));
        return entry->result;
      }
      // Keep the disk entry of a kernel in steady use young (LRU on disk).
      touch_due = (++entry->hits & (kHitsPerTouch - 1)) == 0 &&
                  !entry->disk_path.empty();
      if (!touch_due) return entry->result;
    } else {
      entry = std::make_shared<Entry>();
      entry->key = key;
      lru_.push_front(entry);
      index_[hash] = lru_.begin();
      ++resolving_;
    }
  }
  if (touch_due) {  // disk_path and result are immutable once ready
    TouchEntryFile(entry->disk_path);
    return entry->result;
  }

  std::string disk_path;
  absl::StatusOr<std::shared_ptr<Kernel>> result =
      Resolve(key, generate, disk_path);
  Publish(entry, result, std::move(disk_path));
  return result;
}

void KernelCache::Publish(const std::shared_ptr<Entry>& entry,
                          absl::StatusOr<std::shared_ptr<Kernel>> result,
                          std::string disk_path) {
  absl::MutexLock lock(&mu_);
  const bool ok = result.ok();
  entry->result = std::move(result);
  entry->disk_path = std::move(disk_path);
  entry->ready = true;
  --resolving_;
  if (!ok) {
    // Do not cache failures: the next Get tries again.
    auto it = index_.find(entry->key.Hash());
    if (it != index_.end() && *it->second == entry) {
      lru_.erase(it->second);
      index_.erase(it);
    }
  } else {
    EvictIfFull();
  }
}

KernelCache::~KernelCache() {
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&background_mu_);
    background_stopping_ = true;
    stats_.pending_compiles.fetch_sub(background_queue_.size(),
                                      std::memory_order_relaxed);
    background_queue_.clear();
    workers.swap(background_workers_);
  }
  for (std::thread& worker : workers) worker.join();
}

std::shared_ptr<Kernel> KernelCache::TryGet(const SpecKey& key,
                                            KernelGeneratorFn generate) {
  const Hash128 hash = key.Hash();
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(hash);
    if (it != index_.end() && (*it->second)->key == key) {
      if (!(*it->second)->ready) return nullptr;  // resolving: do not wait
      stats_.Add(stats_.lookups);
      stats_.Add(stats_.memory_hits);
      lru_.splice(lru_.begin(), lru_, it->second);
      return *(*it->second)->result;  // ready entries in the index are ok
    }
    if (background_failed_.contains(hash)) return nullptr;
    stats_.Add(stats_.lookups);
    entry = std::make_shared<Entry>();
    entry->key = key;
    lru_.push_front(entry);
    index_[hash] = lru_.begin();
    ++resolving_;  // Publish (from the background worker) ends it
  }
  Enqueue({.entry = std::move(entry), .generate = generate});
  return nullptr;
}

void KernelCache::Enqueue(BackgroundJob job) {
  absl::MutexLock lock(&background_mu_);
  if (background_stopping_) return;
  stats_.pending_compiles.fetch_add(1, std::memory_order_relaxed);
  background_queue_.push_back(std::move(job));
  if (background_workers_.size() <
      static_cast<size_t>(config_.compile_threads)) {
    background_workers_.emplace_back([this] { BackgroundLoop(); });
  }
}

void KernelCache::BackgroundLoop() {
  while (true) {
    BackgroundJob job;
    {
      absl::MutexLock lock(&background_mu_);
      background_mu_.Await(absl::Condition(
          +[](KernelCache* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->background_mu_) {
            return c->background_stopping_ || !c->background_queue_.empty();
          },
          this));
      if (background_stopping_) return;
      job = std::move(background_queue_.front());
      background_queue_.pop_front();
    }
    RunBackground(job);
    stats_.pending_compiles.fetch_sub(1, std::memory_order_relaxed);
  }
}

void KernelCache::RunBackground(const BackgroundJob& job) {
  const SpecKey& key = job.entry->key;
  std::string disk_path;
  absl::StatusOr<std::shared_ptr<Kernel>> result =
      Resolve(key, job.generate, disk_path);
  if (!result.ok()) {
    {
      absl::MutexLock lock(&mu_);
      background_failed_.insert(key.Hash());
    }
    stats_.Add(stats_.background_compile_failures);
    Logger().error(
        "background compile of {} failed; its generic kernel keeps serving "
        "it: {}",
        key.ToString(), result.status().message());
  }
  Publish(job.entry, std::move(result), std::move(disk_path));
}

absl::Status KernelCache::Prepare(const SpecKey& key, KernelGenerator generate,
                                  KernelSource& source, EntryIdentity& id) {
  TAILOR_RETURN_IF_ERROR(backend_.Supports(key));
  TAILOR_ASSIGN_OR_RETURN(source, generate(key));
  id = IdentityFor(key, source);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::Resolve(
    const SpecKey& key, KernelGenerator generate, std::string& disk_path) {
  KernelSource source;
  EntryIdentity id;
  // Every lookup ends as exactly one of memory hit, disk hit or miss, so
  // failures before the disk is consulted count as misses too.
  if (absl::Status s = Prepare(key, generate, source, id); !s.ok()) {
    stats_.Add(stats_.misses);
    return s;
  }
  if (config_.disk.has_value()) {
    disk_path = config_.disk->EntryPath(key.FileStem(), id);
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

ReadResult KernelCache::ReadEntry(const SpecKey& key, const EntryIdentity& id) {
  ReadResult read = config_.disk->Read(key.FileStem(), id);
  if (read.problem == EntryProblem::kCorrupt ||
      read.problem == EntryProblem::kStale) {
    bool corrupt = read.problem == EntryProblem::kCorrupt;
    stats_.Add(corrupt ? stats_.corrupt_entries : stats_.stale_entries);
    Logger().warn("disk entry for {} is {} ({}); recompiling", key.ToString(),
                  corrupt ? "corrupt" : "stale", read.detail);
  }
  return read;
}

absl::StatusOr<std::shared_ptr<Kernel>> KernelCache::LoadFromDisk(
    const SpecKey& key, const KernelSource& source, const EntryIdentity& id) {
  auto start = std::chrono::steady_clock::now();
  ReadResult read = ReadEntry(key, id);
  if (read.problem == EntryProblem::kMissing)
    return absl::NotFoundError("no disk entry");
  if (read.problem != EntryProblem::kNone)
    return absl::DataLossError(read.detail);
  absl::StatusOr<std::shared_ptr<Kernel>> kernel =
      backend_.Load(key, source, read.payload);
  if (!kernel.ok()) {
    stats_.Add(stats_.corrupt_entries);
    Logger().warn("disk entry for {} does not load ({}); recompiling",
                  key.ToString(), kernel.status().ToString());
    return kernel.status();
  }
  TouchEntryFile(config_.disk->EntryPath(key.FileStem(), id));
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
  Timing timing;
  TAILOR_ASSIGN_OR_RETURN(std::string binary,
                          CompileBinary(key, source, timing));
  stats_.NoteSpecialization(key);
  if (config_.disk.has_value()) {
    // A failed write is logged and counted; the kernel still serves.
    (void)StoreBinary(key, id, binary);
  }
  return backend_.Load(key, source, binary);
}

absl::StatusOr<std::string> KernelCache::CompileBinary(
    const SpecKey& key, const KernelSource& source, Timing& timing) {
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
  double cpu_start = ThreadCpuSeconds();
  absl::StatusOr<std::string> binary = backend_.Compile(key, source);
  timing.cpu_seconds = ThreadCpuSeconds() - cpu_start;
  timing.wall_seconds = SecondsSince(start);
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
  stats_.compile_seconds.Observe(timing.wall_seconds);
  Logger().info("kernel {} compiled in {:.1f} ms", key.ToString(),
                timing.wall_seconds * 1e3);
  return binary;
}

absl::Status KernelCache::StoreBinary(const SpecKey& key,
                                      const EntryIdentity& id,
                                      absl::string_view binary) {
  const DiskCache& disk = *config_.disk;
  absl::Status written = disk.Write(key.FileStem(), id, binary);
  if (!written.ok()) {
    stats_.Add(stats_.disk_write_failures);
    Logger().warn("kernel {} not written to disk: {}", key.ToString(),
                  written.ToString());
    return written;
  }
  if (config_.disk_max_bytes == 0) return absl::OkStatus();
  struct stat st;
  std::string path = disk.EntryPath(key.FileStem(), id);
  uint64_t bytes = stat(path.c_str(), &st) == 0 ? st.st_size : binary.size();
  absl::StatusOr<EvictionReport> evicted =
      NoteEntryWritten(disk.dir(), bytes, config_.disk_max_bytes);
  if (!evicted.ok()) {
    Logger().warn("disk cache size limit not applied: {}",
                  evicted.status().ToString());
  } else if (evicted->removed_entries > 0) {
    stats_.Add(stats_.disk_evictions, evicted->removed_entries);
    Logger().info(
        "disk cache over its limit of {} bytes: evicted {} entries ({} bytes)",
        config_.disk_max_bytes, evicted->removed_entries,
        evicted->removed_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelCache::PrecompileResult> KernelCache::Precompile(
    const SpecKey& key, KernelGenerator generate) {
  if (!config_.disk.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot precompile ", key.ToString(),
                     ": the disk cache is off, so nothing would persist"));
  }
  KernelSource source;
  EntryIdentity id;
  TAILOR_RETURN_IF_ERROR(Prepare(key, generate, source, id));
  PrecompileResult result;
  result.entry_path = config_.disk->EntryPath(key.FileStem(), id);
  if (ReadEntry(key, id).problem == EntryProblem::kNone) {
    TouchEntryFile(result.entry_path);
    result.was_on_disk = true;
    return result;
  }
  if (config_.disable_jit) {
    return absl::FailedPreconditionError(
        absl::StrCat("TAILOR_DISABLE_JIT is set and kernel ", key.ToString(),
                     " is not in the disk cache (", config_.disk->dir(), ")"));
  }
  Timing timing;
  TAILOR_ASSIGN_OR_RETURN(std::string binary,
                          CompileBinary(key, source, timing));
  result.compile_seconds = timing.wall_seconds;
  result.compile_cpu_seconds = timing.cpu_seconds;
  result.persisted = StoreBinary(key, id, binary);
  return result;
}

absl::Status KernelCache::CheckOnDisk(const SpecKey& key,
                                      KernelGenerator generate) {
  if (!config_.disk.has_value())
    return absl::FailedPreconditionError("the disk cache is off");
  KernelSource source;
  EntryIdentity id;
  TAILOR_RETURN_IF_ERROR(Prepare(key, generate, source, id));
  ReadResult read = config_.disk->Read(key.FileStem(), id);
  switch (read.problem) {
    case EntryProblem::kNone:
      return absl::OkStatus();
    case EntryProblem::kMissing:
      return absl::NotFoundError("not in the disk cache");
    case EntryProblem::kCorrupt:
      return absl::DataLossError(absl::StrCat("corrupt: ", read.detail));
    case EntryProblem::kStale:
      return absl::FailedPreconditionError(
          absl::StrCat("stale: ", read.detail));
  }
  return absl::InternalError("unknown disk entry state");
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
  // Nothing is queued now (a queued key counts as resolving), but a
  // background worker may be between two jobs holding background_mu_. Lock
  // order mu_ -> background_mu_: nothing takes mu_ under background_mu_.
  background_mu_.Lock();
}

void KernelCache::AfterForkInParent() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  background_mu_.Unlock();
  mu_.Unlock();
}

void KernelCache::AfterForkInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Nothing was resolving: no entry is pending and no compile slot taken.
  // The background workers were the parent's and do not exist here: with
  // their handles kept, Enqueue would start none (the pool looks full) and
  // every key queued in the child would stay pending forever, and the
  // destructor would join threads that are not there. The handles can be
  // neither joined nor detached here; they are leaked on purpose (as the
  // thread pool does), and the child starts workers of its own on demand.
  new std::vector<std::thread>(std::move(background_workers_));
  background_workers_.clear();
  // Parent threads may be queued on either mutex (a worker waiting for
  // jobs, a lookup blocked by PrepareFork): see ResetMutexInChild.
  ResetMutexInChild(background_mu_);
  ResetMutexInChild(mu_);
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
