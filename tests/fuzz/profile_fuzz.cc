// Fuzzes the serving-profile parser (internal::ParseProfile, what
// `tailor-warmup --profile` reads) on raw document bytes. It must never
// crash (a document nested 100,000 deep used to overflow the stack), must
// refuse nesting past kMaxJsonDepth by name, must report every error as
// InvalidArgument "profile: ...", and every profile it accepts must hold the
// values the schema (warmup/profile.h) documents: the op fronts' own rules
// (k <= E; CheckDecodeShape).
#include <algorithm>
#include <string_view>

#include "absl/strings/match.h"
#include "fuzz_input.h"
#include "json_depth.h"
#include "ops/attention/checks.h"
#include "ops/moe/checks.h"
#include "tailor/ops/moe.h"
#include "warmup/json_fields.h"
#include "warmup/profile.h"

namespace tailor::internal {
namespace {

void CheckAccepted(const ServingProfile& p) {
  FUZZ_CHECK(!p.moe.empty() || !p.paged_decode.empty());
  FUZZ_CHECK(!p.arch.empty());
  FUZZ_CHECK(
      std::is_sorted(p.batch_buckets.begin(), p.batch_buckets.end()) &&
      std::adjacent_find(p.batch_buckets.begin(), p.batch_buckets.end()) ==
          p.batch_buckets.end());
  for (const MoeLayerProfile& m : p.moe) {
    FUZZ_CHECK(m.experts >= 1 && m.experts <= moe::kMaxExperts) << m.path;
    FUZZ_CHECK(m.topk >= 1 && m.topk <= moe::kMaxTopk) << m.path;
    FUZZ_CHECK(ExpectTopkOfExperts("topk", m.topk, "experts", m.experts).ok());
    FUZZ_CHECK(m.hidden >= 1 && m.hidden <= moe::kMaxModelDim) << m.path;
    FUZZ_CHECK(m.intermediate >= 1 && m.intermediate <= moe::kMaxModelDim);
    FUZZ_CHECK(!m.dtypes.empty() && !m.routing.empty()) << m.path;
    for (const moe::RoutingPolicy& r : m.routing)
      FUZZ_CHECK(r.tile_rows >= 0 && r.tile_rows <= moe::kMaxTileRows);
  }
  for (const PagedDecodeProfile& d : p.paged_decode) {
    FUZZ_CHECK(CheckDecodeShape({.num_qo_heads = d.heads_q,
                                 .num_kv_heads = d.heads_kv,
                                 .head_dim = d.head_dim,
                                 .page_size = d.page_size,
                                 .dtype = DType::kBF16},
                                "")
                   .ok())
        << d.path;
    FUZZ_CHECK(!d.dtypes.empty()) << d.path;
  }
}

}  // namespace
}  // namespace tailor::internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tailor::internal;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ServingProfile> profile = ParseProfile(text);
  const bool too_deep = tailor::fuzz::MaxJsonNesting(std::string_view(
                            text.data(), text.size())) > kMaxJsonDepth;
  if (profile.ok()) {
    FUZZ_CHECK(!too_deep);
    CheckAccepted(*profile);
    return 0;
  }
  const std::string message(profile.status().message());
  FUZZ_CHECK(absl::IsInvalidArgument(profile.status())) << message;
  FUZZ_CHECK(absl::StartsWith(message, "profile: ")) << message;
  FUZZ_CHECK(!too_deep || absl::StrContains(message, "nested deeper than"))
      << message;
  return 0;
}
