#include "core/hash.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace tailor::internal {

std::string Hash128::Hex() const {
  return absl::StrFormat("%016x%016x", high, low);
}

Hash128 HashBytes(absl::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Hash128{.low = h.low64, .high = h.high64};
}

uint64_t Checksum64(absl::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

Hasher& Hasher::Add(absl::string_view field) {
  Add(static_cast<uint64_t>(field.size()));
  buffer_.append(field.data(), field.size());
  return *this;
}

Hasher& Hasher::Add(uint64_t value) {
  for (int i = 0; i < 8; ++i)
    buffer_.push_back(static_cast<char>(value >> (8 * i)));
  return *this;
}

}  // namespace tailor::internal
