#include "warmup/json_fields.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tailor::internal {

absl::StatusOr<nlohmann::json> ParseJsonDocument(absl::string_view text,
                                                 absl::string_view what) {
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
