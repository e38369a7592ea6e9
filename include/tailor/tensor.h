// tailor/tensor.h — the tensor view that crosses tailor's API.
//
// A TensorRef is a non-owning view: data pointer, element type, up to
// kMaxRank dims, strides counted in elements (not bytes), and the device the
// data lives on. tailor never allocates or frees a caller's tensor.
//
// Example:
//   std::vector<float> buf(16 * 64);
//   tailor::TensorRef a = tailor::TensorRef::Contiguous(
//       buf.data(), tailor::DType::kF32, {16, 64});   // [16, 64] row-major
#ifndef TAILOR_TENSOR_H_
#define TAILOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tailor {

// Element types. Values are stable: they are part of cache keys.
enum class DType : uint8_t {
  kF32 = 1,
  kBF16 = 2,
  kF16 = 3,
  kI32 = 4,
  kI64 = 5,
  kU8 = 6,
  kF64 = 7,
  // OCP FP8 E4M3 (torch.float8_e4m3fn): 1 byte, largest finite 448, no
  // infinities. Only as the quantized operands of the FP8 MoE ops.
  kF8E4M3 = 8,
};

// Bytes per element of `dtype`.
size_t DTypeSize(DType dtype);
// Short name used in logs, keys and messages: "f32", "bf16", ...
absl::string_view DTypeName(DType dtype);

enum class DeviceType : uint8_t { kCpu = 0, kCuda = 1, kHip = 2 };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

std::string DeviceName(Device device);  // "cpu", "cuda:0", "hip:1"

inline constexpr int kMaxRank = 6;

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements
  Device device = {};

  // A row-major (last dim contiguous) view over `data`. A stride that does
  // not fit int64 (dims whose product overflows) is INT64_MAX: ops reject
  // such a view (its element count overflows) unless another dim is 0.
  static TensorRef Contiguous(const void* data, DType dtype,
                              std::initializer_list<int64_t> dims,
                              Device device = {});

  int64_t dim(int i) const { return dims[i]; }
  int64_t stride(int i) const { return strides[i]; }
  // The product of dims; 0 when a dim is 0, INT64_MAX when the product does
  // not fit int64.
  int64_t numel() const;
  bool empty() const { return numel() == 0; }
  // True when strides are exactly row-major for dims (size-1 dims excepted).
  bool is_contiguous() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  std::string ShapeString() const;  // "[16, 64] bf16 cpu"
};

}  // namespace tailor

#endif  // TAILOR_TENSOR_H_
