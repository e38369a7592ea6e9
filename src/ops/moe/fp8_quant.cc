// ops/moe/fp8_quant.cc — the host reference of the e4m3 format and the FP8
// quantization rule (see the header).
#include "ops/moe/fp8_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/tensor_checks.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

constexpr int kMantissaBits = 3;
constexpr int kExponentBias = 7;
constexpr int kMinNormalExponent = 1 - kExponentBias;  // 2^-6
constexpr uint8_t kNaN = 0x7f;

float LoadFloat(const TensorRef& x, int64_t i) {
  if (x.dtype == DType::kBF16) {
    const uint32_t bits = uint32_t{static_cast<const uint16_t*>(x.data)[i]};
    return std::bit_cast<float>(bits << 16);
  }
  return static_cast<const float*>(x.data)[i];
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status CheckArguments(const TensorRef& x, Fp8Blocks blocks,
                            const uint8_t* q, const Fp8ScaleLayout& scales) {
  TAILOR_RETURN_IF_ERROR(ValidateTensor("x", x));
  if (x.rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: must be 2-D [rows, cols], got rank ", x.rank));
  }
  if (x.dtype != DType::kF32 && x.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: dtype must be f32 or bf16, got ", DTypeName(x.dtype)));
  }
  if (x.device.type != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: must be on the CPU, got ", DeviceName(x.device)));
  }
  if (!x.is_contiguous()) {
    return absl::InvalidArgumentError("x: must be contiguous (row-major)");
  }
  if (blocks.rows < 1 || blocks.cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("blocks: rows and cols must be >= 1, got ", blocks.rows,
                     " x ", blocks.cols));
  }
  if (scales.row_stride < 0 || scales.col_stride < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scales: strides must be >= 0, got ", scales.row_stride,
                     ", ", scales.col_stride));
  }
  if (x.numel() > 0 && (q == nullptr || scales.data == nullptr)) {
    return absl::InvalidArgumentError(
        "q, scales.data: must be non-null when x has elements");
  }
  return absl::OkStatus();
}

// max |x| over block (bi, bj); NaN once any element is NaN.
float BlockAbsMax(const TensorRef& x, Fp8Blocks blocks, int64_t bi,
                  int64_t bj) {
  const int64_t rows = x.dims[0], cols = x.dims[1];
  float amax = 0.0f;
  for (int64_t r = bi * blocks.rows; r < std::min(rows, (bi + 1) * blocks.rows);
       ++r) {
    for (int64_t c = bj * blocks.cols;
         c < std::min(cols, (bj + 1) * blocks.cols); ++c) {
      const float a = std::fabs(LoadFloat(x, r * cols + c));
      if (std::isnan(a) || a > amax) amax = a;
      if (std::isnan(amax)) return amax;
    }
  }
  return amax;
}

}  // namespace

uint8_t E4m3FromFloat(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | kNaN;
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return sign | 0x7e;  // saturated (infinities too)
  if (a == 0.0f) return sign;
  // Spacing of e4m3 values around a: 2^(e - 3) in binade [2^e, 2^(e+1)),
  // 2^-9 among the subnormals. a / spacing is exact (a power-of-two scale),
  // and nearbyint rounds it to nearest even in the default rounding mode.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): binade 2^(e - 1)
  const int binade = std::max(e - 1, kMinNormalExponent);
  const float steps =
      std::nearbyint(std::ldexp(a, kMantissaBits - binade));  // 0 .. 16
  if (steps == 0.0f) return sign;  // below half the smallest subnormal
  // steps * spacing is the rounded magnitude: exponent field and mantissa.
  const float rounded = std::ldexp(steps, binade - kMantissaBits);
  int re = 0;
  const float rm = std::frexp(rounded, &re);
  if (re - 1 < kMinNormalExponent) {  // subnormal: mantissa = steps
    return sign | static_cast<uint8_t>(steps);
  }
  const int mantissa = static_cast<int>(std::ldexp(rm, kMantissaBits + 1)) -
                       (1 << kMantissaBits);  // 0 .. 7
  const int exponent = re - 1 + kExponentBias;
  return sign | static_cast<uint8_t>(exponent << kMantissaBits | mantissa);
}

float E4m3ToFloat(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> kMantissaBits) & 0xf;
  const int mantissa = bits & 0x7;
  if ((bits & 0x7f) == kNaN) return std::nanf("");
  if (exponent == 0) {
    return sign * std::ldexp(static_cast<float>(mantissa),
                             kMinNormalExponent - kMantissaBits);
  }
  return sign * std::ldexp(static_cast<float>(8 + mantissa),
                           exponent - kExponentBias - kMantissaBits);
}

float Fp8Scale(float amax) {
  if (std::isnan(amax)) return amax;
  return std::max(amax, kFp8ScaleEpsilon) / kFp8E4m3Max;
}

absl::Status Fp8Quantize(const TensorRef& x, Fp8Blocks blocks, uint8_t* q,
                         Fp8ScaleLayout scales) {
  TAILOR_RETURN_IF_ERROR(CheckArguments(x, blocks, q, scales));
  const int64_t rows = x.dims[0], cols = x.dims[1];
  for (int64_t bi = 0; bi < CeilDiv(rows, blocks.rows); ++bi) {
    for (int64_t bj = 0; bj < CeilDiv(cols, blocks.cols); ++bj) {
      const float scale = Fp8Scale(BlockAbsMax(x, blocks, bi, bj));
      scales.data[bi * scales.row_stride + bj * scales.col_stride] = scale;
      for (int64_t r = bi * blocks.rows;
           r < std::min(rows, (bi + 1) * blocks.rows); ++r) {
        for (int64_t c = bj * blocks.cols;
             c < std::min(cols, (bj + 1) * blocks.cols); ++c) {
          q[r * cols + c] = E4m3FromFloat(LoadFloat(x, r * cols + c) / scale);
        }
      }
    }
  }
  return absl::OkStatus();
}

std::vector<double> Fp8Dequantize(const uint8_t* q, int64_t rows, int64_t cols,
                                  Fp8Blocks blocks,
                                  const Fp8ScaleLayout& scales) {
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = scales.data[r / blocks.rows * scales.row_stride +
                                      c / blocks.cols * scales.col_stride];
      out[r * cols + c] = static_cast<double>(E4m3ToFloat(q[r * cols + c])) *
                          static_cast<double>(scale);
    }
  }
  return out;
}

}  // namespace tailor::internal
