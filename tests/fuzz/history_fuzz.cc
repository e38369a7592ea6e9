// Fuzzes the history parser (internal::ParseHistory, what
// `tailor-warmup --from-history` reads) on raw document bytes. It must never
// crash (a document nested 100,000 deep used to overflow the stack), must
// refuse nesting past kMaxJsonDepth by name, must report every error as
// InvalidArgument "history: ...", and what it accepts must round-trip:
// HistoryToJson of the parsed keys parses back to the same keys.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "fuzz_input.h"
#include "json_depth.h"
#include "warmup/history.h"
#include "warmup/json_fields.h"

namespace tailor::internal {
namespace {

std::vector<SpecKey> Sorted(std::vector<SpecKey> keys) {
  std::sort(keys.begin(), keys.end(), [](const SpecKey& a, const SpecKey& b) {
    std::string sa = a.ToString(), sb = b.ToString();
    return sa != sb ? sa < sb : a.Hash().Hex() < b.Hash().Hex();
  });
  return keys;
}

}  // namespace
}  // namespace tailor::internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::internal;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<History> history = ParseHistory(text);
  const bool too_deep = tailor::fuzz::MaxJsonNesting(std::string_view(
                            text.data(), text.size())) > kMaxJsonDepth;
  if (!history.ok()) {
    const std::string message(history.status().message());
    FUZZ_CHECK(absl::IsInvalidArgument(history.status())) << message;
    FUZZ_CHECK(absl::StartsWith(message, "history: ")) << message;
    FUZZ_CHECK(!too_deep || absl::StrContains(message, "nested deeper than"))
        << message;
    return 0;
  }
  FUZZ_CHECK(!too_deep);
  absl::StatusOr<History> again = ParseHistory(HistoryToJson(*history));
  FUZZ_CHECK(again.ok()) << again.status().message();
  FUZZ_CHECK(again->backend == history->backend &&
             again->arch == history->arch &&
             again->tailor_version == history->tailor_version);
  FUZZ_CHECK(Sorted(again->keys) == Sorted(history->keys))
      << again->keys.size() << " keys vs " << history->keys.size();
  return 0;
}
