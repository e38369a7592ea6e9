// core/thread_pool.h — the CPU backend's "grid": a fixed pool of workers.
//
// ParallelFor splits [0, n) into chunks and runs them on the workers and the
// calling thread; it returns when all chunks are done. Many threads may call
// ParallelFor at once (each call is its own job). A job of one chunk runs
// inline on the caller, so tiny launches never wake a worker.
//
// In the child of a fork() the workers do not exist: a pool inherited that
// way (core/fork_handlers.h) runs every job on its caller and, when
// destroyed, leaks its worker handles (they cannot be joined) instead of
// joining them.
#ifndef TAILOR_CORE_THREAD_POOL_H_
#define TAILOR_CORE_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace tailor::internal {

class ThreadPool {
 public:
  // Exactly `num_workers` (>= 0) worker threads besides the callers.
  explicit ThreadPool(int num_workers);
  ~ThreadPool();

  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Calls body(begin, end) over disjoint ranges covering [0, n), each at
  // least `min_chunk` items long (except the last).
  void ParallelFor(int64_t n, int64_t min_chunk,
                   absl::FunctionRef<void(int64_t, int64_t)> body);

 private:
  struct Job;
  void WorkerLoop();
  // True in the child of a fork() that happened after construction.
  bool InheritedAcrossFork() const;
  static void RunChunks(Job& job);

  // Jobs waiting for workers. Reserved once: queueing never allocates (a job
  // that finds it full runs on its caller alone).
  static constexpr size_t kMaxQueuedJobs = 256;
  absl::Mutex mu_;
  std::vector<Job*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  uint64_t fork_generation_;  // ForkGeneration() at construction
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_THREAD_POOL_H_
