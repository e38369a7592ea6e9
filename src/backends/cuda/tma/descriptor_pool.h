// backends/cuda/tma/descriptor_pool.h — encode each tensor map once.
//
// A CUtensorMap costs a driver call to encode; a warm launch must not pay it.
// DescriptorPool keeps one encoded 128-byte descriptor per distinct
// TensorMapSpec (every field is part of the key) and hands out a pointer that
// stays valid, unchanged, for the pool's lifetime: the launch path copies the
// bytes into kernel parameters, and the device-side patch slots start from
// them.
//
// The pool is host code only. It checks each new spec with CheckTensorMap
// first, so a rejected spec never reaches the driver, and it encodes through
// an injected TensorMapEncoder: the CUDA backend passes the driver's
// cuTensorMapEncodeTiled (tensor_map_driver_encoder.h); tests pass a fake.
//
// Example:
//   DescriptorPool pool(/*sm_arch=*/90, DriverTensorMapEncoder(api));
//   TAILOR_ASSIGN_OR_RETURN(const TensorMapBytes* map, pool.GetOrEncode(spec));
//   std::memcpy(param_slot, map->bytes, sizeof(map->bytes));
#ifndef TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_
#define TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_

#include <atomic>
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
// accepted, at most once per distinct spec per pool, never concurrently
// within one pool. Returns the driver's error as a Status.
using TensorMapEncoder =
    std::function<absl::Status(const TensorMapSpec& spec, TensorMapBytes* out)>;

// Monotonic counts since the pool was created.
struct DescriptorPoolCounters {
  uint64_t encodes = 0;          // successful encoder calls (== pool size)
  uint64_t reuses = 0;           // lookups served from the pool
  uint64_t rejections = 0;       // specs CheckTensorMap refused
  uint64_t encode_failures = 0;  // encoder errors (checker/driver mismatch)
};

class DescriptorPool {
 public:
  // `sm_arch` (e.g. 90) is the architecture every spec is checked for.
  DescriptorPool(int sm_arch, TensorMapEncoder encoder);

  DescriptorPool(const DescriptorPool&) = delete;
  DescriptorPool& operator=(const DescriptorPool&) = delete;

  // Returns the descriptor of `spec`, encoding it on first request.
  //   - a spec CheckTensorMap rejects returns the checker's status
  //     (InvalidArgument / Unimplemented) and is counted in `rejections`;
  //   - an encoder failure is returned as is, counted in `encode_failures`,
  //     and not cached (the next request tries again).
  // The pointer stays valid and its bytes unchanged until the pool is
  // destroyed. Thread-safe: concurrent requests for one new spec encode it
  // exactly once. A warm lookup takes a shared lock and one hash probe.
  absl::StatusOr<const TensorMapBytes*> GetOrEncode(const TensorMapSpec& spec);

  DescriptorPoolCounters counters() const;
  size_t size() const;  // distinct specs encoded

 private:
  const TensorMapBytes* Find(const TensorMapSpec& spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mutex_);

  const int sm_arch_;
  const TensorMapEncoder encoder_;
  mutable absl::Mutex mutex_;
  // unique_ptr values keep each descriptor at a fixed address across rehash.
  absl::flat_hash_map<TensorMapSpec, std::unique_ptr<TensorMapBytes>> maps_
      ABSL_GUARDED_BY(mutex_);
  std::atomic<uint64_t> encodes_{0};
  std::atomic<uint64_t> reuses_{0};
  std::atomic<uint64_t> rejections_{0};
  std::atomic<uint64_t> encode_failures_{0};
};

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_TMA_DESCRIPTOR_POOL_H_
