// tests/fuzz/json_depth.h — how deep arrays and objects nest in a JSON text,
// counted independently of the library's own check, for the document fuzz
// targets (profile, history) to hold the parsers to their depth limit.
#ifndef TAILOR_TESTS_FUZZ_JSON_DEPTH_H_
#define TAILOR_TESTS_FUZZ_JSON_DEPTH_H_

#include <algorithm>
#include <string_view>

namespace tailor::fuzz {

// The deepest nesting of [ and { outside strings (exact for valid JSON).
inline int MaxJsonNesting(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
  return deepest;
}

}  // namespace tailor::fuzz

#endif  // TAILOR_TESTS_FUZZ_JSON_DEPTH_H_
