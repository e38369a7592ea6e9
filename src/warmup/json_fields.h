// warmup/json_fields.h — read JSON documents (serving profiles, history)
// with errors that name the field.
//
// A FieldReader wraps one JSON object and a path ("moe[1].routing[0]").
// Every getter records an error of the form "<path>.<field>: <rule>, got
// <value>" into a shared list instead of failing at once, so that one pass
// reports every problem of a document. Unknown fields are errors too
// (RejectUnknownFields), so a typo ("hiden") never silently falls back to a
// default.
//
// Example:
//   std::vector<std::string> errors;
//   FieldReader moe(document["moe"], "moe", errors);
//   std::optional<int64_t> hidden = moe.Int("hidden", 1, 65536);
//   moe.RejectUnknownFields();
//   if (!errors.empty()) return ErrorsToStatus("profile", errors);
#ifndef TAILOR_WARMUP_JSON_FIELDS_H_
#define TAILOR_WARMUP_JSON_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tailor::internal {

// Documents (profiles, histories) are small: a profile is a few hundred
// bytes, a history a few hundred bytes a key. What they may be at most, so
// that a hostile file costs little before it is refused.
inline constexpr uint64_t kMaxJsonDocumentBytes = uint64_t{16} << 20;
inline constexpr int kMaxJsonDepth = 32;  // real documents nest 4-5 deep

// Reads the document file at `path`: only a regular file (a FIFO, device,
// socket or directory is refused without blocking on it) of at most
// kMaxJsonDocumentBytes. NotFound when `path` cannot be opened;
// InvalidArgument "<what> <path>: <rule>" otherwise, e.g.
// "profile /tmp/p: is a directory, not a regular file".
absl::StatusOr<std::string> ReadJsonDocumentFile(const std::string& path,
                                                 absl::string_view what);

// Parses `text`; InvalidArgument "<what>: not valid JSON: <parser message>"
// on a syntax error (the one place nlohmann's exceptions are caught), and
// "<what>: nested deeper than kMaxJsonDepth levels (at byte N)" before any
// parsing when arrays and objects nest deeper (every reader of a document
// recurses over its depth).
absl::StatusOr<nlohmann::json> ParseJsonDocument(absl::string_view text,
                                                 absl::string_view what);

// InvalidArgument "<what>: <e1>; <e2>; ..."; OK when `errors` is empty.
absl::Status ErrorsToStatus(absl::string_view what,
                            const std::vector<std::string>& errors);

// "<path>.<name>" (or "<name>" at the root), "<path>[<index>]".
std::string FieldPath(absl::string_view path, absl::string_view name);
std::string IndexPath(absl::string_view path, size_t index);

// A short rendering of a JSON value for messages ("\"2048\"", "1.5", ...).
std::string Describe(const nlohmann::json& value);

class FieldReader {
 public:
  // `value` must outlive the reader. Records "<path>: must be an object"
  // when it is not one (then every getter returns nullopt).
  FieldReader(const nlohmann::json& value, std::string path,
              std::vector<std::string>& errors);

  bool is_object() const { return object_ != nullptr; }
  const std::string& path() const { return path_; }
  bool Has(absl::string_view name) const;

  // The field, or nullptr when absent (an error "missing" if `required`).
  const nlohmann::json* Field(absl::string_view name, bool required);

  // An integer in [min, max].
  std::optional<int64_t> Int(absl::string_view name, int64_t min, int64_t max,
                             bool required = true);
  std::optional<std::string> String(absl::string_view name,
                                    bool required = true);
  // A string from `choices`.
  std::optional<std::string> OneOf(absl::string_view name,
                                   std::initializer_list<const char*> choices,
                                   bool required = true);
  // An array (elements unchecked); nullopt when absent or not an array.
  const nlohmann::json* Array(absl::string_view name, bool required = true);

  // Records "<path>.<name>: <message>".
  void Error(absl::string_view name, absl::string_view message);
  // Records "<path>.<field>: unknown field (known: a, b, c)" for every field
  // none of the getters above asked for.
  void RejectUnknownFields();

 private:
  const nlohmann::json* object_ = nullptr;
  std::string path_;
  std::vector<std::string>& errors_;
  std::vector<std::string> known_;  // fields asked for, in order
};

// An integer element of an array: in [min, max], else an error naming
// "<path>" (e.g. "batch_buckets[3]").
std::optional<int64_t> IntElement(const nlohmann::json& value,
                                  const std::string& path, int64_t min,
                                  int64_t max,
                                  std::vector<std::string>& errors);

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_JSON_FIELDS_H_
