// core/family_registry.h — every op family on every backend, in one table.
#ifndef TAILOR_CORE_FAMILY_REGISTRY_H_
#define TAILOR_CORE_FAMILY_REGISTRY_H_

#include <vector>

#include "core/tuning.h"

namespace tailor::internal {

// Every tuning key of every family on every backend, whichever backend
// runs (ParseTuning checks a text against all of them).
absl::Span<const TuningKnob> AllTuningKnobs();

// ParseTuning(text, AllTuningKnobs()).
absl::StatusOr<Tuning> ParseTuningText(absl::string_view text);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_FAMILY_REGISTRY_H_
