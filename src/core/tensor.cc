#include "tailor/tensor.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/tensor_checks.h"

namespace tailor {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kF64:
      return 8;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kF64:
      return "f64";
    case DType::kF8E4M3:
      return "f8e4m3";
  }
  return "invalid";
}

std::string DeviceName(Device device) {
  switch (device.type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kCuda:
      return absl::StrCat("cuda:", device.index);
    case DeviceType::kHip:
      return absl::StrCat("hip:", device.index);
  }
  return "invalid";
}

namespace {

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) {
    return std::numeric_limits<int64_t>::max();
  }
  return product;
}

}  // namespace

TensorRef TensorRef::Contiguous(const void* data, DType dtype,
                                std::initializer_list<int64_t> dims,
                                Device device) {
  TensorRef t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(dims.size() < kMaxRank ? dims.size() : kMaxRank);
  int i = 0;
  for (int64_t d : dims) {
    if (i == t.rank) break;
    t.dims[i++] = d;
  }
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride = SaturatingMul(stride, t.dims[d]);
  }
  return t;
}

int64_t TensorRef::numel() const {
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) return 0;
  }
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(n, dims[i], &n)) {
      return std::numeric_limits<int64_t>::max();
    }
  }
  return n;
}

bool TensorRef::is_contiguous() const {
  int64_t expected = 1;
  bool overflowed = false;  // no stride can equal the product any more
  for (int d = rank - 1; d >= 0; --d) {
    if (dims[d] == 1) continue;
    if (overflowed || strides[d] != expected) return false;
    overflowed = __builtin_mul_overflow(expected, dims[d], &expected);
  }
  return true;
}

std::string TensorRef::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(dims, dims + rank, ", "), "] ",
                      DTypeName(dtype), " ", DeviceName(device));
}

absl::Status ValidateTensor(absl::string_view name, const TensorRef& t) {
  if (t.rank < 0 || t.rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": rank must be in [0, ", kMaxRank, "], got ", t.rank));
  }
  if (DTypeSize(t.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype is not a tailor::DType value"));
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": dims[", i, "] must be >= 0, got ", t.dims[i]));
    }
    if (t.strides[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": strides[", i, "] must be >= 0, got ", t.strides[i]));
    }
  }
  if (t.data == nullptr && !t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": data is null but the tensor has ", t.numel(), " elements"));
  }
  const size_t element = DTypeSize(t.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % element != 0 && !t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": data must be aligned to its element size (", element,
        " bytes for ", DTypeName(t.dtype), "), got address ",
        absl::Hex(reinterpret_cast<uintptr_t>(t.data), absl::kZeroPad16)));
  }
  return absl::OkStatus();
}

absl::Status ExpectTensor(absl::string_view name, const TensorRef& t, int rank,
                          DType dtype) {
  if (absl::Status s = ValidateTensor(name, t); !s.ok()) return s;
  if (t.rank != rank) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected rank ",
                                                   rank, ", got ", t.rank, " (",
                                                   t.ShapeString(), ")"));
  }
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected dtype ",
                                                   DTypeName(dtype), ", got ",
                                                   DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

}  // namespace tailor
