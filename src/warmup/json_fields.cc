#include "warmup/json_fields.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tailor::internal {
namespace {

absl::string_view NonRegularKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The byte offset where arrays and objects first nest deeper than
// `max_depth`, outside strings; nullopt when they never do. Exact for valid
// JSON; on invalid JSON the parser's error follows anyway.
std::optional<size_t> FirstTooDeep(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::string> ReadJsonDocumentFile(const std::string& path,
                                                 absl::string_view what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  struct stat st = {};
  std::string why, text;
  if (fstat(fd, &st) != 0) {
    why = absl::StrCat("fstat: ", std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    why =
        absl::StrCat("is ", NonRegularKind(st.st_mode), ", not a regular file");
  }
  // Sizes can lie (/proc): whatever st_size says, read at most one byte
  // past the limit.
  bool too_big = static_cast<uint64_t>(st.st_size) > kMaxJsonDocumentBytes;
  while (why.empty() && !too_big) {
    char buffer[64 * 1024];
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = absl::StrCat("read: ", std::strerror(errno));
    if (n <= 0) break;
    text.append(buffer, n);
    too_big = text.size() > kMaxJsonDocumentBytes;
  }
  close(fd);
  if (why.empty() && too_big) {
    why = absl::StrCat("is more than ", kMaxJsonDocumentBytes, " bytes (a ",
                       what, " is far smaller)");
  }
  if (!why.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": ", why));
  return text;
}

absl::StatusOr<nlohmann::json> ParseJsonDocument(absl::string_view text,
                                                 absl::string_view what) {
  if (std::optional<size_t> at = FirstTooDeep(text, kMaxJsonDepth)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": nested deeper than ", kMaxJsonDepth,
                     " levels (at byte ", *at, ")"));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not valid JSON: ", e.what()));
  }
}

absl::Status ErrorsToStatus(absl::string_view what,
                            const std::vector<std::string>& errors) {
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", absl::StrJoin(errors, "; ")));
}

std::string FieldPath(absl::string_view path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

std::string IndexPath(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

std::string Describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = absl::StrCat(text.substr(0, 37), "...");
  return text;
}

FieldReader::FieldReader(const nlohmann::json& value, std::string path,
                         std::vector<std::string>& errors)
    : path_(std::move(path)), errors_(errors) {
  if (value.is_object()) {
    object_ = &value;
  } else {
    errors_.push_back(absl::StrCat(path_.empty() ? "document" : path_,
                                   ": must be an object, got ",
                                   Describe(value)));
  }
}

bool FieldReader::Has(absl::string_view name) const {
  return object_ != nullptr && object_->contains(std::string(name));
}

const nlohmann::json* FieldReader::Field(absl::string_view name,
                                         bool required) {
  if (std::find(known_.begin(), known_.end(), name) == known_.end())
    known_.emplace_back(name);
  if (object_ == nullptr) return nullptr;
  auto it = object_->find(std::string(name));
  if (it == object_->end()) {
    if (required) Error(name, "missing");
    return nullptr;
  }
  return &*it;
}

std::optional<int64_t> FieldReader::Int(absl::string_view name, int64_t min,
                                        int64_t max, bool required) {
  const nlohmann::json* value = Field(name, required);
  if (value == nullptr) return std::nullopt;
  return IntElement(*value, FieldPath(path_, name), min, max, errors_);
}

std::optional<std::string> FieldReader::String(absl::string_view name,
                                               bool required) {
  const nlohmann::json* value = Field(name, required);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    Error(name, absl::StrCat("must be a string, got ", Describe(*value)));
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::string> FieldReader::OneOf(
    absl::string_view name, std::initializer_list<const char*> choices,
    bool required) {
  const nlohmann::json* value = Field(name, required);
  if (value == nullptr) return std::nullopt;
  if (value->is_string()) {
    std::string text = value->get<std::string>();
    for (const char* choice : choices) {
      if (text == choice) return text;
    }
  }
  Error(name, absl::StrCat("must be one of ", absl::StrJoin(choices, ", "),
                           "; got ", Describe(*value)));
  return std::nullopt;
}

const nlohmann::json* FieldReader::Array(absl::string_view name,
                                         bool required) {
  const nlohmann::json* value = Field(name, required);
  if (value == nullptr) return nullptr;
  if (!value->is_array()) {
    Error(name, absl::StrCat("must be an array, got ", Describe(*value)));
    return nullptr;
  }
  return value;
}

void FieldReader::Error(absl::string_view name, absl::string_view message) {
  errors_.push_back(absl::StrCat(FieldPath(path_, name), ": ", message));
}

void FieldReader::RejectUnknownFields() {
  if (object_ == nullptr) return;
  for (const auto& [name, value] : object_->items()) {
    if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
    Error(name, absl::StrCat("unknown field (known: ",
                             absl::StrJoin(known_, ", "), ")"));
  }
}

std::optional<int64_t> IntElement(const nlohmann::json& value,
                                  const std::string& path, int64_t min,
                                  int64_t max,
                                  std::vector<std::string>& errors) {
  std::optional<int64_t> number;
  if (value.is_number_integer()) {
    if (value.is_number_unsigned()) {
      uint64_t u = value.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        number = static_cast<int64_t>(u);
    } else {
      number = value.get<int64_t>();
    }
  }
  if (number.has_value() && *number >= min && *number <= max) return number;
  errors.push_back(absl::StrCat(path, ": must be an integer in [", min, ", ",
                                max, "], got ", Describe(value)));
  return std::nullopt;
}

}  // namespace tailor::internal
