// templates/cuda/attention/decode_common.cuh — what the two paged-decode kernels
// (decode_sm80.cuh: cp.async, decode_sm90.cuh: TMA) share: the shared-
// memory tile layout, the tensor-core math of one warp on one tile, and the
// end of an item (merge of the warps, output or partial, and the merge of
// split pairs by the last piece to finish).
//
// Work split inside a CTA: kDecodeConsumerWarps = 4 warps compute; warp w
// takes tokens [16 w, 16 w + 16) of every 64-token tile and keeps its own
// online-softmax state for the item (rows = the kGroup query heads of the
// item's KV head, padded to the 16 rows of an MMA tile; rows >= kGroup hold
// zero queries and are never written). Per tile and warp:
//   S[16 x 16]  = Q[16 x D] . K^T       D/16 k-steps, 2 mma each (ldmatrix)
//   S           = masked(scale(S))      log2 domain; invalid tokens -inf
//   m, l, O     online softmax update   exp2, quad shuffles for row max
//   O[16 x D]  += P[16 x 16] . V        P from S's registers, V by
//                                        ldmatrix.trans; V of invalid tokens
//                                        zeroed (P = 0 must not meet NaN)
// At the end of an item the 4 warps' (m, l, O) meet in shared memory:
//   lse = log2 sum_w l_w 2^(m_w - m*) + m*, O = sum_w O_w 2^(m_w - m*) / l
// A whole pair writes out (dtype) and lse (natural log); a piece writes its
// partial slot (normalized O, lse in log2), then the CTA that brings the
// pair's counter to `pieces` merges every slot of the pair and resets the
// counter (so a captured graph replays with counters at zero).
//
// Tile layout (K and V alike): 64 tokens as 64 / kBoxTokens boxes, each box
// [D / 64][kBoxTokens][64 elements] with 128-byte rows, 16-byte chunks
// XOR-swizzled by (row % 8): the layout TMA's 128-byte swizzle writes for a
// box {64, kBoxTokens, D / 64}, and what the cp.async path writes by hand.
// ldmatrix reads 8 rows of one 16-byte chunk column: consecutive tokens,
// distinct (row % 8), so distinct bank groups: conflict-free.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_COMMON_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_COMMON_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/error_word.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/decode_params.h"
#include "templates/cuda/attention/decode_trace.cuh"
#include "templates/cuda/attention/page_table.cuh"

namespace tailor::cuda {

inline constexpr float kDecodeLn2 = 0.69314718055994531f;

// The q / out / lse row of sequence `seq`: q_rows[seq] where the launch maps
// rows (a ragged step's decode rows sit among other rows), else seq.
TAILOR_DEVICE long long DecodeRowOf(const DecodeKernelParams& p, int seq) {
  return p.q_rows != nullptr ? __ldg(p.q_rows + seq) : seq;
}

// The group and page size of a kernel: compiled in, or (kDecodeRuntimeDim,
// the generic kernel) the params'.
template <int kGroup>
TAILOR_DEVICE int DecodeGroupOf(const DecodeKernelParams& p) {
  return kGroup != kDecodeRuntimeDim ? kGroup : p.group;
}
template <int kPageSize>
TAILOR_DEVICE int DecodePageSizeOf(const DecodeKernelParams& p) {
  return kPageSize != kDecodeRuntimeDim ? kPageSize : p.page_size;
}

// Item `i` of a CTA whose first item `first` is `head` (already loaded).
TAILOR_DEVICE DecodeWorkItem DecodeItemAt(const DecodeKernelParams& p, int i,
                                          int first,
                                          const DecodeWorkItem& head) {
  return i == first ? head : p.items[i];
}

TAILOR_DEVICE PageRow DecodePageRow(const DecodeKernelParams& p,
                                    const DecodeWorkItem& item) {
  return PageRowOf(p.page_indptr, p.block_table_stride, p.max_pages, item.seq);
}

// Checks of one item that do not depend on a tile: the device length
// (loaded by the caller, so that the load overlaps the block-table loads)
// against the plan, and the planned pages against the block table. Returns
// the end of the tokens to attend: min(kv_end, device length).
template <int kPageSize>
TAILOR_DEVICE int DecodeAttendedEnd(const DecodeKernelParams& p,
                                    const DecodeWorkItem& item, int device_len,
                                    bool report) {
  if (report && device_len != item.seq_len) {
    RecordLowestError(p.errors, kDecodeErrorBadSeqLen, item.seq, device_len);
  }
  const int page_size = DecodePageSizeOf<kPageSize>(p);
  const int pages = (item.seq_len + page_size - 1) / page_size;
  if (report && pages > DecodePageRow(p, item).count) {
    RecordLowestError(p.errors, kDecodeErrorTooManyPages, item.seq, pages);
  }
  return min(item.kv_end, max(device_len, 0));
}

// Page token / page of the item's sequence (page_table.cuh), or
// kDecodeNoPage for a slot past its pages (reported by DecodeAttendedEnd).
// Depends on the item only, so it can be issued before the device length
// arrives.
inline constexpr int kDecodeNoPage = -2147483647 - 1;

template <int kPageSize>
TAILOR_DEVICE int DecodeLoadPage(const DecodeKernelParams& p,
                                 const DecodeWorkItem& item, int token) {
  const int slot = token / DecodePageSizeOf<kPageSize>(p);
  return PageAt(p.block_table, DecodePageRow(p, item), slot, kDecodeNoPage);
}

TAILOR_DEVICE bool DecodePageValid(const DecodeKernelParams& p, int page) {
  return page >= 0 && page < p.num_pages;
}

// Records a block-table entry outside [0, num_pages).
template <int kPageSize>
TAILOR_DEVICE void DecodeReportPage(const DecodeKernelParams& p,
                                    const DecodeWorkItem& item, int token,
                                    int page) {
  if (page == kDecodeNoPage || DecodePageValid(p, page)) return;
  RecordLowestError(p.errors, kDecodeErrorBadPage,
                    static_cast<long long>(item.seq) * p.max_pages +
                        token / DecodePageSizeOf<kPageSize>(p),
                    page);
}

// Byte offset of chunk `chunk` (elements 8 chunk .. 8 chunk + 7) of token
// `token` (0..63) inside a K or V tile (see the file comment).
template <int kHeadDim, int kBoxTokens>
struct DecodeTileLayout {
  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64");
  static_assert(kBoxTokens % 8 == 0 && kDecodeTileTokens % kBoxTokens == 0,
                "boxes hold a multiple of 8 tokens and divide the tile");
  static constexpr int kDBlocks = kHeadDim / 64;
  static TAILOR_DEVICE unsigned ChunkOffset(int token, int chunk) {
    const unsigned box = token / kBoxTokens, t = token % kBoxTokens;
    const unsigned row = (box * kDBlocks + chunk / 8) * kBoxTokens + t;
    return row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
  }
};

// The online-softmax state of one warp for one item. Rows r0 = lane / 4 and
// r1 = lane / 4 + 8 of the 16-row MMA tile.
template <int kHeadDim>
struct DecodeWarpState {
  static constexpr int kNTiles = kHeadDim / 8;
  float o[kNTiles][4];  // O columns 8 n + 2 (lane % 4) + {0, 1}
  float m[2];           // running max, log2 domain
  float l[2];           // this thread's part of the running sum

  TAILOR_DEVICE void Reset() {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    m[0] = m[1] = NegativeInfinity();
    l[0] = l[1] = 0;
  }
};

// The soft-capped score, out of line: tanhf is some 20 instructions, and
// inlined at each of a tile's scores it doubled the tile loop's code, which
// a launch fetches cold from memory once other kernels ran (the decode
// kernel's first tile and its merge are instruction-fetch bound then).
static __device__ __noinline__ float DecodeCappedScore(float score_scale,
                                                       float cap_scale,
                                                       float dot) {
  return score_scale * tanhf(dot * cap_scale);
}

// A scaled (and soft-capped) score in the log2 domain.
TAILOR_DEVICE float DecodeScore(const DecodeKernelParams& p, float dot) {
  if (p.cap_scale > 0) {
    return DecodeCappedScore(p.score_scale, p.cap_scale, dot);
  }
  return p.score_scale * dot;
}

// One warp's 16 tokens of one tile. `valid16` bit t: token 16 warp + t is
// attended. Addresses are shared-window addresses.
template <Half16 kType, int kHeadDim, int kBoxTokens>
TAILOR_DEVICE void DecodeWarpTile(const DecodeKernelParams& p, unsigned k_tile,
                                  unsigned v_tile, unsigned q_rows,
                                  unsigned q_row_bytes, unsigned valid16,
                                  int warp, int lane,
                                  DecodeWarpState<kHeadDim>& st) {
  using Layout = DecodeTileLayout<kHeadDim, kBoxTokens>;
  constexpr int kSteps = kHeadDim / 16;
  // ---- S = Q . K^T: [16 heads x 16 tokens] as two n8 tiles ----------------
  float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  const unsigned a_row = (lane % 8) + ((lane / 8) % 2) * 8;
  const unsigned a_base = q_rows + a_row * q_row_bytes + (lane / 16) * 16;
  const int k_token = warp * 16 + (lane % 8) + (lane / 16) * 8;
  const int k_half = (lane / 8) % 2;
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    unsigned a[4], b[4];
    LdMatrixX4(a, a_base + ks * 32);  // Q[16 x 16] at columns 16 ks
    LdMatrixX4(b, k_tile + Layout::ChunkOffset(k_token, 2 * ks + k_half));
    Mma16816<kType>(s[0], a, b[0], b[1]);  // tokens 0..7
    Mma16816<kType>(s[1], a, b[2], b[3]);  // tokens 8..15
  }
  // ---- scale, mask, online softmax ------------------------------------------
  const int col = 2 * (lane % 4);
  float row_max[2] = {NegativeInfinity(), NegativeInfinity()};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int token = nt * 8 + col + (i & 1);
      const float x = DecodeScore(p, s[nt][i]);
      s[nt][i] = ((valid16 >> token) & 1u) ? x : NegativeInfinity();
      row_max[i / 2] = fmaxf(row_max[i / 2], s[nt][i]);
    }
  }
  float alpha[2], base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    const float m_new = fmaxf(st.m[r], row_max[r]);
    base[r] = m_new == NegativeInfinity() ? 0.0f : m_new;
    alpha[r] = Exp2(st.m[r] - base[r]);  // 0 while nothing was attended
    st.m[r] = m_new;
  }
  float sum[2] = {0, 0};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = Exp2(s[nt][i] - base[i / 2]);  // -inf -> 0
      sum[i / 2] += s[nt][i];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + sum[r];
#pragma unroll
  for (int n = 0; n < DecodeWarpState<kHeadDim>::kNTiles; ++n) {
    st.o[n][0] *= alpha[0];
    st.o[n][1] *= alpha[0];
    st.o[n][2] *= alpha[1];
    st.o[n][3] *= alpha[1];
  }
  // ---- O += P . V -----------------------------------------------------------
  // P as the A operand: the C layout of the two n8 tiles is A's k16 layout.
  const unsigned pa[4] = {
      Pack2<kType>(s[0][0], s[0][1]), Pack2<kType>(s[0][2], s[0][3]),
      Pack2<kType>(s[1][0], s[1][1]), Pack2<kType>(s[1][2], s[1][3])};
  // This thread's V registers hold tokens col, col + 1 (b0) and col + 8,
  // col + 9 (b1): zero the halves of tokens not attended.
  unsigned keep0 = 0xffffffffu, keep1 = 0xffffffffu;
  if (valid16 != 0xffffu) {
    keep0 = (((valid16 >> col) & 1u) ? 0x0000ffffu : 0u) |
            (((valid16 >> (col + 1)) & 1u) ? 0xffff0000u : 0u);
    keep1 = (((valid16 >> (col + 8)) & 1u) ? 0x0000ffffu : 0u) |
            (((valid16 >> (col + 9)) & 1u) ? 0xffff0000u : 0u);
  }
  const int v_token = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
  const int v_half = lane / 16;
#pragma unroll
  for (int jp = 0; jp < kHeadDim / 16; ++jp) {
    unsigned b[4];
    LdMatrixX4Trans(b, v_tile + Layout::ChunkOffset(v_token, 2 * jp + v_half));
    b[0] &= keep0;
    b[1] &= keep1;
    b[2] &= keep0;
    b[3] &= keep1;
    Mma16816<kType>(st.o[2 * jp], pa, b[0], b[1]);
    Mma16816<kType>(st.o[2 * jp + 1], pa, b[2], b[3]);
  }
}

// Copies the item's `group` query rows from a stage's slot to the running
// query rows (all consumer threads; `thread` in [0, 128)).
template <int kHeadDim>
TAILOR_DEVICE void DecodeCopyQuery(const unsigned char* stage_rows,
                                   unsigned char* rows, unsigned row_bytes,
                                   int group, int thread) {
  constexpr int kChunks = kHeadDim / 8;
  for (int e = thread; e < group * kChunks; e += 32 * kDecodeConsumerWarps) {
    const unsigned offset = (e / kChunks) * row_bytes + (e % kChunks) * 16;
    *reinterpret_cast<uint4*>(rows + offset) =
        *reinterpret_cast<const uint4*>(stage_rows + offset);
  }
}

// Barrier of the consumer warps: a named barrier when a producer warp runs
// beside them, the CTA barrier otherwise.
template <bool kNamed>
TAILOR_DEVICE void DecodeConsumerSync() {
  if constexpr (kNamed) {
    asm volatile("bar.sync 1, %0;" ::"n"(32 * kDecodeConsumerWarps) : "memory");
  } else {
    __syncthreads();
  }
}

template <Half16 kType>
TAILOR_DEVICE void DecodeStore2(void* out, float x, float y) {
  *static_cast<unsigned*>(out) = Pack2<kType>(x, y);
}

// Merges every partial slot of `item`'s pair into out / lse (the CTA that
// finished last: its kThreads threads, `thread` in [0, kThreads): all
// consumer threads, or one warp of a head group, which merges its own head
// while the other warps merge theirs). Partials are read through L2 (other
// CTAs wrote them). The merge is the tail of every split pair: while it
// runs, the other SMs are done, so it is made of as few L2 round trips as
// possible. Each thread owns octets of the output (8 values of one query
// row, 16 bytes of a partial in the output's 16-bit type) and reads, for
// kUnroll pieces at once, each piece's lse (log2) of its row and its octet:
// one round trip per kUnroll pieces, no shared memory and no barrier
// (staging the lse in shared memory first took three round trips and two
// barriers). The pieces fold
// into a running max M, sum S and weighted sum A as in the online softmax:
//   M' = max(M, lse_i),  S' = S 2^(M - M') + sum_i 2^(lse_i - M'),
//   A' = A 2^(M - M') + sum_i 2^(lse_i - M') O_i
//   out = A' / S',  lse = (M' + log2 S') ln 2   (S' = 0: out 0, lse -inf)
#ifndef TAILOR_DECODE_MERGE_LOADS
#define TAILOR_DECODE_MERGE_LOADS 8
#endif

template <Half16 kType, int kHeadDim, int kGroup,
          int kThreads = 32 * kDecodeConsumerWarps>
TAILOR_DEVICE void DecodeMergePieces(const DecodeKernelParams& p,
                                     const DecodeWorkItem& item, int thread) {
  constexpr int kOctets = kHeadDim / 8;
  // A run-time group (the generic kernel) is at most 16.
  constexpr int kMaxGroup = kGroup != kDecodeRuntimeDim ? kGroup : 16;
  constexpr int kPerThread = (kMaxGroup * kOctets + kThreads - 1) / kThreads;
  constexpr int kBlock = kPerThread < 4 ? kPerThread : 4;
  // 16-byte partial loads in flight per thread (plus as many lse loads): 8
  // merge a pair of up to 8 pieces in one round trip. The unrolled loads
  // are most of the merge's code, which a launch runs once and so fetches
  // cold once other kernels ran; 16 doubled it, 32 would also take 209-233
  // registers, over the 204 that two CTAs an SM allow.
  // TAILOR_NVRTC_FLAGS=-DTAILOR_DECODE_MERGE_LOADS=16 compares.
  constexpr int kUnroll = TAILOR_DECODE_MERGE_LOADS / kBlock;
  // Every (block, k) names an output octet: no bounds check in the loop (a
  // check there, even one that never fails, keeps the loads of the unrolled
  // pieces from being issued together).
  constexpr bool kExact = kGroup != kDecodeRuntimeDim &&
                          kGroup * kOctets % kThreads == 0 &&
                          kPerThread % kBlock == 0;
  const int group = DecodeGroupOf<kGroup>(p);
  // Whether octet e of the pair is an output; past the first of a block
  // only (a thread leaves at a block whose first octet is past the end).
  auto in_range = [&](int e, int k) {
    return kExact || k == 0 || e < group * kOctets;
  };
  const int pieces = item.pieces;
  const float* lse =
      p.partial_lse + static_cast<long long>(item.first_partial) * group;
  const uint4* partials = static_cast<const uint4*>(p.partial_out);
#pragma unroll 1
  for (int b = 0; b < kPerThread; b += kBlock) {
    if (!kExact && thread + b * kThreads >= group * kOctets) break;
    float top[kBlock], sum[kBlock], acc[kBlock][8];
#pragma unroll
    for (int k = 0; k < kBlock; ++k) {
      top[k] = NegativeInfinity();
      sum[k] = 0.0f;
#pragma unroll
      for (int v = 0; v < 8; ++v) acc[k][v] = 0.0f;
    }
    // Chunks of kUnroll pieces whose loads all issue at once: past the last
    // piece a chunk reloads the last one with lse -inf (weight 0) instead of
    // branching (a loop of `pieces` trips would leave a short pair to a
    // remainder loop of one round trip per piece).
#pragma unroll 1
    for (int i0 = 0; i0 < pieces; i0 += kUnroll) {
      float x[kUnroll][kBlock];
      uint4 o[kUnroll][kBlock];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const int i = min(i0 + j, pieces - 1);
        const long long slot0 =
            static_cast<long long>(item.first_partial + i) * group;
#pragma unroll
        for (int k = 0; k < kBlock; ++k) {
          const int e = thread + (b + k) * kThreads;
          if (in_range(e, k)) {
            const int row = e / kOctets;
            x[j][k] = i0 + j < pieces ? __ldcg(lse + i * group + row)
                                      : NegativeInfinity();
            o[j][k] = __ldcg(partials + (slot0 + row) * kOctets + e % kOctets);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kBlock; ++k) {
        const int e = thread + (b + k) * kThreads;
        if (!in_range(e, k)) break;
        float m = top[k];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) m = fmaxf(m, x[j][k]);
        // Nothing attended so far (m = -inf): every weight is 0.
        const float base = m == NegativeInfinity() ? 0.0f : m;
        const float rescale = Exp2(top[k] - base);
        sum[k] *= rescale;
#pragma unroll
        for (int v = 0; v < 8; ++v) acc[k][v] *= rescale;
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const float w = Exp2(x[j][k] - base);  // -inf -> 0
          const unsigned pairs[4] = {o[j][k].x, o[j][k].y, o[j][k].z,
                                     o[j][k].w};
          sum[k] += w;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float lo, hi;
            Unpack2<kType>(pairs[q], lo, hi);
            acc[k][2 * q] += w * lo;
            acc[k][2 * q + 1] += w * hi;
          }
        }
        top[k] = m;
      }
    }
#pragma unroll
    for (int k = 0; k < kBlock; ++k) {
      const int e = thread + (b + k) * kThreads;
      if (!in_range(e, k)) break;
      const int row = e / kOctets, d = (e % kOctets) * 8;
      const float scale = sum[k] > 0 ? 1.0f / sum[k] : 0.0f;
      const long long head = static_cast<long long>(item.kv_head) * group + row;
      unsigned short* out = static_cast<unsigned short*>(p.out) +
                            DecodeRowOf(p, item.seq) * p.out_stride_b +
                            head * p.out_stride_h + d;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        DecodeStore2<kType>(out + 2 * q, acc[k][2 * q] * scale,
                            acc[k][2 * q + 1] * scale);
      }
      if (d == 0 && p.lse != nullptr) {
        p.lse[DecodeRowOf(p, item.seq) * p.lse_stride_b + head] =
            sum[k] > 0 ? (top[k] + log2f(sum[k])) * kDecodeLn2
                       : NegativeInfinity();
      }
    }
  }
}

// The first half of an item's end: every consumer warp publishes its
// state's rows (merge_out, merge_max, merge_sum) and the warps' per-row
// scales are computed (row_scale; merge_sum[r] then holds row r's lse,
// log2). All consumer threads call it; it ends with a consumer barrier,
// after which DecodeCombinedOctet and the lse can be read.
template <int kHeadDim, int kGroup, bool kNamedSync>
TAILOR_DEVICE void DecodeCombineWarps(const DecodeKernelParams& p,
                                      const DecodeWarpState<kHeadDim>& st,
                                      unsigned char* smem,
                                      const DecodeSmemLayout layout, int warp,
                                      int lane) {
  float* merge_out = reinterpret_cast<float*>(smem + layout.merge_out);
  float* merge_max = reinterpret_cast<float*>(smem + layout.merge_max);
  float* merge_sum = reinterpret_cast<float*>(smem + layout.merge_sum);
  float* row_scale = reinterpret_cast<float*>(smem + layout.row_scale);
  const int thread = warp * 32 + lane;
  const int r0 = lane / 4, r1 = r0 + 8;
  const unsigned row = layout.merge_row;
  const int group = DecodeGroupOf<kGroup>(p);
  // ---- 1. every warp publishes its rows ------------------------------------
  float l0 = st.l[0], l1 = st.l[1];
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (lane % 4 == 0) {
    merge_max[warp * 16 + r0] = st.m[0];
    merge_sum[warp * 16 + r0] = l0;
    merge_max[warp * 16 + r1] = st.m[1];
    merge_sum[warp * 16 + r1] = l1;
  }
#pragma unroll
  for (int n = 0; n < DecodeWarpState<kHeadDim>::kNTiles; ++n) {
    const int d = n * 8 + 2 * (lane % 4);
    if (r0 < group) {
      *reinterpret_cast<float2*>(merge_out + (warp * group + r0) * row + d) =
          make_float2(st.o[n][0], st.o[n][1]);
    }
    if (r1 < group) {
      *reinterpret_cast<float2*>(merge_out + (warp * group + r1) * row + d) =
          make_float2(st.o[n][2], st.o[n][3]);
    }
  }
  DecodeConsumerSync<kNamedSync>();
  // ---- 2. per-row scales of the warps' states -------------------------------
  // A lane per (row, warp), rows side by side: whole warps 0 and 1 (16 rows
  // x 4 warps), so that every lane that shuffles takes part. (One thread a
  // row looped over the warps cost more at every item's end.)
  static_assert(kDecodeConsumerWarps == 4, "a row's warps are 4 lanes");
  if (thread < 16 * kDecodeConsumerWarps) {
    const int r = thread / kDecodeConsumerWarps;
    const int w = thread % kDecodeConsumerWarps;
    const bool mine = r < group;
    const float x = mine ? merge_max[w * 16 + r] : NegativeInfinity();
    const float l = mine ? merge_sum[w * 16 + r] : 0.0f;
    float top = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
    const float e = Exp2(x - (top == NegativeInfinity() ? 0.0f : top));
    float total = l * e;
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    if (mine) {
      row_scale[w * 16 + r] = total > 0 ? e / total : 0.0f;
      // Every lane of the row has read its slot: warp 0's becomes the lse
      // (log2).
      if (w == 0) {
        merge_sum[r] = total > 0 ? top + log2f(total) : NegativeInfinity();
      }
    }
  }
  DecodeConsumerSync<kNamedSync>();
}

// Values d .. d + 7 of row r of the item's output, from the warps' rows
// (after DecodeCombineWarps).
template <int kGroup>
TAILOR_DEVICE void DecodeCombinedOctet(const unsigned char* smem,
                                       const DecodeSmemLayout layout, int r,
                                       int d, float (&v)[8]) {
  static_assert(kGroup != kDecodeRuntimeDim, "a compile-time group");
  const float* merge_out =
      reinterpret_cast<const float*>(smem + layout.merge_out);
  const float* row_scale =
      reinterpret_cast<const float*>(smem + layout.row_scale);
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = 0.0f;
#pragma unroll
  for (int w = 0; w < kDecodeConsumerWarps; ++w) {
    const float f = row_scale[w * 16 + r];
    const float4* o = reinterpret_cast<const float4*>(
        merge_out + (w * kGroup + r) * layout.merge_row + d);
    const float4 a = o[0], b = o[1];
    v[0] += f * a.x, v[1] += f * a.y, v[2] += f * a.z, v[3] += f * a.w;
    v[4] += f * b.x, v[5] += f * b.y, v[6] += f * b.z, v[7] += f * b.w;
  }
}

// The end of an item: merges the consumer warps' states and writes out /
// lse or the partial slot; the last piece of a split pair merges the pair.
// All consumer threads call it; it ends with a consumer barrier, after
// which the query rows, merge buffers and flag may be reused.
template <Half16 kType, int kHeadDim, int kGroup, bool kNamedSync>
TAILOR_DEVICE void DecodeFinishItem(const DecodeKernelParams& p,
                                    const DecodeWorkItem& item,
                                    const DecodeWarpState<kHeadDim>& st,
                                    unsigned char* smem,
                                    const DecodeSmemLayout layout, int warp,
                                    int lane) {
  DecodeCombineWarps<kHeadDim, kGroup, kNamedSync>(p, st, smem, layout, warp,
                                                   lane);
  if (warp == 0 && lane == 0) TAILOR_DECODE_MARK(kTraceCombined);
  const float* merge_out = reinterpret_cast<float*>(smem + layout.merge_out);
  const float* merge_sum = reinterpret_cast<float*>(smem + layout.merge_sum);
  const float* row_scale = reinterpret_cast<float*>(smem + layout.row_scale);
  int* flag = reinterpret_cast<int*>(smem + layout.flag);
  const int thread = warp * 32 + lane;
  const unsigned row = layout.merge_row;
  const int group = DecodeGroupOf<kGroup>(p);
  // ---- 3. combine; write out / lse or the partial slot ----------------------
  constexpr int kPairs = kHeadDim / 2;
  const long long head0 = static_cast<long long>(item.kv_head) * group;
  for (int e = thread; e < group * kPairs; e += 32 * kDecodeConsumerWarps) {
    const int r = e / kPairs, d = (e % kPairs) * 2;
    float x = 0, y = 0;
#pragma unroll
    for (int w = 0; w < kDecodeConsumerWarps; ++w) {
      const float f = row_scale[w * 16 + r];
      const float2 o = *reinterpret_cast<const float2*>(
          merge_out + (w * group + r) * row + d);
      x += f * o.x;
      y += f * o.y;
    }
    if (item.partial < 0) {
      DecodeStore2<kType>(static_cast<unsigned short*>(p.out) +
                              DecodeRowOf(p, item.seq) * p.out_stride_b +
                              (head0 + r) * p.out_stride_h + d,
                          x, y);
    } else {  // the partial in the output's type (its merge reads half)
      DecodeStore2<kType>(
          static_cast<unsigned short*>(p.partial_out) +
              (static_cast<long long>(item.partial) * group + r) * kHeadDim + d,
          x, y);
    }
  }
  if (thread < group) {
    const float lse2 = merge_sum[thread];
    if (item.partial >= 0) {
      p.partial_lse[item.partial * group + thread] = lse2;
    } else if (p.lse != nullptr) {
      p.lse[DecodeRowOf(p, item.seq) * p.lse_stride_b + head0 + thread] =
          lse2 == NegativeInfinity() ? lse2 : lse2 * kDecodeLn2;
    }
  }
  // ---- 4. the last piece of a split pair merges it --------------------------
  if (item.partial >= 0) {
    DecodeConsumerSync<kNamedSync>();  // the partial, before the arrival
    if (thread == 0) {
      *flag = ArriveAcqRel(p.counters + item.first_partial) == item.pieces - 1;
    }
    DecodeConsumerSync<kNamedSync>();
    if (thread == 0) TAILOR_DECODE_MARK(kTraceArrived);
    if (*flag) {
      DecodeMergePieces<kType, kHeadDim, kGroup>(p, item, thread);
      if (thread == 0) p.counters[item.first_partial] = 0;  // for the next run
      if (thread == 0) TAILOR_DECODE_MARK(kTraceMerged);
    }
  }
  DecodeConsumerSync<kNamedSync>();
}

// The end of an item that one warp computed alone (head groups: warp w owns
// head w of the group for the whole item, so no warps combine): writes out /
// lse or the partial slot, and for a piece of a split pair arrives on the
// pair's counter. Returns (on every lane) whether this piece arrived last,
// i.e. the caller must merge the pair (DecodeMergePieces, then reset the
// counter).
template <Half16 kType, int kHeadDim, int kGroup>
TAILOR_DEVICE bool DecodeFinishWarpItem(const DecodeKernelParams& p,
                                        const DecodeWorkItem& item,
                                        const DecodeWarpState<kHeadDim>& st,
                                        int lane) {
  const int group = DecodeGroupOf<kGroup>(p);
  const long long head0 = static_cast<long long>(item.kv_head) * group;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows lane / 4 and lane / 4 + 8
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = lane / 4 + 8 * h;
    if (row >= group) continue;
    const float scale = l > 0 ? 1.0f / l : 0.0f;
    const float lse2 = l > 0 ? st.m[h] + log2f(l) : NegativeInfinity();
    unsigned short* dst =
        item.partial < 0
            ? static_cast<unsigned short*>(p.out) +
                  DecodeRowOf(p, item.seq) * p.out_stride_b +
                  (head0 + row) * p.out_stride_h
            : static_cast<unsigned short*>(p.partial_out) +
                  (static_cast<long long>(item.partial) * group + row) *
                      kHeadDim;
#pragma unroll
    for (int n = 0; n < DecodeWarpState<kHeadDim>::kNTiles; ++n) {
      DecodeStore2<kType>(dst + n * 8 + 2 * (lane % 4), st.o[n][2 * h] * scale,
                          st.o[n][2 * h + 1] * scale);
    }
    if (lane % 4 != 0) continue;
    if (item.partial >= 0) {
      p.partial_lse[item.partial * group + row] = lse2;
    } else if (p.lse != nullptr) {
      p.lse[DecodeRowOf(p, item.seq) * p.lse_stride_b + head0 + row] =
          lse2 == NegativeInfinity() ? lse2 : lse2 * kDecodeLn2;
    }
  }
  if (item.partial < 0) return false;
  __syncwarp();  // the warp's partial, before lane 0's release
  int last = 0;
  if (lane == 0) {
    last = ArriveAcqRel(p.counters + item.first_partial) == item.pieces - 1;
  }
  return __shfl_sync(0xffffffffu, last, 0) != 0;
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_COMMON_CUH_
