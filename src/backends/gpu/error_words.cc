#include "backends/gpu/error_words.h"

#include <cstdint>
#include <optional>

#include "templates/common/error_word.h"

namespace tailor::gpu {

std::optional<ErrorWordFields> DecodeErrorWord(uint64_t word) {
  if (word == kNoErrorWord) return std::nullopt;
  return ErrorWordFields{
      .position = static_cast<int64_t>(word >> 32),
      .value = static_cast<int32_t>(static_cast<uint32_t>(word))};
}

tailor::internal::RouteErrors MoeRouteErrorsOf(const uint64_t (&words)[2]) {
  using Bad = tailor::internal::RouteErrors::Bad;
  return {.bad_id = DecodeErrorWordAs<Bad>(words[0]),
          .bad_map_entry = DecodeErrorWordAs<Bad>(words[1])};
}

}  // namespace tailor::gpu
