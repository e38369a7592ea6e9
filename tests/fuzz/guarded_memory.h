// tests/fuzz/guarded_memory.h — memory for the tensors of a fuzzed call.
//
// JIT-compiled kernels are not instrumented by ASan, so a kernel that runs
// past a tensor would go unnoticed in ordinary heap memory. GuardedArena
// places every buffer so that it ends exactly where a PROT_NONE page begins:
// one element too far faults at once, in any build.
//
// Tensors too large to back with memory (the fuzzer claims shapes of
// terabytes) point into one reserved, never-backed region instead
// (VirtualTensorData): if the code under test ever touched such data
// within the reservation, it would fault too. The fuzzer only passes such
// tensors to a runtime that cannot run kernels (TAILOR_DISABLE_JIT), so only
// host code could touch it.
#ifndef TAILOR_TESTS_FUZZ_GUARDED_MEMORY_H_
#define TAILOR_TESTS_FUZZ_GUARDED_MEMORY_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

namespace tailor::fuzz {

class GuardedArena {
 public:
  GuardedArena() = default;
  GuardedArena(const GuardedArena&) = delete;
  GuardedArena& operator=(const GuardedArena&) = delete;
  ~GuardedArena() { Reset(); }

  // `bytes` of readable, writable memory followed by a PROT_NONE page.
  void* Allocate(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes + page - 1) / page * page;
    void* base = mmap(nullptr, body + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) std::abort();
    char* guard = static_cast<char*>(base) + body;
    if (mprotect(guard, page, PROT_NONE) != 0) std::abort();
    maps_.emplace_back(base, body + page);
    return guard - bytes;
  }

  void Reset() {
    for (auto [base, size] : maps_) munmap(base, size);
    maps_.clear();
  }

 private:
  std::vector<std::pair<void*, size_t>> maps_;
};

// The never-backed reservation behind VirtualTensorData: 16 slots.
struct VirtualRegion {
  char* base = nullptr;
  size_t slot_bytes = 0;
};

// 16 TiB of PROT_NONE address space (one TiB a slot), or, where the
// address space is smaller, the largest power of two down to 16 GiB that
// maps: ThreadSanitizer keeps most of it for its shadow, and a 16 TiB
// mapping fails there (make tsan).
inline const VirtualRegion& GetVirtualRegion() {
  static const VirtualRegion region = [] {
    for (size_t slot = size_t{1} << 40; slot >= (size_t{1} << 30); slot /= 2) {
      void* p = mmap(nullptr, 16 * slot, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) return VirtualRegion{static_cast<char*>(p), slot};
    }
    std::abort();
  }();
  return region;
}

// Slots of a PROT_NONE reservation (GetVirtualRegion): slot i starts i slot
// sizes in, so tensors in different slots never overlap unless they claim
// more than a slot. Never backed: touching it faults.
inline void* VirtualTensorData(int slot) {
  const VirtualRegion& region = GetVirtualRegion();
  return region.base + static_cast<size_t>(slot % 16) * region.slot_bytes;
}

// True when `p` points into the VirtualTensorData reservation.
inline bool IsVirtualTensorData(const void* p) {
  const VirtualRegion& region = GetVirtualRegion();
  const char* c = static_cast<const char*>(p);
  return c >= region.base && c < region.base + 16 * region.slot_bytes;
}

}  // namespace tailor::fuzz

#endif  // TAILOR_TESTS_FUZZ_GUARDED_MEMORY_H_
