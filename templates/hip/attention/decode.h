// templates/hip/attention/decode.h — paged decode attention on AMD Instinct (wave64):
// one work-group per planned worker runs its items (a token range of one
// (sequence, KV head) pair, templates/cuda/attention/decode_params.h), merges split
// pairs in the same launch (the last piece to finish merges), and records
// bad device data instead of reading out of bounds.
//
// Why not the CUDA kernel: that one is built on mma.sync/ldmatrix and
// cp.async/TMA (PTX). This one is SIMT and wave64:
//
//   per 64-token tile (one wave; tile t of an item to wave t % 4)
//     1. lane = token:  s[g] = q[g] . K[token]   (q broadcast from LDS)
//        online softmax per query head g with WaveMax / WaveSum (wave64
//        xor-shuffle reductions, runtime/hip/wave.h), p -> LDS
//     2. lane = dims:   o[g][d] += p[g][t] . V[t][d] for the tile's tokens
//        (V rows read coalesced: 64 lanes cover D)
//   per item: the four waves' (max, sum, o) merge through LDS; the result
//   goes to out / lse, or to a partial slot whose pair the last piece
//   merges (agent-scope loads: other work-groups wrote the partials).
//
// LDS banks (model: runtime/hip/mfma.h, 32 banks x 4 bytes, phases of
// 128 / W lanes for a W-byte access): q and p reads are broadcasts (every
// lane the same address); p writes are b32 at consecutive lanes (two
// conflict-free phases); the merge writes lane's kDims contiguous floats
// as one b(32 * kDims) access, consecutive lanes consecutive slots:
// conflict-free. No padding is needed.
//
// Instantiate tailor::hip::HipPagedDecode<kBf16, kHeadDim, kGroup, kPage>
// with TAILOR_HIP_ENTRY; grid = workers, kHipDecodeThreads threads, no
// dynamic LDS. Params: tailor::hip::HipDecodeParams.
#ifndef TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_H_
#define TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_H_

#include "runtime/hip/entry.h"
#include "runtime/hip/numeric.h"
#include "runtime/hip/wave.h"
#include "templates/hip/attention/decode_params.h"

namespace tailor::hip {

inline constexpr int kDecodeNoPageHip = -2147483647 - 1;
inline constexpr float kLn2 = 0.69314718055994531f;

TAILOR_HIP_DEVICE void RecordDecodeError(unsigned long long* errors, int word,
                                         long long position, int value) {
  const unsigned long long clamped =
      position < 0 ? 0ull
                   : (position > 0xffffffffll
                          ? 0xffffffffull
                          : static_cast<unsigned long long>(position));
  atomicMin(errors + word, (clamped << 32) | static_cast<unsigned>(value));
}

template <bool kBf16, int kHeadDim, int kGroup, int kPageSize>
struct HipPagedDecode {
  static_assert(HipDecodeShapeFits(kHeadDim, kGroup),
                "D in {64, 128, 256}, group in [1, 16], group * D <= 2048");
  static_assert(kPageSize >= 1, "page size");
  using Params = HipDecodeParams;
  static constexpr int kThreads = kHipDecodeThreads;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kDims = kHeadDim / kWaveSize;  // per lane in stage 2
  static constexpr int kVec = 8;                      // elements per K load

  // LDS of the work-group (HipDecodeLdsBytes counts the same).
  struct Lds {
    float q[kGroup][kHeadDim];                    // [group, D]
    float p[kHipDecodeWaves][kGroup][kWaveSize];  // [waves, group, 64]
    int page[kHipDecodeWaves][kWaveSize];         // [waves, 64]
    float o[kHipDecodeWaves][kGroup][kHeadDim];   // [waves, group, D]
    float m[kHipDecodeWaves][kGroup];
    float l[kHipDecodeWaves][kGroup];
    int merges;
  };

  // A wave's running state over its tiles of one item.
  struct WaveState {
    float m[kGroup];         // running max (log2 domain)
    float l[kGroup];         // running sum of exp2(s - m)
    float o[kGroup][kDims];  // unnormalized output, dims lane * kDims + j
  };

  static TAILOR_HIP_DEVICE const unsigned short* Row(const void* base,
                                                     long long offset) {
    return static_cast<const unsigned short*>(base) + offset;
  }

  // ---- item checks: device length vs plan, planned pages vs the table ----
  static TAILOR_HIP_DEVICE int AttendedEnd(const Params& p,
                                           const DecodeWorkItem& item) {
    const int device_len = p.seq_lens[item.seq];
    if (item.kv_begin == 0 && threadIdx.x == 0) {
      if (device_len != item.seq_len) {
        RecordDecodeError(p.errors, kDecodeErrorBadSeqLen, item.seq,
                          device_len);
      }
      const int pages = (item.seq_len + kPageSize - 1) / kPageSize;
      if (pages > p.max_pages) {
        RecordDecodeError(p.errors, kDecodeErrorTooManyPages, item.seq, pages);
      }
    }
    const int len = device_len < 0 ? 0 : device_len;
    return item.kv_end < len ? item.kv_end : len;
  }

  // block_table[b, token / page] if in [0, num_pages), else kDecodeNoPageHip
  // (a bad id is recorded).
  static TAILOR_HIP_DEVICE int PageOf(const Params& p,
                                      const DecodeWorkItem& item, int token) {
    const int slot = token / kPageSize;
    if (slot >= p.max_pages) return kDecodeNoPageHip;
    const int page = p.block_table[item.seq * p.block_table_stride + slot];
    if (page >= 0 && page < p.num_pages) return page;
    RecordDecodeError(p.errors, kDecodeErrorBadPage,
                      static_cast<long long>(item.seq) * p.max_pages + slot,
                      page);
    return kDecodeNoPageHip;
  }

  // ---- stage 1 (lane = token): scores, online softmax, p -> LDS ----------
  static TAILOR_HIP_DEVICE void ScoreTile(const Params& p,
                                          const DecodeWorkItem& item,
                                          int tile_begin, int end, Lds& lds,
                                          WaveState& st, int wave, int lane) {
    const int token = tile_begin + lane;
    const int page = token < end ? PageOf(p, item, token) : kDecodeNoPageHip;
    lds.page[wave][lane] = page;
    float s[kGroup];
    for (int g = 0; g < kGroup; ++g) s[g] = 0.0f;
    if (page != kDecodeNoPageHip) {
      const unsigned short* k =
          Row(p.k_cache, page * p.k_stride_page +
                             (token % kPageSize) * p.k_stride_token +
                             item.kv_head * p.k_stride_head);
      for (int d = 0; d < kHeadDim; d += kVec) {
        const uint4 raw = *reinterpret_cast<const uint4*>(k + d);  // 16 B
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
        for (int e = 0; e < kVec; ++e) {
          const float kv = HalfToFloat<kBf16>(
              static_cast<unsigned short>(words[e / 2] >> (16 * (e % 2))));
          for (int g = 0; g < kGroup; ++g) s[g] += lds.q[g][d + e] * kv;
        }
      }
    }
    for (int g = 0; g < kGroup; ++g) {
      float score = p.cap_scale != 0.0f
                        ? p.score_scale * tanhf(s[g] * p.cap_scale)
                        : p.score_scale * s[g];
      if (page == kDecodeNoPageHip) score = NegInf();
      const float m_new = fmaxf(st.m[g], WaveMax(score));
      const float prob = m_new == NegInf() ? 0.0f : exp2f(score - m_new);
      const float rescale = m_new == NegInf() ? 1.0f : exp2f(st.m[g] - m_new);
      st.l[g] = st.l[g] * rescale + WaveSum(prob);
      st.m[g] = m_new;
      for (int j = 0; j < kDims; ++j) st.o[g][j] *= rescale;
      lds.p[wave][g][lane] = prob;
    }
  }

  // ---- stage 2 (lane = dims): o += p . V ----------------------------------
  static TAILOR_HIP_DEVICE void AccumulateTile(const Params& p,
                                               const DecodeWorkItem& item,
                                               int tile_begin, const Lds& lds,
                                               WaveState& st, int wave,
                                               int lane) {
    for (int t = 0; t < kWaveSize; ++t) {
      const int page = lds.page[wave][t];  // broadcast
      if (page == kDecodeNoPageHip) continue;
      const unsigned short* v =
          Row(p.v_cache, page * p.v_stride_page +
                             ((tile_begin + t) % kPageSize) * p.v_stride_token +
                             item.kv_head * p.v_stride_head) +
          lane * kDims;
      float vf[kDims];
      for (int j = 0; j < kDims; ++j) vf[j] = HalfToFloat<kBf16>(v[j]);
      for (int g = 0; g < kGroup; ++g) {
        const float prob = lds.p[wave][g][t];  // broadcast
        for (int j = 0; j < kDims; ++j) st.o[g][j] += prob * vf[j];
      }
    }
  }

  // ---- the end of an item: merge waves, write out / lse or a partial -----
  static TAILOR_HIP_DEVICE void FinishItem(const Params& p,
                                           const DecodeWorkItem& item, Lds& lds,
                                           const WaveState& st, int wave,
                                           int lane) {
    for (int g = 0; g < kGroup; ++g) {
      for (int j = 0; j < kDims; ++j)
        lds.o[wave][g][lane * kDims + j] = st.o[g][j];
      if (lane == 0) {
        lds.m[wave][g] = st.m[g];
        lds.l[wave][g] = st.l[g];
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kGroup * kHeadDim; e += kThreads) {
      const int g = e / kHeadDim, d = e % kHeadDim;
      float top = NegInf();
      for (int w = 0; w < kHipDecodeWaves; ++w) top = fmaxf(top, lds.m[w][g]);
      float sum = 0.0f, out = 0.0f;
      if (top != NegInf()) {
        for (int w = 0; w < kHipDecodeWaves; ++w) {
          const float scale = exp2f(lds.m[w][g] - top);
          sum += lds.l[w][g] * scale;
          out += lds.o[w][g][d] * scale;
        }
        out /= sum;
      }
      const float lse2 = top == NegInf() ? top : top + log2f(sum);
      const long long head = static_cast<long long>(item.kv_head) * kGroup + g;
      if (item.partial < 0) {
        static_cast<unsigned short*>(
            p.out)[item.seq * p.out_stride_b + head * p.out_stride_h + d] =
            FloatToHalf<kBf16>(out);
        if (d == 0 && p.lse != nullptr) {
          p.lse[item.seq * p.lse_stride_b + head] =
              lse2 == NegInf() ? lse2 : lse2 * kLn2;
        }
      } else {
        const long long slot =
            static_cast<long long>(item.partial) * kGroup + g;
        p.partial_out[slot * kHeadDim + d] = out;
        if (d == 0) p.partial_lse[slot] = lse2;
      }
    }
    if (item.partial >= 0) MergeIfLast(p, item, lds);
    __syncthreads();  // LDS is reused by the next item
  }

  // The last piece of a split pair to finish merges every partial slot.
  static TAILOR_HIP_DEVICE void MergeIfLast(const Params& p,
                                            const DecodeWorkItem& item,
                                            Lds& lds) {
    __threadfence();  // this piece's partials, before its ticket
    __syncthreads();
    if (threadIdx.x == 0) {
      const int done = atomicAdd(p.counters + item.first_partial, 1) + 1;
      lds.merges = done == item.pieces;
      if (lds.merges) p.counters[item.first_partial] = 0;  // next launch
    }
    __syncthreads();
    if (!lds.merges) return;
    __threadfence();
    for (int e = threadIdx.x; e < kGroup * kHeadDim; e += kThreads) {
      const int g = e / kHeadDim, d = e % kHeadDim;
      float top = NegInf();
      for (int i = 0; i < item.pieces; ++i) {
        top = fmaxf(top,
                    LoadFromOtherBlocks(p.partial_lse +
                                        (item.first_partial + i) * kGroup + g));
      }
      float sum = 0.0f, out = 0.0f;
      if (top != NegInf()) {
        for (int i = 0; i < item.pieces; ++i) {
          const long long slot =
              static_cast<long long>(item.first_partial + i) * kGroup + g;
          const float w =
              exp2f(LoadFromOtherBlocks(p.partial_lse + slot) - top);
          sum += w;
          out += w * LoadFromOtherBlocks(p.partial_out + slot * kHeadDim + d);
        }
        out /= sum;
      }
      const long long head = static_cast<long long>(item.kv_head) * kGroup + g;
      static_cast<unsigned short*>(
          p.out)[item.seq * p.out_stride_b + head * p.out_stride_h + d] =
          FloatToHalf<kBf16>(out);
      if (d == 0 && p.lse != nullptr) {
        p.lse[item.seq * p.lse_stride_b + head] =
            top == NegInf() ? top : (top + log2f(sum)) * kLn2;
      }
    }
  }

  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    __shared__ Lds lds;
    const int wave = threadIdx.x / kWaveSize, lane = LaneId();
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    for (int i = first; i < last; ++i) {
      const DecodeWorkItem item = p.items[i];
      // ---- the query rows of the pair, as f32 --------------------------
      for (int e = threadIdx.x; e < kGroup * kHeadDim; e += kThreads) {
        const int g = e / kHeadDim, d = e % kHeadDim;
        const long long head =
            static_cast<long long>(item.kv_head) * kGroup + g;
        lds.q[g][d] = HalfToFloat<kBf16>(
            Row(p.q, item.seq * p.q_stride_b + head * p.q_stride_h)[d]);
      }
      __syncthreads();
      WaveState st;
      for (int g = 0; g < kGroup; ++g) {
        st.m[g] = NegInf();
        st.l[g] = 0.0f;
        for (int j = 0; j < kDims; ++j) st.o[g][j] = 0.0f;
      }
      const int end = AttendedEnd(p, item);
      for (int tile = item.kv_begin + wave * kDecodeTileTokens; tile < end;
           tile += kHipDecodeWaves * kDecodeTileTokens) {
        ScoreTile(p, item, tile, end, lds, st, wave, lane);
        WaveSync();  // p and page ids of the tile, to every lane
        AccumulateTile(p, item, tile, lds, st, wave, lane);
        WaveSync();  // read before the next tile overwrites them
      }
      FinishItem(p, item, lds, st, wave, lane);
    }
  }
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_H_
