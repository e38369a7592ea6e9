// templates/common/error_word.h — the device error word: how CUDA and HIP
// kernels record the first bad entry of data they were handed (an expert id
// or a page id out of range) without ever touching memory through it.
//
// Contract: plain C++ that compiles as host code (g++) and as device code
// (NVRTC -default-device, hiprtc inside the vendor header's host-device
// region): no vendor keywords, no standard headers.
//
// A word is (position << 32) | (uint32) value for a position >= 0. Kernels
// keep it with atomicMin, so the lowest position wins; kNoErrorWord (all
// ones) means none, and is what the host resets it to when it takes it
// (src/backends/gpu/error_words.h decodes it).
#ifndef TAILOR_TEMPLATES_COMMON_ERROR_WORD_H_
#define TAILOR_TEMPLATES_COMMON_ERROR_WORD_H_

namespace tailor::gpu {

inline constexpr unsigned long long kNoErrorWord = ~0ull;

constexpr unsigned long long ErrorWord(int position, int value) {
  return (static_cast<unsigned long long>(position) << 32) |
         static_cast<unsigned>(value);
}

}  // namespace tailor::gpu

#endif  // TAILOR_TEMPLATES_COMMON_ERROR_WORD_H_
