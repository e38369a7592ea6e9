// ops/attention/ragged_spec.h — the typed kernel specs of ragged attention:
// what one variant is specialized on, its SpecKey, and the way back.
//
// A variant is specialized on model constants and plan classes only:
//   dtype, head_dim, group (Hq / Hkv), head_pack (query heads per packed
//   row group), page_size, the mask kind and the tile rows (tile class)
// — never on lengths or batch sizes, which reach kernels through the plan's
// work items. Generators build their instantiation from a spec, never by
// reading key positions; FromKey is the only decoder and checks every
// field.
//
// Key layout (GetOpInfo names the dims):
//   attention.ragged        dtypes {x} dims {D, group, pack, page, mask}
//                           tile.m = tile rows
//                           variant bit 0: pipeline protocol checks
//                           variant bit 1: the portable kernel (CUDA:
//                           mma.sync + cp.async, sm_80+, any page size)
//   attention.ragged_merge  dtypes {x} dims {D, pack}  tile.m = tile rows
//
// Example:
//   const RaggedKernelSpec spec = {.dtype = DType::kBF16, .head_dim = 128,
//       .group = 4, .head_pack = 4, .page_size = 16,
//       .mask = RaggedMask::kCausal, .tile_rows = 128};
//   SpecKey key = spec.Key(engine.target());
//   RaggedKernelSpec back = *RaggedKernelSpec::FromKey(key);  // == spec
#ifndef TAILOR_OPS_ATTENTION_RAGGED_SPEC_H_
#define TAILOR_OPS_ATTENTION_RAGGED_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/spec_key.h"
#include "ops/attention/ragged_kernels.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// Which masks a variant applies: none (every query sees its whole KV),
// causal, or causal with a sliding window.
enum class RaggedMask : int32_t { kNone = 0, kCausal = 1, kCausalWindow = 2 };
const char* RaggedMaskName(RaggedMask mask);  // "none", "causal", "window"
RaggedMask RaggedMaskOf(const RaggedShape& shape);

struct RaggedKernelSpec {
  DType dtype = DType::kBF16;
  int32_t head_dim = 0;
  int32_t group = 0;
  int32_t head_pack = 0;
  int32_t page_size = 0;
  RaggedMask mask = RaggedMask::kNone;
  int32_t tile_rows = 0;
  // runtime/cuda/pipeline.cuh's checks and the kernel's wait watch
  // ($TAILOR_CUDA_PIPELINE_CHECKS=1, a developer knob; CUDA only).
  bool pipeline_checks = false;
  // The backend's portable kernel instead of its arch-specific one (CUDA:
  // prefill_sm80.cuh rather than prefill_sm90.cuh).
  bool portable = false;

  SpecKey Key(const KeyTarget& target) const;
  // InvalidArgument naming the key field for a key that is not an
  // attention.ragged key of a well-formed spec.
  static absl::StatusOr<RaggedKernelSpec> FromKey(const SpecKey& key);
  std::string ToString() const;
  friend bool operator==(const RaggedKernelSpec&,
                         const RaggedKernelSpec&) = default;
};

struct RaggedMergeSpec {
  DType dtype = DType::kBF16;
  int32_t head_dim = 0;
  int32_t head_pack = 0;
  int32_t tile_rows = 0;

  SpecKey Key(const KeyTarget& target) const;
  static absl::StatusOr<RaggedMergeSpec> FromKey(const SpecKey& key);
  std::string ToString() const;
  friend bool operator==(const RaggedMergeSpec&,
                         const RaggedMergeSpec&) = default;
};

// The specs a layer of `shape` cut as `config` says launches (the kernel
// spec's `portable` is the backend's to set).
RaggedKernelSpec RaggedKernelSpecFor(const RaggedShape& shape,
                                     const RaggedPlanConfig& config);
RaggedMergeSpec RaggedMergeSpecFor(const RaggedShape& shape,
                                   const RaggedPlanConfig& config);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_SPEC_H_
