// templates/cuda/attention/prefill_sm90.cuh — ragged paged attention on
// Hopper (prefill, chunked prefill over cached prefixes, speculative and
// decode rows in one launch): persistent, warp-specialized, TMA + mbarrier
// ring + wgmma, over the host planner's work list.
//
// Template parameters (the specialization; never a length or a batch):
//   kType      Half16::kBf16 or kF16 (q, caches, out)
//   kHeadDim   D in {64, 128, 256}
//   kPack      query heads packed into a tile's rows: 1, 2, 4, 8 or 16
//   kPageSize  tokens per page: a multiple of 8 that divides the KV block
//              or is a multiple of it
// The KV block, K and V stages and query buffers follow from D
// (PrefillSm90ShapeFor).
// Launch: grid {workers of the plan}, block {kThreads = 384}, dynamic shared
// memory PrefillSm90SharedBytes(D); params as in prefill_params.h.
//
// Per CTA (items [worker_begin[c], worker_begin[c + 1]), each one query tile
// of 128 packed rows over KV blocks [kv_begin, kv_end)):
//   warpgroup 0, warps 0 and 1 (producers; registers lowered, setmaxnreg):
//     warp 0 fills the K ring and the query buffers, warp 1 the V ring.
//     Small pages make many small boxes (a 16-token page: 16 a tile), and
//     one warp issuing both rings' boxes left V late; a warp a ring issues
//     them side by side.
//     Warp 0, per item: K of its first block, then (once a query buffer is
//     free) the tile's rows by TMA (one box per 64 elements of D: 128
//     packed rows, token-major), then K of each further block. Warp 1: V
//     of each block.
//     Per KV block: looks up the block's pages (lane i: box i), waits for
//     a free stage of its ring, and loads each box by TMA with the page id
//     as a coordinate of the one map over the cache. A page id outside
//     [0, num_pages) is recorded in the error word and its box dropped:
//     read as zeros (an out-of-bounds coordinate) and named in the K
//     stage's message, whose bits the consumers mask.
//     The last box of a sequence whose end falls inside it is copied by the
//     warp itself for V, with the rows past the end zeroed: TMA would bring
//     whatever the cache holds there.
//     Warp 2 compares each item's planned KV length with the device's
//     kv_lens (one load an item) and records a mismatch; the tiles attend
//     the planned length.
//   warpgroups 1 and 2 (consumers, registers raised): rows [0, 64) and
//     [64, 128) of every tile, prefill_sm90_mainloop.cuh, then
//     prefill_sm90_epilogue.cuh; a tile's store runs while the next tile's
//     first Q K^T does (Consume). Each releases a K stage once its Q K^T on
//     it is done, a V stage once its P V is, and a query buffer once its
//     rows have left.
// Protocol: runtime/cuda/pipeline.cuh for the K and the V rings (compile
// with TAILOR_PIPELINE_CHECKS=1 for its checks); the query buffers use the
// same parity rules with their own full / empty barriers (empty counts both
// consumer warpgroups).
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/entry.cuh"
#include "runtime/cuda/error_word.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/pipeline.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/warp_mma.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/attention/page_table.cuh"
#include "templates/cuda/attention/prefill_params.h"
#include "templates/cuda/attention/prefill_sm90_epilogue.cuh"
#include "templates/cuda/attention/prefill_sm90_mainloop.cuh"

namespace tailor::cuda {

template <Half16 kType, int kHeadDim, int kPack, int kPageSize>
struct PrefillSm90Kernel {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "head_dim must be 64, 128 or 256");
  static_assert(kPack == 1 || kPack == 2 || kPack == 4 || kPack == 8 ||
                    kPack == 16,
                "head pack must be a power of two up to 16");
  static constexpr PrefillSm90Shape kShape = PrefillSm90ShapeFor(kHeadDim);
  static constexpr int kBlockN = kShape.kv_block;
  static constexpr int kKStages = kShape.k_stages;
  static constexpr int kVStages = kShape.v_stages;
  static constexpr int kQBuffers = kShape.q_buffers;
  static_assert(kPageSize % 8 == 0 && kPageSize <= 256 &&
                    (kBlockN % kPageSize == 0 || kPageSize % kBlockN == 0),
                "TMA path: page_size must be a multiple of 8 (at most 256) "
                "that divides the KV block or is a multiple of it");
  static constexpr int kBoxTokens = kPageSize < kBlockN ? kPageSize : kBlockN;
  static constexpr int kBoxes = kBlockN / kBoxTokens;  // <= 16: one per lane
  static constexpr int kChunks = kHeadDim / kPrefillChunk;
  static constexpr unsigned kBoxBytes = kBoxTokens * 128;  // one chunk
  static constexpr unsigned kKvChunkBytes = kBlockN * 128;
  static constexpr unsigned kQChunkBytes = kPrefillTileRows * 128;

  using Params = PrefillParams;
  using KRing = PipelineRing<kKStages, int>;  // message: dropped boxes
  using VRing = PipelineRing<kVStages, int>;
  using Mainloop = PrefillSm90Mainloop<kType, kHeadDim, kBlockN, kBoxTokens>;
  using Epilogue = PrefillSm90Epilogue<kType, kHeadDim, kPack>;
  static constexpr int kThreads = 384;
  static constexpr int kMinBlocksPerSm = 1;  // a register cap for setmaxnreg
  // D = 256 holds 128 O registers a consumer thread; below, the consumers
  // fit in 224 and the producers get the rest.
  static constexpr int kProducerRegisters = kHeadDim > 128 ? 40 : 56;
  static constexpr int kConsumerRegisters = kHeadDim > 128 ? 232 : 224;
  // setmaxnreg moves registers within what the launch allocated (the count
  // ptxas picks for kThreads at one CTA an SM, rounded down to 8): an
  // increase beyond what the producers gave back never returns.
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * 256 <=
                    (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg: the warpgroups' registers exceed the launch's");
  static constexpr unsigned kKRingBytes = PrefillAlignUp(sizeof(KRing), 8);
  static constexpr unsigned kVRingBytes = PrefillAlignUp(sizeof(VRing), 8);
  static constexpr PrefillSm90Layout kLayout =
      MakePrefillSm90Layout(kHeadDim, kKRingBytes + kVRingBytes);
  static constexpr unsigned kQBarriers =
      kLayout.barriers + kKRingBytes + kVRingBytes;
  static_assert(kKRingBytes + kVRingBytes <= kPrefillRingBytesBound,
                "the host sizes shared memory with kPrefillRingBytesBound");
  static_assert(kBoxBytes % 1024 == 0 || kBoxTokens == 8,
                "boxes start on 128-byte swizzle rows");
  static_assert(kLayout.tile_bytes == kBlockN * kHeadDim * 2,
                "a K or V tile is kv_block rows of D");

  struct Shared {
    unsigned char* q;  // [kQBuffers][kChunks][128 rows][64]
    unsigned char* k;  // [kKStages][kChunks][kBlockN][64]
    unsigned char* v;  // [kVStages][kChunks][kBlockN][64]
    KRing* k_ring;
    VRing* v_ring;
    Mbarrier* q_full;   // [kQBuffers]
    Mbarrier* q_empty;  // [kQBuffers]
  };

  static TAILOR_DEVICE Shared Carve() {
    extern __shared__ unsigned char prefill_smem[];
    const unsigned misalign = SharedAddress(prefill_smem) % 1024;
    unsigned char* base = prefill_smem + (misalign == 0 ? 0 : 1024 - misalign);
    Shared s;
    s.q = base + kLayout.q;
    s.k = base + kLayout.k;
    s.v = base + kLayout.v;
    s.k_ring = reinterpret_cast<KRing*>(base + kLayout.barriers);
    s.v_ring = reinterpret_cast<VRing*>(base + kLayout.barriers + kKRingBytes);
    s.q_full = reinterpret_cast<Mbarrier*>(base + kQBarriers);
    s.q_empty = s.q_full + kQBuffers;
    return s;
  }

  // The query buffers walk their own ring: buffer k % kQBuffers, parity
  // (k / kQBuffers) & 1 for the k-th item.
  static TAILOR_DEVICE int QBuffer(int k) { return k % kQBuffers; }
  static TAILOR_DEVICE unsigned QParity(int k) { return (k / kQBuffers) & 1; }

  // KV blocks of an item.
  static TAILOR_DEVICE int BlocksOf(const PrefillWorkItem& item) {
    return (item.kv_end - item.kv_begin + kBlockN - 1) / kBlockN;
  }

  // ---- producer -------------------------------------------------------------

  // One KV block's pages as the producer warp holds them: lane i the page
  // of box i (num_pages, read as zeros, past the sequence's end or for a
  // bad id), and the boxes dropped for bad ids (the same in every lane).
  struct BlockPages {
    int start;  // first KV position of the block
    int page;
    unsigned dropped;
  };

  // Lane `box`'s page id for the block at `start`: num_pages (read as
  // zeros) past the sequence's end, and for a bad id, which it records and
  // flags in `bad`.
  static TAILOR_DEVICE int PageOf(const Params& p, const PrefillWorkItem& item,
                                  int start, int box, bool& bad) {
    bad = false;
    const int token = start + box * kBoxTokens;
    if (box >= kBoxes || token >= item.kv_len) return p.num_pages;
    const int index = token / kPageSize;
    const PageRow row =
        PageRowOf(p.page_indptr, p.block_table_stride, p.max_pages, item.seq);
    const int page = PageAt(p.block_table, row, index, -1);
    if (page < 0 || page >= p.num_pages) {
      RecordLowestError(p.errors, kPrefillErrorBadPage,
                        static_cast<long long>(item.seq) * p.max_pages + index,
                        page);
      bad = true;
      return p.num_pages;
    }
    return page;
  }

  static TAILOR_DEVICE BlockPages PagesOf(const Params& p,
                                          const PrefillWorkItem& item, int j,
                                          int lane) {
    BlockPages b;
    b.start = item.kv_begin + j * kBlockN;
    bool bad;
    b.page = PageOf(p, item, b.start, lane, bad);
    b.dropped = __ballot_sync(0xffffffffu, bad);
    return b;
  }

  // The warp's own copy of V box `box` of the stage (tokens past the
  // sequence's end zeroed), 16 bytes a lane at a time.
  static TAILOR_DEVICE void CopyEdgeBox(const Params& p,
                                        const PrefillWorkItem& item,
                                        unsigned char* v_tile, int start,
                                        int box, int page, int lane) {
    constexpr int kUnits = kHeadDim / 8;  // 16-byte units of a row
    const int first = start + box * kBoxTokens;
    const int kv_head = item.q_head / p.group;
    const unsigned short* head =
        static_cast<const unsigned short*>(p.v_cache) +
        static_cast<long long>(page) * p.v_stride_page +
        static_cast<long long>(kv_head) * p.v_stride_head;
    for (int e = lane; e < kBoxTokens * kUnits; e += 32) {
      const int row = e / kUnits, unit = e % kUnits;
      const int token = first + row;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (token < item.kv_len) {
        value = *reinterpret_cast<const uint4*>(
            head +
            static_cast<long long>(token % kPageSize) * p.v_stride_token +
            unit * 8);
      }
      const int tile_row = box * kBoxTokens + row;
      *reinterpret_cast<uint4*>(v_tile + (unit / 8) * kKvChunkBytes +
                                tile_row * 128 +
                                (((unit % 8) ^ (tile_row % 8)) << 4)) = value;
    }
    FenceSharedToAsyncProxy();
  }

  // Lane `lane`'s boxes of one K or V tile, every chunk of D, by TMA.
  static TAILOR_DEVICE void LoadBoxes(const TensorMap* map, unsigned char* tile,
                                      const PrefillWorkItem& item,
                                      const BlockPages& b, int lane,
                                      Mbarrier* full, const Params& p) {
    const int token = b.start + lane * kBoxTokens;
    const int kv_head = item.q_head / p.group;
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      const int coords[5] = {0, token % kPageSize, chunk, kv_head, b.page};
      TmaLoad<5>(tile + chunk * kKvChunkBytes + lane * kBoxBytes, map, coords,
                 full);
    }
  }

  // K of one block into the next K stage; its message names the dropped
  // boxes.
  static TAILOR_DEVICE void LoadK(const Params& p, const Shared& sh,
                                  const PrefillWorkItem& item,
                                  const BlockPages& b, PipelineCursor& c,
                                  int lane, int block) {
    PrefillWaitEmpty(*sh.k_ring, c, kPrefillWaitKEmpty, item, block);
    if (lane == 0) {
      ArmFull(*sh.k_ring, c, kLayout.tile_bytes, static_cast<int>(b.dropped));
    }
    __syncwarp();
    if (lane < kBoxes) {
      LoadBoxes(&p.k_map, sh.k + c.stage * kLayout.tile_bytes, item, b, lane,
                &sh.k_ring->full[c.stage], p);
    }
    c.Advance(kKStages);
  }

  // V of one block into the next V stage; the box holding the sequence's
  // last token, when the end falls inside it, copied by the warp.
  static TAILOR_DEVICE void LoadV(const Params& p, const Shared& sh,
                                  const PrefillWorkItem& item,
                                  const BlockPages& b, PipelineCursor& c,
                                  int lane, int block) {
    const int last = item.kv_len - 1;
    const int edge_box = (last >= b.start && last < b.start + kBlockN &&
                          item.kv_len % kBoxTokens != 0)
                             ? (last - b.start) / kBoxTokens
                             : -1;
    const int edge_page =
        __shfl_sync(0xffffffffu, b.page, edge_box < 0 ? 0 : edge_box);
    const bool copy_edge = edge_box >= 0 && edge_page < p.num_pages;
    PrefillWaitEmpty(*sh.v_ring, c, kPrefillWaitVEmpty, item, block);
    unsigned char* v_tile = sh.v + c.stage * kLayout.tile_bytes;
    if (copy_edge) {
      CopyEdgeBox(p, item, v_tile, b.start, edge_box, edge_page, lane);
    }
    __syncwarp();
    if (lane == 0) {
      const unsigned stored = copy_edge ? kChunks * kBoxBytes : 0;
      ArmFullStored(*sh.v_ring, c, kLayout.tile_bytes - stored, stored);
    }
    __syncwarp();
    if (lane < kBoxes && (lane != edge_box || !copy_edge)) {
      LoadBoxes(&p.v_map, v_tile, item, b, lane, &sh.v_ring->full[c.stage], p);
    }
    c.Advance(kVStages);
  }

  // The tile's query rows into buffer QBuffer(k), once both consumer
  // warpgroups are done with that buffer's previous tile.
  static TAILOR_DEVICE void LoadQuery(const Params& p, const Shared& sh,
                                      const PrefillWorkItem& item, int k,
                                      int lane) {
    const int qb = QBuffer(k);
    PrefillWatch(sh.q_empty[qb], QParity(k) ^ 1, kPrefillWaitQEmpty, item, -1,
                 qb, k);
    sh.q_empty[qb].Wait(QParity(k) ^ 1);
    if (lane != 0) return;
    sh.q_full[qb].ArriveExpectTx(kLayout.q_bytes);
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      const int coords[5] = {0, 0, item.q_head / kPack, item.q_token, chunk};
      TmaLoad<5>(sh.q + qb * kLayout.q_bytes + chunk * kQChunkBytes, &p.q_map,
                 coords, &sh.q_full[qb]);
    }
  }

  // Warp 0, per item: K of block 0 (it needs only a free stage), then its
  // query (which may wait for the previous tile to leave its buffer), then
  // K of the further blocks, in the order the consumers free the stages.
  static TAILOR_DEVICE void ProduceK(const Params& p, const Shared& sh) {
    const int lane = threadIdx.x % 32;
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    PipelineCursor kc;
    for (int i = first; i < last; ++i) {
      const PrefillWorkItem item = p.items[i];
      const int blocks = BlocksOf(item);
      PrefillMark(0, i - first, 0, 1);
      if (blocks > 0)
        LoadK(p, sh, item, PagesOf(p, item, 0, lane), kc, lane, 0);
      PrefillMark(0, -1, 0, 2);
      LoadQuery(p, sh, item, i - first, lane);
      __syncwarp();
      for (int j = 1; j < blocks; ++j) {
        PrefillMark(0, -1, j, 3);
        LoadK(p, sh, item, PagesOf(p, item, j, lane), kc, lane, j);
      }
    }
    PrefillMark(0, last - first, -1, 4);
  }

  // Warp 1: V of every block of every item.
  static TAILOR_DEVICE void ProduceV(const Params& p, const Shared& sh) {
    const int lane = threadIdx.x % 32;
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    PipelineCursor vc;
    for (int i = first; i < last; ++i) {
      const PrefillWorkItem item = p.items[i];
      const int blocks = BlocksOf(item);
      for (int j = 0; j < blocks; ++j) {
        LoadV(p, sh, item, PagesOf(p, item, j, lane), vc, lane, j);
      }
    }
  }

  // Warp 2 (otherwise idle): each item's planned KV length against the
  // device's, one load per item, beside the pipeline.
  static TAILOR_DEVICE void CheckKvLens(const Params& p) {
    const int last = p.worker_begin[blockIdx.x + 1];
#pragma unroll 1
    for (int i = p.worker_begin[blockIdx.x] + threadIdx.x % 32; i < last;
         i += 32) {
      CheckKvLen(p.kv_lens, p.items[i].seq, p.items[i].kv_len, p.errors,
                 kPrefillErrorBadKvLen);
    }
  }

  // ---- consumers ------------------------------------------------------------

  using Pipes = typename Mainloop::template Pipes<kKStages, kVStages>;
  using State = typename Mainloop::State;
  using Scores = typename Mainloop::Scores;

  static TAILOR_DEVICE unsigned char* QTile(const Shared& sh, int k) {
    return sh.q + QBuffer(k) * kLayout.q_bytes;
  }

  // Waits for the query rows of the CTA's k-th item.
  static TAILOR_DEVICE void WaitQuery(const Shared& sh,
                                      const PrefillWorkItem& item, int k) {
    const int qb = QBuffer(k);
    PrefillWatch(sh.q_full[qb], QParity(k), kPrefillWaitQFull, item, -1, qb, k);
    sh.q_full[qb].Wait(QParity(k));
  }

  static TAILOR_DEVICE PrefillRowLimits LimitsOf(const Params& p,
                                                 const PrefillWorkItem& item,
                                                 int wg) {
    const int row0 = wg * kPrefillConsumerRows + 16 * ((threadIdx.x / 32) % 4) +
                     (threadIdx.x % 32) / 4;
    return RowLimitsOf(p, item, kPack, row0);
  }

  // Normalizes and stores the warpgroup's rows of the CTA's k-th item, then
  // frees its query buffer (the full tile's output is staged there).
  static TAILOR_DEVICE void Store(const Params& p, const Shared& sh,
                                  const PrefillWorkItem& item, int k, State& st,
                                  int wg, bool leader) {
    PrefillMark(1 + wg, -1, -1, 6);
    const float scale = p.cap_scale != 0.0f ? 1.0f : p.score_scale;
    const typename Epilogue::Rows rows = Epilogue::Normalize(st, scale, wg);
    if (item.partial >= 0) {
      Epilogue::StorePartial(p, item, st.o, rows);
    } else {
      Epilogue::StoreLse(p, item, rows);
      if (item.rows == kPrefillTileRows) {
        Epilogue::StoreByTma(p, item, st.o, rows, QTile(sh, k), wg, leader);
      } else {
        Epilogue::StoreRows(p, item, st.o, rows);
      }
    }
    if (leader) sh.q_empty[QBuffer(k)].Arrive();
    PrefillMark(1 + wg, -1, -1, 7);
  }

  // The warpgroup's rows of every item of the CTA. When an item and the
  // next both have KV blocks, the item's last P V and the next's first
  // Q K^T share one turn, and the item's rows are stored while that Q K^T
  // runs: otherwise the tensor pipe idles through each tile's store and
  // first softmax. Not at D = 256, whose 128 O registers leave no room for
  // the next tile's S during the store (it spills).
  static constexpr bool kOverlapStores = kHeadDim <= 128;
  static TAILOR_DEVICE void Consume(const Params& p, const Shared& sh, int wg) {
    const bool leader = threadIdx.x % 128 == 0;
    const int first = p.worker_begin[blockIdx.x];
    const int last = p.worker_begin[blockIdx.x + 1];
    // Warpgroup 0 issues first.
    if (wg == 1) ScheduleArrive(wg);
    Pipes x = {sh.k, sh.v, sh.k_ring, sh.v_ring, {}, {}, wg, leader};
    State st;
    Scores sc;
    bool started = false;  // block 0 of item i ran with item i - 1's last P V
    for (int i = first; i < last; ++i) {
      const PrefillWorkItem item = p.items[i];
      const int k = i - first;
      const int blocks = BlocksOf(item);
      const PrefillRowLimits lim = LimitsOf(p, item, wg);
      PrefillMark(1 + wg, k, -1, 0);
      if (!started) {
        WaitQuery(sh, item, k);
        if (blocks > 0) {
          Mainloop::First(p, item, QTile(sh, k), x, lim, st, sc);
        } else {
          Mainloop::Init(st);
        }
      }
      Mainloop::Middle(p, item, blocks, QTile(sh, k), x, lim, st, sc);
      const PrefillWorkItem next = i + 1 < last ? p.items[i + 1] : item;
      started =
          kOverlapStores && blocks > 0 && i + 1 < last && BlocksOf(next) > 0;
      if (started) {
        WaitQuery(sh, next, k + 1);
        const unsigned dropped = Mainloop::LastPvWithNextS(
            item, blocks, next, QTile(sh, k + 1), x, st, sc);
        Store(p, sh, item, k, st, wg, leader);
        Mainloop::FinishFirst(p, next, x, LimitsOf(p, next, wg), st, sc,
                              dropped);
      } else {
        if (blocks > 0) Mainloop::LastPv(item, blocks, x, st, sc);
        Store(p, sh, item, k, st, wg, leader);
      }
    }
    // Warpgroup 1's last turn handed to 0: take it, so no arrival is left.
    PrefillMark(1 + wg, last - first, -1, 8);
    if (wg == 0) ScheduleSync(wg);
  }

  static TAILOR_DEVICE void Run(const Params& p) {
    const Shared sh = Carve();
    if (threadIdx.x == 0) {
      sh.k_ring->Init(/*groups=*/2, kLayout.tile_bytes);
      sh.v_ring->Init(/*groups=*/2, kLayout.tile_bytes);
      for (int b = 0; b < kQBuffers; ++b) {
        sh.q_full[b].Init(1);
        sh.q_empty[b].Init(2);
      }
      FenceMbarrierInit();
      PrefetchTensorMap(&p.q_map);
      PrefetchTensorMap(&p.k_map);
      PrefetchTensorMap(&p.v_map);
      PrefetchTensorMap(&p.out_map);
    }
    __syncthreads();
    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
      SetMaxRegistersDecrease<kProducerRegisters>();
      if (threadIdx.x / 32 == 0) ProduceK(p, sh);
      if (threadIdx.x / 32 == 1) ProduceV(p, sh);
      if (threadIdx.x / 32 == 2) CheckKvLens(p);
    } else {
      SetMaxRegistersIncrease<kConsumerRegisters>();
      Consume(p, sh, warpgroup - 1);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_PREFILL_SM90_CUH_
