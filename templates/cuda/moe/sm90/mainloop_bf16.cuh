// templates/cuda/moe/sm90/mainloop_bf16.cuh — the Hopper grouped GEMM's
// bf16 mainloop: what one stage of the ring holds, the TMA copies that fill
// it (the producer's side) and the wgmma steps that read it (the
// consumers' side).
//
// Contract: device-only code for NVRTC. MoeSm90MainloopBf16<Shape> fills a
// stage of Shape::kStageBytes, 1024-byte aligned, with kSlots boxes, all
// 128-byte swizzled K-major (64 K = 128 bytes a row):
//   slot 0       A rows [row_begin, +kARows) x 64 K             (a_map)
//   slot 1 + q   W rows WBoxRow(expert, n_tile, q), +64 x 64 K   (w_map)
// and multiplies them into each consumer's f32 accumulators (Shape's
// layout). Rows past a tail are the next expert's A rows or the TMA's zero
// fill past A's end: each C row depends only on its own A row, so they
// never leak into stored rows.
//
// W rows of the CTA: plain, W rows [256 n, +256); gated (silu_and_mul),
// output columns [128 n, +128), laid out so that gate and up of one output
// sit in one thread's accumulators: 128 rows, the 128 gate rows then the
// 128 up rows; 64 rows and swap-AB, per consumer its 64 gate rows then
// their 64 up rows.
//
// An FP8 mainloop is another file with this interface: kSlots, SlotKeys,
// PrefetchW, WPolicy, Load, LoadClustered, Mma.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_MAINLOOP_BF16_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_MAINLOOP_BF16_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/cluster.cuh"
#include "runtime/cuda/mbarrier.cuh"
#include "runtime/cuda/tma.cuh"
#include "runtime/cuda/wgmma.cuh"
#include "templates/cuda/moe/params.h"
#include "templates/cuda/moe/sm90/scheduler.cuh"
#include "templates/cuda/moe/tile_raster.cuh"

namespace tailor::cuda {

template <typename Shape>
struct MoeSm90MainloopBf16 {
  using Params = MoeGroupedGemmSm90Params;
  static constexpr bool kGated = Shape::kGated;
  static constexpr bool kSwap = Shape::kSwap;
  static constexpr bool kSplitRows = Shape::kSplitRows;
  static constexpr int kN = Shape::kN;
  static constexpr int kOutN = Shape::kOutN;
  static constexpr int kBK = Shape::kBK;
  static constexpr int kBox = Shape::kBox;
  static constexpr int kARows = Shape::kARows;
  static constexpr unsigned kBoxBytes = Shape::kBoxBytes;
  static constexpr unsigned kABytes = Shape::kABytes;
  static constexpr int kAccumulators = Shape::kAccumulators;
  // The boxes of a stage: A, then 4 W boxes.
  static constexpr int kSlots = 5;
  using ClusterCopies = MoeSm90ClusterCopies<kSlots>;

  // ---- producer -------------------------------------------------------------
  // Global W row (of the [E * N, K] view) of box q of N tile n_tile.
  static int WBoxRow(int expert, int n_tile, int q) {
    if constexpr (kGated) {
      // 128 rows: gate 0-63, gate 64-127, up 0-63, up 64-127; 64 rows:
      // gate 0-63, up 0-63, gate 64-127, up 64-127.
      const int half = kSplitRows ? q % 2 : q / 2;
      const bool up = kSplitRows ? q >= 2 : q % 2 == 1;
      const int out = n_tile * (kMoeSm90WRows / 2) + half * kBox;
      return expert * kN + (up ? kOutN + out : out);
    } else {
      return expert * kN + n_tile * kMoeSm90WRows + q * kBox;
    }
  }

  // What slot j of a tile of `item` at N tile n_tile holds: its A row, then
  // its W rows (clusters compare them to share boxes).
  static void SlotKeys(const MoeWorkItem& item, int n_tile,
                       int (&keys)[kSlots]) {
    keys[0] = item.row_begin;
#pragma unroll
    for (int q = 0; q < 4; ++q) keys[1 + q] = WBoxRow(item.group, n_tile, q);
  }

  // Pulls W of K blocks [k_begin, k_end) of an expert's N tile into the L2.
  static void PrefetchW(const Params& p, int expert, int n_tile, int k_begin,
                        int k_end) {
    for (int kb = k_begin; kb < k_end; ++kb) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        TmaPrefetchL2(&p.w_map, {kb * kBK, WBoxRow(expert, n_tile, q)});
      }
    }
  }

  // The L2 policy of W's copies when p.w_evict_first is set.
  static unsigned long long WPolicy() { return L2EvictFirstPolicy(); }

  // Fills `stage` with K block kb of the item's tile at N tile n_tile; the
  // copies complete on `full`.
  static void Load(const Params& p, unsigned char* stage, Mbarrier* full,
                   int kb, const MoeWorkItem& item, int n_tile,
                   unsigned long long w_policy) {
    TmaLoad<2>(stage, &p.a_map, {kb * kBK, item.row_begin}, full);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned char* box = stage + kABytes + q * kBoxBytes;
      const int coords[2] = {kb * kBK, WBoxRow(item.group, n_tile, q)};
      if (p.w_evict_first) {
        TmaLoadHinted<2>(box, &p.w_map, coords, full, w_policy);
      } else {
        TmaLoad<2>(box, &p.w_map, coords, full);
      }
    }
  }

  static void CopyBox(void* box, const TensorMap* map, int x, int y,
                      Mbarrier* full, unsigned short mask) {
    if (__popc(mask) == 1) {
      TmaLoad<2>(box, map, {x, y}, full);
    } else {
      TmaLoadMulticast2d(box, map, x, y, full, mask);
    }
  }

  // A cluster CTA's copies of K block kb of a tile of `item` at N tile
  // n_tile: the slots this CTA issues, each multicast to the CTAs of its
  // mask. The keys are computed here, per K block, not held: a cluster
  // producer's registers hold the next unit's lookups meanwhile.
  static void LoadClustered(const Params& p, unsigned char* stage,
                            Mbarrier* full, int kb, const MoeWorkItem& item,
                            int n_tile, const ClusterCopies& copies) {
    const int k = kb * kBK;
    if (copies.Issue(0)) {
      CopyBox(stage, &p.a_map, k, item.row_begin, full, copies.Mask(0));
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (copies.Issue(1 + q)) {
        CopyBox(stage + kABytes + q * kBoxBytes, &p.w_map, k,
                WBoxRow(item.group, n_tile, q), full, copies.Mask(1 + q));
      }
    }
  }

  // ---- consumers ------------------------------------------------------------
  // Swap-AB: the consumer's two W boxes are wgmma's A (M = 64 W rows each),
  // the stage's tokens its B (N = kARows).
  static void MmaSwapped(const unsigned char* stage, int consumer,
                         bool accumulate, float (&acc)[kAccumulators]) {
    using Half = float[kAccumulators / 2];
    Half& lo = reinterpret_cast<Half&>(acc[0]);
    Half& hi = reinterpret_cast<Half&>(acc[kAccumulators / 2]);
    const unsigned char* w_tile = stage + kABytes + consumer * 2 * kBoxBytes;
    const unsigned long long tokens = SwizzledKMajorDescriptor(stage);
    const unsigned long long w0 = SwizzledKMajorDescriptor(w_tile);
    const unsigned long long w1 = SwizzledKMajorDescriptor(w_tile + kBoxBytes);
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      const bool add = accumulate || ks > 0;
      WgmmaM64NSmallK16<kARows>(lo, w0 + 2 * ks, tokens + 2 * ks, add);
      WgmmaM64NSmallK16<kARows>(hi, w1 + 2 * ks, tokens + 2 * ks, add);
    }
    WgmmaCommit();
  }

  // The A rows x W rows MMAs of one K block (the kernel without swap-AB).
  static void MmaRows(const unsigned char* stage, int consumer, bool accumulate,
                      float (&acc)[kAccumulators]) {
    const unsigned char* a_tile =
        stage + (kSplitRows ? consumer * 64 * kBK * 2 : 0);
    const unsigned char* b_tile =
        stage + kABytes + (kSplitRows ? 0 : consumer * 2 * kBoxBytes);
    const unsigned long long a = SwizzledKMajorDescriptor(a_tile);
    const unsigned long long b = SwizzledKMajorDescriptor(b_tile);
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // +32 bytes along K per step: +2 in the address field.
      if constexpr (kSplitRows) {
        WgmmaM64N256K16(acc, a + 2 * ks, b + 2 * ks, accumulate || ks > 0);
      } else {
        WgmmaM64N128K16(acc, a + 2 * ks, b + 2 * ks, accumulate || ks > 0);
      }
    }
    WgmmaCommit();
  }

  // One K block's 4 wgmma k16 steps on the stage at `stage`, committed as
  // one group (the caller waits for it).
  static void Mma(const unsigned char* stage, int consumer, bool accumulate,
                  float (&acc)[kAccumulators]) {
    if constexpr (kSwap) {
      MmaSwapped(stage, consumer, accumulate, acc);
    } else {
      MmaRows(stage, consumer, accumulate, acc);
    }
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_MAINLOOP_BF16_CUH_
