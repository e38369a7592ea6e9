// core/env.h — reading tailor's environment knobs ($TAILOR_*).
#ifndef TAILOR_CORE_ENV_H_
#define TAILOR_CORE_ENV_H_

#include <cstdlib>

#include "absl/strings/string_view.h"

namespace tailor::internal {

// Whether $name is set to exactly `value` (unset or anything else: false).
inline bool EnvIs(const char* name, absl::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && absl::string_view(v) == value;
}

}  // namespace tailor::internal

#endif  // TAILOR_CORE_ENV_H_
