// templates/cuda/attention/prefill_sm80.cuh — ragged paged attention, the
// portable kernel (sm_80 and newer, any page size 1..256): the same work
// list and params as the Hopper kernel (prefill_sm90.cuh), with mma.sync
// m16n8k16, ldmatrix and a cp.async ring instead of wgmma and TMA.
//
// Template parameters (the specialization; never a length or a batch):
//   kType      Half16::kBf16 or kF16 (q, caches, out)
//   kHeadDim   D in {64, 128, 256}
//   kPack      query heads packed into a tile's rows: 1, 2, 4, 8 or 16
//   kPageSize  tokens per page, 1..256
// The KV block and stage count follow from D (PrefillSm80ShapeFor).
// kPack = kPageSize = kPrefillRuntimeDim is the generic kernel of
// background JIT: pack, page size and the plan's tile rows come from the
// params, and it also runs the Hopper kernel's plans (128-row tiles over
// KV blocks of 128 or 64, which its blocks of 64 or 32 divide): a tile as
// 64-row strips one after another, each over the tile's KV, each writing
// its rows of the tile's partial slot.
// Launch: grid {workers of the plan}, block {kThreads = 128}, dynamic shared
// memory PrefillSm80SharedBytes(D); params as in prefill_params.h (q and
// the caches by pointer; the maps are not read).
//
// Per CTA (items [worker_begin[c], worker_begin[c + 1]), each one query tile
// of kPrefillSm80TileRows packed rows over KV blocks [kv_begin, kv_end)):
// KV blocks are numbered across the CTA's items (k = 0, 1, ...); block k
// uses stage k % kStages and cp.async group k, as in decode_sm80.cuh:
//   prologue: issue blocks 0 .. kStages - 2 (one group each, maybe empty)
//   per item: load its query rows into shared memory (plain loads; the
//             item's first blocks are already in flight)
//   block k:  issue block k + kStages - 1 into the stage block k - 1 freed;
//             wait until group k landed; barrier; compute; barrier.
// Every thread copies 16-byte units of K and V rows, the page looked up per
// position (any page size, any strides), into a 128-byte swizzled layout
// (the TMA swizzle: ldmatrix reads it without bank conflicts). Positions
// past the item's end or on a bad page are zero-filled (P = 0 must not
// meet a NaN of the cache) and masked; warp 0 writes the block's attended
// bits and records bad page ids in the error word, as the Hopper kernel.
// After its tiles, warp 0 compares each item's planned KV length with the
// device's kv_lens and records a mismatch (the tiles attend the planned
// length), as the Hopper kernel.
//
// Warp w computes tile rows [16 w, 16 w + 16): S = Q K^T from ldmatrix
// fragments, the mask (causal with queries aligned to the end of KV,
// window, KV end, dropped pages: decided per row, so no plan flag is
// trusted for correctness), the online softmax in f32 in the log2 domain
// with the folded scale and the soft cap of prefill_params.h, then
// O += P V with P from the S registers and V by ldmatrix.trans.
// The epilogue writes a split piece's normalized f32 rows and log2 lse into
// its partial slot (prefill_merge.cuh with kTileRows = 64 combines them),
// otherwise 16-bit rows and natural-log lse. A row with nothing attended
// gets O = 0 and lse = -inf.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM80_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM80_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/error_word.cuh"
#include "runtime/cuda/mma_sm80.cuh"
#include "runtime/cuda/numeric.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/page_table.cuh"
#include "templates/cuda/attention/prefill_params.h"

namespace tailor::cuda {

// The page id of entry `index` of sequence `seq`'s block-table row; -1
// past the row. The one place the portable kernel reads the block table.
TAILOR_DEVICE int PrefillSm80PageAt(const PrefillParams& p, int seq,
                                    int index) {
  const PageRow row =
      PageRowOf(p.page_indptr, p.block_table_stride, p.max_pages, seq);
  return PageAt(p.block_table, row, index, -1);
}

template <Half16 kType, int kHeadDim, int kPack, int kPageSize>
struct PrefillSm80Kernel {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "head_dim must be 64, 128 or 256");
  static constexpr bool kGeneric = kPack == kPrefillRuntimeDim;
  static_assert(kGeneric == (kPageSize == kPrefillRuntimeDim),
                "the generic kernel reads both pack and page size");
  static_assert(kGeneric || kPack == 1 || kPack == 2 || kPack == 4 ||
                    kPack == 8 || kPack == 16,
                "head pack must be a power of two up to 16");
  static_assert(kGeneric || (kPageSize >= 1 && kPageSize <= 256),
                "page_size must be in [1, 256]");
  static constexpr PrefillSm80Shape kShape = PrefillSm80ShapeFor(kHeadDim);
  static constexpr int kBlockN = kShape.kv_block;
  static constexpr int kStages = kShape.stages;
  static constexpr int kRows = kPrefillSm80TileRows;
  static constexpr int kUnits = kHeadDim / 8;   // 16-byte units of a row
  static constexpr int kNTiles = kBlockN / 8;   // n8 tiles of S
  static constexpr int kDTiles = kHeadDim / 8;  // n8 tiles of O
  static constexpr int kQSteps = kHeadDim / 16;
  static constexpr int kPSteps = kBlockN / 16;
  static constexpr PrefillSm80Layout kLayout = MakePrefillSm80Layout(kHeadDim);
  static_assert(kBlockN == 32 || kBlockN == 64, "attended bits: one u64");
  static_assert(kRows == 16 * 4, "four warps of 16 rows");
  static_assert(kStages >= 2 && kStages <= 7, "cp.async groups in flight");

  using Params = PrefillParams;
  static constexpr int kThreads = kPrefillSm80Threads;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr unsigned long long kAllAttended =
      kBlockN == 64 ? ~0ull : (1ull << kBlockN) - 1;

  // The thread's part of one tile's rows: O of rows g and g + 8 of its
  // warp's strip, their running max (score units) and partial sums.
  struct State {
    float o[kDTiles][4];
    float m[2];
    float l[2];
  };

  // Where the thread's two rows may attend, in KV positions: [lo, hi).
  struct Limits {
    int lo[2];
    int hi[2];
  };

  // ---- what the generic kernel reads from the params ------------------------

  static TAILOR_DEVICE int PackOf(const Params& p) {
    return kGeneric ? p.head_pack : kPack;
  }
  static TAILOR_DEVICE int PageSizeOf(const Params& p) {
    return kGeneric ? p.page_size : kPageSize;
  }
  // Rows of the plan's tiles: a partial slot's rows.
  static TAILOR_DEVICE int PlanRowsOf(const Params& p) {
    return kGeneric ? p.tile_rows : kRows;
  }
  // The 64-row strips of `item` (at least one, as an item of no rows
  // still runs its blocks).
  static TAILOR_DEVICE int StripsOf(const PrefillWorkItem& item) {
    return kGeneric && item.rows > kRows ? (item.rows + kRows - 1) / kRows : 1;
  }
  // Strip `s` of `item`: its rows as an item of their own (s * kRows is a
  // multiple of the pack, so the strip starts at a token).
  static TAILOR_DEVICE PrefillWorkItem StripOf(const Params& p,
                                               PrefillWorkItem item, int s) {
    if (s == 0) return item;
    item.q_token += s * kRows / PackOf(p);
    item.row_begin += s * kRows;
    item.rows = min(kRows, item.rows - s * kRows);
    return item;
  }

  // ---- layout ---------------------------------------------------------------

  static TAILOR_DEVICE unsigned char* Base() {
    extern __shared__ unsigned char prefill_sm80_smem[];
    const unsigned misalign = SharedAddress(prefill_sm80_smem) % 128;
    return prefill_sm80_smem + (misalign == 0 ? 0 : 128 - misalign);
  }

  // Byte offset of 16-byte unit `unit` of row `row` in a tile of
  // kTileRows rows: 64-element chunks of D one after another (kTileRows x
  // 128 bytes each), the unit XOR-swizzled by row % 8.
  template <int kTileRows>
  static TAILOR_DEVICE unsigned UnitOffset(int row, int unit) {
    return (unit / 8) * (kTileRows * 128) + row * 128 +
           (((unit % 8) ^ (row % 8)) << 4);
  }

  static TAILOR_DEVICE unsigned char* KTile(unsigned char* base, int stage) {
    return base + kLayout.kv + stage * 2 * kLayout.tile_bytes;
  }

  static TAILOR_DEVICE unsigned long long* Masks(unsigned char* base) {
    return reinterpret_cast<unsigned long long*>(base + kLayout.masks);
  }

  // ---- loads ----------------------------------------------------------------

  static TAILOR_DEVICE int BlocksOf(const PrefillWorkItem& item) {
    return item.kv_end > item.kv_begin
               ? (item.kv_end - item.kv_begin + kBlockN - 1) / kBlockN
               : 0;
  }

  // One past the last KV position the item attends.
  static TAILOR_DEVICE int EndOf(const PrefillWorkItem& item) {
    return min(item.kv_end, item.kv_len);
  }

  // The page of KV position `token` of `item`, or -1 when it is not
  // attended data: past the item's end, or a page id outside [0,
  // num_pages) (recorded in the error word when `report`).
  static TAILOR_DEVICE int PageOf(const Params& p, const PrefillWorkItem& item,
                                  int token, bool report) {
    if (token >= EndOf(item)) return -1;
    const int index = token / PageSizeOf(p);
    const int page = PrefillSm80PageAt(p, item.seq, index);
    if (page < 0 || page >= p.num_pages) {
      if (report) {
        RecordLowestError(
            p.errors, kPrefillErrorBadPage,
            static_cast<long long>(item.seq) * p.max_pages + index, page);
      }
      return -1;
    }
    return page;
  }

  // Issues block `j` of `item` into `stage`: K and V rows by cp.async
  // (zero-filled where not attended); warp 0 writes the block's attended
  // bits (its plain stores are seen after the barrier that follows the
  // group's wait).
  static TAILOR_DEVICE void LoadBlock(const Params& p, unsigned char* base,
                                      const PrefillWorkItem& item, int j,
                                      int stage) {
    const int start = item.kv_begin + j * kBlockN;
    const long long kv_head = item.q_head / p.group;
    unsigned char* k_tile = KTile(base, stage);
    unsigned char* v_tile = k_tile + kLayout.tile_bytes;
    const unsigned short* k_cache =
        static_cast<const unsigned short*>(p.k_cache);
    const unsigned short* v_cache =
        static_cast<const unsigned short*>(p.v_cache);
    for (int e = threadIdx.x; e < kBlockN * kUnits; e += kThreads) {
      const int row = e / kUnits, unit = e % kUnits;
      const int token = start + row;
      const int page = PageOf(p, item, token, /*report=*/false);
      const unsigned short* k_src = k_cache;
      const unsigned short* v_src = v_cache;
      if (page >= 0) {
        const long long in_page = token % PageSizeOf(p);
        k_src += page * p.k_stride_page + in_page * p.k_stride_token +
                 kv_head * p.k_stride_head + unit * 8;
        v_src += page * p.v_stride_page + in_page * p.v_stride_token +
                 kv_head * p.v_stride_head + unit * 8;
      }
      const unsigned offset = UnitOffset<kBlockN>(row, unit);
      CpAsync16(k_tile + offset, k_src, page >= 0);
      CpAsync16(v_tile + offset, v_src, page >= 0);
    }
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      unsigned long long bits = 0;
#pragma unroll
      for (int h = 0; h < kBlockN / 32; ++h) {
        const bool attended =
            PageOf(p, item, start + 32 * h + lane, /*report=*/true) >= 0;
        bits |= static_cast<unsigned long long>(
                    __ballot_sync(0xffffffffu, attended))
                << (32 * h);
      }
      if (lane == 0) Masks(base)[stage] = bits;
    }
  }

  // The next block of the CTA's items to issue.
  struct Cursor {
    int index;
    int block;
  };

  // Issues the next block (if any) into `stage`; an item's blocks once
  // per strip.
  static TAILOR_DEVICE void IssueNext(const Params& p, unsigned char* base,
                                      Cursor& c, int last, int stage) {
    while (c.index < last) {
      const PrefillWorkItem item = p.items[c.index];
      const int blocks = BlocksOf(item);
      if (c.block < blocks * StripsOf(item)) {
        LoadBlock(p, base, item, kGeneric ? c.block % blocks : c.block, stage);
        ++c.block;
        return;
      }
      ++c.index;
      c.block = 0;
    }
  }

  // The tile's query rows into shared memory (rows past item.rows zero):
  // row r is token q_token + r / kPack, head q_head + r % kPack.
  static TAILOR_DEVICE void LoadQuery(const Params& p, unsigned char* base,
                                      const PrefillWorkItem& item) {
    const unsigned short* q = static_cast<const unsigned short*>(p.q);
    const int pack = PackOf(p);
    for (int e = threadIdx.x; e < kRows * kUnits; e += kThreads) {
      const int row = e / kUnits, unit = e % kUnits;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (row < item.rows) {
        const long long at =
            (static_cast<long long>(item.q_token) + row / pack) *
                p.q_stride_token +
            static_cast<long long>(item.q_head + row % pack) * p.q_stride_head +
            unit * 8;
        value = *reinterpret_cast<const uint4*>(q + at);
      }
      *reinterpret_cast<uint4*>(base + kLayout.q +
                                UnitOffset<kRows>(row, unit)) = value;
    }
  }

  // ---- math -----------------------------------------------------------------

  static TAILOR_DEVICE void Init(State& st) {
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) st.o[i][c] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st.m[r] = NegativeInfinity();
      st.l[r] = 0.0f;
    }
  }

  // The limits of the thread's rows 16 warp + lane / 4 and + 8 (packed row
  // r is token (row_begin + r) / kPack of its sequence).
  static TAILOR_DEVICE Limits LimitsOf(const Params& p,
                                       const PrefillWorkItem& item, int warp,
                                       int lane) {
    Limits lim;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * warp + lane / 4 + 8 * r;
      const int token = (item.row_begin + row) / PackOf(p);
      const int pos = item.kv_len - item.q_len + token;
      lim.hi[r] = p.causal ? min(item.kv_len, pos + 1) : item.kv_len;
      lim.lo[r] = p.window_left >= 0 ? pos - p.window_left : -0x7fffffff;
    }
    return lim;
  }

  // S[16 x N] of the warp's rows = Q K^T.
  static TAILOR_DEVICE void QK(float (&s)[kNTiles][4], unsigned q_base,
                               unsigned k_base, int warp, int lane) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[nt][c] = 0.0f;
    }
    const int m = lane / 8, r = lane % 8;  // ldmatrix: matrix, its row
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      unsigned a[4];
      LdMatrixX4(a, q_base + UnitOffset<kRows>(16 * warp + (m % 2) * 8 + r,
                                               2 * kk + m / 2));
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt += 2) {
        unsigned b[4];
        LdMatrixX4(b, k_base + UnitOffset<kBlockN>(8 * (nt + m / 2) + r,
                                                   2 * kk + m % 2));
        Mma16816<kType>(s[nt], a, b[0], b[1]);
        Mma16816<kType>(s[nt + 1], a, b[2], b[3]);
      }
    }
  }

  // O[16 x D] += P[16 x N] V[N x D].
  static TAILOR_DEVICE void PV(State& st, const unsigned (&pa)[kPSteps][4],
                               unsigned v_base, int lane) {
    const int m = lane / 8, r = lane % 8;
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt += 2) {
        unsigned b[4];
        LdMatrixX4Trans(b, v_base + UnitOffset<kBlockN>(
                                        16 * kk + (m % 2) * 8 + r, dt + m / 2));
        Mma16816<kType>(st.o[dt], pa[kk], b[0], b[1]);
        Mma16816<kType>(st.o[dt + 1], pa[kk], b[2], b[3]);
      }
    }
  }

  // -inf where the thread's element may not be attended: outside its
  // row's limits or not attended data (`bits`).
  static TAILOR_DEVICE void Mask(float (&s)[kNTiles][4], int start,
                                 unsigned long long bits, const Limits& lim,
                                 int lane) {
    const int t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 8 * nt + 2 * t + c % 2;
        const int pos = start + col;
        if (pos < lim.lo[c / 2] || pos >= lim.hi[c / 2] ||
            ((bits >> col) & 1ull) == 0) {
          s[nt][c] = NegativeInfinity();
        }
      }
    }
  }

  // S -> P in place (f32), the row max and sums updated; alpha = the factor
  // O is scaled by before P V is added.
  static TAILOR_DEVICE void Softmax(float (&s)[kNTiles][4], State& st,
                                    float (&alpha)[2], const Params& p) {
    float scale = p.score_scale;
    if (p.cap_scale != 0.0f) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          // tanh(-inf) = -1 would unmask: keep the mask's -inf.
          const float x = s[nt][c];
          s[nt][c] = x == NegativeInfinity()
                         ? x
                         : p.score_scale * TanhApprox(x * p.cap_scale);
        }
      }
      scale = 1.0f;
    }
    float row_max[2] = {st.m[0], st.m[1]};
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        row_max[c / 2] = fmaxf(row_max[c / 2], s[nt][c]);
      }
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
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[nt][c] = Exp2(fmaf(s[nt][c], scale, -base[c / 2]));
        sum[c / 2] += s[nt][c];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + sum[r];
  }

  // One KV block of the warp's rows: S, mask, softmax, rescale, P V.
  static TAILOR_DEVICE void Block(const Params& p, unsigned char* base,
                                  int start, int end, int stage,
                                  const Limits& lim, State& st, int warp,
                                  int lane) {
    const unsigned k_base = SharedAddress(KTile(base, stage));
    float s[kNTiles][4];
    QK(s, SharedAddress(base + kLayout.q), k_base, warp, lane);
    const unsigned long long bits = Masks(base)[stage];
    bool masked = bits != kAllAttended || start + kBlockN > end;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      masked = masked || start < lim.lo[r] || start + kBlockN > lim.hi[r];
    }
    // Masked before the soft cap, which keeps -inf (Softmax).
    if (masked) Mask(s, start, bits, lim, lane);
    float alpha[2];
    Softmax(s, st, alpha, p);
    unsigned pa[kPSteps][4];
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      pa[kk][0] = Pack2<kType>(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = Pack2<kType>(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = Pack2<kType>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = Pack2<kType>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) st.o[dt][c] *= alpha[c / 2];
    }
    PV(st, pa, k_base + kLayout.tile_bytes, lane);
  }

  // ---- epilogue -------------------------------------------------------------

  // Normalizes the thread's rows and stores them: a split piece's f32 rows
  // and log2 lse into its partial slot (from row `slot_row`: the strip's
  // first), otherwise 16-bit rows and (when asked for) natural-log lse.
  static TAILOR_DEVICE void Store(const Params& p, const PrefillWorkItem& item,
                                  int slot_row, State& st, int warp, int lane) {
    const float scale = p.cap_scale != 0.0f ? 1.0f : p.score_scale;
    const int t = lane % 4;
    const int pack = PackOf(p);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = st.l[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = 16 * warp + lane / 4 + 8 * r;
      if (row >= item.rows) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse2 =
          l > 0.0f ? st.m[r] * scale + __log2f(l) : NegativeInfinity();
      if (item.partial >= 0) {
        const long long slot =
            static_cast<long long>(item.partial) * PlanRowsOf(p) + slot_row;
        float* out = p.partial_out + (slot + row) * kHeadDim;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          *reinterpret_cast<float2*>(out + 8 * dt + 2 * t) =
              make_float2(st.o[dt][2 * r] * inv, st.o[dt][2 * r + 1] * inv);
        }
        if (t == 0) p.partial_lse[slot + row] = lse2;
        continue;
      }
      const long long token = static_cast<long long>(item.q_token) + row / pack;
      const int head = item.q_head + row % pack;
      unsigned short* out = static_cast<unsigned short*>(p.out) +
                            token * p.out_stride_token +
                            static_cast<long long>(head) * p.out_stride_head;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<unsigned*>(out + 8 * dt + 2 * t) =
            Pack2<kType>(st.o[dt][2 * r] * inv, st.o[dt][2 * r + 1] * inv);
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[token * p.lse_stride_token + head] = lse2 * 0.69314718055994531f;
      }
    }
  }

  // ---- the CTA --------------------------------------------------------------

  // One strip of an item (the item itself unless generic) over the item's
  // KV blocks; `k` counts the blocks consumed so far.
  static TAILOR_DEVICE void RunStrip(const Params& p, unsigned char* base,
                                     const PrefillWorkItem& item, int slot_row,
                                     Cursor& next, int last, int& k, int warp,
                                     int lane) {
    const int blocks = BlocksOf(item);
    // Every warp left the previous strip's blocks behind a barrier, so the
    // query buffer is free; the first block's barrier publishes it.
    LoadQuery(p, base, item);
    const Limits lim = LimitsOf(p, item, warp, lane);
    State st;
    Init(st);
    for (int j = 0; j < blocks; ++j, ++k) {
      IssueNext(p, base, next, last, (k + kStages - 1) % kStages);
      CpAsyncCommit();
      CpAsyncWait<kStages - 1>();
      __syncthreads();  // block k, its bits and the query rows landed
      Block(p, base, item.kv_begin + j * kBlockN, EndOf(item), k % kStages, lim,
            st, warp, lane);
      __syncthreads();  // its stage (and the query rows) free again
    }
    Store(p, item, slot_row, st, warp, lane);
  }

  static TAILOR_DEVICE void Run(const Params& p) {
    unsigned char* base = Base();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    Cursor next = {first, 0};
    for (int s = 0; s + 1 < kStages; ++s) {
      IssueNext(p, base, next, last, s);
      CpAsyncCommit();
    }
    int k = 0;  // blocks consumed so far
    for (int i = first; i < last; ++i) {
      const PrefillWorkItem item = p.items[i];
      for (int s = 0; s < StripsOf(item); ++s) {
        RunStrip(p, base, StripOf(p, item, s), s * kRows, next, last, k, warp,
                 lane);
      }
    }
    CpAsyncWait<0>();
    // Each item's planned KV length against the device's, one load per
    // item, after the tiles (nothing of them waits for it).
    if (warp != 0) return;
#pragma unroll 1
    for (int i = first + lane; i < last; i += 32) {
      CheckKvLen(p.kv_lens, p.items[i].seq, p.items[i].kv_len, p.errors,
                 kPrefillErrorBadKvLen);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM80_CUH_
