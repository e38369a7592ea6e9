#include "warmup/profile.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/family_registry.h"
#include "ops/attention/checks.h"
#include "ops/moe/checks.h"
#include "tailor/status.h"
#include "warmup/json_fields.h"

namespace tailor::internal {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// Records `status`'s message (the op front's rule, naming the field).
void RecordIfError(const absl::Status& status,
                   std::vector<std::string>& errors) {
  if (!status.ok()) errors.emplace_back(status.message());
}

// Calls `parse(element, path)` for the one object or every element of the
// array stored at `name` (an optional section).
template <typename Parse>
void ForEachSection(FieldReader& root, absl::string_view name, Parse parse) {
  const nlohmann::json* section = root.Field(name, /*required=*/false);
  if (section == nullptr) return;
  if (!section->is_array()) {
    parse(*section, std::string(name));
    return;
  }
  if (section->empty()) root.Error(name, "must not be an empty array");
  for (size_t i = 0; i < section->size(); ++i)
    parse((*section)[i], IndexPath(name, i));
}

// A non-empty array of dtype names out of `allowed`.
std::vector<DType> ReadDTypes(FieldReader& reader,
                              std::initializer_list<DType> allowed) {
  std::vector<DType> dtypes;
  const nlohmann::json* array = reader.Array("dtypes");
  if (array == nullptr) return dtypes;
  std::string names;
  for (DType d : allowed)
    absl::StrAppend(&names, names.empty() ? "" : ", ", DTypeName(d));
  if (array->empty()) reader.Error("dtypes", "must not be empty");
  for (size_t i = 0; i < array->size(); ++i) {
    const nlohmann::json& element = (*array)[i];
    std::optional<DType> dtype;
    if (element.is_string()) dtype = DTypeFromName(element.get<std::string>());
    bool ok = dtype.has_value() && std::find(allowed.begin(), allowed.end(),
                                             *dtype) != allowed.end();
    if (!ok) {
      reader.Error(
          IndexPath("dtypes", i),
          absl::StrCat("must be one of ", names, "; got ", Describe(element)));
      continue;
    }
    if (std::find(dtypes.begin(), dtypes.end(), *dtype) != dtypes.end()) {
      reader.Error(IndexPath("dtypes", i),
                   absl::StrCat("repeats ", Describe(element)));
      continue;
    }
    dtypes.push_back(*dtype);
  }
  return dtypes;
}

std::optional<moe::RoutingPolicy> ReadRoutingPolicy(
    const nlohmann::json& value, std::string path,
    std::vector<std::string>& errors) {
  FieldReader reader(value, std::move(path), errors);
  std::optional<int64_t> tile_rows =
      reader.Int("tile_rows", 0, moe::kMaxTileRows);
  std::optional<std::string> tail =
      reader.OneOf("tail", {"pow2", "exact", "full"});
  reader.RejectUnknownFields();
  if (!tile_rows || !tail) return std::nullopt;
  moe::RoutingPolicy policy{.tile_rows = static_cast<int32_t>(*tile_rows)};
  policy.tail = *tail == "pow2"    ? moe::TailPolicy::kNextPowerOfTwo
                : *tail == "exact" ? moe::TailPolicy::kExact
                                   : moe::TailPolicy::kFullTile;
  return policy;
}

std::vector<moe::RoutingPolicy> ReadRouting(FieldReader& layer,
                                            std::vector<std::string>& errors) {
  const nlohmann::json* routing = layer.Field("routing", /*required=*/false);
  if (routing == nullptr) return {moe::RoutingPolicy{}};
  std::string path = FieldPath(layer.path(), "routing");
  std::vector<moe::RoutingPolicy> policies;
  if (!routing->is_array()) {
    if (auto p = ReadRoutingPolicy(*routing, path, errors)) {
      policies.push_back(*p);
    }
    return policies;
  }
  if (routing->empty()) layer.Error("routing", "must not be an empty array");
  for (size_t i = 0; i < routing->size(); ++i) {
    if (auto p = ReadRoutingPolicy((*routing)[i], IndexPath(path, i), errors))
      policies.push_back(*p);
  }
  return policies;
}

// f8e4m3 layers run block mode: H and I (GEMM K dims) in whole 128 blocks,
// as moe::Experts requires.
void ExpectFp8BlockDims(FieldReader& reader, const MoeLayerProfile& layer) {
  if (std::find(layer.dtypes.begin(), layer.dtypes.end(), DType::kF8E4M3) ==
      layer.dtypes.end()) {
    return;
  }
  for (const auto& [name, value] :
       {std::pair{"hidden", layer.hidden},
        std::pair{"intermediate", layer.intermediate}}) {
    if (value > 0 && value % 128 != 0) {
      reader.Error(name, absl::StrCat("must be a multiple of 128 for f8e4m3 "
                                      "(128 x 128 block scales), got ",
                                      value));
    }
  }
}

void ReadMoe(const nlohmann::json& value, std::string path,
             ServingProfile& profile, std::vector<std::string>& errors) {
  FieldReader reader(value, path, errors);
  MoeLayerProfile layer{.path = std::move(path)};
  layer.experts = reader.Int("experts", 1, moe::kMaxExperts).value_or(0);
  layer.topk = reader.Int("topk", 1, moe::kMaxTopk).value_or(0);
  layer.hidden = reader.Int("hidden", 1, moe::kMaxModelDim).value_or(0);
  layer.intermediate =
      reader.Int("intermediate", 1, moe::kMaxModelDim).value_or(0);
  layer.dtypes =
      ReadDTypes(reader, {DType::kBF16, DType::kF32, DType::kF8E4M3});
  reader.OneOf("activation", {"silu"}, /*required=*/false);
  layer.routing = ReadRouting(reader, errors);
  reader.RejectUnknownFields();
  ExpectFp8BlockDims(reader, layer);
  if (layer.experts > 0 && layer.topk > 0) {
    RecordIfError(ExpectTopkOfExperts(FieldPath(layer.path, "topk"), layer.topk,
                                      "experts", layer.experts),
                  errors);
  }
  profile.moe.push_back(std::move(layer));
}

// The optional "ragged_masks" of a paged_decode section: names out of
// none / causal / window, no repeats; absent: causal only.
std::vector<RaggedMask> ReadRaggedMasks(FieldReader& reader) {
  const nlohmann::json* array = reader.Array("ragged_masks", false);
  if (array == nullptr) {
    if (reader.Has("ragged_masks")) return {};  // Array recorded the error
    return {RaggedMask::kCausal};
  }
  std::vector<RaggedMask> masks;
  for (size_t i = 0; i < array->size(); ++i) {
    const nlohmann::json& element = (*array)[i];
    std::optional<RaggedMask> mask;
    for (RaggedMask m :
         {RaggedMask::kNone, RaggedMask::kCausal, RaggedMask::kCausalWindow}) {
      if (element.is_string() &&
          element.get<std::string>() == RaggedMaskName(m))
        mask = m;
    }
    if (!mask) {
      reader.Error(IndexPath("ragged_masks", i),
                   absl::StrCat("must be one of none, causal, window; got ",
                                Describe(element)));
    } else if (std::find(masks.begin(), masks.end(), *mask) != masks.end()) {
      reader.Error(IndexPath("ragged_masks", i),
                   absl::StrCat("repeats ", Describe(element)));
    } else {
      masks.push_back(*mask);
    }
  }
  return masks;
}

// The shape rules are the op front's (CheckDecodeShape), under the
// profile's field names; the JSON read only checks that they are integers.
void ReadPagedDecode(const nlohmann::json& value, std::string path,
                     ServingProfile& profile,
                     std::vector<std::string>& errors) {
  FieldReader reader(value, path, errors);
  PagedDecodeProfile decode{.path = std::move(path)};
  const size_t errors_before = errors.size();
  decode.heads_q = reader.Int("heads_q", 1, kMaxInt32).value_or(0);
  decode.heads_kv = reader.Int("heads_kv", 1, kMaxInt32).value_or(0);
  decode.head_dim = reader.Int("head_dim", 1, kMaxInt32).value_or(0);
  decode.page_size = reader.Int("page_size", 1, kMaxInt32).value_or(0);
  const bool integers = errors.size() == errors_before;
  decode.dtypes = ReadDTypes(reader, {DType::kBF16, DType::kF16, DType::kF32});
  decode.ragged_masks = ReadRaggedMasks(reader);
  reader.RejectUnknownFields();
  if (integers) {
    // f32 is listed as skipped (no kernel takes it): the shape is checked
    // with a dtype the kernels take.
    RecordIfError(CheckDecodeShape(
                      {.num_qo_heads = decode.heads_q,
                       .num_kv_heads = decode.heads_kv,
                       .head_dim = decode.head_dim,
                       .page_size = decode.page_size,
                       .dtype = DType::kBF16},
                      absl::StrCat(decode.path, "."),
                      {.num_qo_heads = "heads_q", .num_kv_heads = "heads_kv"})
                      .status(),
                  errors);
  }
  profile.paged_decode.push_back(std::move(decode));
}

void ReadTarget(FieldReader& root, ServingProfile& profile,
                std::vector<std::string>& errors) {
  const nlohmann::json* target = root.Field("target", /*required=*/true);
  if (target == nullptr) return;
  FieldReader reader(*target, "target", errors);
  std::optional<std::string> backend = reader.OneOf("backend", {"cpu", "cuda"});
  if (backend) {
    profile.backend =
        *backend == "cpu" ? BackendKind::kCpu : BackendKind::kCuda;
  }
  if (std::optional<std::string> arch = reader.String("arch", false)) {
    if (arch->empty()) {
      reader.Error("arch", "must not be empty (use \"native\")");
    } else {
      profile.arch = *arch;
    }
  }
  reader.RejectUnknownFields();
}

void ReadBatchBuckets(FieldReader& root, ServingProfile& profile,
                      std::vector<std::string>& errors) {
  const nlohmann::json* buckets = root.Array("batch_buckets", false);
  if (buckets == nullptr) return;
  if (buckets->empty()) root.Error("batch_buckets", "must not be empty");
  for (size_t i = 0; i < buckets->size(); ++i) {
    std::string path = IndexPath("batch_buckets", i);
    std::optional<int64_t> size =
        IntElement((*buckets)[i], path, 1, kMaxInt32, errors);
    if (!size) continue;
    if (!profile.batch_buckets.empty() &&
        *size <= profile.batch_buckets.back()) {
      errors.push_back(absl::StrCat(path, ": must be greater than ",
                                    profile.batch_buckets.back(),
                                    " (strictly increasing), got ", *size));
      continue;
    }
    profile.batch_buckets.push_back(*size);
  }
}

// "tuning": the server's tuning keys, validated as Runtime::Create does.
void ReadTuning(FieldReader& root, ServingProfile& profile) {
  std::optional<std::string> text = root.String("tuning", false);
  if (!text.has_value()) return;
  absl::StatusOr<Tuning> tuning = ParseTuningText(*text);
  if (!tuning.ok()) {
    root.Error("tuning", tuning.status().message());
    return;
  }
  profile.tuning = tuning->ToString();
}

}  // namespace

std::optional<DType> DTypeFromName(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                  DType::kI64, DType::kU8, DType::kF64, DType::kF8E4M3}) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

absl::StatusOr<ServingProfile> ParseProfile(absl::string_view json_text) {
  absl::StatusOr<nlohmann::json> document =
      ParseJsonDocument(json_text, "profile");
  if (!document.ok()) return document.status();
  std::vector<std::string> errors;
  ServingProfile profile;
  FieldReader root(*document, "", errors);
  if (root.is_object()) {
    if (std::optional<std::string> schema = root.String("schema");
        schema && *schema != kProfileSchema) {
      root.Error("schema", absl::StrCat("must be \"", kProfileSchema,
                                        "\", got \"", *schema, "\""));
    }
    profile.name = root.String("name").value_or("");
    profile.description = root.String("description", false).value_or("");
    ReadTarget(root, profile, errors);
    ReadBatchBuckets(root, profile, errors);
    ReadTuning(root, profile);
    ForEachSection(root, "moe", [&](const nlohmann::json& v, std::string p) {
      ReadMoe(v, std::move(p), profile, errors);
    });
    ForEachSection(root, "paged_decode",
                   [&](const nlohmann::json& v, std::string p) {
                     ReadPagedDecode(v, std::move(p), profile, errors);
                   });
    root.RejectUnknownFields();
    if (errors.empty() && profile.moe.empty() && profile.paged_decode.empty())
      errors.push_back("needs at least one op section (moe, paged_decode)");
  }
  TAILOR_RETURN_IF_ERROR(ErrorsToStatus("profile", errors));
  return profile;
}

}  // namespace tailor::internal
