// ops/moe/spec.h — the typed kernel specs of the MoE family, and the one
// place their SpecKey encoding lives.
//
// Every MoE key is built from one of these specs (ToKey) and every
// generator reads its key through one (FromKey); nothing else reads a MoE
// key's fields. The encoding is pinned by tests/ops/moe/spec_test.cc: a
// change to it changes every user's cache keys, so it needs a disk cache
// format version bump.
//
// Encoding (static dims only; T, R and per-expert counts never appear):
//   moe.route         variant = kernel; kScatter: dims {scatter_warps}
//   moe.pack          dtypes {x}            dims {H}
//                     quantizing (FP8): dtypes {x, f8e4m3},
//                     variant = scale mode
//   moe.grouped_gemm  dtypes {x, x, f32}    dims {N, K}
//                     FP8: dtypes {f8e4m3, f8e4m3, f32, c}
//                     tile.m = tile_rows, tile.n = kernel, tail_class,
//                     variant = epilogue | pipeline checks (bit 8) |
//                     TMA store (bit 9) | swap-AB (bit 10) |
//                     scale mode << 11 (FP8 only: bits 11-12) |
//                     ping-pong consumers (bit 13),
//                     tile.cluster = cluster (when > 1)
//   moe.combine       dtypes {x, f32, x}    dims {H, topk}
//
// Which values a backend uses: the CPU has one GEMM kernel (kSimt) and a
// kernel per tail class; CUDA and HIP have tail class 0 and kSimt or
// kMatrixCore (mma.sync / MFMA); only CUDA has kHopper and its flags.
// FP8 (a scale mode) is the CPU's kernel and CUDA's kHopper and kMatrixCore
// (sm_80+) only. Keys without a scale mode are the bf16 / f32 keys,
// unchanged.
//
// Example:
//   const MoeGemmSpec spec = {.dtype = DType::kBF16, .n = 1536, .k = 2048,
//                             .tile_rows = 64,
//                             .epilogue = moe::Epilogue::kSiluAndMul,
//                             .kernel = MoeGemmKernel::kHopper,
//                             .tma_store = true};
//   SpecKey key = spec.ToKey(target);
//   TAILOR_ASSIGN_OR_RETURN(MoeGemmSpec decoded, MoeGemmSpec::FromKey(key));
#ifndef TAILOR_OPS_MOE_SPEC_H_
#define TAILOR_OPS_MOE_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/spec_key.h"
#include "tailor/ops/moe.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The device Route's kernels (values: templates/common/moe/params.h,
// kMoeRoute*).
enum class MoeRouteKernel : uint32_t {
  kCountPlan = 0,  // per-segment counts, then the plan
  kFused = 1,      // count, plan and scatter in one block
  kScatter = 2,    // scatter over segments
};

struct MoeRouteSpec {
  MoeRouteKernel kernel = MoeRouteKernel::kCountPlan;
  // kScatter only (else 0): warps (CUDA) or waves (HIP) per scatter block.
  int32_t scatter_warps = 0;

  SpecKey ToKey(const KeyTarget& target) const;
  // InvalidArgument naming the field when `key` is not a moe.route key this
  // encoding writes.
  static absl::StatusOr<MoeRouteSpec> FromKey(const SpecKey& key);
  friend bool operator==(const MoeRouteSpec&, const MoeRouteSpec&) = default;
};

struct MoePackSpec {
  DType dtype = DType::kF32;  // hidden (and a, unless quantizing)
  int64_t hidden = 0;         // H
  // Set: a quantizing Pack, a is f8e4m3 scaled by this mode's activation
  // rule (1 x 128 groups, per token, or a static per-tensor scale).
  moe::ScaleMode scale_mode = moe::ScaleMode::kNone;

  SpecKey ToKey(const KeyTarget& target) const;
  static absl::StatusOr<MoePackSpec> FromKey(const SpecKey& key);
  friend bool operator==(const MoePackSpec&, const MoePackSpec&) = default;
};

// The Hopper kernel's consumer schedules (kHopper only).
enum class MoeGemmConsumers : int32_t {
  kCooperative = 0,  // both consumer warpgroups on one tile's two halves
  kPingPong = 1,     // each warpgroup owns a tile; mainloops take turns
};

// The grouped-GEMM kernels (values are part of the key).
enum class MoeGemmKernel : int32_t {
  kSimt = 0,        // CUDA and HIP SIMT; the CPU's one kernel
  kMatrixCore = 1,  // CUDA mma.sync (sm_80+), HIP MFMA
  kHopper = 2,      // CUDA sm_90a: TMA + wgmma, warp-specialized
};

struct MoeGemmSpec {
  // A, W and C (C accumulates in f32); with a scale mode, C only: bf16,
  // f32, or f8e4m3 (kSiluAndMul in block mode, and on cuda per tensor: the
  // quantizing epilogue).
  DType dtype = DType::kF32;
  int64_t n = 0;  // W rows (gated: gate and up, 2 x I)
  int64_t k = 0;
  int32_t tile_rows = 0;   // the plan tile, [1, moe::kMaxTileRows]
  int32_t tail_class = 0;  // CPU: the tail class served (0: core); GPU: 0
  moe::Epilogue epilogue = moe::Epilogue::kNone;
  MoeGemmKernel kernel = MoeGemmKernel::kSimt;
  // kHopper only (else false / 1):
  bool pipeline_checks = false;  // runtime/cuda/pipeline.cuh's checks
  bool tma_store = false;        // full tiles leave by TMA stores
  bool swap_ab = false;          // W rows as wgmma's M, tokens as its N
  int32_t cluster = 1;           // CTAs per cluster: 1, 2 or 4
  // kPingPong: bf16, plan tiles of more than 64 rows, no swap-AB, no
  // clusters.
  MoeGemmConsumers consumers = MoeGemmConsumers::kCooperative;
  // Set: FP8, A and W are f8e4m3 with scales of this mode.
  moe::ScaleMode scale_mode = moe::ScaleMode::kNone;

  bool quantized() const { return scale_mode != moe::ScaleMode::kNone; }
  // A's and W's element type.
  DType operand_dtype() const { return quantized() ? DType::kF8E4M3 : dtype; }

  SpecKey ToKey(const KeyTarget& target) const;
  // Also InvalidArgument when the kernel or a flag is not one `key.backend`
  // has (see the file comment).
  static absl::StatusOr<MoeGemmSpec> FromKey(const SpecKey& key);
  friend bool operator==(const MoeGemmSpec&, const MoeGemmSpec&) = default;
};

struct MoeCombineSpec {
  DType dtype = DType::kF32;  // C and out; weights are f32
  int64_t hidden = 0;         // H
  int64_t topk = 0;

  SpecKey ToKey(const KeyTarget& target) const;
  static absl::StatusOr<MoeCombineSpec> FromKey(const SpecKey& key);
  friend bool operator==(const MoeCombineSpec&,
                         const MoeCombineSpec&) = default;
};

}  // namespace tailor::internal

#endif  // TAILOR_OPS_MOE_SPEC_H_
