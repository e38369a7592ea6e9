// core/fork_handlers.h — keeps tailor usable in the child of a fork().
//
// Pre-forking servers (gunicorn, Python multiprocessing, DataLoader workers)
// fork while other threads may be compiling, launching or logging through
// tailor. The child has only the thread that called fork(): a lock another
// thread held, or a kernel another thread was compiling, would never be
// released there, and the CPU backend's worker threads are gone.
//
// Components that hold such state implement ForkParticipant and register;
// pthread_atfork handlers call, around every fork() in the process:
//   Prepare()        in the parent before the fork: bring the component to
//                    a state the child can inherit (wait for compiles in
//                    flight, take its locks). May wait, never fails.
//   AfterInParent()  in the parent: release what Prepare took.
//   AfterInChild()   in the child, single-threaded: release it, and forget
//                    what only other threads could have finished.
// Prepare runs in reverse registration order and the After* in registration
// order (as pthread_atfork does), so a component registered later, which
// may use an earlier one (an Engine logs), is quiesced first.
//
// Components that can check lazily compare ForkGeneration() with the value
// they saw at construction instead (the CPU thread pool: one relaxed load).
//
// Not covered: CUDA (a CUDA context never survives fork()), and a "tailor"
// logger that the application created with sinks other than spdlog's
// console sinks.
#ifndef TAILOR_CORE_FORK_HANDLERS_H_
#define TAILOR_CORE_FORK_HANDLERS_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"

namespace tailor::internal {

class ForkParticipant {
 public:
  virtual ~ForkParticipant() = default;
  virtual void Prepare() = 0;
  virtual void AfterInParent() = 0;
  virtual void AfterInChild() = 0;
};

// Thread-safe. A participant must unregister before it is destroyed.
void RegisterForkParticipant(ForkParticipant* participant);
void UnregisterForkParticipant(ForkParticipant* participant);

// For AfterInChild(): turns `mu`, which the caller has held since
// Prepare(), into a new unlocked mutex. Unlocking it would not do: an
// absl::Mutex keeps its waiters in the mutex itself, so a parent thread
// queued on it (blocked in Lock, or in Await on a condition) would be handed
// the lock in the child, where that thread does not exist, and the mutex
// would never be free again. Only in the child, single-threaded.
void ResetMutexInChild(absl::Mutex& mu);

// How many fork()s separate this process from the one that loaded tailor:
// 0 there, incremented in every child.
uint64_t ForkGeneration();

}  // namespace tailor::internal

#endif  // TAILOR_CORE_FORK_HANDLERS_H_
