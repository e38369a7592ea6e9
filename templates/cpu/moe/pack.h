// templates/cpu/moe/pack.h — gather token rows into expert-sorted order.
//
// A[r, :] = hidden[permutation[r] / topk, :] for every row r of A: row r of
// the expert-sorted matrix is the token of flat assignment permutation[r]
// (= token * topk + slot). One work item copies one row of kH elements with
// 16-byte vector moves; the row length is compile-time, so the copy is fully
// unrolled for small rows and has no scalar remainder when kH * sizeof(T) is
// a multiple of 16.
//
// Params: MoePackParams (templates/cpu/moe/params.h).
#ifndef TAILOR_TEMPLATES_CPU_MOE_PACK_H_
#define TAILOR_TEMPLATES_CPU_MOE_PACK_H_

#include "runtime/cpu/tailor_cpu.h"
#include "templates/cpu/moe/params.h"

namespace tailor::kernels {

template <typename T, int kH>
struct MoePackKernel {
  static_assert(kH >= 1, "H must be positive");
  static constexpr int64_t kRowBytes = int64_t{kH} * sizeof(T);
  static constexpr int64_t kVectorBytes = 16;
  static constexpr int64_t kVectors = kRowBytes / kVectorBytes;
  static constexpr int64_t kRestBytes = kRowBytes % kVectorBytes;

  using Params = MoePackParams;

  typedef uint32_t Vector16 __attribute__((ext_vector_type(4)));  // 16 bytes

  static void Run(const Params& p, int64_t row) {
    const int64_t token = p.permutation[row] / p.topk;
    const char* src =
        static_cast<const char*>(p.hidden) + token * kRowBytes;  // [kH]
    char* dst = static_cast<char*>(p.a) + row * kRowBytes;       // [kH]
    for (int64_t v = 0; v < kVectors; ++v) {
      Vector16 chunk;
      __builtin_memcpy(&chunk, src + v * kVectorBytes, kVectorBytes);
      __builtin_memcpy(dst + v * kVectorBytes, &chunk, kVectorBytes);
    }
    if constexpr (kRestBytes > 0) {
      __builtin_memcpy(dst + kVectors * kVectorBytes,
                       src + kVectors * kVectorBytes, kRestBytes);
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_MOE_PACK_H_
