// runtime/cuda/pipeline.cuh — the stage ring of a warp-specialized kernel,
// written once: a producer fills stages by TMA, consumer groups read them,
// mbarriers carry every handoff.
//
// Contract: device-only code for NVRTC, sm_90 or newer. Header-only, no
// standard headers.
//
// Protocol, per stage s of kStages (phase parities start at 0):
//   producer   WaitEmpty(s)       every consumer group released the stage's
//                                 previous fill (the first round passes)
//              ArmFull(s, bytes)  arrive on full[s] expecting `bytes`, then
//                                 issue the TMA copies (they complete_tx)
//   consumers  WaitFull(s)        the fill landed (acquire)
//              ... read the stage (wgmma, ldmatrix, ...) ...
//              Release(s)         one arrival per consumer group on empty[s],
//                                 once the group is done reading
// Both sides walk the ring with a PipelineCursor (stage, phase, round),
// advanced after each stage. A producer that writes part of a fill with its
// own stores (fenced to the async proxy) arms with ArmFullStored instead.
//
// Messages: a producer that decides the work at run time (a dynamic tile
// scheduler) tells the consumers what a fill holds: ArmFull(s, bytes, m)
// stores m in message[s] before its arrival (release), so a consumer reads it
// after WaitFull(s) (acquire). Close(s) ends the stream: a fill of no bytes
// whose message is kPipelineClosed; consumers stop there without releasing.
// A message is an int, or (the ring's MessageType) a small struct whose
// first member is that int and whose others carry what the producer already
// derived from it, so the consumers need not look it up again.
// Every thread of a group must have read the message before the group's
// Release (a group barrier between them): the next fill rewrites it.
//
// Protocol checks (compile with TAILOR_PIPELINE_CHECKS=1, as the tests do):
// the ring counts fills armed and releases per stage in shared memory, and
//   - ArmFull traps unless `bytes` is the ring's stage byte count;
//   - WaitEmpty traps if a stage is about to be refilled before every
//     consumer group released its previous fill (or after more releases
//     than a round ahead);
//   - WaitFull traps if it waits, past a bounded spin, for a fill the
//     producer never armed;
// each trap prints "tailor pipeline: ..." naming the stage and round
// (tests/backends/cuda/pipeline_checks_test.cc watches the first two fire).
//
// Across a cluster (TMA multicast: a stage of each CTA is filled partly by
// the peers' producers): every CTA's ring counts the consumer groups of all
// CTAs the stage's copies write to, and each group releases the stage to its
// own ring (Release) and to each peer's (ReleasePeer), so no producer
// refills a stage any CTA still reads. The checks count across the cluster
// the same way.
//
// Example (one producer thread, two consumer warpgroups):
//   __shared__ PipelineRing<4> ring;
//   if (threadIdx.x == 0) { ring.Init(/*consumer_groups=*/2, kStageBytes);
//                           FenceMbarrierInit(); }
//   __syncthreads();
//   PipelineCursor c;
//   producer:  WaitEmpty(ring, c); ArmFull(ring, c, kStageBytes);
//              TmaLoad(..., &ring.full[c.stage]); c.Advance(4);
//   consumer:  WaitFull(ring, c); ...; if (group leader) Release(ring, c);
//              c.Advance(4);
#ifndef TAILOR_RUNTIME_CUDA_PIPELINE_CUH_
#define TAILOR_RUNTIME_CUDA_PIPELINE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/mbarrier.cuh"

#ifndef TAILOR_PIPELINE_CHECKS
#define TAILOR_PIPELINE_CHECKS 0
#endif

namespace tailor::cuda {

inline constexpr int kPipelineClosed = -1;

template <int kStages, typename MessageType = int>
struct PipelineRing {
  static_assert(kStages >= 2, "a ring needs two stages to overlap");
  Mbarrier full[kStages];        // producer -> consumers: the fill landed
  Mbarrier empty[kStages];       // consumers -> producer: the stage is free
  MessageType message[kStages];  // producer -> consumers, with the fill
#if TAILOR_PIPELINE_CHECKS
  unsigned armed[kStages];     // fills armed so far
  unsigned released[kStages];  // consumer-group releases so far
  unsigned consumer_groups;
  unsigned stage_bytes;
#endif

  // One thread, before any other use; then FenceMbarrierInit() and a CTA
  // barrier.
  TAILOR_DEVICE void Init(unsigned groups, unsigned bytes) {
    for (int s = 0; s < kStages; ++s) {
      full[s].Init(1);
      empty[s].Init(groups);
#if TAILOR_PIPELINE_CHECKS
      armed[s] = 0;
      released[s] = 0;
#endif
    }
#if TAILOR_PIPELINE_CHECKS
    consumer_groups = groups;
    stage_bytes = bytes;
#endif
  }
};

struct PipelineCursor {
  int stage = 0;
  unsigned phase = 0;
  unsigned round = 0;  // fills of this stage before the current one

  TAILOR_DEVICE void Advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1;
      ++round;
    }
  }
};

#if TAILOR_PIPELINE_CHECKS
TAILOR_DEVICE unsigned VolatileRead(const unsigned* p) {
  return *static_cast<const volatile unsigned*>(p);
}
#endif

template <int kStages, typename M>
TAILOR_DEVICE void WaitEmpty(PipelineRing<kStages, M>& ring,
                             const PipelineCursor& c) {
#if !TAILOR_PIPELINE_CHECKS
  ring.empty[c.stage].Wait(c.phase ^ 1);
#else
  // Acquire at cluster scope: a peer's count (ReleasePeer) is visible.
  while (!TryWaitFromCluster(&ring.empty[c.stage], c.phase ^ 1)) {
  }
  // Every group released the previous fill; across a cluster a peer's groups
  // may also have released their next one already (a peer whose copies do
  // not wait for this CTA's runs up to a round ahead), never more.
  const unsigned released = VolatileRead(&ring.released[c.stage]);
  if (released < c.round * ring.consumer_groups ||
      released > (c.round + 1) * ring.consumer_groups) {
    printf("tailor pipeline: stage %d refilled (round %u) after %u of %u "
           "consumer releases\n",
           c.stage, c.round, released, c.round * ring.consumer_groups);
    __trap();
  }
#endif
}

template <int kStages, typename M>
TAILOR_DEVICE void ArmFull(PipelineRing<kStages, M>& ring,
                           const PipelineCursor& c, unsigned bytes,
                           const M& message = M{}) {
#if TAILOR_PIPELINE_CHECKS
  if (bytes != ring.stage_bytes) {
    printf("tailor pipeline: stage %d (round %u) armed with %u bytes, the "
           "ring's stage has %u\n",
           c.stage, c.round, bytes, ring.stage_bytes);
    __trap();
  }
  atomicAdd(&ring.armed[c.stage], 1u);
#endif
  ring.message[c.stage] = message;
  ring.full[c.stage].ArriveExpectTx(bytes);
}

// A fill of which `stored_bytes` the producer's own threads wrote with
// ordinary stores (e.g. a tile edge that TMA cannot zero-fill): each writer
// fenced its stores to the async proxy (fence.proxy.async.shared::cta, for
// readers such as wgmma) and synchronized with the arriving thread, whose
// arrival releases them. Expects only the `tma_bytes` of the copies; the
// checks count both parts against the ring's stage bytes.
template <int kStages, typename M>
TAILOR_DEVICE void ArmFullStored(PipelineRing<kStages, M>& ring,
                                 const PipelineCursor& c, unsigned tma_bytes,
                                 unsigned stored_bytes,
                                 const M& message = M{}) {
#if TAILOR_PIPELINE_CHECKS
  if (tma_bytes + stored_bytes != ring.stage_bytes) {
    printf("tailor pipeline: stage %d (round %u) armed with %u + %u stored "
           "bytes, the ring's stage has %u\n",
           c.stage, c.round, tma_bytes, stored_bytes, ring.stage_bytes);
    __trap();
  }
  atomicAdd(&ring.armed[c.stage], 1u);
#endif
  ring.message[c.stage] = message;
  ring.full[c.stage].ArriveExpectTx(tma_bytes);
}

// The producer's last fill: waits for the stage like any fill, carries no
// bytes and the message kPipelineClosed.
template <int kStages, typename M>
TAILOR_DEVICE void Close(PipelineRing<kStages, M>& ring,
                         const PipelineCursor& c) {
  WaitEmpty(ring, c);
#if TAILOR_PIPELINE_CHECKS
  atomicAdd(&ring.armed[c.stage], 1u);
#endif
  ring.message[c.stage] = M{kPipelineClosed};
  ring.full[c.stage].Arrive();
}

// The message of the fill a consumer waited for (WaitFull first).
// (WaitFull's wait is a compiler memory barrier: the read stays after it.)
template <int kStages, typename M>
TAILOR_DEVICE M Message(const PipelineRing<kStages, M>& ring,
                        const PipelineCursor& c) {
  return ring.message[c.stage];
}

template <int kStages, typename M>
TAILOR_DEVICE void WaitFull(PipelineRing<kStages, M>& ring,
                            const PipelineCursor& c) {
#if TAILOR_PIPELINE_CHECKS
  for (long long spin = 0; !ring.full[c.stage].TryWait(c.phase); ++spin) {
    if (spin > (1ll << 26) && VolatileRead(&ring.armed[c.stage]) <= c.round) {
      printf("tailor pipeline: consumer waits on stage %d round %u, which "
             "the producer never armed\n",
             c.stage, c.round);
      __trap();
    }
  }
#else
  ring.full[c.stage].Wait(c.phase);
#endif
}

// One thread per consumer group, after the group finished reading the stage.
template <int kStages, typename M>
TAILOR_DEVICE void Release(PipelineRing<kStages, M>& ring,
                           const PipelineCursor& c) {
#if TAILOR_PIPELINE_CHECKS
  atomicAdd(&ring.released[c.stage], 1u);
#endif
  ring.empty[c.stage].Arrive();
}

// Release to the same ring of CTA `rank` of the cluster (whose producer
// multicast into this CTA's stage).
template <int kStages, typename M>
TAILOR_DEVICE void ReleasePeer(PipelineRing<kStages, M>& ring,
                               const PipelineCursor& c, unsigned rank) {
#if TAILOR_PIPELINE_CHECKS
  // The count lands before the arrival (a release at cluster scope: checked
  // builds only, it costs a memory barrier).
  PeerAdd(&ring.released[c.stage], rank, 1u);
  PeerArriveRelease(&ring.empty[c.stage], rank);
#else
  PeerArrive(&ring.empty[c.stage], rank);
#endif
}

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_PIPELINE_CUH_
