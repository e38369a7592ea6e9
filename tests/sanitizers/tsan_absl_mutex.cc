// tests/sanitizers/tsan_absl_mutex.cc — makes absl::Mutex visible to
// ThreadSanitizer in `make tsan` (linked into every test binary there, and
// only there).
//
// Debian's abseil is a prebuilt shared library without TSan instrumentation:
// absl::Mutex takes and releases its lock with atomics TSan never sees, so
// every field an absl::Mutex guards would be reported as a data race. This
// file interposes the Mutex and CondVar entries tailor and its tests use:
// each calls the library's own function (found with dlsym(RTLD_NEXT)) and
// tells TSan that the lock was acquired (__tsan_acquire after it returns
// holding the lock) or released (__tsan_release before it lets go). The
// library's internals stay invisible (uninstrumented), and every race on
// tailor's own data is still reported, except inside absl::Condition
// functions: the library evaluates them inside these calls, on whichever
// thread is locking or unlocking, where TSan cannot know that the mutex is
// held, so accesses during the library's own code are ignored.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"

// In the TSan runtime, not declared by <sanitizer/tsan_interface.h>.
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

namespace {

// The library's definition of `mangled`, which this file hides.
template <typename Fn>
Fn Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Ignores this thread's memory accesses while alive: the Condition
// functions the library evaluates in the call it wraps.
class IgnoreAccesses {
 public:
  IgnoreAccesses() { __tsan_ignore_thread_begin(); }
  ~IgnoreAccesses() { __tsan_ignore_thread_end(); }
};

void Acquired(const absl::Mutex* mu) {
  __tsan_acquire(const_cast<absl::Mutex*>(mu));
}
void Releasing(const absl::Mutex* mu) {
  __tsan_release(const_cast<absl::Mutex*>(mu));
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define TAILOR_REAL(name, type, mangled) \
  static const auto name = Real<type>(mangled)

void Mutex::Lock() {
  TAILOR_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  {
    IgnoreAccesses ignore;
    real(this);
  }
  Acquired(this);
}

void Mutex::Unlock() {
  TAILOR_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Releasing(this);
  {
    IgnoreAccesses ignore;
    real(this);
  }
}

void Mutex::ReaderLock() {
  TAILOR_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  {
    IgnoreAccesses ignore;
    real(this);
  }
  Acquired(this);
}

void Mutex::ReaderUnlock() {
  TAILOR_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Releasing(this);
  {
    IgnoreAccesses ignore;
    real(this);
  }
}

bool Mutex::TryLock() {
  TAILOR_REAL(real, bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  bool locked;
  {
    IgnoreAccesses ignore;
    locked = real(this);
  }
  if (locked) Acquired(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  TAILOR_REAL(real, void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  {
    IgnoreAccesses ignore;
    real(this, cond);
  }
  Acquired(this);
}

void Mutex::Await(const Condition& cond) {
  TAILOR_REAL(real, void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Releasing(this);
  {
    IgnoreAccesses ignore;
    real(this, cond);
  }
  Acquired(this);
}

void CondVar::Wait(Mutex* mu) {
  TAILOR_REAL(real, void (*)(CondVar*, Mutex*),
              "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Releasing(mu);
  {
    IgnoreAccesses ignore;
    real(this, mu);
  }
  Acquired(mu);
}

// Barrier is implemented in the library with Mutex and CondVar calls that
// may not go through the entries above: its own edge.
bool Barrier::Block() {
  TAILOR_REAL(real, bool (*)(Barrier*), "_ZN4absl7debian37Barrier5BlockEv");
  __tsan_release(this);
  bool last;
  {
    IgnoreAccesses ignore;
    last = real(this);
  }
  __tsan_acquire(this);
  return last;
}

#undef TAILOR_REAL

ABSL_NAMESPACE_END
}  // namespace absl
