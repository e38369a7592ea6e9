#include "ops/attention/decode_spec.h"

#include "core/spec_fields.h"
#include "tailor/status.h"

namespace tailor::internal {
namespace {

constexpr int64_t kMostDim = int64_t{1} << 20;

absl::Status ExpectDtype(DType dtype) {
  return ExpectSpecRange("dtype (dtypes[0])", static_cast<int>(dtype),
                         static_cast<int>(DType::kF32),
                         static_cast<int>(DType::kF64));
}

}  // namespace

SpecKey DecodeSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kAttentionDecode);
  key.dtypes = {dtype};
  key.dims = {head_dim, group, page_size};
  key.tile.m = tile_tokens;
  key.tile.warps = warps;
  key.tile.stages = stages;
  key.variant = static_cast<uint32_t>(kernel);
  return key;
}

absl::StatusOr<DecodeSpec> DecodeSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kAttentionDecode));
  TAILOR_RETURN_IF_ERROR(ExpectUnusedSpecFieldsZero(key, {.dtypes = 1,
                                                          .dims = 3,
                                                          .tile_m = true,
                                                          .tile_stages = true,
                                                          .tile_warps = true,
                                                          .variant = true}));
  TAILOR_RETURN_IF_ERROR(ExpectDtype(key.dtypes[0]));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("head_dim (dims[0])", key.dims[0], 1, kMostDim));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("group (dims[1])", key.dims[1], 1, kMostDim));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("page_size (dims[2])", key.dims[2], 1, kMostDim));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("tile_tokens (tile.m)", key.tile.m, 0, 1024));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("warps (tile.warps)", key.tile.warps, 0, 32));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("stages (tile.stages)", key.tile.stages, 0, 16));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("kernel (variant)", key.variant, 0, 1));
  return DecodeSpec{.dtype = key.dtypes[0],
                    .head_dim = key.dims[0],
                    .group = key.dims[1],
                    .page_size = key.dims[2],
                    .tile_tokens = key.tile.m,
                    .warps = key.tile.warps,
                    .stages = key.tile.stages,
                    .kernel = static_cast<DecodeKernel>(key.variant)};
}

SpecKey DecodeMergeSpec::ToKey(const KeyTarget& target) const {
  SpecKey key = target.MakeKey(OpKind::kAttentionDecodeMerge);
  key.dtypes = {dtype};
  key.dims = {head_dim, group};
  return key;
}

absl::StatusOr<DecodeMergeSpec> DecodeMergeSpec::FromKey(const SpecKey& key) {
  TAILOR_RETURN_IF_ERROR(ExpectSpecOp(key, OpKind::kAttentionDecodeMerge));
  TAILOR_RETURN_IF_ERROR(
      ExpectUnusedSpecFieldsZero(key, {.dtypes = 1, .dims = 2}));
  TAILOR_RETURN_IF_ERROR(ExpectDtype(key.dtypes[0]));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("head_dim (dims[0])", key.dims[0], 1, kMostDim));
  TAILOR_RETURN_IF_ERROR(
      ExpectSpecRange("group (dims[1])", key.dims[1], 1, kMostDim));
  return DecodeMergeSpec{
      .dtype = key.dtypes[0], .head_dim = key.dims[0], .group = key.dims[1]};
}

}  // namespace tailor::internal
