// ops/device_layout.h — laying out a workspace's device buffers in one
// allocation: each buffer starts on a 256-byte boundary (TMA and vector
// loads need 16; 256 keeps every buffer on its own cache lines and L2
// sectors), and an empty buffer still gets a slot so its offset is valid.
//
// Example:
//   int64_t end = 0;
//   const int64_t items = PlaceDeviceBuffer(bytes_of_items, end);
//   const int64_t scratch = PlaceDeviceBuffer(scratch_bytes, end);
//   // allocate `end` bytes; buffer i lives at base + its offset
#ifndef TAILOR_OPS_DEVICE_LAYOUT_H_
#define TAILOR_OPS_DEVICE_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace tailor::internal {

inline constexpr int64_t kDeviceBufferAlignment = 256;

// Places a buffer of `bytes` at `end` and moves `end` past it, rounded up
// to kDeviceBufferAlignment; returns the buffer's offset.
inline int64_t PlaceDeviceBuffer(int64_t bytes, int64_t& end) {
  const int64_t offset = end;
  end += (std::max<int64_t>(bytes, 1) + kDeviceBufferAlignment - 1) /
         kDeviceBufferAlignment * kDeviceBufferAlignment;
  return offset;
}

}  // namespace tailor::internal

#endif  // TAILOR_OPS_DEVICE_LAYOUT_H_
