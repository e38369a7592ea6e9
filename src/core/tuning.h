// core/tuning.h — the one channel for experiment switches ("tuning keys").
//
// A tuning text is a comma-separated list of key=value items, e.g.
// "moe.cluster=2,decode.stages=3". It comes from Runtime::Options::tuning,
// else $TAILOR_TUNING, and from `tailor-warmup --tuning` or a serving
// profile's "tuning" field, so that warm-up and serving build the same keys.
//
// Every key is declared once, with the values it accepts, in its kernel
// family's knob table next to the family's heuristics
// (src/backends/<b>/<family>/tuning.{h,cc}); the family registry
// (core/family_registry.h) lists every table. The text is checked against
// all of them whichever backend runs: an unknown key or a value a knob does
// not accept is InvalidArgument naming the key and the accepted values,
// never silently ignored. A family then reads its typed tuning struct from
// the validated Tuning (e.g. cuda::MoeTuningFrom).
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(Tuning tuning,
//                           ParseTuning("moe.cluster=2", AllTuningKnobs()));
//   tuning.Get("moe.cluster");  // "2"
//   tuning.ToString();          // "moe.cluster=2" (sorted by key)
#ifndef TAILOR_CORE_TUNING_H_
#define TAILOR_CORE_TUNING_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tailor::internal {

// One tuning key as its family declares it. `values` lists every accepted
// value; the first is the default (what applies when the key is not set).
struct TuningKnob {
  absl::string_view key;                       // "moe.cluster"
  absl::Span<const absl::string_view> values;  // {"1", "2", "4"}
  absl::string_view help;                      // one line, for docs
};

// Validated overrides: only the keys that were set, sorted by key.
class Tuning {
 public:
  Tuning() = default;

  // The value set for `key`; nullopt when it was not set.
  std::optional<absl::string_view> Get(absl::string_view key) const;
  bool empty() const { return entries_.empty(); }
  // The overrides, sorted by key.
  const std::vector<std::pair<std::string, std::string>>& entries() const {
    return entries_;
  }
  // The overrides whose key starts with `prefix` ("moe.").
  std::map<std::string, std::string> WithPrefix(absl::string_view prefix) const;
  // "decode.stages=3,moe.cluster=2": the canonical text (sorted); "" when
  // nothing is set. ParseTuning of it gives this Tuning back.
  std::string ToString() const;

 private:
  friend absl::StatusOr<Tuning> ParseTuning(absl::string_view,
                                            absl::Span<const TuningKnob>);
  std::vector<std::pair<std::string, std::string>> entries_;
};

// Parses `text` ("key=value" items separated by commas; blanks around items,
// keys and values are ignored; "" sets nothing) against `knobs`.
// InvalidArgument for an item without '=', a key no knob declares ("unknown
// key \"moe.clustr\"; known keys: ..."), a value its knob does not accept
// ("moe.cluster: must be one of 1, 2, 4, got \"3\"") and a key set twice.
absl::StatusOr<Tuning> ParseTuning(absl::string_view text,
                                   absl::Span<const TuningKnob> knobs);

// An on/off switch whose default leaves the choice to a rule of a cost
// model: "auto", "off" or "on".
enum class Switch { kAuto, kOff, kOn };
// kAuto/kOff/kOn for "auto"/"off"/"on" (anything else: kAuto).
Switch SwitchOf(std::optional<absl::string_view> value);
// Whether to do it: the switch when it is forced, else `rule`.
inline bool Decide(Switch s, bool rule) {
  return s == Switch::kOn || (s == Switch::kAuto && rule);
}

}  // namespace tailor::internal

#endif  // TAILOR_CORE_TUNING_H_
