// templates/cuda/attention/prefill_sm90_mainloop.cuh — the math of one
// consumer warpgroup of the Hopper ragged-attention kernel
// (prefill_sm90.cuh): its 64 query rows of a tile against the tile's KV
// blocks, with an online softmax in f32.
//
// Per KV block j (kBlockN positions, one stage of the K ring and one of the
// V ring):
//   S  = Q K_j^T          wgmma, A and B from shared memory (K-major)
//   S  = masked(S)        only blocks the plan marks (diagonal, window, KV
//                         end) or whose stage dropped a page; -inf outside
//   m' = max(m, rowmax S);  P = 2^(S s - m' s);  l = l 2^(m s - m' s) + sum P
//   O  = O 2^(m s - m' s) + P V_j   wgmma, P from registers, V MN-major
// (s: the folded score scale, sm_scale log2 e; with a soft cap S is capped
// first and s = 1.) P V_{j-1} is issued with Q K_j^T; the softmax of block
// j overlaps the other warpgroup's MMAs (ping-pong: the two warpgroups take
// turns issuing their MMAs, ScheduleSync / ScheduleArrive, so that one's
// softmax runs while the other's MMAs use the tensor cores). Holding the
// wait for this warpgroup's own P V_{j-1} until after the softmax (to
// overlap that too) measured no faster and frees V stages later.
//
// Registers per thread (D = 128, kBlockN = 128): O 64 and S 64 floats, P
// 32 words. P is packed from S only once the P V reading it is done (ptxas
// would otherwise merge the two P buffers and serialize the MMAs, C7513).
//
// Thread layout (wgmma m64nN accumulators): warp w of the warpgroup owns
// rows 16 w .. 16 w + 15; lane 4 g + t holds rows 16 w + g and + 8,
// columns 8 i + 2 t, + 1 of every n8 group i.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_MAINLOOP_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_MAINLOOP_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "runtime/cuda/warpgroup_turns.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "runtime/cuda/wgmma_half.cuh"
#include "templates/cuda/attention/prefill_params.h"

namespace tailor::cuda {

// Named barriers of the consumers (0 is __syncthreads'): 1 + wg gives
// warpgroup wg its turn to issue MMAs; 3 + wg synchronizes one warpgroup.
inline constexpr int kPrefillScheduleBarrier = 1;
inline constexpr int kPrefillWarpgroupBarrier = 3;

using PrefillTurns = WarpgroupTurns<kPrefillScheduleBarrier>;
// Waits for this warpgroup's turn to issue MMAs (the other one passed it).
TAILOR_DEVICE void ScheduleSync(int wg) { PrefillTurns::Wait(wg); }
// Gives the other warpgroup its turn.
TAILOR_DEVICE void ScheduleArrive(int wg) { PrefillTurns::Pass(1 - wg); }

// The kernel's waits, named for the checked build's report.
enum PrefillWaitSite : int {
  kPrefillWaitKFull,
  kPrefillWaitVFull,
  kPrefillWaitQFull,
  kPrefillWaitKEmpty,
  kPrefillWaitVEmpty,
  kPrefillWaitQEmpty,
};

#if TAILOR_PIPELINE_CHECKS
// Checked builds: where each role of the CTA last was, [role][item,
// block, step] (role 0 the producer, 1 + wg the consumers; steps: see
// PrefillMark's callers), printed by a wait that times out.
__shared__ int prefill_progress[3][3];
#endif

// Checked builds only: records that `role` reached `step` of block `block`
// of its item `item` (the CTA's k-th).
TAILOR_DEVICE void PrefillMark(int role, int item, int block, int step) {
#if TAILOR_PIPELINE_CHECKS
  if (threadIdx.x % 32 == 0) {
    volatile int* p = prefill_progress[role];
    if (item >= 0) p[0] = item;
    p[1] = block;
    p[2] = step;
  }
#endif
}

// Checked builds (TAILOR_PIPELINE_CHECKS=1) only: waits for `parity` of
// `bar`; past about 2^32 cycles (seconds) lane 0 prints where its warp
// stopped (site, item, block, stage, round) and every role's last mark,
// and past 2^34 the thread traps, so a protocol error names its waits
// instead of hanging the device. The caller then waits as usual (and runs
// pipeline.cuh's own checks).
TAILOR_DEVICE void PrefillWatch(Mbarrier& bar, unsigned parity, int site,
                                const PrefillWorkItem& item, int block,
                                int stage, unsigned round) {
#if TAILOR_PIPELINE_CHECKS
  const long long start = clock64();
  bool reported = false;
  while (!bar.TryWait(parity)) {
    const long long waited = clock64() - start;
    if (!reported && waited > (1ll << 32) && threadIdx.x % 32 == 0) {
      const volatile int(*m)[3] = prefill_progress;
      printf(
          "tailor ragged: CTA %d warp %d stuck at wait %d (0 K full, 1 "
          "V full, 2 Q full, 3 K empty, 4 V empty, 5 Q empty): item seq "
          "%d head %d q_token %d rows %d kv [%d, %d) of %d, block %d, "
          "stage %d round %u parity %u | marks producer %d/%d/%d wg0 "
          "%d/%d/%d wg1 %d/%d/%d\n",
          blockIdx.x, threadIdx.x / 32, site, item.seq, item.q_head,
          item.q_token, item.rows, item.kv_begin, item.kv_end, item.kv_len,
          block, stage, round, parity, m[0][0], m[0][1], m[0][2], m[1][0],
          m[1][1], m[1][2], m[2][0], m[2][1], m[2][2]);
      reported = true;
    }
    if (waited > (1ll << 34)) __trap();
  }
#endif
}

template <int kStages, typename M>
TAILOR_DEVICE void PrefillWaitFull(PipelineRing<kStages, M>& ring,
                                   const PipelineCursor& c, int site,
                                   const PrefillWorkItem& item, int block) {
  PrefillWatch(ring.full[c.stage], c.phase, site, item, block, c.stage,
               c.round);
  WaitFull(ring, c);
}

template <int kStages, typename M>
TAILOR_DEVICE void PrefillWaitEmpty(PipelineRing<kStages, M>& ring,
                                    const PipelineCursor& c, int site,
                                    const PrefillWorkItem& item, int block) {
  PrefillWatch(ring.empty[c.stage], c.phase ^ 1, site, item, block, c.stage,
               c.round);
  WaitEmpty(ring, c);
}

// Where the rows of one thread may attend, in KV positions: [lo, hi).
struct PrefillRowLimits {
  int lo[2];
  int hi[2];
};

// The limits of the thread's two rows (tile rows `row0` and row0 + 8) of
// `item` (see prefill_params.h: row r is token (row_begin + r) / pack).
TAILOR_DEVICE PrefillRowLimits RowLimitsOf(const PrefillParams& p,
                                           const PrefillWorkItem& item,
                                           int pack, int row0) {
  PrefillRowLimits lim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int token = (item.row_begin + row0 + 8 * r) / pack;
    const int pos = item.kv_len - item.q_len + token;
    lim.hi[r] = p.causal ? min(item.kv_len, pos + 1) : item.kv_len;
    lim.lo[r] = p.window_left >= 0 ? pos - p.window_left : -0x7fffffff;
  }
  return lim;
}

template <Half16 kType, int kHeadDim, int kBlockN, int kBoxTokens>
struct PrefillSm90Mainloop {
  static_assert(kHeadDim % kPrefillChunk == 0, "D is whole 64-element chunks");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "N is whole k16 steps");
  static constexpr int kSRegs = kBlockN / 2;     // S accumulators a thread
  static constexpr int kORegs = kHeadDim / 2;    // O accumulators a thread
  static constexpr int kPSteps = kBlockN / 16;   // k16 steps of P V
  static constexpr int kQSteps = kHeadDim / 16;  // k16 steps of Q K^T
  static constexpr unsigned kKvChunkBytes = kBlockN * 128;
  static constexpr unsigned kQChunkBytes = kPrefillTileRows * 128;

  struct State {
    float o[kORegs];  // unnormalized output of the thread's two rows
    float m[2];       // running row max, in score units
    float l[2];       // this thread's part of the row sums
  };

  // One block's masking: whether to mask, the rows' limits, the block's
  // first position, and the stage's dropped boxes (bad page ids).
  struct BlockMask {
    bool on;
    int start;
    unsigned dropped;
  };

  static TAILOR_DEVICE void Init(State& st) {
#pragma unroll
    for (int i = 0; i < kORegs; ++i) st.o[i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st.m[r] = NegativeInfinity();
      st.l[r] = 0.0f;
    }
  }

  // ---- MMAs -----------------------------------------------------------------

  // S[64 x N] = Q[rows of wg][D] . K[N][D]^T.
  static TAILOR_DEVICE void IssueQK(float (&s)[kSRegs],
                                    const unsigned char* q_tile,
                                    const unsigned char* k_tile, int wg) {
    const unsigned char* q_rows = q_tile + wg * kPrefillConsumerRows * 128;
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      const int chunk = kk / 4, step = kk % 4;  // +32 bytes: +2 in the field
      const unsigned long long a =
          SwizzledKMajorDescriptor(q_rows + chunk * kQChunkBytes) + 2 * step;
      const unsigned long long b =
          SwizzledKMajorDescriptor(k_tile + chunk * kKvChunkBytes) + 2 * step;
      WgmmaSS<kType>(s, a, b, kk > 0, WgmmaN<kBlockN>{});
    }
    WgmmaCommit();
  }

  // O[64 x D] += P[64 x N] . V[N][D].
  static TAILOR_DEVICE void IssuePV(float (&o)[kORegs],
                                    const unsigned (&pa)[kPSteps][4],
                                    const unsigned char* v_tile) {
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      const unsigned long long b =
          SwizzledMNMajorDescriptor(v_tile + kk * 2048, kKvChunkBytes);
      WgmmaRSTransposedB<kType>(o, pa[kk], b, true, WgmmaN<kHeadDim>{});
    }
    WgmmaCommit();
  }

  // ---- softmax --------------------------------------------------------------

  // -inf where the thread's element may not be attended (see BlockMask).
  static TAILOR_DEVICE void Mask(float (&s)[kSRegs], const BlockMask& mask,
                                 const PrefillRowLimits& lim) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      const int col = 8 * (i / 4) + 2 * t + (i % 2);
      const int row = (i / 2) % 2;
      const int pos = mask.start + col;
      const bool dropped = (mask.dropped >> (col / kBoxTokens)) & 1u;
      if (pos < lim.lo[row] || pos >= lim.hi[row] || dropped) {
        s[i] = NegativeInfinity();
      }
    }
  }

  // Turns the scores S of one block into the probabilities P (f32, in
  // place) and updates the row max and sums; alpha = the factor O must be
  // scaled by before P V is added.
  static TAILOR_DEVICE void Softmax(float (&s)[kSRegs], State& st,
                                    float (&alpha)[2], const BlockMask& mask,
                                    const PrefillRowLimits& lim,
                                    const PrefillParams& p) {
    float scale = p.score_scale;
    if (p.cap_scale != 0.0f) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) {
        s[i] = p.score_scale * TanhApprox(s[i] * p.cap_scale);
      }
      scale = 1.0f;
    }
    if (mask.on) Mask(s, mask, lim);
    float row_max[2] = {st.m[0], st.m[1]};
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      row_max[(i / 2) % 2] = fmaxf(row_max[(i / 2) % 2], s[i]);
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] =
          fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
      row_max[r] =
          fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
      // A row with nothing attended yet keeps m = -inf: base 0 keeps
      // 2^(-inf - base) = 0 instead of NaN.
      base[r] = row_max[r] == NegativeInfinity() ? 0.0f : row_max[r] * scale;
      alpha[r] = Exp2(st.m[r] * scale - base[r]);
      st.m[r] = row_max[r];
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      s[i] = Exp2(fmaf(s[i], scale, -base[(i / 2) % 2]));
      sum[(i / 2) % 2] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + sum[r];
  }

  // P as the A operand of P V: the accumulator layout of two n8 groups is
  // the A fragment of one k16 step (wgmma_half.cuh).
  static TAILOR_DEVICE void PackP(const float (&s)[kSRegs],
                                  unsigned (&pa)[kPSteps][4]) {
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      pa[kk][0] = Pack2<kType>(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = Pack2<kType>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = Pack2<kType>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = Pack2<kType>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

  static TAILOR_DEVICE void Rescale(State& st, const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < kORegs; ++i) st.o[i] *= alpha[(i / 2) % 2];
  }

  // ---- one tile -------------------------------------------------------------

  static constexpr unsigned kTileBytes = kBlockN * kHeadDim * 2;

  // Block j's mask: the plan's masked blocks, or a stage that dropped pages.
  static TAILOR_DEVICE BlockMask MaskOf(const PrefillWorkItem& item, int j,
                                        unsigned dropped) {
    return {j < item.masked_below || j >= item.masked_from || dropped != 0,
            item.kv_begin + j * kBlockN, dropped};
  }

  // The rings one consumer warpgroup walks: K tiles from `k_tiles` (ring
  // `k_ring`, cursor `kc`), V tiles likewise; `leader` (one thread of the
  // warpgroup) releases a K stage once Q K^T has read it and a V stage once
  // P V has.
  template <int kKStages, int kVStages>
  struct Pipes {
    static constexpr int kK = kKStages;
    static constexpr int kV = kVStages;
    const unsigned char* k_tiles;
    const unsigned char* v_tiles;
    PipelineRing<kKStages, int>* k_ring;
    PipelineRing<kVStages, int>* v_ring;
    PipelineCursor kc;
    PipelineCursor vc;
    int wg;
    bool leader;
  };

  // S of the block in flight and P of the last one (A of its P V).
  struct Scores {
    float s[kSRegs];
    unsigned pa[kPSteps][4];
  };

  // Block 0's S, issued in its own turn; then FinishFirst.
  template <typename P>
  static TAILOR_DEVICE void First(const PrefillParams& p,
                                  const PrefillWorkItem& item,
                                  const unsigned char* q_tile, P& x,
                                  const PrefillRowLimits& lim, State& st,
                                  Scores& sc) {
    PrefillMark(1 + x.wg, -1, 0, 1);
    PrefillWaitFull(*x.k_ring, x.kc, kPrefillWaitKFull, item, 0);
    const unsigned dropped = static_cast<unsigned>(Message(*x.k_ring, x.kc));
    PrefillMark(1 + x.wg, -1, 0, 3);
    ScheduleSync(x.wg);
    IssueQK(sc.s, q_tile, x.k_tiles + x.kc.stage * kTileBytes, x.wg);
    ScheduleArrive(x.wg);
    FinishFirst(p, item, x, lim, st, sc, dropped);
  }

  // Waits for block 0's S (stage message `dropped`), starts `st` afresh and
  // turns S into P.
  template <typename P>
  static TAILOR_DEVICE void FinishFirst(const PrefillParams& p,
                                        const PrefillWorkItem& item, P& x,
                                        const PrefillRowLimits& lim, State& st,
                                        Scores& sc, unsigned dropped) {
    float alpha[2];
    PrefillMark(1 + x.wg, -1, 0, 4);
    WgmmaWait<0>();
    FenceRegisters(sc.s);
    if (x.leader) Release(*x.k_ring, x.kc);
    x.kc.Advance(P::kK);
    Init(st);
    Softmax(sc.s, st, alpha, MaskOf(item, 0, dropped), lim, p);
    PackP(sc.s, sc.pa);
  }

  // Blocks [1, blocks) of `item`: S of block j with P V of block j - 1 in
  // one turn, the softmax of j while the other warpgroup's MMAs run.
  template <typename P>
  static TAILOR_DEVICE void Middle(const PrefillParams& p,
                                   const PrefillWorkItem& item, int blocks,
                                   const unsigned char* q_tile, P& x,
                                   const PrefillRowLimits& lim, State& st,
                                   Scores& sc) {
    float alpha[2];
    for (int j = 1; j < blocks; ++j) {
      PrefillMark(1 + x.wg, -1, j, 1);
      PrefillWaitFull(*x.k_ring, x.kc, kPrefillWaitKFull, item, j);
      const unsigned dropped = static_cast<unsigned>(Message(*x.k_ring, x.kc));
      PrefillMark(1 + x.wg, -1, j, 2);
      PrefillWaitFull(*x.v_ring, x.vc, kPrefillWaitVFull, item, j - 1);
      PrefillMark(1 + x.wg, -1, j, 3);
      ScheduleSync(x.wg);
      IssueQK(sc.s, q_tile, x.k_tiles + x.kc.stage * kTileBytes, x.wg);
      IssuePV(st.o, sc.pa, x.v_tiles + x.vc.stage * kTileBytes);
      ScheduleArrive(x.wg);
      PrefillMark(1 + x.wg, -1, j, 4);
      WgmmaWait<1>();  // S of block j
      FenceRegisters(sc.s);
      if (x.leader) Release(*x.k_ring, x.kc);
      x.kc.Advance(P::kK);
      Softmax(sc.s, st, alpha, MaskOf(item, j, dropped), lim, p);
      PrefillMark(1 + x.wg, -1, j, 5);
      WgmmaWait<0>();  // P V of block j - 1: P and O are free again
      FenceRegisters(st.o);
      if (x.leader) Release(*x.v_ring, x.vc);
      x.vc.Advance(P::kV);
      Rescale(st, alpha);
      PackP(sc.s, sc.pa);
    }
  }

  // The last block's P V of `item` in its own turn.
  template <typename P>
  static TAILOR_DEVICE void LastPv(const PrefillWorkItem& item, int blocks,
                                   P& x, State& st, Scores& sc) {
    PrefillMark(1 + x.wg, -1, blocks, 2);
    PrefillWaitFull(*x.v_ring, x.vc, kPrefillWaitVFull, item, blocks - 1);
    PrefillMark(1 + x.wg, -1, blocks, 3);
    ScheduleSync(x.wg);
    IssuePV(st.o, sc.pa, x.v_tiles + x.vc.stage * kTileBytes);
    ScheduleArrive(x.wg);
    WgmmaWait<0>();
    FenceRegisters(st.o);
    if (x.leader) Release(*x.v_ring, x.vc);
    x.vc.Advance(P::kV);
  }

  // The last block's P V of `item` and block 0's S of `next` (its query in
  // `next_q`) in one turn, so that the tensor pipe has the next tile's
  // Q K^T while this warpgroup stores `item`. Returns once the P V is done
  // (O final); the caller stores O, then calls FinishFirst for `next` with
  // the returned stage message.
  template <typename P>
  static TAILOR_DEVICE unsigned LastPvWithNextS(const PrefillWorkItem& item,
                                                int blocks,
                                                const PrefillWorkItem& next,
                                                const unsigned char* next_q,
                                                P& x, State& st, Scores& sc) {
    PrefillMark(1 + x.wg, -1, blocks, 2);
    PrefillWaitFull(*x.v_ring, x.vc, kPrefillWaitVFull, item, blocks - 1);
    PrefillWaitFull(*x.k_ring, x.kc, kPrefillWaitKFull, next, 0);
    const unsigned dropped = static_cast<unsigned>(Message(*x.k_ring, x.kc));
    PrefillMark(1 + x.wg, -1, blocks, 3);
    ScheduleSync(x.wg);
    IssuePV(st.o, sc.pa, x.v_tiles + x.vc.stage * kTileBytes);
    IssueQK(sc.s, next_q, x.k_tiles + x.kc.stage * kTileBytes, x.wg);
    ScheduleArrive(x.wg);
    WgmmaWait<1>();  // the P V
    FenceRegisters(st.o);
    if (x.leader) Release(*x.v_ring, x.vc);
    x.vc.Advance(P::kV);
    return dropped;
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_MAINLOOP_CUH_
