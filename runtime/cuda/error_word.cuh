// runtime/cuda/error_word.cuh — the device side of a kernel's error words
// (src/backends/gpu/error_words.h decodes them): each word keeps the lowest
// (position, value) any thread recorded, position clamped to 32 bits in the
// high half and the value in the low half; the host fills the words with
// 0xff before a launch.
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
#ifndef TAILOR_RUNTIME_CUDA_ERROR_WORD_CUH_
#define TAILOR_RUNTIME_CUDA_ERROR_WORD_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

// Records (position, value) in error word `word` if it is the lowest so far.
TAILOR_DEVICE void RecordLowestError(unsigned long long* errors, int word,
                                     long long position, int value) {
  const unsigned long long clamped =
      position < 0 ? 0ull
                   : (position > 0xffffffffll
                          ? 0xffffffffull
                          : static_cast<unsigned long long>(position));
  atomicMin(errors + word, (clamped << 32) | static_cast<unsigned>(value));
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_ERROR_WORD_CUH_
