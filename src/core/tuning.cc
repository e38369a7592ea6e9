#include "core/tuning.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tailor::internal {
namespace {

const TuningKnob* FindKnob(absl::Span<const TuningKnob> knobs,
                           absl::string_view key) {
  for (const TuningKnob& knob : knobs) {
    if (knob.key == key) return &knob;
  }
  return nullptr;
}

absl::Status UnknownKey(absl::string_view key,
                        absl::Span<const TuningKnob> knobs) {
  std::vector<absl::string_view> keys;
  for (const TuningKnob& knob : knobs) keys.push_back(knob.key);
  std::sort(keys.begin(), keys.end());
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown key \"", key, "\"; known keys: ", absl::StrJoin(keys, ", ")));
}

absl::Status CheckValue(const TuningKnob& knob, absl::string_view value) {
  if (std::find(knob.values.begin(), knob.values.end(), value) !=
      knob.values.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(knob.key, ": must be one of ",
                   absl::StrJoin(knob.values, ", "), ", got \"", value, "\""));
}

}  // namespace

std::optional<absl::string_view> Tuning::Get(absl::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return absl::string_view(v);
  }
  return std::nullopt;
}

std::map<std::string, std::string> Tuning::WithPrefix(
    absl::string_view prefix) const {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : entries_) {
    if (absl::StartsWith(k, prefix)) out.emplace(k, v);
  }
  return out;
}

std::string Tuning::ToString() const {
  return absl::StrJoin(entries_, ",", absl::PairFormatter("="));
}

absl::StatusOr<Tuning> ParseTuning(absl::string_view text,
                                   absl::Span<const TuningKnob> knobs) {
  Tuning tuning;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", item, "\": expected key=value"));
    }
    const absl::string_view key =
        absl::StripAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value =
        absl::StripAsciiWhitespace(item.substr(eq + 1));
    const TuningKnob* knob = FindKnob(knobs, key);
    if (knob == nullptr) return UnknownKey(key, knobs);
    if (absl::Status s = CheckValue(*knob, value); !s.ok()) return s;
    if (tuning.Get(key).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": set twice"));
    }
    tuning.entries_.emplace_back(std::string(key), std::string(value));
  }
  std::sort(tuning.entries_.begin(), tuning.entries_.end());
  return tuning;
}

Switch SwitchOf(std::optional<absl::string_view> value) {
  if (value == "off") return Switch::kOff;
  if (value == "on") return Switch::kOn;
  return Switch::kAuto;
}

}  // namespace tailor::internal
