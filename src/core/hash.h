// core/hash.h — 128-bit content hashes (xxh3) used by cache keys and entries.
#ifndef TAILOR_CORE_HASH_H_
#define TAILOR_CORE_HASH_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tailor::internal {

struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
  std::string Hex() const;  // 32 lowercase hex digits, high word first
  template <typename H>
  friend H AbslHashValue(H h, const Hash128& v) {
    return H::combine(std::move(h), v.low, v.high);
  }
};

Hash128 HashBytes(absl::string_view bytes);
uint64_t Checksum64(absl::string_view bytes);

// Builds a hash over a sequence of fields. Each field is length-prefixed so
// that ("ab","c") and ("a","bc") hash differently.
class Hasher {
 public:
  Hasher& Add(absl::string_view field);
  Hasher& Add(uint64_t value);
  Hasher& Add(const Hash128& value) { return Add(value.low).Add(value.high); }
  Hash128 Finish() const { return HashBytes(buffer_); }

 private:
  std::string buffer_;
};

}  // namespace tailor::internal

#endif  // TAILOR_CORE_HASH_H_
