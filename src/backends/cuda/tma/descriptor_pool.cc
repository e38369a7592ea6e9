// backends/cuda/tma/descriptor_pool.cc — check once, encode once, reuse.
#include "backends/cuda/tma/descriptor_pool.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/tma/tensor_map_check.h"

namespace tailor::cuda {

DescriptorPool::DescriptorPool(int sm_arch, TensorMapEncoder encoder)
    : sm_arch_(sm_arch), encoder_(std::move(encoder)) {}

const TensorMapBytes* DescriptorPool::Find(const TensorMapSpec& spec) const {
  const auto it = maps_.find(spec);
  return it == maps_.end() ? nullptr : it->second.get();
}

absl::StatusOr<const TensorMapBytes*> DescriptorPool::GetOrEncode(
    const TensorMapSpec& spec) {
  {
    // Warm path: shared lock, one probe.
    absl::ReaderMutexLock lock(&mutex_);
    if (const TensorMapBytes* found = Find(spec)) {
      reuses_.fetch_add(1, std::memory_order_relaxed);
      return found;
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
  if (const TensorMapBytes* found = Find(spec)) {
    reuses_.fetch_add(1, std::memory_order_relaxed);
    return found;
  }
  // Encoding under the exclusive lock keeps "exactly one encode per spec"
  // simple; encodes are rare (once per spec) and take microseconds.
  auto bytes = std::make_unique<TensorMapBytes>();
  if (absl::Status status = encoder_(spec, bytes.get()); !status.ok()) {
    encode_failures_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  encodes_.fetch_add(1, std::memory_order_relaxed);
  const TensorMapBytes* stored = bytes.get();
  maps_.emplace(spec, std::move(bytes));
  return stored;
}

DescriptorPoolCounters DescriptorPool::counters() const {
  return DescriptorPoolCounters{
      .encodes = encodes_.load(std::memory_order_relaxed),
      .reuses = reuses_.load(std::memory_order_relaxed),
      .rejections = rejections_.load(std::memory_order_relaxed),
      .encode_failures = encode_failures_.load(std::memory_order_relaxed),
  };
}

size_t DescriptorPool::size() const {
  absl::ReaderMutexLock lock(&mutex_);
  return maps_.size();
}

}  // namespace tailor::cuda
