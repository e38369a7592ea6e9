// runtime/cuda/cluster.cuh — thread-block clusters: who am I, the cluster
// barrier, and the few remote shared-memory operations a warp-specialized
// kernel needs to drive a peer CTA's pipeline (remote arrivals, a remote
// store, TMA loads multicast into several CTAs).
//
// Contract: device-only code for NVRTC, sm_90 or newer. Header-only, no
// standard headers. A "rank" is a CTA's %cluster_ctarank; a local pointer
// into this CTA's shared memory names the same offset in the peer (mapa), so
// every remote operation takes the local object and the peer's rank.
//
// Lifetime rule (what the type cannot check): a CTA must not exit while a
// peer may still touch its shared memory; end the kernel with ClusterSync().
// Likewise ClusterSync() after the mbarriers are initialized, before any
// peer arrives on them (FenceMbarrierInit first).
//
// PTX used (ISA 8.0+, sm_90; st.async 8.1+): %cluster_ctarank,
// %cluster_nctarank, %clusterid, %nclusterid, barrier.cluster.arrive/wait,
// mapa, st.shared::cluster, st.async,
// red.shared::cluster, mbarrier.arrive(.release.cluster) on shared::cluster,
// mbarrier.try_wait.parity.acquire.cluster, cp.async.bulk.tensor ...
// .multicast::cluster.
#ifndef TAILOR_RUNTIME_CUDA_CLUSTER_CUH_
#define TAILOR_RUNTIME_CUDA_CLUSTER_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tensor_map.h"

#if defined(__CUDA_ARCH__) && !defined(TAILOR_CUDA_HAS_SM90)
#error "runtime/cuda/cluster.cuh needs sm_90 or newer (thread-block clusters)"
#endif

namespace tailor::cuda {

TAILOR_DEVICE unsigned ClusterCtaRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The cluster's index in the grid and the number of clusters (x only: the
// kernels here launch 1D grids of 1D clusters).
TAILOR_DEVICE int ClusterIdX() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return static_cast<int>(r);
}
TAILOR_DEVICE int ClusterCountX() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return static_cast<int>(r);
}

// CTAs in this CTA's cluster (1 in a launch without clusters).
TAILOR_DEVICE unsigned ClusterCtaCount() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// The cluster barrier in two halves, for a kernel whose CTAs only need to
// know that the others started (their mbarriers initialized, after
// FenceMbarrierInit): every thread arrives early, and a thread waits once,
// before its first remote operation. A thread that exits counts as arrived.
TAILOR_DEVICE void ClusterArriveRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
TAILOR_DEVICE void ClusterWait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// Every thread of every CTA of the cluster: release what this thread wrote
// (shared or global), wait for all, acquire what the others wrote. Not
// .aligned, so threads of one warp may arrive from different branches.
TAILOR_DEVICE void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The shared::cluster address of `local`'s offset in CTA `rank`.
TAILOR_DEVICE unsigned PeerAddress(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(SharedAddress(local)), "r"(rank));
  return remote;
}

TAILOR_DEVICE void PeerStore(int* local, unsigned rank, int value) {
  asm volatile(
      "st.shared::cluster.s32 [%0], %1;" ::"r"(PeerAddress(local, rank)),
      "r"(value)
      : "memory");
}

TAILOR_DEVICE void PeerAdd(unsigned* local, unsigned rank, unsigned value) {
  asm volatile("red.relaxed.cluster.shared::cluster.add.u32 [%0], %1;" ::"r"(
                   PeerAddress(local, rank)),
               "r"(value)
               : "memory");
}

// Stores `value` at `local`'s offset in CTA `rank` asynchronously: the
// store completes its bytes of the transaction on `bar`'s copy there (which
// that CTA arms with ArriveExpectTx, before or after the bytes land), so the
// data is visible to whoever waits on that barrier's phase. The sender
// needs no fence and may exit once it issued the store.
TAILOR_DEVICE void PeerStoreAsync(void* local, unsigned rank, uint4 value,
                                  Mbarrier* bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32"
      " [%0], {%1, %2, %3, %4}, [%5];" ::"r"(PeerAddress(local, rank)),
      "r"(value.x), "r"(value.y), "r"(value.z), "r"(value.w),
      "r"(PeerAddress(bar, rank))
      : "memory");
}
TAILOR_DEVICE void PeerStoreAsync(float* local, unsigned rank, float value,
                                  Mbarrier* bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32"
      " [%0], %1, [%2];" ::"r"(PeerAddress(local, rank)),
      "r"(__float_as_uint(value)), "r"(PeerAddress(bar, rank))
      : "memory");
}

// Arrives once on `bar`'s copy in CTA `rank`, ordered after this thread's
// earlier operations at CTA scope only: enough to hand back a stage whose
// readers (wgmma, waited for) are done. A release at cluster scope costs a
// memory barrier per call, once per K block in the Hopper GEMM's clusters.
TAILOR_DEVICE void PeerArrive(Mbarrier* bar, unsigned rank) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(
                   PeerAddress(bar, rank))
               : "memory");
}

// PeerArrive with release at cluster scope: this thread's earlier writes,
// PeerStore included, are visible to whoever acquires the phase (e.g.
// TryWaitFromCluster).
TAILOR_DEVICE void PeerArriveRelease(Mbarrier* bar, unsigned rank) {
  asm volatile(
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(
          PeerAddress(bar, rank))
      : "memory");
}

// Mbarrier::TryWait with acquire at cluster scope: what a peer wrote before
// its PeerArrive on this barrier is visible once it returns true.
TAILOR_DEVICE bool TryWaitFromCluster(Mbarrier* bar, unsigned phase_parity) {
  unsigned done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
      "%2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(SharedAddress(bar)), "r"(phase_parity)
      : "memory");
  return done != 0;
}

// TmaLoad<2> into the same offset of every CTA in `cta_mask` (bit r: rank
// r), signalling each one's barrier at `bar`'s offset with the box bytes.
TAILOR_DEVICE void TmaLoadMulticast2d(void* smem_dst, const TensorMap* map,
                                      int x, int y, Mbarrier* bar,
                                      unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
      "complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(SharedAddress(smem_dst)),
      "l"(GenericAddress(map)), "r"(x), "r"(y), "r"(SharedAddress(bar)),
      "h"(cta_mask)
      : "memory");
}

// Ints sent in order from one thread of rank 0 to one thread of each of
// ranks 1 .. receivers (e.g. a tile scheduler's decisions): two slots, each
// with a "full" barrier on every receiver and an "empty" one on the sender
// (counting the receivers), so the sender runs at most two messages ahead.
// Every CTA holds the struct at the same offset; Init(receivers) on each
// (one thread, then FenceMbarrierInit and ClusterSync). Message n uses slot
// n % 2 at parity (n / 2) % 2.
struct PeerMailbox {
  int value[2];
  Mbarrier full[2];   // receiver side: the sender wrote the slot
  Mbarrier empty[2];  // sender side: every receiver took the slot

  TAILOR_DEVICE void Init(unsigned receivers) {
    for (int i = 0; i < 2; ++i) {
      full[i].Init(1);
      empty[i].Init(receivers);
    }
  }

  // Message n, from rank 0 to ranks 1 .. receivers.
  TAILOR_DEVICE void Send(unsigned n, unsigned receivers, int message) {
    while (!TryWaitFromCluster(&empty[n % 2], ((n / 2) & 1u) ^ 1u)) {
    }  // a fresh slot passes
    for (unsigned to = 1; to <= receivers; ++to) {
      PeerStore(&value[n % 2], to, message);
      PeerArriveRelease(&full[n % 2], to);  // the store lands first
    }
  }

  // Message n, on a receiver (from rank 0).
  TAILOR_DEVICE int Receive(unsigned n) {
    while (!TryWaitFromCluster(&full[n % 2], (n / 2) & 1u)) {
    }
    const int message = *static_cast<volatile int*>(&value[n % 2]);
    PeerArriveRelease(&empty[n % 2], 0);  // the read is done first
    return message;
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_CLUSTER_CUH_
