// templates/cuda/attention/decode_sm80.cuh — paged-KV decode attention, generic path
// (sm_80 and newer, any page size): the four warps that compute also load,
// with cp.async, kStages - 1 tiles ahead (decode_common.cuh has the math).
//
// Template parameters (SpecKey: dtypes[0], dims {D, group, page},
// tile.stages, variant kDecodeVariantCpAsync):
//   kType      Half16::kBf16 or kF16
//   kHeadDim   D in {64, 128, 256}
//   kGroup     query heads per KV head, 1..16
//   kPageSize  1..256
//   kStages    pipeline depth, 2..kDecodeMaxStages
// kGroup and kPageSize may be kDecodeRuntimeDim (0): the generic kernel of
// background JIT reads params.group / params.page_size (same code, the
// shared-memory layout computed at run time).
// Launch: grid {workers of the plan}, block {kThreads = 128}, dynamic shared
// memory DecodeSharedBytes(D, group, stages).
//
// Per CTA, tiles are numbered across its items (k = 0, 1, ...); tile k uses
// stage k % kStages and cp.async group k:
//   prologue: issue tiles 0 .. kStages - 2 (one group each, maybe empty)
//   tile k:   issue tile k + kStages - 1 into stage (k - 1) % kStages (freed
//             by the barrier that ended tile k - 1); wait until <=
//             kStages - 1 groups are pending (so group k landed); barrier;
//             on an item's first tile copy its query rows, barrier; compute;
//             at an item's end DecodeFinishItem; barrier.
// Each thread copies 16-byte chunks of K and V rows (page looked up per
// token) into the same swizzled layout TMA writes (one 64-token box per
// tile); warp 0 computes the tile's valid-token bits. Tokens past the
// device length or in bad pages are not loaded and are masked.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM80_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM80_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/decode_common.cuh"
#include "templates/cuda/attention/decode_params.h"

namespace tailor::cuda {

template <Half16 kType, int kHeadDim, int kGroup, int kPageSize, int kStages>
struct DecodeSm80Kernel {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "head_dim must be 64, 128 or 256");
  static_assert(kGroup >= 0 && kGroup <= 16,
                "group must be in [1, 16] (kDecodeRuntimeDim: params.group)");
  static_assert(kPageSize >= 0 && kPageSize <= 256,
                "page_size must be in [1, 256] (kDecodeRuntimeDim: params)");
  static_assert(kStages >= 2 && kStages <= kDecodeMaxStages,
                "stages must be in [2, kDecodeMaxStages]");

  using Params = DecodeKernelParams;
  static constexpr int kThreads = kDecodeConsumerWarps * 32;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  using Layout = DecodeTileLayout<kHeadDim, kDecodeTileTokens>;

  // The shared-memory layout (a constant when the group is compiled in).
  static TAILOR_DEVICE DecodeSmemLayout SmemLayout(const Params& p) {
    return MakeDecodeSmemLayout(kHeadDim, DecodeGroupOf<kGroup>(p), kStages);
  }

  // The next tile to issue: item index and tile within it, and the CTA's
  // first item (index and copy).
  struct Cursor {
    int item;
    int tile;
    int first;
    DecodeWorkItem head;
  };

  static TAILOR_DEVICE int TilesOf(const DecodeWorkItem& item) {
    return (item.kv_end - item.kv_begin + kDecodeTileTokens - 1) /
           kDecodeTileTokens;
  }

  static TAILOR_DEVICE unsigned char* Base() {
    extern __shared__ unsigned char decode_smem[];
    const unsigned misalign = SharedAddress(decode_smem) % 1024;
    return decode_smem + (misalign == 0 ? 0 : 1024 - misalign);
  }

  // Issues the copies of tile `tile` of `item` into `stage`.
  static TAILOR_DEVICE void LoadTile(const Params& p,
                                     const DecodeSmemLayout& layout,
                                     unsigned char* base,
                                     const DecodeWorkItem& item, int tile,
                                     int stage) {
    const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
    const int group = DecodeGroupOf<kGroup>(p);
    const int device_len = __ldg(p.seq_lens + item.seq);
    const int tile_first = item.kv_begin + tile * kDecodeTileTokens;
    const unsigned k_tile =
        SharedAddress(base + layout.kv + stage * 2 * layout.tile_bytes);
    const int chunk = thread % kChunks;
    for (int r = thread / kChunks; r < kDecodeTileTokens; r += kRowsPerPass) {
      const int token = tile_first + r;
      if (token >= item.kv_end) break;
      const int page = DecodeLoadPage<kPageSize>(p, item, token);
      if (token >= min(item.kv_end, max(device_len, 0)) ||
          !DecodePageValid(p, page)) {
        continue;  // not attended: masked, its stale tile rows never count
      }
      const long long in_page = token % DecodePageSizeOf<kPageSize>(p);
      const long long k_at = page * p.k_stride_page +
                             in_page * p.k_stride_token +
                             item.kv_head * p.k_stride_head + chunk * 8;
      const long long v_at = page * p.v_stride_page +
                             in_page * p.v_stride_token +
                             item.kv_head * p.v_stride_head + chunk * 8;
      const unsigned offset = Layout::ChunkOffset(r, chunk);
      CpAsync16(k_tile + offset,
                static_cast<const unsigned short*>(p.k_cache) + k_at);
      CpAsync16(k_tile + layout.tile_bytes + offset,
                static_cast<const unsigned short*>(p.v_cache) + v_at);
    }
    if (tile == 0) {
      const unsigned q_stage =
          SharedAddress(base + layout.q_stage + stage * layout.q_bytes);
      for (int e = thread; e < group * kChunks; e += kThreads) {
        const int row = e / kChunks, c = e % kChunks;
        const long long at =
            DecodeRowOf(p, item.seq) * p.q_stride_b +
            (static_cast<long long>(item.kv_head) * group + row) *
                p.q_stride_h +
            c * 8;
        CpAsync16(q_stage + row * layout.q_row_bytes + c * 16,
                  static_cast<const unsigned short*>(p.q) + at);
      }
    }
    if (warp == 0) {  // the tile's valid-token bits; errors, once each
      const int end = DecodeAttendedEnd<kPageSize>(
          p, item, device_len, /*report=*/lane == 0 && tile == 0);
      bool valid[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int token = tile_first + lane + 32 * h;
        valid[h] = false;
        if (token < end) {
          const int page = DecodeLoadPage<kPageSize>(p, item, token);
          DecodeReportPage<kPageSize>(p, item, token, page);
          valid[h] = DecodePageValid(p, page);
        }
      }
      const unsigned lo = __ballot_sync(0xffffffffu, valid[0]);
      const unsigned hi = __ballot_sync(0xffffffffu, valid[1]);
      if (lane == 0) {
        reinterpret_cast<unsigned long long*>(base + layout.masks)[stage] =
            (static_cast<unsigned long long>(hi) << 32) | lo;
      }
    }
  }

  // Issues the next tile of the CTA's items (if any) into `stage`.
  static TAILOR_DEVICE void IssueNext(const Params& p,
                                      const DecodeSmemLayout& layout,
                                      unsigned char* base, Cursor& next,
                                      int last, int stage) {
    while (next.item < last) {
      const DecodeWorkItem item =
          DecodeItemAt(p, next.item, next.first, next.head);
      if (next.tile < TilesOf(item)) {
        LoadTile(p, layout, base, item, next.tile, stage);
        ++next.tile;
        return;
      }
      ++next.item;
      next.tile = 0;
    }
  }

  static TAILOR_DEVICE void Run(const Params& p) {
    const DecodeSmemLayout layout = SmemLayout(p);
    unsigned char* base = Base();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (unsigned i = threadIdx.x; i < layout.q_bytes / 16; i += kThreads) {
      reinterpret_cast<uint4*>(base + layout.q)[i] = make_uint4(0, 0, 0, 0);
    }
    const DecodeWorkItem head = p.first_items[blockIdx.x];  // with first
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    Cursor next = {first, 0, first, head};
    for (int s = 0; s + 1 < kStages; ++s) {
      IssueNext(p, layout, base, next, last, s);
      CpAsyncCommit();
    }
    const unsigned q_rows = SharedAddress(base + layout.q);
    const unsigned long long* masks =
        reinterpret_cast<const unsigned long long*>(base + layout.masks);
    unsigned k = 0;  // tiles consumed so far
    DecodeWarpState<kHeadDim> st;
    for (int i = first; i < last; ++i) {
      const DecodeWorkItem item = DecodeItemAt(p, i, first, head);
      const int tiles = TilesOf(item);
      if (tiles == 0 && threadIdx.x == 0) {  // still check the length
        DecodeAttendedEnd<kPageSize>(p, item, __ldg(p.seq_lens + item.seq),
                                     /*report=*/true);
      }
      st.Reset();
      for (int j = 0; j < tiles; ++j, ++k) {
        const int stage = k % kStages;
        IssueNext(p, layout, base, next, last, (k + kStages - 1) % kStages);
        CpAsyncCommit();
        CpAsyncWait<kStages - 1>();
        __syncthreads();  // tile k (and its mask) landed for every thread
        if (j == 0) {
          DecodeCopyQuery<kHeadDim>(
              base + layout.q_stage + stage * layout.q_bytes, base + layout.q,
              layout.q_row_bytes, DecodeGroupOf<kGroup>(p), threadIdx.x);
          __syncthreads();
        }
        const unsigned valid16 =
            static_cast<unsigned>(masks[stage] >> (16 * warp)) & 0xffffu;
        const unsigned k_tile =
            SharedAddress(base + layout.kv + stage * 2 * layout.tile_bytes);
        DecodeWarpTile<kType, kHeadDim, kDecodeTileTokens>(
            p, k_tile, k_tile + layout.tile_bytes, q_rows, layout.q_row_bytes,
            valid16, warp, lane, st);
        __syncthreads();  // stage free for the issue of the next tile
      }
      DecodeFinishItem<kType, kHeadDim, kGroup, /*kNamedSync=*/false>(
          p, item, st, base, layout, warp, lane);
    }
    CpAsyncWait<0>();
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM80_CUH_
