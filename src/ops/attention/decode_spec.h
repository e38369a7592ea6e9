// ops/attention/decode_spec.h — the typed kernel specs of paged decode, and
// the one place their SpecKey encoding lives.
//
// Every decode key is built from one of these specs (ToKey) and every
// generator reads its key through one (FromKey); nothing else reads a
// decode key's fields. The encoding is pinned by
// tests/ops/attention/decode_spec_test.cc: a change to it changes every
// user's cache keys, so it needs a disk cache format version bump.
//
// Encoding (static quantities only; B and lengths never appear):
//   attention.decode        dtypes {x}  dims {D, group, page}
//                           tile.m = tile_tokens, tile.warps = warps,
//                           tile.stages = stages, variant = kernel
//   attention.decode_merge  dtypes {x}  dims {D, group}
// Which values a backend uses: the CPU leaves the tile and kernel zero;
// HIP sets tile_tokens; CUDA sets tile_tokens, warps, stages and kernel.
//
// Example:
//   const DecodeSpec spec = {.dtype = DType::kBF16, .head_dim = 128,
//                            .group = 8, .page_size = 16, .tile_tokens = 64,
//                            .warps = 4, .stages = 3,
//                            .kernel = DecodeKernel::kTma};
//   SpecKey key = spec.ToKey(target);
#ifndef TAILOR_OPS_ATTENTION_DECODE_SPEC_H_
#define TAILOR_OPS_ATTENTION_DECODE_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/spec_key.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The decode kernels (values are part of the key).
enum class DecodeKernel : uint32_t {
  kPortable = 0,  // CUDA cp.async (sm_80+); the CPU's and HIP's one kernel
  kTma = 1,       // CUDA sm_90a: a TMA producer warp
};

struct DecodeSpec {
  DType dtype = DType::kBF16;  // q, the cache and out
  int64_t head_dim = 0;        // D
  int64_t group = 0;           // query heads per KV head
  int64_t page_size = 0;
  int32_t tile_tokens = 0;  // KV tokens per tile (GPUs), else 0
  int32_t warps = 0;        // consumer warps (CUDA), else 0
  int32_t stages = 0;       // pipeline depth (CUDA), else 0
  DecodeKernel kernel = DecodeKernel::kPortable;

  SpecKey ToKey(const KeyTarget& target) const;
  // InvalidArgument naming the field when `key` is not an attention.decode
  // key this encoding writes (template limits are the generators' checks).
  static absl::StatusOr<DecodeSpec> FromKey(const SpecKey& key);
  friend bool operator==(const DecodeSpec&, const DecodeSpec&) = default;
};

// The CPU's separate log-sum-exp merge of split pieces.
struct DecodeMergeSpec {
  DType dtype = DType::kBF16;
  int64_t head_dim = 0;  // D
  int64_t group = 0;

  SpecKey ToKey(const KeyTarget& target) const;
  static absl::StatusOr<DecodeMergeSpec> FromKey(const SpecKey& key);
  friend bool operator==(const DecodeMergeSpec&,
                         const DecodeMergeSpec&) = default;
};

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_DECODE_SPEC_H_
