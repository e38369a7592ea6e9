// ops/moe/fp8_quant.h — the e4m3 format and tailor's FP8 quantization rule
// on the host: the reference that every FP8 kernel (the CUDA quantizing Pack
// and epilogue, the CPU templates) must match bit for bit, written as plain
// arithmetic, sharing no code with them.
//
// e4m3 (OCP FP8 E4M3, torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7) and
// 3 mantissa bits; the largest finite value is 448 (0x7e), 0x7f / 0xff are
// NaN, there are no infinities; subnormals step by 2^-9.
// Encoding (E4m3FromFloat, PTX cvt.rn.satfinite.e4m3x2.f32): round to
// nearest, ties to even; magnitudes above 448 (infinities too) saturate to
// +-448; NaN becomes 0x7f with its sign; -0 stays 0x80.
//
// Quantization of a block of values (Fp8Quantize; the block is 1 x 128 for
// activations, 128 x 128 for weights, a row for per-token / per-channel
// scales, the whole matrix for a per-tensor scale):
//   amax  = max |x| over the block           (a NaN anywhere makes it NaN)
//   scale = max(amax, 1e-10) / 448           (f32, IEEE division)
//   q     = E4m3FromFloat(x / scale)         (f32, IEEE division)
//   x ~ q * scale
// This is vLLM's per_token_group_quant_fp8 (its Triton kernel: eps 1e-10,
// true division, clamp, round to nearest even) for finite inputs. Where they
// differ: a NaN propagates here (the group's scale and every value are NaN,
// so a GEMM row over it is NaN, as the f32 reference computes), where fmax
// drops it there; an infinity makes the scale infinite and the group's values
// 0 or NaN. DeepGEMM's per_token_cast_to_fp8 clamps amax to 1e-4 and
// multiplies by 448 / amax, so its bytes can differ from this rule's in the
// last place.
//
// Example (activations [R, K], scales K-block major as the GEMM loads them):
//   Fp8ScaleLayout s = {scales.data(), /*row_stride=*/1,
//                       /*col_stride=*/scale_rows};
//   TAILOR_RETURN_IF_ERROR(Fp8Quantize(a, kFp8ActivationBlock, q.data(), s));
#ifndef TAILOR_OPS_MOE_FP8_QUANT_H_
#define TAILOR_OPS_MOE_FP8_QUANT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tailor/tensor.h"

namespace tailor::internal {

inline constexpr float kFp8E4m3Max = 448.0f;
// The smallest amax a scale is computed from: an all-zero block gets scale
// 1e-10 / 448 and quantizes to zeros.
inline constexpr float kFp8ScaleEpsilon = 1e-10f;

// e4m3 bits of `x` by the encoding above.
uint8_t E4m3FromFloat(float x);
// The value of e4m3 `bits` (exact in f32; NaN for 0x7f / 0xff).
float E4m3ToFloat(uint8_t bits);
// The scale of a block whose largest magnitude is `amax`.
float Fp8Scale(float amax);

// How a matrix is cut into scale blocks: `rows` x `cols` elements each; the
// last block of a row or column may be smaller (ceil division).
struct Fp8Blocks {
  int64_t rows = 1;
  int64_t cols = 128;
};
inline constexpr Fp8Blocks kFp8ActivationBlock = {1, 128};
inline constexpr Fp8Blocks kFp8WeightBlock = {128, 128};

// Where the scale of block (i, j) goes: data[i * row_stride + j *
// col_stride]. Weights [N, K]: {data, ceil(K / 128), 1} ([N/128, K/128] as
// shipped); activations: {data, 1, scale_rows} ([K/128, scale_rows]).
struct Fp8ScaleLayout {
  float* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// Quantizes `x` (a contiguous 2-D f32 or bf16 host tensor [rows, cols]) into
// `q` ([rows, cols] e4m3 bytes) and one scale per block into `scales`.
// InvalidArgument names the argument and the rule: x not 2-D, not f32 /
// bf16, not contiguous or not on the CPU; blocks not positive; q or
// scales.data null while x has elements; scale strides negative.
absl::Status Fp8Quantize(const TensorRef& x, Fp8Blocks blocks, uint8_t* q,
                         Fp8ScaleLayout scales);

// q * scale as f64, [rows, cols] row-major: the dequantized matrix that FP8
// GEMMs are checked against.
std::vector<double> Fp8Dequantize(const uint8_t* q, int64_t rows, int64_t cols,
                                  Fp8Blocks blocks,
                                  const Fp8ScaleLayout& scales);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_FP8_QUANT_H_
