// core/spec_fields.h — the checks every typed kernel spec's decoder shares.
//
// A family's typed specs (ops/<family>/spec.h) encode to a SpecKey and
// decode from one. A decoder accepts exactly the keys its encoder writes:
// every field the family does not use must be zero, so that two keys of one
// kernel never differ (they would hash apart and compile twice). Errors are
// InvalidArgument naming the spec field and the key field it lives in, e.g.
// "tile_rows (tile.m): must be in [1, 128], got 0".
#ifndef TAILOR_CORE_SPEC_FIELDS_H_
#define TAILOR_CORE_SPEC_FIELDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/spec_key.h"

namespace tailor::internal {

// InvalidArgument "<field>: <rule>, got <got>".
absl::Status SpecFieldError(absl::string_view field, absl::string_view rule,
                            int64_t got);

// OK when `key.op` is `op`; else InvalidArgument naming both ops.
absl::Status ExpectSpecOp(const SpecKey& key, OpKind op);

// OK when `value` lies in [lo, hi]; else SpecFieldError naming `field`.
absl::Status ExpectSpecRange(absl::string_view field, int64_t value, int64_t lo,
                             int64_t hi);

// The fields a family's encoding leaves unused: OK when dtypes from
// `dtypes_used` on, dims from `dims_used` on, the bucket id and each tile
// field whose bit is clear in `tile_used` are zero (and the tail class when
// `tail_used` is false, the variant when `variant_used` is false); else
// InvalidArgument naming the first field that is not.
struct SpecFieldsUsed {
  int dtypes = 0;
  int dims = 0;
  bool tail_class = false;
  bool tile_m = false, tile_n = false, tile_k = false;
  bool tile_stages = false, tile_warps = false, tile_cluster = false;
  bool variant = false;
};
absl::Status ExpectUnusedSpecFieldsZero(const SpecKey& key,
                                        const SpecFieldsUsed& used);

}  // namespace tailor::internal

#endif  // TAILOR_CORE_SPEC_FIELDS_H_
