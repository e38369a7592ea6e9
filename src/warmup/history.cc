#include "warmup/history.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tailor/status.h"
#include "warmup/json_fields.h"
#include "warmup/profile.h"

namespace tailor::internal {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxUint32 = std::numeric_limits<uint32_t>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

nlohmann::json KeyToJson(const SpecKey& key) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : key.dtypes) {
    if (static_cast<int>(d) != 0) dtypes.push_back(std::string(DTypeName(d)));
  }
  int used_dims = kMaxSpecDims;
  while (used_dims > 0 && key.dims[used_dims - 1] == 0) --used_dims;
  nlohmann::json dims = nlohmann::json::array();
  for (int i = 0; i < used_dims; ++i) dims.push_back(key.dims[i]);
  return {
      {"key", key.ToString()},
      {"op", std::string(GetOpInfo(key.op).name)},
      {"dtypes", dtypes},
      {"dims", dims},
      {"bucket_id", key.bucket_id},
      {"tail_class", key.tail_class},
      {"tile",
       {{"m", key.tile.m},
        {"n", key.tile.n},
        {"k", key.tile.k},
        {"stages", key.tile.stages},
        {"warps", key.tile.warps},
        {"cluster", key.tile.cluster}}},
      {"variant", key.variant},
  };
}

void ReadKeyDTypes(FieldReader& reader, SpecKey& key) {
  const nlohmann::json* array = reader.Array("dtypes");
  if (array == nullptr) return;
  if (array->size() > static_cast<size_t>(kMaxSpecDtypes)) {
    reader.Error("dtypes", absl::StrCat("has ", array->size(),
                                        " entries; at most ", kMaxSpecDtypes));
    return;
  }
  for (size_t i = 0; i < array->size(); ++i) {
    const nlohmann::json& name = (*array)[i];
    std::optional<DType> dtype;
    if (name.is_string()) dtype = DTypeFromName(name.get<std::string>());
    if (!dtype) {
      reader.Error(IndexPath("dtypes", i),
                   absl::StrCat("unknown dtype ", Describe(name)));
      continue;
    }
    key.dtypes[i] = *dtype;
  }
}

void ReadKeyDims(FieldReader& reader, SpecKey& key,
                 std::vector<std::string>& errors) {
  const nlohmann::json* array = reader.Array("dims");
  if (array == nullptr) return;
  if (array->size() > static_cast<size_t>(kMaxSpecDims)) {
    reader.Error("dims", absl::StrCat("has ", array->size(),
                                      " entries; at most ", kMaxSpecDims));
    return;
  }
  for (size_t i = 0; i < array->size(); ++i) {
    std::string path = IndexPath(FieldPath(reader.path(), "dims"), i);
    key.dims[i] =
        IntElement((*array)[i], path, 0, kMaxInt64, errors).value_or(0);
  }
}

void ReadKeyTile(FieldReader& reader, SpecKey& key,
                 std::vector<std::string>& errors) {
  const nlohmann::json* value = reader.Field("tile", /*required=*/true);
  if (value == nullptr) return;
  FieldReader tile(*value, FieldPath(reader.path(), "tile"), errors);
  auto field = [&](const char* name) {
    return static_cast<int32_t>(
        tile.Int(name, 0, kMaxInt32, false).value_or(0));
  };
  key.tile = {.m = field("m"),
              .n = field("n"),
              .k = field("k"),
              .stages = field("stages"),
              .warps = field("warps"),
              .cluster = field("cluster")};
  tile.RejectUnknownFields();
}

std::optional<SpecKey> ReadKey(const nlohmann::json& value, std::string path,
                               const History& history,
                               std::vector<std::string>& errors) {
  size_t errors_before = errors.size();
  FieldReader reader(value, std::move(path), errors);
  SpecKey key;
  key.backend = history.backend;
  key.SetArch(history.arch);
  reader.String("key", /*required=*/false);  // for people; not trusted
  if (std::optional<std::string> op = reader.String("op")) {
    key.op = OpKindFromName(*op);
    if (key.op == OpKind::kInvalid)
      reader.Error("op", absl::StrCat("unknown op \"", *op, "\""));
  }
  ReadKeyDTypes(reader, key);
  ReadKeyDims(reader, key, errors);
  key.bucket_id =
      static_cast<int32_t>(reader.Int("bucket_id", 0, kMaxInt32).value_or(0));
  key.tail_class =
      static_cast<int32_t>(reader.Int("tail_class", 0, kMaxInt32).value_or(0));
  ReadKeyTile(reader, key, errors);
  key.variant =
      static_cast<uint32_t>(reader.Int("variant", 0, kMaxUint32).value_or(0));
  reader.RejectUnknownFields();
  if (errors.size() != errors_before) return std::nullopt;
  return key;
}

void ReadHeader(FieldReader& root, History& history) {
  if (std::optional<std::string> format = root.String("format");
      format && *format != kHistoryFormat) {
    root.Error("format", absl::StrCat("must be \"", kHistoryFormat,
                                      "\", got \"", *format, "\""));
  }
  history.tailor_version = root.String("tailor_version").value_or("");
  if (std::optional<std::string> backend =
          root.OneOf("backend", {"cpu", "cuda", "hip"})) {
    history.backend = *backend == "cpu"    ? BackendKind::kCpu
                      : *backend == "cuda" ? BackendKind::kCuda
                                           : BackendKind::kHip;
  }
  history.arch = root.String("arch").value_or("");
  if (history.arch.size() > static_cast<size_t>(kMaxArchLength)) {
    root.Error("arch",
               absl::StrCat("is longer than ", kMaxArchLength, " characters"));
  }
}

}  // namespace

std::string HistoryToJson(const History& history) {
  std::vector<SpecKey> keys = history.keys;
  std::vector<std::pair<std::string, size_t>> order;
  for (size_t i = 0; i < keys.size(); ++i)
    order.emplace_back(keys[i].ToString(), i);
  std::sort(order.begin(), order.end());
  nlohmann::json specializations = nlohmann::json::array();
  for (const auto& [name, index] : order)
    specializations.push_back(KeyToJson(keys[index]));
  nlohmann::json document = {
      {"format", kHistoryFormat},
      {"tailor_version", history.tailor_version},
      {"backend", std::string(BackendName(history.backend))},
      {"arch", history.arch},
      {"specializations", specializations},
  };
  return document.dump(2) + "\n";
}

namespace {

// GET /specializations of an endpoint serving several runtimes:
// {"runtimes": {"<name>": <document>, ...}}.
bool IsEndpointAnswer(const nlohmann::json& document) {
  return document.is_object() && document.size() == 1 &&
         document.contains("runtimes") && document["runtimes"].is_object();
}

std::string RuntimeNames(const nlohmann::json& runtimes) {
  std::vector<std::string> names;
  for (const auto& [name, value] : runtimes.items()) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

absl::Status PickOne(absl::string_view problem, const std::string& names) {
  return absl::InvalidArgumentError(
      absl::StrCat("history: ", problem, " (", names,
                   "); pick one with --runtime NAME, or fetch "
                   "/specializations?runtime=NAME"));
}

// One runtime's document (Runtime::SpecializationHistoryJson).
absl::StatusOr<History> ParseOneHistory(const nlohmann::json& document) {
  std::vector<std::string> errors;
  History history;
  FieldReader root(document, "", errors);
  if (root.is_object()) {
    ReadHeader(root, history);
    if (const nlohmann::json* keys = root.Array("specializations")) {
      for (size_t i = 0; i < keys->size(); ++i) {
        std::optional<SpecKey> key = ReadKey(
            (*keys)[i], IndexPath("specializations", i), history, errors);
        if (key) history.keys.push_back(*key);
      }
    }
    root.RejectUnknownFields();
  }
  TAILOR_RETURN_IF_ERROR(ErrorsToStatus("history", errors));
  return history;
}

// Every runtime's keys in one history: they must share backend and arch
// (one machine's kernels); otherwise the caller picks a runtime.
absl::StatusOr<History> MergeRuntimes(const nlohmann::json& runtimes) {
  std::optional<History> merged;
  std::unordered_set<std::string> seen;
  std::vector<std::string> targets;
  bool one_target = true;
  for (const auto& [name, document] : runtimes.items()) {
    absl::StatusOr<History> history = ParseOneHistory(document);
    if (!history.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          history.status().message(), " (runtime \"", name, "\")"));
    }
    targets.push_back(absl::StrCat(name, ": ", BackendName(history->backend),
                                   " ", history->arch));
    if (!merged)
      merged = History{.tailor_version = history->tailor_version,
                       .backend = history->backend,
                       .arch = history->arch};
    one_target = one_target && history->backend == merged->backend &&
                 history->arch == merged->arch;
    for (const SpecKey& key : history->keys) {
      if (seen.insert(key.ToString()).second) merged->keys.push_back(key);
    }
  }
  if (!merged) {
    return absl::InvalidArgumentError("history: runtimes: holds no runtime");
  }
  if (!one_target) {
    return PickOne("the runtimes ran on different backends or archs",
                   absl::StrJoin(targets, ", "));
  }
  return *std::move(merged);
}

}  // namespace

absl::StatusOr<History> ParseHistory(absl::string_view json_text,
                                     absl::string_view runtime) {
  TAILOR_ASSIGN_OR_RETURN(nlohmann::json whole,
                          ParseJsonDocument(json_text, "history"));
  if (!IsEndpointAnswer(whole)) {
    if (runtime.empty()) return ParseOneHistory(whole);
    return absl::InvalidArgumentError(absl::StrCat(
        "history: runtime \"", runtime,
        "\" asked for, but the document is one runtime's history, not "
        "{\"runtimes\": {...}}"));
  }
  const nlohmann::json& runtimes = whole["runtimes"];
  if (runtime.empty()) return MergeRuntimes(runtimes);
  auto found = runtimes.find(std::string(runtime));
  if (found == runtimes.end()) {
    return PickOne(absl::StrCat("no runtime \"", runtime, "\""),
                   RuntimeNames(runtimes));
  }
  return ParseOneHistory(*found);
}

}  // namespace tailor::internal
