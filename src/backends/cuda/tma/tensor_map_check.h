// backends/cuda/tma/tensor_map_check.h — is a TMA tensor map legal?
//
// CheckTensorMap says, before any driver call, whether cuTensorMapEncodeTiled
// would accept a TensorMapSpec on a given architecture and whether that
// architecture can use it. The planner calls it while choosing a TMA path and
// falls back (another box, another swizzle, a non-TMA kernel) on a rejection
// instead of failing at launch. It is pure code: no cuda.h, no driver, no GPU.
//
// The rules are the ones documented for cuTensorMapEncodeTiled in CUDA 13.0's
// cuda.h, checked in the order the documentation lists them, corrected where
// the GPU differential test
// (tests/backends/cuda/tensor_map_differential_test.cc, run against driver
// 580.159.04 / CUDA 13.0 on an H100) showed the driver doing something else.
// Every such place is marked "Driver:" in tensor_map_check.cc; the remaining
// interpretations are marked "Interpretation:". In short:
//   - the driver relates no stride to another stride or to a dim (cuda.h's
//     stride pseudo-code is an illustration): not checked;
//   - boxDim[0] * element size must be a multiple of 16 bytes with every
//     interleave, not only without one (driver-enforced);
//   - the box must fit in one SM's shared memory (undocumented; driver-
//     enforced; see TensorMapMaxBoxBytes);
//   - "32B interleave needs 32B swizzle" is documented but not enforced by the
//     driver: checked anyway (hardware behaviour otherwise is undefined).
//
// Status codes:
//   InvalidArgument — the spec breaks an encode rule (the driver would return
//                     CUDA_ERROR_INVALID_VALUE), or `sm_arch` is not a
//                     compute capability. The message names the driver's
//                     parameter and the rule, e.g.
//                     "globalStrides[1]: must be a multiple of 16 bytes, got
//                     40".
//   Unimplemented   — the architecture cannot use the spec: tensor maps
//                     before sm_90; the 128B_ATOM_* swizzles and the packed
//                     sub-byte types before sm_100 (PTX ISA; libcu++'s
//                     make_tma_descriptor rejects both on compute capability
//                     9, and so does the driver on an H100).
//
// Example:
//   TensorMapSpec spec{.data_type = TensorMapDataType::kBfloat16, .rank = 2,
//                      .global_address = addr, .global_dims = {4096, 577},
//                      .global_strides = {8192}, .box_dims = {64, 128},
//                      .swizzle = TensorMapSwizzle::k128B};
//   if (absl::Status s = CheckTensorMap(spec, /*sm_arch=*/90); !s.ok()) {
//     // try a smaller box or a non-TMA path; s.message() says why
//   }
#ifndef TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_CHECK_H_
#define TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "backends/cuda/tma/tensor_map_spec.h"

namespace tailor::cuda {

// One rule of cuTensorMapEncodeTiled's contract (or of architecture
// support). kAccepted means no rule was broken.
enum class TensorMapRule {
  kAccepted = 0,
  kSmArch,                 // sm_arch is not a compute capability x 10
  kEnumValue,              // an enum field outside its CUtensorMap* enum
  kRank,                   // tensorRank in [1, 5]
  kInterleaveRank,         // tensorRank >= 3 with interleave
  kAddressAlignment,       // 16 B; 32 B with 32B interleave or 16-byte packing
  kGlobalDimRange,         // globalDim[i] in [1, 2^32]
  kPackedGlobalDim,        // globalDim[0] % 128 (ALIGN16B) or % 2 (ALIGN8B)
  kGlobalStrideAlignment,  // multiple of 16 B (32 B: 32B interleave, ALIGN16B)
  kGlobalStrideRange,      // < 2^40
  kBoxDimRange,            // boxDim[i] in [1, 256]
  kPackedBoxDim,           // boxDim[0] == 128 for the ALIGN16B types
  kBoxInnerBytes,          // boxDim[0] * element size % 16 == 0
  kElementStrideRange,     // elementStrides[i] in [1, 8]
  kInterleaveSwizzle,  // 32B interleave needs 32B swizzle (not driver-checked)
  kPackedInterleave,   // 16U6_ALIGN16B needs no interleave
  kPackedSwizzle,      // swizzles allowed for the ALIGN16B types
  kSwizzleInnerBytes,  // inner box bytes <= swizzle span (no interleave)
  kOobFillType,        // NaN fill only for (non-packed) float types
  kBoxBytes,           // the box fits in one SM's shared memory (sm_arch)
  kArchTensorMap,      // tensor maps need sm_90+
  kArchSwizzleAtom,    // 128B_ATOM_* swizzles need sm_100+
  kArchPackedType,     // packed sub-byte types need sm_100+
};
inline constexpr int kTensorMapRuleCount =
    static_cast<int>(TensorMapRule::kArchPackedType) + 1;

// Stable snake_case name of a rule, e.g. "global_stride_alignment"; used in
// counters and in the differential test's per-rule report.
absl::string_view TensorMapRuleName(TensorMapRule rule);

// The first broken rule and its status (OkStatus with kAccepted).
struct TensorMapVerdict {
  TensorMapRule rule = TensorMapRule::kAccepted;
  absl::Status status;
  bool ok() const { return status.ok(); }
};

// Checks `spec` against every rule for `sm_arch` (compute capability x 10:
// 90 for sm_90/sm_90a, 100 for sm_100). Returns the first broken rule
// (InvalidArgument or Unimplemented, see the file comment) or OkStatus. Never
// touches the driver; thread-safe.
absl::Status CheckTensorMap(const TensorMapSpec& spec, int sm_arch);
TensorMapVerdict DiagnoseTensorMap(const TensorMapSpec& spec, int sm_arch);

// The largest box, in bytes, the driver encodes for `sm_arch`: one SM's
// shared memory (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
// 233472 (228 KiB) on sm_90 (measured), sm_100 and sm_110; 102400 (100 KiB)
// on sm_120/sm_121 and, conservatively, on architectures this table does not
// know. The driver counts floor(boxDim[i] / elementStrides[i]) elements per
// dimension (measured; the copy itself moves ceil(...) of them, so size
// shared-memory buffers from the real footprint, not from this limit).
uint64_t TensorMapMaxBoxBytes(int sm_arch);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_CHECK_H_
