#include "core/fork_handlers.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <vector>

namespace tailor::internal {
namespace {

std::atomic<uint64_t> fork_generation{0};

struct Registry {
  std::mutex mu;  // held from Prepare until the After* of one fork
  std::vector<ForkParticipant*> participants;  // in registration order
};

// Never destroyed: fork() may run during static destruction.
Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

void PrepareAll() {
  Registry& r = GetRegistry();
  r.mu.lock();
  for (auto it = r.participants.rbegin(); it != r.participants.rend(); ++it)
    (*it)->Prepare();
}

void AfterInParentAll() {
  Registry& r = GetRegistry();
  for (ForkParticipant* p : r.participants) p->AfterInParent();
  r.mu.unlock();
}

void AfterInChildAll() {
  fork_generation.fetch_add(1, std::memory_order_relaxed);
  Registry& r = GetRegistry();
  for (ForkParticipant* p : r.participants) p->AfterInChild();
  r.mu.unlock();  // locked by this thread in PrepareAll
}

}  // namespace

void RegisterForkParticipant(ForkParticipant* participant) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    pthread_atfork(PrepareAll, AfterInParentAll, AfterInChildAll);
  });
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.participants.push_back(participant);
}

void UnregisterForkParticipant(ForkParticipant* participant) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.participants.erase(
      std::remove(r.participants.begin(), r.participants.end(), participant),
      r.participants.end());
}

uint64_t ForkGeneration() {
  return fork_generation.load(std::memory_order_relaxed);
}

void ResetMutexInChild(absl::Mutex& mu) {
  mu.~Mutex();
  new (&mu) absl::Mutex();
}

}  // namespace tailor::internal
