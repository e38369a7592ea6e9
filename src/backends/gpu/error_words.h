// backends/gpu/error_words.h — the host side of the device error words
// (templates/common/error_word.h) that CUDA and HIP kernels record bad
// routing or paging data in: decoding one, and the MoE route's pair.
//
// A word is (position << 32) | (uint32) value, kept with atomicMin so the
// lowest position wins; all ones means nothing was recorded.
#ifndef TAILOR_BACKENDS_GPU_ERROR_WORDS_H_
#define TAILOR_BACKENDS_GPU_ERROR_WORDS_H_

#include <cstdint>
#include <optional>

#include "ops/moe/kernels.h"

namespace tailor::gpu {

struct ErrorWordFields {
  int64_t position;
  int32_t value;
};

// The fields of `word`, or nullopt when it records nothing.
std::optional<ErrorWordFields> DecodeErrorWord(uint64_t word);

// The same as a family's record of one bad entry (a struct of `position`
// and `value`, e.g. RouteErrors::Bad, DecodeErrors::Bad).
template <typename Bad>
std::optional<Bad> DecodeErrorWordAs(uint64_t word) {
  const std::optional<ErrorWordFields> fields = DecodeErrorWord(word);
  if (!fields) return std::nullopt;
  return Bad{.position = fields->position, .value = fields->value};
}

// The MoE route's errors from its header's two words (bad_id,
// bad_map_entry; MoeRouteHeader).
tailor::internal::RouteErrors MoeRouteErrorsOf(const uint64_t (&words)[2]);

}  // namespace tailor::gpu

#endif  // TAILOR_BACKENDS_GPU_ERROR_WORDS_H_
