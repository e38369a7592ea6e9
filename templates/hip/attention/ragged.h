// templates/hip/attention/ragged.h — ragged paged attention on AMD Instinct
// (wave64) over the host planner's work list (templates/hip/attention/
// ragged_params.h), and the merge of split tiles.
//
// Why not the CUDA kernels: those are built on wgmma / mma.sync, ldmatrix
// and TMA / cp.async (PTX). This one is SIMT, the plain counterpart of the
// portable CUDA kernel (prefill_sm80.cuh) over the same kind of plan, with
// the same mask, soft-cap, lse and partial-slot rules:
//
//   per item (one tile of 64 packed rows of one sequence and KV head):
//     the query rows -> LDS (16-bit; row r: token r / kPack, head
//     q_head + r % kPack)
//     per KV block of HipRaggedKvBlock positions:
//       K and V rows -> LDS (the page looked up per position, any page
//       size and strides; past the item's end or on a bad page: zeros, and
//       the position is masked; bad ids go to the error word)
//       lanes 4r..4r+3 own row r: lane c scores positions c, c + 4, ...
//       (f32 dot products), masks them (causal with queries aligned to the
//       end of KV, window, KV end), and the four lanes run the online
//       softmax in the log2 domain (xor-shuffle max and sum); then each
//       lane adds P V for its quarter of D, P taken from its row's lanes
//       by shuffles
//   a split piece writes its normalized f32 rows and log2 lse to its
//   partial slot (HipRaggedMerge combines them); otherwise 16-bit rows and
//   natural-log lse. A row with nothing attended gets O = 0, lse = -inf.
//
// Instantiate tailor::hip::HipRaggedAttention<kBf16, kHeadDim, kPack,
// kPageSize> and tailor::hip::HipRaggedMerge<kBf16, kHeadDim> with
// TAILOR_HIP_ENTRY; attention: grid = workers, kHipRaggedThreads threads,
// no dynamic LDS, HipRaggedParams; merge: any grid, kHipRaggedMergeThreads
// threads, PrefillMergeParams (its group count read on the device).
#ifndef TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_H_
#define TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_H_

// The block-table lookup is CUDA's (vendor-neutral, both table forms).
#include "runtime/hip/cuda_compat.h"
TAILOR_HIP_REUSE_CUDA_BEGIN
#include "templates/cuda/attention/page_table.cuh"
TAILOR_HIP_REUSE_CUDA_END

#include "runtime/hip/entry.h"
#include "runtime/hip/numeric.h"
#include "runtime/hip/wave.h"
#include "templates/hip/attention/ragged_params.h"

namespace tailor::hip {

inline constexpr float kRaggedLn2 = 0.69314718055994531f;

TAILOR_HIP_DEVICE void RecordRaggedError(unsigned long long* errors, int word,
                                         long long position, int value) {
  const unsigned long long clamped =
      position < 0 ? 0ull
                   : (position > 0xffffffffll
                          ? 0xffffffffull
                          : static_cast<unsigned long long>(position));
  atomicMin(errors + word, (clamped << 32) | static_cast<unsigned>(value));
}

template <bool kBf16, int kHeadDim, int kPack, int kPageSize>
struct HipRaggedAttention {
  static_assert(HipRaggedHeadDimFits(kHeadDim), "D in {64, 128, 256}");
  static_assert(kPack == 1 || kPack == 2 || kPack == 4 || kPack == 8 ||
                    kPack == 16,
                "head pack must be a power of two up to 16");
  static_assert(kPageSize >= 1 && kPageSize <= 256, "page size in [1, 256]");
  using Params = HipRaggedParams;
  static constexpr int kThreads = kHipRaggedThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRows = kHipRaggedTileRows;
  static constexpr int kLanes = kHipRaggedLanesPerRow;
  static constexpr int kBlockN = HipRaggedKvBlock(kHeadDim);
  static constexpr int kCols = kBlockN / kLanes;   // scores per lane
  static constexpr int kDims = kHeadDim / kLanes;  // output dims per lane
  static constexpr int kUnits = kHeadDim / 8;      // 16-byte units of a row
  static_assert(kBlockN % kLanes == 0 && kDims % 8 == 0, "lane split");

  struct Lds {
    unsigned short q[kRows][kHeadDim];
    unsigned short k[kBlockN][kHeadDim];
    unsigned short v[kBlockN][kHeadDim];
    int attended[kBlockN];  // 1: data of the item, 0: masked
  };
  static_assert(sizeof(Lds) == HipRaggedLdsBytes(kHeadDim), "LDS layout");

  // The running state of the lane's row: max (log2 units), sum, and the
  // unnormalized output of the lane's quarter of D.
  struct RowState {
    float m;
    float l;
    float o[kDims];
  };

  // One past the last KV position the item attends.
  static TAILOR_HIP_DEVICE int EndOf(const PrefillWorkItem& item) {
    return item.kv_end < item.kv_len ? item.kv_end : item.kv_len;
  }

  static TAILOR_HIP_DEVICE int BlocksOf(const PrefillWorkItem& item) {
    return item.kv_end > item.kv_begin
               ? (item.kv_end - item.kv_begin + kBlockN - 1) / kBlockN
               : 0;
  }

  // The page of KV position `token`, or -1 when it is not attended data:
  // past the item's end, or a page id outside [0, num_pages) (recorded
  // when `report`).
  static TAILOR_HIP_DEVICE int PageOf(const Params& p,
                                      const PrefillWorkItem& item, int token,
                                      bool report) {
    if (token >= EndOf(item)) return -1;
    const int index = token / kPageSize;
    const ::tailor::cuda::PageRow row = ::tailor::cuda::PageRowOf(
        p.page_indptr, p.block_table_stride, p.max_pages, item.seq);
    const int page = ::tailor::cuda::PageAt(p.block_table, row, index, -1);
    if (page >= 0 && page < p.num_pages) return page;
    if (report) {
      RecordRaggedError(p.errors, kPrefillErrorBadPage,
                        static_cast<long long>(item.seq) * p.max_pages + index,
                        page);
    }
    return -1;
  }

  // ---- loads (every thread; LDS published by the caller's barrier) -------

  static TAILOR_HIP_DEVICE void LoadQuery(const Params& p,
                                          const PrefillWorkItem& item,
                                          Lds& lds) {
    const unsigned short* q = static_cast<const unsigned short*>(p.q);
    for (int e = threadIdx.x; e < kRows * kUnits; e += kThreads) {
      const int row = e / kUnits, unit = e % kUnits;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (row < item.rows) {
        const long long at =
            (static_cast<long long>(item.q_token) + row / kPack) *
                p.q_stride_token +
            static_cast<long long>(item.q_head + row % kPack) *
                p.q_stride_head +
            unit * 8;
        value = *reinterpret_cast<const uint4*>(q + at);
      }
      *reinterpret_cast<uint4*>(&lds.q[row][unit * 8]) = value;
    }
  }

  // K and V rows of the block at KV position `start`, zeros where not
  // attended; the first kBlockN threads write the attended flags and
  // record bad page ids.
  static TAILOR_HIP_DEVICE void LoadBlock(const Params& p,
                                          const PrefillWorkItem& item,
                                          int start, Lds& lds) {
    const long long kv_head = item.q_head / p.group;
    const unsigned short* k_cache =
        static_cast<const unsigned short*>(p.k_cache);
    const unsigned short* v_cache =
        static_cast<const unsigned short*>(p.v_cache);
    for (int e = threadIdx.x; e < kBlockN * kUnits; e += kThreads) {
      const int row = e / kUnits, unit = e % kUnits;
      const int token = start + row;
      const int page = PageOf(p, item, token, /*report=*/false);
      uint4 k = make_uint4(0, 0, 0, 0), v = k;
      if (page >= 0) {
        const long long in_page = token % kPageSize;
        k = *reinterpret_cast<const uint4*>(
            k_cache + page * p.k_stride_page + in_page * p.k_stride_token +
            kv_head * p.k_stride_head + unit * 8);
        v = *reinterpret_cast<const uint4*>(
            v_cache + page * p.v_stride_page + in_page * p.v_stride_token +
            kv_head * p.v_stride_head + unit * 8);
      }
      *reinterpret_cast<uint4*>(&lds.k[row][unit * 8]) = k;
      *reinterpret_cast<uint4*>(&lds.v[row][unit * 8]) = v;
    }
    if (threadIdx.x < kBlockN) {
      lds.attended[threadIdx.x] =
          PageOf(p, item, start + threadIdx.x, /*report=*/true) >= 0 ? 1 : 0;
    }
  }

  // ---- math ---------------------------------------------------------------

  // Where the lane's row may attend, in KV positions: [lo, hi).
  static TAILOR_HIP_DEVICE void LimitsOf(const Params& p,
                                         const PrefillWorkItem& item, int row,
                                         int& lo, int& hi) {
    const int token = (item.row_begin + row) / kPack;
    const int pos = item.kv_len - item.q_len + token;
    hi = p.causal ? (pos + 1 < item.kv_len ? pos + 1 : item.kv_len)
                  : item.kv_len;
    lo = p.window_left >= 0 ? pos - p.window_left : -0x7fffffff;
  }

  // The lane's scores of the block (positions lane4 + 4 i), masked to
  // -inf, in the log2 domain.
  static TAILOR_HIP_DEVICE void Scores(const Params& p, const Lds& lds,
                                       int start, int row, int lane4, int lo,
                                       int hi, float (&s)[kCols]) {
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int col = lane4 + kLanes * i;
      float dot = 0.0f;
      for (int d = 0; d < kHeadDim; ++d) {
        dot += HalfToFloat<kBf16>(lds.q[row][d]) *
               HalfToFloat<kBf16>(lds.k[col][d]);
      }
      const int pos = start + col;
      const bool attended = lds.attended[col] != 0 && pos >= lo && pos < hi;
      s[i] = !attended             ? NegInf()
             : p.cap_scale != 0.0f ? p.score_scale * tanhf(dot * p.cap_scale)
                                   : p.score_scale * dot;
    }
  }

  // Online softmax of the block's scores (s -> P in place) and P V into
  // the lane's quarter of the row's output.
  static TAILOR_HIP_DEVICE void Accumulate(const Lds& lds, int lane4,
                                           float (&s)[kCols], RowState& st) {
    float top = st.m;
#pragma unroll
    for (int i = 0; i < kCols; ++i) top = fmaxf(top, s[i]);
    top = fmaxf(top, ShuffleXor(top, 1));
    top = fmaxf(top, ShuffleXor(top, 2));
    // Nothing attended yet: base 0 keeps 2^(-inf - base) = 0, not NaN.
    const float base = top == NegInf() ? 0.0f : top;
    const float alpha = exp2f(st.m - base);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      s[i] = exp2f(s[i] - base);
      sum += s[i];
    }
    sum += ShuffleXor(sum, 1);
    sum += ShuffleXor(sum, 2);
    st.l = st.l * alpha + sum;
    st.m = top;
    for (int j = 0; j < kDims; ++j) st.o[j] *= alpha;
    const int row_lane0 = LaneId() & ~(kLanes - 1);
#pragma unroll
    for (int col = 0; col < kBlockN; ++col) {
      // Every lane shuffles (uniform control flow); col / kLanes is a
      // constant of the unrolled loop.
      const float pc = __shfl(s[col / kLanes], row_lane0 + col % kLanes);
      for (int j = 0; j < kDims; ++j) {
        st.o[j] += pc * HalfToFloat<kBf16>(lds.v[col][lane4 * kDims + j]);
      }
    }
  }

  // ---- epilogue -------------------------------------------------------------

  static TAILOR_HIP_DEVICE void Store(const Params& p,
                                      const PrefillWorkItem& item, int row,
                                      int lane4, const RowState& st) {
    if (row >= item.rows) return;
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    const float lse2 = st.l > 0.0f ? st.m + log2f(st.l) : NegInf();
    if (item.partial >= 0) {
      const long long slot = static_cast<long long>(item.partial) * kRows + row;
      float* out = p.partial_out + slot * kHeadDim + lane4 * kDims;
      for (int j = 0; j < kDims; ++j) out[j] = st.o[j] * inv;
      if (lane4 == 0) p.partial_lse[slot] = lse2;
      return;
    }
    const long long token = static_cast<long long>(item.q_token) + row / kPack;
    const int head = item.q_head + row % kPack;
    unsigned short* out =
        static_cast<unsigned short*>(p.out) + token * p.out_stride_token +
        static_cast<long long>(head) * p.out_stride_head + lane4 * kDims;
    for (int j = 0; j < kDims; ++j) out[j] = FloatToHalf<kBf16>(st.o[j] * inv);
    if (lane4 == 0 && p.lse != nullptr) {
      p.lse[token * p.lse_stride_token + head] =
          lse2 == NegInf() ? lse2 : lse2 * kRaggedLn2;
    }
  }

  // ---- the work-group ---------------------------------------------------

  static TAILOR_HIP_DEVICE void RunItem(const Params& p,
                                        const PrefillWorkItem& item, Lds& lds,
                                        int row, int lane4) {
    __syncthreads();  // the previous item's last block was read
    LoadQuery(p, item, lds);
    int lo = 0, hi = 0;
    LimitsOf(p, item, row, lo, hi);
    RowState st;
    st.m = NegInf();
    st.l = 0.0f;
    for (int j = 0; j < kDims; ++j) st.o[j] = 0.0f;
    const int blocks = BlocksOf(item);
    for (int b = 0; b < blocks; ++b) {
      const int start = item.kv_begin + b * kBlockN;
      if (b > 0) __syncthreads();  // the previous block was read
      LoadBlock(p, item, start, lds);
      __syncthreads();  // the block (and the query rows) landed
      float s[kCols];
      Scores(p, lds, start, row, lane4, lo, hi, s);
      Accumulate(lds, lane4, s, st);
    }
    Store(p, item, row, lane4, st);
  }

  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    __shared__ Lds lds;
    const int row = threadIdx.x / kLanes, lane4 = threadIdx.x % kLanes;
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    for (int i = first; i < last; ++i) RunItem(p, p.items[i], lds, row, lane4);
    // Each item's planned KV length against the device's, one load per
    // item, after the tiles (which attend the planned length).
    if (p.kv_lens == nullptr) return;
    for (int i = first + threadIdx.x; i < last; i += kHipRaggedThreads) {
      const PrefillWorkItem item = p.items[i];
      const int device_len = p.kv_lens[item.seq];
      if (device_len != item.kv_len) {
        RecordRaggedError(p.errors, kPrefillErrorBadKvLen, item.seq,
                          device_len);
      }
    }
  }
};

// The merge of split tiles (prefill_merge.cuh's rule, slots of 64 rows):
//   M = max_i lse_i,  w_i = 2^(lse_i - M),
//   out = sum_i w_i O_i / sum_i w_i,  lse = (M + log2 sum_i w_i) ln 2.
// The work-groups stride over the groups, whose count is read on the
// device; each thread merges one column of a row at a time.
template <bool kBf16, int kHeadDim>
struct HipRaggedMerge {
  static_assert(HipRaggedHeadDimFits(kHeadDim), "D in {64, 128, 256}");
  using Params = PrefillMergeParams;
  static constexpr int kThreads = kHipRaggedMergeThreads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRows = kHipRaggedTileRows;

  static TAILOR_HIP_DEVICE void MergeColumn(const Params& p,
                                            const PrefillMergeGroup& g, int row,
                                            int d) {
    float top = NegInf();
    for (int i = 0; i < g.pieces; ++i) {
      const long long slot =
          (static_cast<long long>(g.first_partial) + i) * kRows + row;
      top = fmaxf(top, p.partial_lse[slot]);
    }
    float sum = 0.0f, acc = 0.0f;
    if (top != NegInf()) {
      for (int i = 0; i < g.pieces; ++i) {
        const long long slot =
            (static_cast<long long>(g.first_partial) + i) * kRows + row;
        const float w = exp2f(p.partial_lse[slot] - top);
        acc += w * p.partial_out[slot * kHeadDim + d];
        sum += w;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const long long token = static_cast<long long>(g.q_token) + row / p.pack;
    const int head = g.q_head + row % p.pack;
    static_cast<unsigned short*>(
        p.out)[token * p.out_stride_token +
               static_cast<long long>(head) * p.out_stride_head + d] =
        FloatToHalf<kBf16>(acc * inv);
    if (d == 0 && p.lse != nullptr) {
      p.lse[token * p.lse_stride_token + head] =
          sum > 0.0f ? (top + log2f(sum)) * kRaggedLn2 : NegInf();
    }
  }

  static TAILOR_HIP_DEVICE void Run(const Params& p) {
    const int groups = *p.num_groups;
    for (int gi = blockIdx.x; gi < groups; gi += gridDim.x) {
      const PrefillMergeGroup g = p.groups[gi];
      for (int e = threadIdx.x; e < g.rows * kHeadDim; e += kThreads) {
        MergeColumn(p, g, e / kHeadDim, e % kHeadDim);
      }
    }
  }
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_ATTENTION_RAGGED_H_
