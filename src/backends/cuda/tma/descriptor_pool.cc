// backends/cuda/tma/descriptor_pool.cc — check once, encode once, reuse;
// drop the least recently used descriptor at the bound.
#include "backends/cuda/tma/descriptor_pool.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/tma/tensor_map_check.h"

namespace tailor::cuda {

DescriptorPool::DescriptorPool(int sm_arch, TensorMapEncoder encoder,
                               size_t capacity)
    : sm_arch_(sm_arch),
      encoder_(std::move(encoder)),
      capacity_(std::max<size_t>(capacity, 1)) {}

const DescriptorPool::Entry* DescriptorPool::FindAndTouch(
    const TensorMapSpec& spec) const {
  const auto it = maps_.find(spec);
  if (it == maps_.end()) return nullptr;
  // Under the shared lock: eviction, which reads the stamps, holds the
  // exclusive one, so a stamp is never written while it picks.
  it->second->last_use.store(uses_.fetch_add(1, std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
  return it->second.get();
}

void DescriptorPool::EvictOne() {
  // A linear scan: evictions are rare (the bound is far above a serving
  // workload's maps), and a scan keeps the warm path to one stamp store.
  auto oldest = maps_.begin();
  for (auto it = maps_.begin(); it != maps_.end(); ++it) {
    if (it->second->last_use.load(std::memory_order_relaxed) <
        oldest->second->last_use.load(std::memory_order_relaxed)) {
      oldest = it;
    }
  }
  maps_.erase(oldest);
  evictions_.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<TensorMapBytes> DescriptorPool::GetOrEncode(
    const TensorMapSpec& spec) {
  {
    // Warm path: shared lock, one probe, the bytes copied out under it.
    absl::ReaderMutexLock lock(&mutex_);
    if (const Entry* found = FindAndTouch(spec)) {
      reuses_.fetch_add(1, std::memory_order_relaxed);
      return found->bytes;
    }
  }
  // Cold path. The check is pure and cheap; run it outside the lock so that
  // rejected specs never serialize behind an encode.
  if (absl::Status status = CheckTensorMap(spec, sm_arch_); !status.ok()) {
    rejections_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  absl::MutexLock lock(&mutex_);
  // Another thread may have encoded it while we waited for the lock.
  if (const Entry* found = FindAndTouch(spec)) {
    reuses_.fetch_add(1, std::memory_order_relaxed);
    return found->bytes;
  }
  // Encoding under the exclusive lock keeps "exactly one encode per spec"
  // simple; encodes are rare (once per spec) and take microseconds.
  auto entry = std::make_unique<Entry>();
  if (absl::Status status = encoder_(spec, &entry->bytes); !status.ok()) {
    encode_failures_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  encodes_.fetch_add(1, std::memory_order_relaxed);
  if (maps_.size() >= capacity_) EvictOne();
  entry->last_use.store(uses_.fetch_add(1, std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
  const TensorMapBytes bytes = entry->bytes;
  maps_.emplace(spec, std::move(entry));
  return bytes;
}

DescriptorPoolCounters DescriptorPool::counters() const {
  return DescriptorPoolCounters{
      .encodes = encodes_.load(std::memory_order_relaxed),
      .reuses = reuses_.load(std::memory_order_relaxed),
      .rejections = rejections_.load(std::memory_order_relaxed),
      .encode_failures = encode_failures_.load(std::memory_order_relaxed),
      .evictions = evictions_.load(std::memory_order_relaxed),
  };
}

size_t DescriptorPool::size() const {
  absl::ReaderMutexLock lock(&mutex_);
  return maps_.size();
}

}  // namespace tailor::cuda
