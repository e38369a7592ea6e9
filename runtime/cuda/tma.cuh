// runtime/cuda/tma.cuh — TMA tile copies between global and shared memory.
//
// Contract: device-only code for NVRTC, sm_90 or newer. Header-only, no host
// code, no framework or standard headers.
//
// A TMA copy moves one *box* (boxDim of the TensorMap, encoded on the host)
// between global memory and a dense shared-memory tile. Coordinates are
// element indices, innermost dimension first (the order of globalDim in
// cuTensorMapEncodeTiled), and may be negative or past the end:
//   - loads fill elements outside [0, globalDim) with zeros (or NaN, per the
//     map's oobFill) and still count them as transferred bytes;
//   - stores drop elements outside [0, globalDim).
// That bounds check is what tailor's ragged kernels rely on for tails.
//
// Load (one thread issues; the mbarrier tracks completion):
//   bar.ArriveExpectTx(kBoxBytes);
//   TmaLoad<2>(smem_tile, &params.map, {col, row}, &bar);   // [rows][cols]
//   bar.Wait(phase);
// Store (one thread issues; the bulk group tracks completion):
//   FenceSharedToAsyncProxy();   // after generic writes into smem_tile,
//   __syncthreads();             //   by every writer thread
//   if (threadIdx.x == 0) {
//     TmaStore<2>(&params.map, smem_tile, {col, row});
//     BulkCommitGroup();
//     BulkWaitGroupRead<0>();   // smem_tile may be overwritten after this
//   }
//
// Preconditions (checked on the host by tma/tensor_map_check, not here):
// the shared tile is 128-byte aligned (1024 for 128B swizzle) and holds a
// whole box; the TensorMap lives in param, const or global memory.
//
// PTX used (PTX ISA 8.0+, sm_90): cp.async.bulk.tensor.{1..5}d (tile mode,
// .shared::cluster destination with mbarrier::complete_tx::bytes for loads,
// .bulk_group for stores), cp.async.bulk.commit_group,
// cp.async.bulk.wait_group(.read), fence.proxy.async.shared::cta,
// prefetch.tensormap.
#ifndef TAILOR_RUNTIME_CUDA_TMA_CUH_
#define TAILOR_RUNTIME_CUDA_TMA_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tensor_map.h"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90)
#error "runtime/cuda/tma.cuh needs sm_90 or newer (cp.async.bulk.tensor)"
#endif

namespace tailor::cuda {

// Copies the box at `coords` of `map` into `smem_dst` and signals `bar` with
// complete_tx of the box bytes. The caller arms `bar` with ArriveExpectTx.
template <int kRank>
TAILOR_DEVICE void TmaLoad(void* smem_dst, const TensorMap* map,
                           const int (&coords)[kRank], Mbarrier* bar) {
  static_assert(kRank >= 1 && kRank <= 5, "TMA tensors have rank 1..5");
  const unsigned dst = SharedAddress(smem_dst);
  const unsigned mbar = SharedAddress(bar);
  const unsigned long long tmap = GenericAddress(map);
  if constexpr (kRank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes"
        " [%0], [%1, {%2}], [%3];" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(mbar)
        : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(mbar)
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(mbar)
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]),
        "r"(coords[3]), "r"(mbar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]),
        "r"(coords[3]), "r"(coords[4]), "r"(mbar)
        : "memory");
  }
}

// An L2 policy for data read once: its lines are the first evicted, so a
// stream does not push out lines that others (or dirty data) still hold.
TAILOR_DEVICE unsigned long long L2EvictFirstPolicy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"
               : "=l"(policy));
  return policy;
}

// TmaLoad<kRank> (2 or 5, the ranks tailor's kernels read with a policy)
// with an L2 cache policy (L2EvictFirstPolicy).
template <int kRank>
TAILOR_DEVICE void TmaLoadHinted(void* smem_dst, const TensorMap* map,
                                 const int (&coords)[kRank], Mbarrier* bar,
                                 unsigned long long policy) {
  static_assert(kRank == 2 || kRank == 5, "hinted TMA loads: rank 2 or 5");
  const unsigned dst = SharedAddress(smem_dst);
  const unsigned mbar = SharedAddress(bar);
  const unsigned long long tmap = GenericAddress(map);
  if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(mbar), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::"
        "complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;" ::"r"(dst),
        "l"(tmap), "r"(coords[0]), "r"(coords[1]), "r"(coords[2]),
        "r"(coords[3]), "r"(coords[4]), "r"(mbar), "l"(policy)
        : "memory");
  }
}

// Copies `smem_src` (one box) to the box at `coords` of `map`, dropping
// elements out of bounds. Joins the thread's current bulk group: follow with
// BulkCommitGroup() and a BulkWaitGroup*() before reusing `smem_src` or
// exiting.
template <int kRank>
TAILOR_DEVICE void TmaStore(const TensorMap* map, const void* smem_src,
                            const int (&coords)[kRank]) {
  static_assert(kRank >= 1 && kRank <= 5, "TMA tensors have rank 1..5");
  const unsigned src = SharedAddress(smem_src);
  const unsigned long long tmap = GenericAddress(map);
  if constexpr (kRank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, "
        "{%1}], [%2];" ::"l"(tmap),
        "r"(coords[0]), "r"(src)
        : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, "
        "%2}], [%3];" ::"l"(tmap),
        "r"(coords[0]), "r"(coords[1]), "r"(src)
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, "
        "%2, %3}], [%4];" ::"l"(tmap),
        "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(src)
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
        " [%0, {%1, %2, %3, %4}], [%5];" ::"l"(tmap),
        "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(coords[3]), "r"(src)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
        " [%0, {%1, %2, %3, %4, %5}], [%6];" ::"l"(tmap),
        "r"(coords[0]), "r"(coords[1]), "r"(coords[2]), "r"(coords[3]),
        "r"(coords[4]), "r"(src)
        : "memory");
  }
}

// Closes the thread's current bulk group (the TMA stores issued since the
// last commit).
TAILOR_DEVICE void BulkCommitGroup() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most `kPending` of the thread's committed bulk groups still
// *read* their shared-memory sources: after it, those sources may be reused.
template <int kPending>
TAILOR_DEVICE void BulkWaitGroupRead() {
  static_assert(kPending >= 0 && kPending <= 63, "bulk group count is 0..63");
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Waits until at most `kPending` of the thread's committed bulk groups are
// incomplete: after it, their global writes are done (e.g. before a
// descriptor they used is rewritten, or before another kernel reads them).
template <int kPending>
TAILOR_DEVICE void BulkWaitGroup() {
  static_assert(kPending >= 0 && kPending <= 63, "bulk group count is 0..63");
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// Orders this thread's earlier generic-proxy writes to shared memory before
// later async-proxy (TMA) accesses of it. Each writer fences, then a CTA
// barrier, then the TMA store is issued.
TAILOR_DEVICE void FenceSharedToAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Pulls the box at `coords` of `map` into the L2, without waiting and
// without touching shared memory (a hint: boxes past the tensor's bounds
// fetch nothing).
TAILOR_DEVICE void TmaPrefetchL2(const TensorMap* map, const int (&coords)[2]) {
  asm volatile(
      "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
          GenericAddress(map)),
      "r"(coords[0]), "r"(coords[1])
      : "memory");
}

// Hints the TMA unit to fetch `map` into its descriptor cache. `map` must be
// in param, const or global memory; for a patched slot, call it after
// AcquireTensorMap (runtime/cuda/tensormap_patch.cuh).
TAILOR_DEVICE void PrefetchTensorMap(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(GenericAddress(map))
               : "memory");
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_TMA_CUH_
