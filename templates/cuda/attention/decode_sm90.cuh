// templates/cuda/attention/decode_sm90.cuh — paged-KV decode attention, Hopper path:
// a TMA producer warp loads whole pages by page id, four consumer warps
// compute on tensor cores (decode_common.cuh).
//
// Template parameters (SpecKey: dtypes[0], dims {D, group, page},
// tile.stages, variant kDecodeVariantTma):
//   kType      Half16::kBf16 or kF16 (q, caches, out)
//   kHeadDim   D in {64, 128, 256}
//   kGroup     query heads per KV head, 1..16
//   kPageSize  a multiple of 8 that divides 64 or is a multiple of 64
//   kStages    pipeline depth, 2..kDecodeMaxStages
// Launch: grid {workers of the plan}, block {kThreads = 160}, dynamic shared
// memory DecodeSharedBytes(D, group, stages); params.k_map / v_map as in
// decode_params.h.
//
// Per CTA (items [worker_begin[c], worker_begin[c + 1]) of the plan):
//   warp 4 (producer), for every 64-token tile of every item, stage
//   s = k % kStages of the k-th tile overall:
//     wait empty[s]; lane i < 64 / kBoxTokens looks up the page of box i
//     (block_table[b, token / page]) and checks it; lane 0 stores the tile's
//     valid-token bits and arms full[s] with the bytes of the valid boxes
//     (plus the query rows for an item's first tile); each lane with a valid
//     box issues two TMA loads with coordinates {0, token % page, 0, h,
//     page id} — the page id is a coordinate of the one map over the whole
//     cache, no per-page descriptor; lanes < group bulk-copy the query rows.
//   warps 0..3 (consumers): wait full[s]; on an item's first tile copy its
//     query rows; DecodeWarpTile; arrive empty[s]; DecodeFinishItem at the
//     end of each item.
// Phases: the k-th use of stage s waits full[s] with parity (k / kStages)
// & 1, and the producer waits empty[s] with the opposite parity (a fresh
// barrier's "previous phase" counts as complete), so nobody falls two
// phases behind: the producer cannot refill s before all 4 consumer warps
// arrived on it, and consumers cannot pass s before the producer armed it.
// Invalid boxes (bad page id, past the device length) are not loaded and
// not counted in the transaction bytes; their tokens are masked.
// Launched in clusters (decode_params.h, DecodeClusterLayout), a split
// pair whose pieces all run in this CTA's cluster is merged in the shared
// memory of its first piece's CTA instead of through L2 (FinishInCluster);
// other pairs merge as without clusters.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/bulk_copy.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "templates/cuda/attention/decode_common.cuh"
#include "templates/cuda/attention/decode_params.h"
#include "templates/cuda/attention/decode_trace.cuh"

namespace tailor::cuda {

template <Half16 kType, int kHeadDim, int kGroup, int kPageSize, int kStages>
struct DecodeSm90Kernel {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "head_dim must be 64, 128 or 256");
  static_assert(kGroup >= 1 && kGroup <= 16, "group must be in [1, 16]");
  static_assert(kPageSize % 8 == 0 && (kDecodeTileTokens % kPageSize == 0 ||
                                       kPageSize % kDecodeTileTokens == 0),
                "TMA path: page_size must be a multiple of 8 that divides 64 "
                "or a multiple of 64");
  static_assert(kPageSize <= 256, "a box dim is <= 256");
  static_assert(kStages >= 2 && kStages <= kDecodeMaxStages,
                "stages must be in [2, kDecodeMaxStages]");

  using Params = DecodeKernelParams;
  static constexpr int kThreads = (kDecodeConsumerWarps + 1) * 32;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kProducerWarp = kDecodeConsumerWarps;
  static constexpr int kBoxTokens =
      kPageSize < kDecodeTileTokens ? kPageSize : kDecodeTileTokens;
  static constexpr int kBoxes = kDecodeTileTokens / kBoxTokens;  // <= 8
  static constexpr unsigned kBoxBytes = kBoxTokens * kHeadDim * 2;
  static constexpr unsigned kQueryBytes = kGroup * kHeadDim * 2;
  static constexpr DecodeSmemLayout kLayout =
      MakeDecodeSmemLayout(kHeadDim, kGroup, kStages);
  static_assert(kBoxBytes % 1024 == 0,
                "boxes keep the 1024-byte alignment of the 128B swizzle");
  // Head groups (kDecodeLaunchHeadGroups): a stage is 16 tokens of 4 heads,
  // box w holding head w's 16 tokens, as a 64-token tile of one head holds
  // its 4 boxes of 16: the consumers' math is the same. Built for pages of
  // 16 (one page a stage) where the warps' query rows fit.
  static constexpr bool kHeadGroups =
      kPageSize == 16 && DecodeHeadGroupFits(kHeadDim, kGroup, kStages);

  struct Shared {
    unsigned char* base;        // 1024-byte aligned
    Mbarrier* full;             // [kStages]
    Mbarrier* empty;            // [kStages]
    unsigned long long* masks;  // [kStages]
  };

  // This CTA's cluster (size 1: a launch without clusters) and its
  // receiver's buffers (DecodeClusterLayout).
  struct Cluster {
    unsigned size, rank;
    uint4* slots;  // [size][kGroup][kHeadDim / 8]
    float* lse;    // [size][kGroup]
    Mbarrier* merged;
  };
  static constexpr unsigned kClusterSlots = DecodeAlignUp(kLayout.total, 16);

  static TAILOR_DEVICE Shared Carve() {
    extern __shared__ unsigned char decode_smem[];
    const unsigned misalign = SharedAddress(decode_smem) % 1024;
    Shared s;
    s.base = decode_smem + (misalign == 0 ? 0 : 1024 - misalign);
    s.full = reinterpret_cast<Mbarrier*>(s.base + kLayout.barriers);
    s.empty = s.full + kStages;
    s.masks = reinterpret_cast<unsigned long long*>(s.base + kLayout.masks);
    return s;
  }

  static TAILOR_DEVICE Cluster ClusterOf(const Shared& sh) {
    Cluster c;
    c.size = ClusterCtaCount();
    c.rank = ClusterCtaRank();
    c.slots = reinterpret_cast<uint4*>(sh.base + kClusterSlots);
    const unsigned lse = kClusterSlots + c.size * kGroup * kHeadDim * 2;
    c.lse = reinterpret_cast<float*>(sh.base + lse);
    c.merged = reinterpret_cast<Mbarrier*>(
        sh.base + (lse + c.size * kGroup * 4 + 7) / 8 * 8);
    return c;
  }

  static TAILOR_DEVICE unsigned char* KTile(const Shared& sh, int stage) {
    return sh.base + kLayout.kv + stage * 2 * kLayout.tile_bytes;
  }

  // ---- producer -------------------------------------------------------------
  // One K and one V copy into the stage's tiles at `k_dst` and k_dst +
  // tile_bytes, with the launch's L2 policy.
  static TAILOR_DEVICE void LoadKv(const Shared& sh, unsigned char* k_dst,
                                   const TensorMap* k_map,
                                   const TensorMap* v_map,
                                   const int (&coords)[5], int stage,
                                   bool evict_first) {
    Mbarrier* full = &sh.full[stage];
    unsigned char* v_dst = k_dst + kLayout.tile_bytes;
    if (evict_first) {
      const unsigned long long policy = L2EvictFirstPolicy();
      TmaLoadHinted<5>(k_dst, k_map, coords, full, policy);
      TmaLoadHinted<5>(v_dst, v_map, coords, full, policy);
    } else {
      TmaLoad<5>(k_dst, k_map, coords, full);
      TmaLoad<5>(v_dst, v_map, coords, full);
    }
  }

  // Lane i's page id of box i of the tile (from the prefetched window of
  // Produce; kDecodeNoPage past the item or max_pages). `evict_first`: the
  // launch's kDecodeLaunchEvictFirst.
  static TAILOR_DEVICE void LoadTile(const Params& p, const Shared& sh,
                                     const DecodeWorkItem& item, int device_len,
                                     int tile, int stage, int lane, int page,
                                     bool evict_first) {
    const int tile_first = item.kv_begin + tile * kDecodeTileTokens;
    const int box_first = tile_first + lane * kBoxTokens;
    if (lane >= kBoxes) page = kDecodeNoPage;
    const int end = DecodeAttendedEnd<kPageSize>(
        p, item, device_len, /*report=*/tile == 0 && lane == 0);
    if (box_first < end) {
      DecodeReportPage<kPageSize>(p, item, box_first, page);
    } else {
      page = kDecodeNoPage;  // past the attended tokens: not loaded
    }
    if (!DecodePageValid(p, page)) page = -1;
    const unsigned boxes_ok = __ballot_sync(0xffffffffu, page >= 0);
    // Token t of the tile is attended iff its box loads and t < end.
    const int t0 = lane, t1 = lane + 32;
    const unsigned lo =
        __ballot_sync(0xffffffffu, ((boxes_ok >> (t0 / kBoxTokens)) & 1u) &&
                                       tile_first + t0 < end);
    const unsigned hi =
        __ballot_sync(0xffffffffu, ((boxes_ok >> (t1 / kBoxTokens)) & 1u) &&
                                       tile_first + t1 < end);
    if (lane == 0) {
      sh.masks[stage] = (static_cast<unsigned long long>(hi) << 32) | lo;
      sh.full[stage].ArriveExpectTx(__popc(boxes_ok) * 2 * kBoxBytes +
                                    (tile == 0 ? kQueryBytes : 0));
    }
    __syncwarp();
    if (page >= 0) {
      const int coords[5] = {0, box_first % kPageSize, 0, item.kv_head, page};
      LoadKv(sh, KTile(sh, stage) + lane * kBoxBytes, &p.k_map, &p.v_map,
             coords, stage, evict_first);
    }
    if (tile == 0 && lane < kGroup) {
      const unsigned short* q_row =
          static_cast<const unsigned short*>(p.q) +
          DecodeRowOf(p, item.seq) * p.q_stride_b +
          (static_cast<long long>(item.kv_head) * kGroup + lane) * p.q_stride_h;
      BulkLoad(sh.base + kLayout.q_stage + stage * kLayout.q_bytes +
                   lane * kLayout.q_row_bytes,
               q_row, kHeadDim * 2, &sh.full[stage]);
    }
  }

  // Lane i's page of box `box` + i of the item, kDecodeNoPage past its end.
  static TAILOR_DEVICE int WindowPage(const Params& p,
                                      const DecodeWorkItem& item, int box,
                                      int lane) {
    const int token = item.kv_begin + (box + lane) * kBoxTokens;
    return token < item.kv_end ? DecodeLoadPage<kPageSize>(p, item, token)
                               : kDecodeNoPage;
  }

  // Head groups: the stage of 16 tokens (one page) of the group's 4 heads
  // from `item` (the group's first head): one K and one V copy, each 4
  // boxes of 16 tokens (lane 0 does it all).
  static TAILOR_DEVICE void LoadHeadsTile(const Params& p, const Shared& sh,
                                          const DecodeWorkItem& item,
                                          int device_len, int tile, int stage,
                                          int page, bool evict_first) {
    const int tile_first = item.kv_begin + tile * kBoxTokens;
    const int end =
        DecodeAttendedEnd<kPageSize>(p, item, device_len, /*report=*/tile == 0);
    if (tile_first < end) {
      DecodeReportPage<kPageSize>(p, item, tile_first, page);
    } else {
      page = kDecodeNoPage;
    }
    const bool load = DecodePageValid(p, page);
    // Tokens attended, the same 16 bits for every head's warp.
    const int attended = load ? min(end - tile_first, kBoxTokens) : 0;
    const unsigned long long bits = (1ull << attended) - 1;
    sh.masks[stage] = bits | bits << 16 | bits << 32 | bits << 48;
    sh.full[stage].ArriveExpectTx(load ? 2 * kDecodeHeadGroup * kBoxBytes : 0);
    if (!load) return;
    const int coords[5] = {0, 0, 0, item.kv_head, page};
    LoadKv(sh, KTile(sh, stage), &p.k_heads_map, &p.v_heads_map, coords, stage,
           evict_first);
  }

  // Head groups: every 4th item opens a group; its pages, 16 tokens a stage.
  static TAILOR_DEVICE void ProduceHeads(const Params& p, const Shared& sh,
                                         int first, int last,
                                         const DecodeWorkItem& head,
                                         bool evict_first, int lane) {
    unsigned k = 0;  // stages issued so far
    for (int i = first; i < last; i += kDecodeHeadGroup) {
      const DecodeWorkItem item = DecodeItemAt(p, i, first, head);
      const int tiles =
          (item.kv_end - item.kv_begin + kBoxTokens - 1) / kBoxTokens;
      int window_page = WindowPage(p, item, 0, lane);  // as in Produce
      const int device_len = __ldg(p.seq_lens + item.seq);
      if (tiles == 0 && lane == 0) {
        DecodeAttendedEnd<kPageSize>(p, item, device_len, true);
      }
      for (int j = 0; j < tiles; ++j, ++k) {
        if (j % 32 == 0 && j > 0) window_page = WindowPage(p, item, j, lane);
        const int page = __shfl_sync(0xffffffffu, window_page, j % 32);
        const int stage = k % kStages;
        sh.empty[stage].Wait(((k / kStages) & 1u) ^ 1u);
        if (lane == 0) {
          LoadHeadsTile(p, sh, item, device_len, j, stage, page, evict_first);
        }
        __syncwarp();
      }
    }
  }

  static TAILOR_DEVICE void Produce(const Params& p, const Shared& sh,
                                    int first, int last,
                                    const DecodeWorkItem& head, int flags,
                                    int lane) {
    const bool evict_first = (flags & kDecodeLaunchEvictFirst) != 0;
    if constexpr (kHeadGroups) {
      if (flags & kDecodeLaunchHeadGroups) {
        ProduceHeads(p, sh, first, last, head, evict_first, lane);
        return;
      }
    }
    unsigned k = 0;  // tiles issued so far
    for (int i = first; i < last; ++i) {
      const DecodeWorkItem item = DecodeItemAt(p, i, first, head);
      const int tiles = (item.kv_end - item.kv_begin + kDecodeTileTokens - 1) /
                        kDecodeTileTokens;
      // Block-table entries are fetched 32 boxes at a time, lane i holding
      // box 32 w + i of window w, so a tile's TMA issue waits for one load
      // per 32 boxes, not one per tile. The first window is requested before
      // the device length: both depend on the item only, and every use of
      // the length (hoisted out of the tile loop by the compiler) waits for
      // it, so loaded first it cost a second round trip before the first
      // TMA copy at every CTA's start.
      int window_page = WindowPage(p, item, 0, lane);
      const int device_len = __ldg(p.seq_lens + item.seq);
      if (tiles == 0) {  // nothing to load; still check the length
        DecodeAttendedEnd<kPageSize>(p, item, device_len, lane == 0);
      }
      for (int j = 0; j < tiles; ++j, ++k) {
        const int box = j * kBoxes;  // the tile's first box in the item
        if (box % 32 == 0 && j > 0) {
          window_page = WindowPage(p, item, box, lane);
        }
        const int page =
            __shfl_sync(0xffffffffu, window_page, (box + lane) % 32);
        const int stage = k % kStages;
        if (k == 0 && lane == 0) TAILOR_DECODE_MARK(kTraceTable);
        sh.empty[stage].Wait(((k / kStages) & 1u) ^ 1u);
        LoadTile(p, sh, item, device_len, j, stage, lane, page, evict_first);
        if (k == 0 && lane == 0) TAILOR_DECODE_MARK(kTraceFirstTma);
      }
    }
  }

  // ---- consumers ------------------------------------------------------------
  // Head groups: warp w computes item i + w of each group alone, from its
  // own query rows (loaded here: no stage carries them), and ends it with
  // DecodeFinishWarpItem; a warp whose piece of its head's pair arrived
  // last merges that pair on its own.
  static TAILOR_DEVICE void ConsumeHeads(const Params& p, const Shared& sh,
                                         int first, int last,
                                         const DecodeWorkItem& head, int warp,
                                         int lane) {
    unsigned char* rows = sh.base + kLayout.q_stage + warp * kLayout.q_bytes;
    constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
    unsigned k = 0;                        // stages consumed so far
    DecodeWarpState<kHeadDim> st;
    for (int i = first; i < last; i += kDecodeHeadGroup) {
      const DecodeWorkItem item = DecodeItemAt(p, i + warp, first, head);
      const int tiles =
          (item.kv_end - item.kv_begin + kBoxTokens - 1) / kBoxTokens;
      // The item's query rows; rows >= kGroup zero (the MMA's 16 rows).
      // (16-byte aligned rows, as the other path's bulk copies need.)
      const unsigned short* q = static_cast<const unsigned short*>(p.q) +
                                DecodeRowOf(p, item.seq) * p.q_stride_b +
                                (item.kv_head * kGroup) * p.q_stride_h;
      __syncwarp();  // the previous item's last reads of the rows
      for (int e = lane; e < 16 * kChunks; e += 32) {
        const int row = e / kChunks, chunk = e % kChunks;
        const uint4 v =
            row < kGroup
                ? __ldg(reinterpret_cast<const uint4*>(q + row * p.q_stride_h) +
                        chunk)
                : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(rows + row * kLayout.q_row_bytes +
                                  chunk * 16) = v;
      }
      __syncwarp();
      st.Reset();
      for (int j = 0; j < tiles; ++j, ++k) {
        const int stage = k % kStages;
        sh.full[stage].Wait((k / kStages) & 1u);
        const unsigned valid16 =
            static_cast<unsigned>(sh.masks[stage] >> (16 * warp)) & 0xffffu;
        const unsigned k_tile = SharedAddress(KTile(sh, stage));
        DecodeWarpTile<kType, kHeadDim, kBoxTokens>(
            p, k_tile, k_tile + kLayout.tile_bytes, SharedAddress(rows),
            kLayout.q_row_bytes, valid16, warp, lane, st);
        __syncwarp();
        if (lane == 0) sh.empty[stage].Arrive();
      }
      // The warp that finished its head's last piece merges that head alone,
      // while the other warps merge theirs or go on streaming: a group's
      // pieces end together, and four merges one after another by the whole
      // CTA made the tail of every split group four merges long.
      if (DecodeFinishWarpItem<kType, kHeadDim, kGroup>(p, item, st, lane)) {
        __syncwarp();  // lane 0's acquiring arrival, before every lane's reads
        DecodeMergePieces<kType, kHeadDim, kGroup, 32>(p, item, lane);
        if (lane == 0) p.counters[item.first_partial] = 0;  // the next run's
      }
    }
  }

  // ---- cluster merges -------------------------------------------------------
  // Whether every piece of `item`'s pair runs in this CTA's cluster: plans
  // flagged kDecodeLaunchClusterMerges put piece i on worker first + i, so
  // the pair's pieces run on CTAs [c - i, c - i + pieces) (c = blockIdx.x;
  // clusters are aligned runs of `size` CTAs).
  static TAILOR_DEVICE bool MergesInCluster(const Cluster& cl, int flags,
                                            const DecodeWorkItem& item) {
    if (cl.size < 2 || item.partial < 0 ||
        !(flags & kDecodeLaunchClusterMerges)) {
      return false;
    }
    const int first =
        static_cast<int>(blockIdx.x) - (item.partial - item.first_partial);
    return first / static_cast<int>(cl.size) ==
           (first + item.pieces - 1) / static_cast<int>(cl.size);
  }

  // The end of a piece that MergesInCluster: the warps combine, piece i
  // stores its partial (16-bit rows, lse) in slot i of the receiver (the
  // CTA of piece 0, rank rank - i) and is done; the receiver writes its own
  // slot 0, waits for the others' bytes and merges. Same contract as
  // DecodeFinishItem (all consumer threads; ends with a consumer barrier).
  static TAILOR_DEVICE void FinishInCluster(const Params& p, const Shared& sh,
                                            const Cluster& cl,
                                            const DecodeWorkItem& item,
                                            const DecodeWarpState<kHeadDim>& st,
                                            int warp, int lane) {
    constexpr int kOctets = kHeadDim / 8;
    constexpr unsigned kSlotBytes = kGroup * kHeadDim * 2 + kGroup * 4;
    DecodeCombineWarps<kHeadDim, kGroup, true>(p, st, sh.base, kLayout, warp,
                                               lane);
    const int thread = warp * 32 + lane;
    if (thread == 0) TAILOR_DECODE_MARK(kTraceCombined);
    const int piece = item.partial - item.first_partial;
    const unsigned receiver = cl.rank - piece;
    for (int e = thread; e < kGroup * kOctets; e += kDecodeConsumerWarps * 32) {
      float v[8];
      DecodeCombinedOctet<kGroup>(sh.base, kLayout, e / kOctets,
                                  (e % kOctets) * 8, v);
      const uint4 packed =
          make_uint4(Pack2<kType>(v[0], v[1]), Pack2<kType>(v[2], v[3]),
                     Pack2<kType>(v[4], v[5]), Pack2<kType>(v[6], v[7]));
      uint4* slot = cl.slots + piece * kGroup * kOctets + e;
      if (piece == 0) {
        *slot = packed;
      } else {
        PeerStoreAsync(slot, receiver, packed, cl.merged);
      }
    }
    if (thread < kGroup) {
      const float lse2 =
          reinterpret_cast<const float*>(sh.base + kLayout.merge_sum)[thread];
      float* slot = cl.lse + piece * kGroup + thread;
      if (piece == 0) {
        *slot = lse2;
      } else {
        PeerStoreAsync(slot, receiver, lse2, cl.merged);
      }
    }
    if (piece == 0) {
      DecodeConsumerSync<true>();  // slot 0, before every thread's reads
      if (thread == 0)
        cl.merged->ArriveExpectTx((item.pieces - 1) * kSlotBytes);
      while (!TryWaitFromCluster(cl.merged, 0)) {
      }
      if (thread == 0) TAILOR_DECODE_MARK(kTraceArrived);
      MergeSlots(p, cl, item, thread);
      if (thread == 0) TAILOR_DECODE_MARK(kTraceMerged);
    } else if (thread == 0) {
      TAILOR_DECODE_MARK(kTraceArrived);
    }
    DecodeConsumerSync<true>();
  }

  // The receiver's merge of slots [0, item.pieces) into out / lse. First
  // each row's lse column becomes the pieces' weights (exp2(lse - max) /
  // sum, in place), 16 lanes a row and a piece a lane (pieces <= 16, the
  // largest cluster), and the row's lse is written; then each thread folds
  // its octets of the output over the pieces with those weights, 8 pieces'
  // loads at a time. (A running max per octet left each piece waiting on
  // the one before.)
  static TAILOR_DEVICE void MergeSlots(const Params& p, const Cluster& cl,
                                       const DecodeWorkItem& item, int thread) {
    constexpr int kOctets = kHeadDim / 8;
    constexpr int kRowLanes = 16;
    // Whole warps, so that every lane of a warp that shuffles takes part.
    constexpr int kWeightTasks = (kGroup * kRowLanes + 31) / 32 * 32;
    const int pieces = item.pieces;
    for (int t = thread; t < kWeightTasks; t += kDecodeConsumerWarps * 32) {
      const int row = t / kRowLanes, i = t % kRowLanes;
      const bool mine = row < kGroup && i < pieces;
      float* weight = cl.lse + i * kGroup + row;
      const float x = mine ? *weight : NegativeInfinity();
      float top = x;
#pragma unroll
      for (int s = kRowLanes / 2; s > 0; s /= 2) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, s));
      }
      // Nothing attended (top = -inf): every weight and the sum are 0.
      const float w = Exp2(x - (top == NegativeInfinity() ? 0.0f : top));
      float sum = w;
#pragma unroll
      for (int s = kRowLanes / 2; s > 0; s /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, s);
      }
      if (mine) *weight = sum > 0 ? w / sum : 0.0f;
      if (mine && i == 0 && p.lse != nullptr) {
        p.lse[DecodeRowOf(p, item.seq) * p.lse_stride_b +
              item.kv_head * kGroup + row] =
            sum > 0 ? (top + log2f(sum)) * kDecodeLn2 : NegativeInfinity();
      }
    }
    DecodeConsumerSync<true>();  // the weights, before every thread's reads
    constexpr int kUnroll = 8;
    for (int e = thread; e < kGroup * kOctets; e += kDecodeConsumerWarps * 32) {
      const int row = e / kOctets, d = (e % kOctets) * 8;
      float acc[8] = {};
      for (int i0 = 0; i0 < pieces; i0 += kUnroll) {
        // Past the last piece: the last one again, weighted 0 (no branch, so
        // the chunk's loads issue together).
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const int i = min(i0 + j, pieces - 1);
          const float w = i0 + j < pieces ? cl.lse[i * kGroup + row] : 0.0f;
          const uint4 o = cl.slots[i * kGroup * kOctets + e];
          const unsigned pairs[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float lo, hi;
            Unpack2<kType>(pairs[q], lo, hi);
            acc[2 * q] += w * lo;
            acc[2 * q + 1] += w * hi;
          }
        }
      }
      const long long head =
          static_cast<long long>(item.kv_head) * kGroup + row;
      unsigned short* out = static_cast<unsigned short*>(p.out) +
                            DecodeRowOf(p, item.seq) * p.out_stride_b +
                            head * p.out_stride_h + d;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        DecodeStore2<kType>(out + 2 * q, acc[2 * q], acc[2 * q + 1]);
      }
    }
  }

  static TAILOR_DEVICE void Consume(const Params& p, const Shared& sh,
                                    int first, int last,
                                    const DecodeWorkItem& head, int flags,
                                    int warp, int lane) {
    if constexpr (kHeadGroups) {
      if (flags & kDecodeLaunchHeadGroups) {
        ConsumeHeads(p, sh, first, last, head, warp, lane);
        return;
      }
    }
    const unsigned q_rows = SharedAddress(sh.base + kLayout.q);
    const Cluster cl = ClusterOf(sh);
    // Once, before any remote store: the cluster's CTAs have initialized
    // their receivers' barriers (Run). They started together, so this costs
    // nothing next to the first tile's load.
    if (cl.size > 1) ClusterWait();
    unsigned k = 0;  // tiles consumed so far
    DecodeWarpState<kHeadDim> st;
    for (int i = first; i < last; ++i) {
      const DecodeWorkItem item = DecodeItemAt(p, i, first, head);
      const int tiles = (item.kv_end - item.kv_begin + kDecodeTileTokens - 1) /
                        kDecodeTileTokens;
      st.Reset();
      for (int j = 0; j < tiles; ++j, ++k) {
        const int stage = k % kStages;
        sh.full[stage].Wait((k / kStages) & 1u);
        if (warp == 0 && lane == 0) {
          if (k == 0) TAILOR_DECODE_MARK(kTraceFirstFull);
          TAILOR_DECODE_MARK(kTraceLastFull);
        }
        if (j == 0) {
          DecodeCopyQuery<kHeadDim>(
              sh.base + kLayout.q_stage + stage * kLayout.q_bytes,
              sh.base + kLayout.q, kLayout.q_row_bytes, kGroup,
              warp * 32 + lane);
          DecodeConsumerSync<true>();
        }
        const unsigned valid16 =
            static_cast<unsigned>(sh.masks[stage] >> (16 * warp)) & 0xffffu;
        const unsigned k_tile = SharedAddress(KTile(sh, stage));
        DecodeWarpTile<kType, kHeadDim, kBoxTokens>(
            p, k_tile, k_tile + kLayout.tile_bytes, q_rows, kLayout.q_row_bytes,
            valid16, warp, lane, st);
        __syncwarp();
        if (lane == 0) sh.empty[stage].Arrive();
      }
      if (warp == 0 && lane == 0) TAILOR_DECODE_MARK(kTraceFinish);
      if (MergesInCluster(cl, flags, item)) {
        FinishInCluster(p, sh, cl, item, st, warp, lane);
      } else {
        DecodeFinishItem<kType, kHeadDim, kGroup, /*kNamedSync=*/true>(
            p, item, st, sh.base, kLayout, warp, lane);
      }
    }
    if (warp == 0 && lane == 0) TAILOR_DECODE_MARK(kTraceEnd);
  }

  static TAILOR_DEVICE void Run(const Params& p) {
#ifdef TAILOR_DECODE_TRACE
    const unsigned long long trace_start =
        threadIdx.x == 0 ? DecodeTraceStart() : 0;
#endif
    const Shared sh = Carve();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The work list and the maps do not depend on shared memory: ask for
    // them before the prologue's stores and barrier (which no load passes),
    // so that their round trip overlaps it.
    const DecodeWorkItem head = p.first_items[blockIdx.x];  // with first
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    const int flags = p.worker_begin[gridDim.x + 1];
    if (warp == kProducerWarp && lane == 0) {
      PrefetchTensorMap(&p.k_map);
      PrefetchTensorMap(&p.v_map);
    }
    // Query rows >= kGroup stay zero: item copies write rows < kGroup only.
    for (unsigned i = threadIdx.x; i < kLayout.q_bytes / 16; i += kThreads) {
      reinterpret_cast<uint4*>(sh.base + kLayout.q)[i] = make_uint4(0, 0, 0, 0);
    }
    const bool clustered = ClusterCtaCount() > 1;
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        sh.full[s].Init(1);
        sh.empty[s].Init(kDecodeConsumerWarps);
      }
      if (clustered) ClusterOf(sh).merged->Init(1);
      FenceMbarrierInit();
    }
    __syncthreads();
    if (clustered) ClusterArriveRelaxed();  // ClusterWait: Consume
    if (warp == kProducerWarp) {
      Produce(p, sh, first, last, head, flags, lane);
    } else {
      Consume(p, sh, first, last, head, flags, warp, lane);
    }
#ifdef TAILOR_DECODE_TRACE
    __syncthreads();
    if (threadIdx.x == 0) DecodeTraceDump(trace_start, last - first);
#endif
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_SM90_CUH_
