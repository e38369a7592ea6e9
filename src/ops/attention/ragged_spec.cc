#include "ops/attention/ragged_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tailor::internal {
namespace {

absl::Status BadField(absl::string_view field, absl::string_view rule,
                      int64_t got) {
  return absl::InvalidArgumentError(
      absl::StrCat("key.", field, ": ", rule, ", got ", got));
}

constexpr uint32_t kRaggedPipelineChecks = 1u;
constexpr uint32_t kRaggedPortable = 2u;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// The checks both specs share: dtype, head_dim, pack, tile rows.
absl::Status CheckCommon(const SpecKey& key, OpKind op, int64_t pack) {
  if (key.op != op) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key.op: ", GetOpInfo(key.op).name, " is not ", GetOpInfo(op).name));
  }
  if (key.dtypes[0] != DType::kBF16 && key.dtypes[0] != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key.dtypes[0]: must be bf16 or f16, got ", DTypeName(key.dtypes[0])));
  }
  const int64_t d = key.dims[0];
  if (d != 64 && d != 128 && d != 256) {
    return BadField("dims[0] (D)", "must be 64, 128 or 256", d);
  }
  if (!IsPowerOfTwo(pack) || pack > 16) {
    return BadField("pack", "must be a power of two <= 16", pack);
  }
  if (key.tile.m < 1 || key.tile.m > 1024 || key.tile.m % pack != 0) {
    return BadField("tile.m (tile rows)",
                    "must be in [1, 1024] and a multiple of pack", key.tile.m);
  }
  return absl::OkStatus();
}

}  // namespace

const char* RaggedMaskName(RaggedMask mask) {
  switch (mask) {
    case RaggedMask::kNone:
      return "none";
    case RaggedMask::kCausal:
      return "causal";
    case RaggedMask::kCausalWindow:
      return "window";
  }
  return "invalid";
}

RaggedMask RaggedMaskOf(const RaggedShape& shape) {
  if (!shape.causal) return RaggedMask::kNone;
  return shape.window_left >= 0 ? RaggedMask::kCausalWindow
                                : RaggedMask::kCausal;
}

SpecKey RaggedKernelSpec::Key(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kAttentionRagged);
  key.dtypes = {dtype};
  key.dims = {head_dim, group, head_pack, page_size, static_cast<int>(mask)};
  key.tile.m = tile_rows;
  key.variant = (pipeline_checks ? kRaggedPipelineChecks : 0u) |
                (portable ? kRaggedPortable : 0u);
  return key;
}

absl::StatusOr<RaggedKernelSpec> RaggedKernelSpec::FromKey(const SpecKey& key) {
  const int64_t group = key.dims[1], pack = key.dims[2], page = key.dims[3],
                mask = key.dims[4];
  if (absl::Status s = CheckCommon(key, OpKind::kAttentionRagged, pack);
      !s.ok()) {
    return s;
  }
  if (group < 1 || group > 16 || group % pack != 0) {
    return BadField("dims[1] (group)", "must be in [1, 16] and divide by pack",
                    group);
  }
  if (page < 1 || page > 256) {
    return BadField("dims[3] (page)", "must be in [1, 256]", page);
  }
  if ((key.variant & ~(kRaggedPipelineChecks | kRaggedPortable)) != 0) {
    return BadField("variant",
                    "only bits 0 (pipeline checks) and 1 (portable) are "
                    "defined",
                    key.variant);
  }
  if (mask < 0 || mask > 2) {
    return BadField("dims[4] (mask)",
                    "must be 0 (none), 1 (causal) or 2 "
                    "(window)",
                    mask);
  }
  return RaggedKernelSpec{
      .dtype = key.dtypes[0],
      .head_dim = static_cast<int32_t>(key.dims[0]),
      .group = static_cast<int32_t>(group),
      .head_pack = static_cast<int32_t>(pack),
      .page_size = static_cast<int32_t>(page),
      .mask = static_cast<RaggedMask>(mask),
      .tile_rows = key.tile.m,
      .pipeline_checks = (key.variant & kRaggedPipelineChecks) != 0,
      .portable = (key.variant & kRaggedPortable) != 0};
}

std::string RaggedKernelSpec::ToString() const {
  return absl::StrFormat(
      "%s D=%d group=%d pack=%d page=%d mask=%s rows=%d%s%s", DTypeName(dtype),
      head_dim, group, head_pack, page_size, RaggedMaskName(mask), tile_rows,
      pipeline_checks ? " checks" : "", portable ? " portable" : "");
}

SpecKey RaggedMergeSpec::Key(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kAttentionRaggedMerge);
  key.dtypes = {dtype};
  key.dims = {head_dim, head_pack};
  key.tile.m = tile_rows;
  return key;
}

absl::StatusOr<RaggedMergeSpec> RaggedMergeSpec::FromKey(const SpecKey& key) {
  if (absl::Status s =
          CheckCommon(key, OpKind::kAttentionRaggedMerge, key.dims[1]);
      !s.ok()) {
    return s;
  }
  return RaggedMergeSpec{.dtype = key.dtypes[0],
                         .head_dim = static_cast<int32_t>(key.dims[0]),
                         .head_pack = static_cast<int32_t>(key.dims[1]),
                         .tile_rows = key.tile.m};
}

std::string RaggedMergeSpec::ToString() const {
  return absl::StrFormat("%s D=%d pack=%d rows=%d", DTypeName(dtype), head_dim,
                         head_pack, tile_rows);
}

RaggedKernelSpec RaggedKernelSpecFor(const RaggedShape& shape,
                                     const RaggedPlanConfig& config) {
  return {.dtype = shape.dtype,
          .head_dim = static_cast<int32_t>(shape.head_dim),
          .group = static_cast<int32_t>(shape.group()),
          .head_pack = config.head_pack,
          .page_size = static_cast<int32_t>(shape.page_size),
          .mask = RaggedMaskOf(shape),
          .tile_rows = config.tile_rows};
}

RaggedMergeSpec RaggedMergeSpecFor(const RaggedShape& shape,
                                   const RaggedPlanConfig& config) {
  return {.dtype = shape.dtype,
          .head_dim = static_cast<int32_t>(shape.head_dim),
          .head_pack = config.head_pack,
          .tile_rows = config.tile_rows};
}

}  // namespace tailor::internal
