#include "core/spec_fields.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tailor::internal {

absl::Status SpecFieldError(absl::string_view field, absl::string_view rule,
                            int64_t got) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", rule, ", got ", got));
}

absl::Status ExpectSpecOp(const SpecKey& key, OpKind op) {
  if (key.op == op) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "op: must be ", GetOpInfo(op).name, ", got ", GetOpInfo(key.op).name));
}

absl::Status ExpectSpecRange(absl::string_view field, int64_t value, int64_t lo,
                             int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return SpecFieldError(field, absl::StrCat("must be in [", lo, ", ", hi, "]"),
                        value);
}

namespace {

absl::Status ExpectZero(bool used, absl::string_view field, int64_t value) {
  if (used || value == 0) return absl::OkStatus();
  return SpecFieldError(field, "not used by this kernel, must be 0", value);
}

}  // namespace

absl::Status ExpectUnusedSpecFieldsZero(const SpecKey& key,
                                        const SpecFieldsUsed& used) {
  for (int i = used.dtypes; i < kMaxSpecDtypes; ++i) {
    if (static_cast<int>(key.dtypes[i]) != 0) {
      return SpecFieldError(absl::StrCat("dtypes[", i, "]"),
                            "not used by this kernel, must be 0",
                            static_cast<int>(key.dtypes[i]));
    }
  }
  for (int i = used.dims; i < kMaxSpecDims; ++i) {
    if (key.dims[i] != 0) {
      return SpecFieldError(absl::StrCat("dims[", i, "]"),
                            "not used by this kernel, must be 0", key.dims[i]);
    }
  }
  const struct {
    bool used;
    absl::string_view field;
    int64_t value;
  } fields[] = {{false, "bucket_id", key.bucket_id},
                {used.tail_class, "tail_class", key.tail_class},
                {used.tile_m, "tile.m", key.tile.m},
                {used.tile_n, "tile.n", key.tile.n},
                {used.tile_k, "tile.k", key.tile.k},
                {used.tile_stages, "tile.stages", key.tile.stages},
                {used.tile_warps, "tile.warps", key.tile.warps},
                {used.tile_cluster, "tile.cluster", key.tile.cluster},
                {used.variant, "variant", key.variant}};
  for (const auto& f : fields) {
    if (absl::Status s = ExpectZero(f.used, f.field, f.value); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tailor::internal
