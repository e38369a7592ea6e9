#include "core/thread_pool.h"

#include <algorithm>

#include "core/fork_handlers.h"

namespace tailor::internal {

struct ThreadPool::Job {
  absl::FunctionRef<void(int64_t, int64_t)> body;
  int64_t n;
  int64_t chunk;
  int64_t num_chunks;
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int64_t> done_chunks{0};
  // Workers that picked the job up and may still touch it.
  std::atomic<int> active_helpers{0};
};

ThreadPool::ThreadPool(int num_workers) : fork_generation_(ForkGeneration()) {
  queue_.reserve(kMaxQueuedJobs);
  for (int i = 0; i < num_workers; ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  if (InheritedAcrossFork()) {
    // The workers were the parent's and do not exist here: they can be
    // neither joined nor detached (both fail, and a joinable std::thread's
    // destructor terminates). Their handles are leaked on purpose, once
    // per inherited pool; the queue lock they may hold is never taken.
    new std::vector<std::thread>(std::move(workers_));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::InheritedAcrossFork() const {
  return ForkGeneration() != fork_generation_;
}

void ThreadPool::RunChunks(Job& job) {
  while (true) {
    int64_t c = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) return;
    int64_t begin = c * job.chunk;
    job.body(begin, std::min(job.n, begin + job.chunk));
    job.done_chunks.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::WorkerLoop() {
  while (true) {
    Job* job = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      job = queue_.front();
      // Leave the job queued until all of its chunks are claimed, so several
      // workers can join it; the last claimer removes it.
      job->active_helpers.fetch_add(1, std::memory_order_acq_rel);
      if (job->next_chunk.load(std::memory_order_relaxed) + 1 >=
          job->num_chunks) {
        queue_.erase(queue_.begin());
      }
    }
    RunChunks(*job);
    job->active_helpers.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  int64_t parts =
      std::min<int64_t>((n + min_chunk - 1) / min_chunk,
                        4 * (static_cast<int64_t>(workers_.size()) + 1));
  if (parts <= 1 || workers_.empty() || InheritedAcrossFork()) {
    body(0, n);
    return;
  }
  int64_t chunk = (n + parts - 1) / parts;
  Job job{.body = body,
          .n = n,
          .chunk = chunk,
          .num_chunks = (n + chunk - 1) / chunk};
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() < queue_.capacity()) {
      queue_.push_back(&job);
      queued = true;
    }
  }
  if (!queued) {  // no room: run alone rather than allocate
    body(0, n);
    return;
  }
  RunChunks(job);
  {
    // Make sure no worker still holds a pointer to the job (on our stack).
    absl::MutexLock lock(&mu_);
    auto it = std::find(queue_.begin(), queue_.end(), &job);
    if (it != queue_.end()) queue_.erase(it);
  }
  while (job.done_chunks.load(std::memory_order_acquire) < job.num_chunks ||
         job.active_helpers.load(std::memory_order_acquire) > 0) {
    std::this_thread::yield();
  }
}

}  // namespace tailor::internal
