// templates/cuda/attention/prefill_sm90_epilogue.cuh — where one consumer
// warpgroup's rows of a tile go once its KV blocks are done
// (prefill_sm90.cuh): O = O / l, lse = m s + log2 l, then
//   a piece of a split tile   f32 rows and log2 lse into its partial slot
//                             (prefill_merge.cuh combines the slots)
//   a full tile               16-bit rows into the tile's query buffer
//                             (128-byte swizzled, as the query came), then
//                             one TMA store per 64-element chunk of D
//   a tail tile               16-bit register stores of its valid rows
// and lse (natural log, f32) of every stored row when asked for. A row with
// nothing attended (l = 0) gets O = 0 and lse = -inf.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_EPILOGUE_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_EPILOGUE_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/prefill_params.h"
#include "templates/cuda/attention/prefill_sm90_mainloop.cuh"

namespace tailor::cuda {

inline constexpr float kPrefillLn2 = 0.69314718055994531f;

template <Half16 kType, int kHeadDim, int kPack>
struct PrefillSm90Epilogue {
  static constexpr int kORegs = kHeadDim / 2;
  static constexpr unsigned kQChunkBytes = kPrefillTileRows * 128;

  // The thread's two rows: their tile rows, normalized O and lse (log2).
  struct Rows {
    int row[2];     // tile rows in [0, kPrefillTileRows)
    float lse2[2];  // log2 domain; -inf for a row with nothing attended
  };

  // Sums the row sums over the quad, scales O by 1 / l.
  template <typename State>
  static TAILOR_DEVICE Rows Normalize(State& st, float scale, int wg) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    Rows rows;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = st.l[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      rows.row[r] = wg * kPrefillConsumerRows + 16 * warp + lane / 4 + 8 * r;
      inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
      rows.lse2[r] =
          l > 0.0f ? st.m[r] * scale + __log2f(l) : NegativeInfinity();
    }
#pragma unroll
    for (int i = 0; i < kORegs; ++i) st.o[i] *= inv[(i / 2) % 2];
    return rows;
  }

  // Row r of the tile: token offset r / pack, head q_head + r % pack.
  static TAILOR_DEVICE long long OutOffset(const PrefillParams& p,
                                           const PrefillWorkItem& item, int r) {
    return (static_cast<long long>(item.q_token) + r / kPack) *
               p.out_stride_token +
           static_cast<long long>(item.q_head + r % kPack) * p.out_stride_head;
  }

  static TAILOR_DEVICE void StoreLse(const PrefillParams& p,
                                     const PrefillWorkItem& item,
                                     const Rows& rows) {
    if (p.lse == nullptr || threadIdx.x % 4 != 0) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = rows.row[r];
      if (row >= item.rows) continue;
      p.lse[(static_cast<long long>(item.q_token) + row / kPack) *
                p.lse_stride_token +
            item.q_head + row % kPack] = rows.lse2[r] * kPrefillLn2;
    }
  }

  // A piece: f32 rows and log2 lse into partial slot item.partial.
  static TAILOR_DEVICE void StorePartial(const PrefillParams& p,
                                         const PrefillWorkItem& item,
                                         const float (&o)[kORegs],
                                         const Rows& rows) {
    const int t = threadIdx.x % 4;
    const long long slot =
        static_cast<long long>(item.partial) * kPrefillTileRows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = rows.row[r];
      if (row >= item.rows) continue;
      float* out = p.partial_out + (slot + row) * kHeadDim;
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        *reinterpret_cast<float2*>(out + 8 * i + 2 * t) =
            make_float2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
      }
      if (t == 0) p.partial_lse[slot + row] = rows.lse2[r];
    }
  }

  // A tail tile: 16-bit register stores of the valid rows.
  static TAILOR_DEVICE void StoreRows(const PrefillParams& p,
                                      const PrefillWorkItem& item,
                                      const float (&o)[kORegs],
                                      const Rows& rows) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = rows.row[r];
      if (row >= item.rows) continue;
      unsigned short* out =
          static_cast<unsigned short*>(p.out) + OutOffset(p, item, row);
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        *reinterpret_cast<unsigned*>(out + 8 * i + 2 * t) =
            Pack2<kType>(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
      }
    }
  }

  // A full tile: the warpgroup's 64 rows into its rows of the (consumed)
  // query buffer in the swizzled layout, then TMA stores by `leader`, which
  // returns once they have read the buffer.
  static TAILOR_DEVICE void StoreByTma(const PrefillParams& p,
                                       const PrefillWorkItem& item,
                                       const float (&o)[kORegs],
                                       const Rows& rows, unsigned char* q_tile,
                                       int wg, bool leader) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = rows.row[r];
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        // Column 8 i + 2 t: chunk i / 8, 16-byte unit i % 8, swizzled by the
        // row within its 8-row atom.
        const unsigned offset = (i / 8) * kQChunkBytes + row * 128 +
                                (((i % 8) ^ (row % 8)) << 4) + 4 * t;
        *reinterpret_cast<unsigned*>(q_tile + offset) =
            Pack2<kType>(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
      }
    }
    FenceSharedToAsyncProxy();
    NamedBarrierSync<128>(kPrefillWarpgroupBarrier + wg);
    if (leader) {
      const int first = wg * kPrefillConsumerRows;
#pragma unroll
      for (int chunk = 0; chunk < kHeadDim / kPrefillChunk; ++chunk) {
        const int coords[5] = {0, 0, item.q_head / kPack,
                               item.q_token + first / kPack, chunk};
        TmaStore<5>(&p.out_map, q_tile + chunk * kQChunkBytes + first * 128,
                    coords);
      }
      BulkCommitGroup();
      BulkWaitGroupRead<0>();
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_EPILOGUE_CUH_
