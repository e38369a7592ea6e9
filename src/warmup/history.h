// warmup/history.h — the specializations a runtime used, as a JSON document
// (Runtime::SpecializationHistoryJson), and its parser for
// `tailor-warmup --from-history FILE`.
//
// Format "tailor.history/1" (see tailor/runtime.h for an example): the
// producing runtime's tailor version, backend and arch, then one object per
// key with its op name, dtype names, dims (trailing zeros dropped), bucket
// id, tail class, tile and variant. "key" (SpecKey::ToString) is for people;
// the parser rebuilds keys from the other fields, so that a history stays
// usable after an upgrade that changes the readable form.
//
// Example:
//   std::string json = HistoryToJson({.tailor_version = "0.1.0",
//                                     .backend = BackendKind::kCpu,
//                                     .arch = "x86_64-znver3",
//                                     .keys = keys});
//   TAILOR_ASSIGN_OR_RETURN(History history, ParseHistory(json));
#ifndef TAILOR_WARMUP_HISTORY_H_
#define TAILOR_WARMUP_HISTORY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/spec_key.h"
#include "tailor/runtime.h"

namespace tailor::internal {

inline constexpr char kHistoryFormat[] = "tailor.history/1";

struct History {
  std::string tailor_version;
  BackendKind backend = BackendKind::kCpu;
  std::string arch;           // of the runtime that used the keys
  std::vector<SpecKey> keys;  // their backend and arch are the above
};

// The document; keys sorted by ToString().
std::string HistoryToJson(const History& history);

// InvalidArgument "history: ..." naming every bad field, e.g.
// "history: specializations[3].dtypes[1]: unknown dtype \"bf17\"".
// `json_text` may also be what a stats endpoint serving several runtimes
// answers at GET /specializations, {"runtimes": {"<name>": <document>}}
// (names as in /stats: "cpu", "cpu#2", "cuda:0"): `runtime` names the one to
// read; empty reads them all when they share backend and arch (their keys
// merged), else is an InvalidArgument listing each runtime's backend and
// arch.
absl::StatusOr<History> ParseHistory(absl::string_view json_text,
                                     absl::string_view runtime = "");

}  // namespace tailor::internal

#endif  // TAILOR_WARMUP_HISTORY_H_
