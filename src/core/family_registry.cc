#include "core/family_registry.h"

#include "backends/cuda/attention/tuning.h"
#include "backends/cuda/moe/tuning.h"

namespace tailor::internal {

absl::Span<const TuningKnob> AllTuningKnobs() {
  static const std::vector<TuningKnob>* const knobs = [] {
    auto* all = new std::vector<TuningKnob>();
    for (absl::Span<const TuningKnob> table :
         {cuda::MoeTuningKnobs(), cuda::DecodeTuningKnobs()}) {
      all->insert(all->end(), table.begin(), table.end());
    }
    return all;
  }();
  return *knobs;
}

absl::StatusOr<Tuning> ParseTuningText(absl::string_view text) {
  return ParseTuning(text, AllTuningKnobs());
}

}  // namespace tailor::internal
