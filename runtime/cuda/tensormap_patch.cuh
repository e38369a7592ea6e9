// runtime/cuda/tensormap_patch.cuh — patch TMA descriptors on the device.
//
// Contract: device-only code for NVRTC, arch-specific Hopper target (sm_90a).
// Header-only, no host code, no framework or standard headers.
//
// Why: the host encodes one *template* TensorMap per tensor (and bucket) once.
// Per ragged group (an expert's rows, a sequence), the kernel rewrites the
// template's base address and row extent, so that the TMA unit's own bounds
// check zero-fills loads and drops stores past the group's end: the hardware
// does the tail masking, and no host encode happens per launch.
//
// How (one warp; the PTX ISA rules behind each step):
//   1. StageTensorMap: copy the 128-byte template into a 128-byte aligned
//      shared-memory staging buffer (plain generic loads/stores).
//   2. Replace*: `tensormap.replace.tile.<field>.shared::cta.b1024` edits the
//      staged copy. It is a weak generic-proxy write of the whole 1024-bit
//      object, so it is ordered after step 1 by program order (same lane) and
//      made visible to the warp by __syncwarp.
//   3. PublishTensorMap: `tensormap.cp_fenceproxy.global.shared::cta.
//      tensormap::generic.release.gpu.sync.aligned` copies the staged object
//      into its global slot *and* performs the release proxy fence that
//      orders the generic-proxy write before later tensormap-proxy reads
//      (the TMA unit reads descriptors through the tensormap proxy). Whole
//      warp, converged (.sync.aligned). It stands for "store the 128 bytes;
//      fence.proxy.tensormap::generic.release.gpu" in one instruction (the
//      form CUTLASS uses for shared-staged maps).
//   4. AcquireTensorMap: `fence.proxy.tensormap::generic.acquire.gpu [slot],
//      128` by every thread that then issues a TMA copy through the slot:
//      it invalidates any stale copy of that address in the descriptor cache.
//      Only then TmaLoad/TmaStore/PrefetchTensorMap with the slot.
//   (TMA cannot read a descriptor from shared memory, hence the global slot.)
//
// Who may acquire after a publish:
//   - the publishing warp: program order suffices;
//   - another warp of the CTA: a CTA barrier (__syncthreads / named barrier)
//     between publish and acquire;
//   - another CTA or a later kernel: a release/acquire flag in global memory
//     (or the kernel boundary), then AcquireTensorMap.
//
// Slot rotation contract (slots: a device array of TensorMap, 128-byte
// aligned, e.g. from cuMemAlloc):
//   R1. A slot has one writer at a time. Give each owner (CTA, or producer
//       warp) its own ring: RotatingSlot<kSlotsPerOwner>(slots, owner, use).
//   R2. A slot is rewritten only after every TMA operation that used it has
//       completed: loads — the mbarrier phase they signal has been waited;
//       stores — BulkWaitGroup<0>() (not only the .read form) by the thread
//       that issued them. With a ring of K slots, the writer may run K-1
//       uses ahead of the oldest use still in flight: K must exceed the uses
//       that can be in flight at once (pipeline stages + 1 is enough).
//   R3. Between launches on one stream, stream order gives R2. Slots are
//       never shared by launches that may run concurrently (other streams,
//       or graph branches): give each its own slot array.
//
// Example (warp 0 patches and loads rows [row0, row0 + 64) of a group that
// starts at `group_base` with `group_rows` rows; map template is [rows, cols]):
//   __shared__ TensorMap staging;          // alignas(128) by type
//   TensorMap* slot = RotatingSlot<2>(params.slots, blockIdx.x, iteration);
//   if (warp == 0) {
//     PatchRowWindow<1>(&staging, params.in_template,
//                       {.base = group_base, .rows = group_rows}, slot);
//     if (lane == 0) {
//       AcquireTensorMap(slot);
//       bar.ArriveExpectTx(kBoxBytes);
//       TmaLoad<2>(smem_tile, slot, {0, row0}, &bar);
//     }
//   }
//
// PTX used (PTX ISA 8.3+, sm_90a): tensormap.replace.tile.{global_address,
// global_dim,global_stride}.shared::cta.b1024, tensormap.cp_fenceproxy,
// fence.proxy.tensormap::generic.acquire.
#ifndef TAILOR_RUNTIME_CUDA_TENSORMAP_PATCH_CUH_
#define TAILOR_RUNTIME_CUDA_TENSORMAP_PATCH_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/tensor_map.h"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90A)
#error "runtime/cuda/tensormap_patch.cuh needs -arch=sm_90a (tensormap.replace)"
#endif

namespace tailor::cuda {

// Copies `map_template` (param, const or global memory) into the shared
// staging buffer. Warp-collective: all 32 lanes call it, converged.
TAILOR_DEVICE void StageTensorMap(TensorMap* smem_staging,
                                  const TensorMap& map_template) {
  constexpr int kWords = kTensorMapBytes / 8;  // 16 x 8 bytes
  const unsigned lane = threadIdx.x % 32;
  if (lane < kWords) smem_staging->opaque[lane] = map_template.opaque[lane];
  __syncwarp();
}

// Sets the staged map's base address (a device pointer, 16-byte aligned; 32
// for interleaved or packed-subbyte maps). One thread.
TAILOR_DEVICE void ReplaceGlobalAddress(TensorMap* smem_staging,
                                        const void* global_address) {
  asm volatile(
      "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::
          "r"(SharedAddress(smem_staging)),
      "l"(GenericAddress(global_address))
      : "memory");
}

// Sets globalDim[kDim] (elements, 1 .. 2^32) of the staged map. One thread.
template <int kDim>
TAILOR_DEVICE void ReplaceGlobalDim(TensorMap* smem_staging, unsigned extent) {
  static_assert(kDim >= 0 && kDim < 5, "globalDim has 5 entries at most");
  asm volatile(
      "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], %1, %2;" ::
          "r"(SharedAddress(smem_staging)),
      "n"(kDim), "r"(extent)
      : "memory");
}

// Sets globalStrides[kStride] (bytes, a multiple of 16, < 2^40) of the staged
// map: the stride of dimension kStride + 1, as in cuTensorMapEncodeTiled.
// One thread. The operand is the byte stride itself (PTX ISA 8.5+ / CUDA
// 12.5+ assemblers; older ones took stride >> 4).
template <int kStride>
TAILOR_DEVICE void ReplaceGlobalStride(TensorMap* smem_staging,
                                       unsigned long long stride_bytes) {
  static_assert(kStride >= 0 && kStride < 4,
                "globalStrides has 4 entries at most");
  asm volatile(
      "tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], %1, "
      "%2;" ::"r"(SharedAddress(smem_staging)),
      "n"(kStride), "l"(stride_bytes)
      : "memory");
}

// Copies the staged map into `global_slot` (128-byte aligned, global memory)
// with the release proxy fence (see step 3 above). Warp-collective: all 32
// lanes call it, converged, with the same arguments. The staging buffer may
// be reused when it returns. compute-sanitizer's initcheck counts the copy as
// a read of the 128 destination bytes (4 per lane): initialize slot memory
// once (e.g. zero it when allocated), or every first publish of a slot is
// reported as an uninitialized read.
TAILOR_DEVICE void PublishTensorMap(TensorMap* global_slot,
                                    const TensorMap* smem_staging) {
  __syncwarp();  // the lane that ran Replace* -> every lane of the copy
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release."
      "gpu.sync.aligned"
      " [%0], [%1], %2;" ::"l"(GlobalAddress(global_slot)),
      "r"(SharedAddress(smem_staging)), "n"(kTensorMapBytes)
      : "memory");
  __syncwarp();
}

// Acquire proxy fence for a published slot; call before the first TMA use of
// it by this thread (see "Who may acquire" above).
TAILOR_DEVICE void AcquireTensorMap(const TensorMap* global_slot) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], %1;" ::"l"(
                   GenericAddress(global_slot)),
               "n"(kTensorMapBytes)
               : "memory");
}

// The window of rows a patched map exposes.
struct RowWindow {
  const void* base = nullptr;         // first row, 16-byte aligned
  unsigned rows = 1;                  // >= 1 (empty groups have no tiles)
  unsigned long long row_stride = 0;  // bytes; 0 keeps the template's
};

// Stage + patch + publish in one call: the staged copy of `map_template` gets
// base address `window.base`, globalDim[kRowDim] = `window.rows` and, when
// `window.row_stride` != 0, globalStrides[kRowDim - 1] = `window.row_stride`.
// Warp-collective (lane 0 edits); `smem_staging` is 128-byte aligned shared
// memory owned by this warp. Consumers still call AcquireTensorMap.
template <int kRowDim>
TAILOR_DEVICE void PatchRowWindow(TensorMap* smem_staging,
                                  const TensorMap& map_template,
                                  const RowWindow& window,
                                  TensorMap* global_slot) {
  static_assert(
      kRowDim >= 1 && kRowDim < 5,
      "the row dimension is an outer dimension (1..4); dim 0 is contiguous");
  StageTensorMap(smem_staging, map_template);
  if (threadIdx.x % 32 == 0) {
    ReplaceGlobalAddress(smem_staging, window.base);
    ReplaceGlobalDim<kRowDim>(smem_staging, window.rows);
    if (window.row_stride != 0) {
      ReplaceGlobalStride<kRowDim - 1>(smem_staging, window.row_stride);
    }
  }
  PublishTensorMap(global_slot, smem_staging);
}

// Slot `use % kSlotsPerOwner` of `owner`'s ring in `slots`
// ([owners * kSlotsPerOwner] TensorMaps); see rule R2 for choosing K.
template <int kSlotsPerOwner>
TAILOR_DEVICE TensorMap* RotatingSlot(TensorMap* slots, unsigned owner,
                                      unsigned use) {
  static_assert(kSlotsPerOwner >= 1, "a ring has at least one slot");
  return slots + static_cast<unsigned long long>(owner) * kSlotsPerOwner +
         use % kSlotsPerOwner;
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_TENSORMAP_PATCH_CUH_
