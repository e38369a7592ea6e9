// backends/cuda/tma/descriptor_pool.h — encode each tensor map once, keep a
// bounded number of them.
//
// A CUtensorMap costs a driver call to encode; a warm launch must not pay it.
// DescriptorPool keeps one encoded 128-byte descriptor per distinct
// TensorMapSpec (every field is part of the key) and hands out a copy of its
// bytes: the launch path puts them into kernel parameters, and the
// device-side patch slots start from them.
//
// The pool is bounded: it holds at most `capacity` descriptors and, to make
// room for a new one, drops the least recently used (counted in
// `evictions`). Specs are keyed on addresses, so without the bound a server
// whose buffers or extents change would keep one entry per combination
// forever. Launches describe buffers over their reserved extents (never a
// step's ragged count), so a serving workload's set of maps is fixed and
// far below the bound; evictions in steady state mean a caller builds specs
// from per-step quantities.
//
// The pool is host code only. It checks each new spec with CheckTensorMap
// first, so a rejected spec never reaches the driver, and it encodes through
// an injected TensorMapEncoder: the CUDA backend passes the driver's
// cuTensorMapEncodeTiled (tensor_map_driver_encoder.h); tests pass a fake.
//
// Example:
//   DescriptorPool pool(/*sm_arch=*/90, DriverTensorMapEncoder(api));
//   TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes map, pool.GetOrEncode(spec));
//   std::memcpy(param_slot, map.bytes, sizeof(map.bytes));
#ifndef TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_
#define TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/tma/tensor_map_spec.h"

namespace tailor::cuda {

// An encoded tensor map: the driver's opaque 128-byte CUtensorMap. The driver
// requires 64-byte alignment of the encode target (cuda.h's own CUtensorMap
// type asks for 128; the driver encoder encodes into one and copies).
struct alignas(64) TensorMapBytes {
  uint8_t bytes[128] = {};
};
static_assert(sizeof(TensorMapBytes) == 128);

// Encodes `spec` into `out`. Called only for specs that CheckTensorMap
// accepted, once per distinct spec while it stays in the pool (again after
// an eviction), never concurrently within one pool. Returns the driver's
// error as a Status.
using TensorMapEncoder =
    std::function<absl::Status(const TensorMapSpec& spec, TensorMapBytes* out)>;

// Monotonic counts since the pool was created.
struct DescriptorPoolCounters {
  uint64_t encodes = 0;          // successful encoder calls
  uint64_t reuses = 0;           // lookups served from the pool
  uint64_t rejections = 0;       // specs CheckTensorMap refused
  uint64_t encode_failures = 0;  // encoder errors (checker/driver mismatch)
  uint64_t evictions = 0;        // descriptors dropped to respect the bound
};

// The bound of the CUDA backend's pool: a few maps per MoE layer (its
// weights; the workspace's rows are shared by every layer) and per
// attention layer (its caches), for the largest models, with room to spare.
inline constexpr size_t kDefaultDescriptorPoolCapacity = 4096;

class DescriptorPool {
 public:
  // `sm_arch` (e.g. 90) is the architecture every spec is checked for;
  // `capacity` (at least 1) the most descriptors the pool holds.
  DescriptorPool(int sm_arch, TensorMapEncoder encoder,
                 size_t capacity = kDefaultDescriptorPoolCapacity);

  DescriptorPool(const DescriptorPool&) = delete;
  DescriptorPool& operator=(const DescriptorPool&) = delete;

  // Returns (a copy of) the descriptor of `spec`, encoding it on first
  // request, and marks it most recently used.
  //   - a spec CheckTensorMap rejects returns the checker's status
  //     (InvalidArgument / Unimplemented) and is counted in `rejections`;
  //   - an encoder failure is returned as is, counted in `encode_failures`,
  //     and not cached (the next request tries again).
  // Thread-safe: concurrent requests for one new spec encode it exactly
  // once. A warm lookup takes a shared lock, one hash probe and one atomic
  // increment (the recency stamp); it never evicts.
  absl::StatusOr<TensorMapBytes> GetOrEncode(const TensorMapSpec& spec);

  DescriptorPoolCounters counters() const;
  size_t size() const;  // descriptors held, at most capacity()
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    TensorMapBytes bytes;
    std::atomic<uint64_t> last_use{0};  // a stamp of uses_; larger: newer
  };
  // The entry of `spec`, stamped as just used; null when absent.
  const Entry* FindAndTouch(const TensorMapSpec& spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // Drops the least recently used entry.
  void EvictOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int sm_arch_;
  const TensorMapEncoder encoder_;
  const size_t capacity_;
  mutable absl::Mutex mutex_;
  // unique_ptr values keep each entry (and its atomic) at a fixed address
  // across rehash.
  absl::flat_hash_map<TensorMapSpec, std::unique_ptr<Entry>> maps_
      ABSL_GUARDED_BY(mutex_);
  mutable std::atomic<uint64_t> uses_{0};  // the recency clock
  std::atomic<uint64_t> encodes_{0};
  std::atomic<uint64_t> reuses_{0};
  std::atomic<uint64_t> rejections_{0};
  std::atomic<uint64_t> encode_failures_{0};
  std::atomic<uint64_t> evictions_{0};
};

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_
