// tests/fuzz/c_tensors.h — the tailor_tensor views of one fuzzed C ABI call.
//
// CTensors builds each tensor an entry expects (shape, dtype, row-major or
// padded strides, memory from a GuardedArena), then, now and then, breaks it
// in one or several of the ways a C caller can: any int32 as dtype, rank or
// device type, edge values as dims and strides, a null or misaligned data
// pointer. Memory is sized after the breaking, so a view never claims more
// than it is given:
//   - views that span at most kMaxRealBytes get real memory that ends at a
//     PROT_NONE page (one element too far faults);
//   - larger float views point into a never-backed reservation
//     (VirtualTensorData) and mark the call has_virtual_data(): the harness
//     then gives it only to a runtime that cannot run kernels;
//   - larger index views (host code reads them) are made surely invalid
//     (dims[0] = -1) instead.
// Output() remembers an output's bytes so that the harness can check that a
// failed call wrote nothing.
#ifndef TAILOR_TESTS_FUZZ_C_TENSORS_H_
#define TAILOR_TESTS_FUZZ_C_TENSORS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_input.h"
#include "guarded_memory.h"
#include "tailor/c_api.h"

namespace tailor::fuzz {

inline constexpr size_t kMaxRealBytes = size_t{1} << 20;

// Bytes per element of a tailor_dtype value; 0 for any other value.
inline size_t CDTypeSize(int32_t dtype) {
  switch (dtype) {
    case TAILOR_DTYPE_F32:
    case TAILOR_DTYPE_I32:
      return 4;
    case TAILOR_DTYPE_BF16:
    case TAILOR_DTYPE_F16:
      return 2;
    case TAILOR_DTYPE_I64:
    case TAILOR_DTYPE_F64:
      return 8;
    case TAILOR_DTYPE_U8:
      return 1;
    default:
      return 0;
  }
}

// Elements a view spans (the last one it can touch, plus one): 0 when a dim
// is 0; -1 when the rank is out of range, a dim or stride is negative, or
// the span overflows int64.
inline int64_t SpanElements(const tailor_tensor& t) {
  if (t.rank < 0 || t.rank > TAILOR_MAX_RANK) return -1;
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 0 || t.strides[i] < 0) return -1;
    if (t.dims[i] == 0) return 0;
  }
  for (int i = 0; i < t.rank; ++i) {
    int64_t step;
    if (__builtin_mul_overflow(t.dims[i] - 1, t.strides[i], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return -1;
    }
  }
  return last == std::numeric_limits<int64_t>::max() ? -1 : last + 1;
}

// Bytes of memory a view can touch; ~0 when that is more than 2^50 bytes or
// not computable (negative or overflowing); 0 for an unknown dtype.
inline size_t SpanBytes(const tailor_tensor& t) {
  const int64_t span = SpanElements(t);
  const size_t element = CDTypeSize(t.dtype);
  if (span < 0) return ~size_t{0};
  if (element == 0 || span == 0) return 0;
  if (static_cast<uint64_t>(span) > (uint64_t{1} << 50) / element) {
    return ~size_t{0};
  }
  return static_cast<size_t>(span) * element;
}

// Values for the elements of an index tensor (its position, flattened).
using IndexValue = std::function<int32_t(FuzzInput&, int64_t)>;

class CTensors {
 public:
  explicit CTensors(FuzzInput& in) : in_(in) {}
  CTensors(const CTensors&) = delete;
  CTensors& operator=(const CTensors&) = delete;

  FuzzInput& in() { return in_; }
  bool has_virtual_data() const { return has_virtual_data_; }

  // A host tensor of `dims` and `dtype`, maybe padded, maybe broken; small
  // finite float contents.
  tailor_tensor Float(const std::vector<int64_t>& dims, int32_t dtype) {
    return Make(dims, dtype, nullptr, nullptr);
  }
  // The same with the strides given (before any breaking).
  tailor_tensor Strided(const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& strides, int32_t dtype) {
    return Make(dims, dtype, nullptr, &strides);
  }
  // The same for an i32 index tensor whose elements come from `value`.
  tailor_tensor Index(const std::vector<int64_t>& dims,
                      const IndexValue& value) {
    return Make(dims, TAILOR_DTYPE_I32, &value, nullptr);
  }

  // Remembers the bytes of an output (one with real memory).
  void Output(const tailor_tensor& t) {
    const size_t bytes = SpanBytes(t);
    if (t.data != nullptr && IsBacked(t) && bytes > 0 &&
        bytes <= kMaxRealBytes) {
      outputs_.push_back({t, Snapshot(t.data, bytes)});
    }
  }
  // True when no remembered output changed.
  bool OutputsUnchanged() const {
    for (const auto& [t, bytes] : outputs_) {
      if (Snapshot(t.data, bytes.size()) != bytes) return false;
    }
    return true;
  }
  // True when the remembered output `t` is unchanged from byte `offset` on.
  bool OutputTailUnchanged(const tailor_tensor& t, size_t offset) const {
    for (const auto& [o, bytes] : outputs_) {
      if (o.data != t.data || offset > bytes.size()) continue;
      return std::memcmp(static_cast<const char*>(t.data) + offset,
                         bytes.data() + offset, bytes.size() - offset) == 0;
    }
    return true;
  }

  // `bytes` of guarded memory owned by this call.
  void* Allocate(size_t bytes) { return arena_.Allocate(bytes); }

 private:
  static std::string Snapshot(const void* data, size_t bytes) {
    return std::string(static_cast<const char*>(data), bytes);
  }
  bool IsBacked(const tailor_tensor& t) const {
    for (const void* p : backed_) {
      if (p == t.data) return true;
    }
    return false;
  }

  // Row-major strides, each non-last dim sometimes padded (a view sliced
  // from a wider tensor, e.g. q from a fused qkv).
  void SetStrides(tailor_tensor& t) {
    const bool padded = in_.OneIn(6);
    int64_t stride = 1, extent = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.strides[d] = stride;
      const int64_t pad = padded && d > 0 ? in_.InRange(0, 2) * 8 : 0;
      // Dims may come from an earlier broken view: saturate, as
      // tailor_tensor_contiguous does.
      if (__builtin_add_overflow(t.dims[d], pad, &extent) ||
          __builtin_mul_overflow(stride, extent, &stride)) {
        stride = std::numeric_limits<int64_t>::max();
      }
    }
  }

  // Breaks `t` in one way a C caller could.
  void Break(tailor_tensor& t) {
    const int dim = static_cast<int>(in_.InRange(0, TAILOR_MAX_RANK - 1));
    switch (in_.InRange(0, 8)) {
      case 0:
        t.dtype = in_.OneIn(4) ? in_.Take<int32_t>()
                               : static_cast<int32_t>(in_.InRange(-1, 9));
        break;
      case 1:
        t.rank = in_.OneIn(4) ? in_.Take<int32_t>()
                              : static_cast<int32_t>(in_.InRange(-1, 7));
        break;
      case 2:
        t.dims[dim] = in_.EdgeValue();
        break;
      case 3:
        // +-1, where that does not overflow (an earlier break may have set
        // an edge value).
        if (in_.Bool()) {
          if (t.dims[dim] < std::numeric_limits<int64_t>::max()) ++t.dims[dim];
        } else if (t.dims[dim] > std::numeric_limits<int64_t>::min()) {
          --t.dims[dim];
        }
        break;
      case 4:
        t.strides[dim] = in_.OneIn(4) ? in_.EdgeValue() : in_.InRange(0, 3);
        break;
      case 5:
        t.data = nullptr;
        break;
      case 6:
        t.device_type = in_.OneIn(4) ? in_.Take<int32_t>()
                                     : static_cast<int32_t>(in_.InRange(0, 3));
        break;
      case 7:
        t.device_index = in_.OneIn(2) ? in_.Take<int32_t>() : 1;
        break;
      default:
        misalign_ = static_cast<size_t>(in_.InRange(1, 7));
        break;
    }
  }

  tailor_tensor Make(const std::vector<int64_t>& dims, int32_t dtype,
                     const IndexValue* value,
                     const std::vector<int64_t>* strides) {
    // Through the C ABI's own helper, then re-strided (maybe padded).
    tailor_tensor t = tailor_tensor_contiguous(
        nullptr, dtype, static_cast<int32_t>(dims.size()), dims.data());
    if (strides != nullptr) {
      std::copy(strides->begin(), strides->end(), t.strides);
    } else {
      SetStrides(t);
    }
    t.data = reinterpret_cast<void*>(64);  // replaced below unless broken
    misalign_ = 0;
    if (in_.OneIn(10)) {
      do Break(t);
      while (in_.OneIn(3));
    }
    if (t.data == nullptr) return t;
    const size_t bytes = SpanBytes(t);
    if (bytes > kMaxRealBytes && value != nullptr) {
      t.dims[0] = -1;  // surely invalid: host code would read it
      t.data = arena_.Allocate(16);
      return t;
    }
    if (bytes > kMaxRealBytes) {
      t.data = VirtualTensorData(next_slot_++);
      has_virtual_data_ = true;
      return t;
    }
    const size_t size = bytes > 0 ? bytes : 16;
    char* data = static_cast<char*>(arena_.Allocate(size + misalign_));
    t.data = data + misalign_;
    backed_.push_back(t.data);
    Fill(t.data, bytes, value);
    return t;
  }

  void Fill(void* data, size_t bytes, const IndexValue* value) {
    auto* p = static_cast<unsigned char*>(data);
    if (value != nullptr) {
      for (size_t i = 0; i + 4 <= bytes; i += 4) {
        const int32_t v = (*value)(in_, static_cast<int64_t>(i / 4));
        std::memcpy(p + i, &v, 4);  // data may be misaligned
      }
      return;
    }
    for (size_t i = 0; i < bytes; ++i) {  // small, finite floats and bf16s
      p[i] = static_cast<unsigned char>(i % 4 == 3 ? 0x3e : i * 37);
    }
  }

  FuzzInput& in_;
  GuardedArena arena_;
  bool has_virtual_data_ = false;
  int next_slot_ = 0;
  size_t misalign_ = 0;
  std::vector<std::pair<tailor_tensor, std::string>> outputs_;
  std::vector<const void*> backed_;
};

}  // namespace tailor::fuzz

#endif  // TAILOR_TESTS_FUZZ_C_TENSORS_H_
