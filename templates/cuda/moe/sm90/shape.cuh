// templates/cuda/moe/sm90/shape.cuh — the compile-time shape of one Hopper
// grouped-GEMM variant: its preconditions and every constant that the
// kernel, the tile scheduler, the mainloop and the epilogue share.
//
// Contract: device-only code for NVRTC; constants only. The template
// arguments are the variant's key: N, K, plan tile rows, epilogue
// (kMoeEpilogue*), TMA-store epilogue (0/1), cluster size (1, 2, 4) and
// swap-AB (0/1). The launch-shape constants the host must agree with
// (threads, stages, shared memory) come from templates/cuda/moe/params.h.
//
// CTA tile: kCtaRows rows (one plan tile: 64 for plan tiles of at most 64
// rows, else 128) x 256 W rows x 64 K per stage. A stage holds the A box
// (kARows rows x 64 K) and 4 W boxes of 64 W rows x 64 K.
//   128 rows   consumer c computes rows [64 c, +64) x all 256 W rows
//              (m64n256k16): both consumers share every W tile.
//   64 rows    consumer c computes the 64 rows x W rows [128 c, +128)
//              (m64n128k16).
//   swap-AB    (plan tiles of at most 32 rows) the A box is the tile's
//              tokens rounded up to kARows = 8, 16 or 32, and the W boxes
//              are wgmma's M: consumer c computes its two W boxes 2 c,
//              2 c + 1 x all the tokens (m64nNk16, N = kARows).
#ifndef TAILOR_TEMPLATES_CUDA_MOE_SM90_SHAPE_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_SM90_SHAPE_CUH_

#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

template <int N, int K, int TileRows, int Epilogue, int TmaStore,
          int Cluster = 1, int SwapAB = 0>
struct MoeSm90Shape {
  static_assert(N >= 1 && K >= 1, "N and K must be positive");
  static_assert(K % 8 == 0, "TMA rows must be 16-byte multiples: K % 8 == 0");
  static_assert(TileRows >= 1 && TileRows <= kMoeSm90MaxRows,
                "a plan tile must fit the CTA's 128 rows");
  static_assert(Epilogue == kMoeEpilogueNone ||
                    Epilogue == kMoeEpilogueSiluAndMul,
                "unknown epilogue");
  static_assert(Epilogue != kMoeEpilogueSiluAndMul || N % 2 == 0,
                "silu_and_mul needs an even N (gate | up)");
  static_assert(TmaStore == 0 || TmaStore == 1, "kTmaStore is 0 or 1");
  static_assert(Cluster == 1 ||
                    ((Cluster == 2 || Cluster == 4) && TileRows > 64),
                "clusters of 2 or 4 share tiles of the 128-row kernel");
  static_assert(SwapAB == 0 ||
                    (SwapAB == 1 && TileRows <= kMoeSm90SwapMaxRows &&
                     TmaStore == 0 && Cluster == 1),
                "swap-AB: plan tiles of at most 32 rows, register stores, "
                "no clusters");

  // ---- the key's arguments ------------------------------------------------
  static constexpr int kN = N;  // W rows per expert
  static constexpr int kK = K;
  static constexpr int kTileRows = TileRows;  // rows of a core plan tile
  static constexpr int kTmaStore = TmaStore;
  static constexpr int kCluster = Cluster;
  static constexpr bool kClustered = kCluster > 1;
  static constexpr bool kSwap = SwapAB == 1;
  static constexpr bool kGated = Epilogue == kMoeEpilogueSiluAndMul;
  static constexpr int kOutN = kGated ? kN / 2 : kN;  // columns of C

  // ---- CTA tile and stage ring --------------------------------------------
  static constexpr int kCtaRows = MoeSm90CtaRows(kTileRows);
  static constexpr bool kSplitRows = kCtaRows == 128;  // else split W rows
  static constexpr int kARows = MoeSm90ARows(kTileRows, kSwap);  // A box
  static constexpr int kStages = MoeSm90Stages(kARows, kTmaStore);
  static constexpr int kBK = kMoeSm90KTile;
  static constexpr int kKBlocks = (kK + kBK - 1) / kBK;
  static constexpr int kNTiles = MoeSm90NTiles(kGated, kN);
  static constexpr int kBox = kMoeSm90BoxRows;
  static constexpr unsigned kBoxBytes = kBox * kBK * 2;  // 8 KiB
  static constexpr unsigned kABytes = kARows * kBK * 2;  // A box
  static constexpr unsigned kStageBytes = MoeSm90StageBytes(kARows);
  static_assert(kStageBytes == kABytes + 4 * kBoxBytes,
                "A box + 4 W boxes per stage");

  // ---- per consumer warpgroup ---------------------------------------------
  // Rows x W rows of its wgmma tile, and its f32 accumulators per thread
  // (64 x 256 / 128, 64 x 128 / 128, or swap-AB 2 x 64 x tokens / 128).
  static constexpr int kConsumerWRows = kSplitRows ? 256 : 128;
  static constexpr int kAccumulators = kSwap ? kARows : kConsumerWRows / 2;
  // Output columns of its tile, and the 64 x 64 boxes of a TMA store.
  static constexpr int kConsumerOutCols =
      kGated ? kConsumerWRows / 2 : kConsumerWRows;
  static constexpr int kStoreBoxes = kConsumerOutCols / 64;
  // TMA-store epilogue: a full tile's rows fill the CTA (the plan tile is
  // the CTA tile) and C rows are 16-byte multiples.
  static_assert(!kTmaStore || (kTileRows == kCtaRows && kOutN % 8 == 0),
                "TMA stores need plan tiles of the CTA's rows and N % 8 == 0");

  // ---- clusters -------------------------------------------------------------
  // A cluster unit is kClusterItems consecutive items x kClusterNs N tiles
  // (MoeSm90ClusterUnits); kColumnNTiles columns of kClusterNs N tiles each.
  static constexpr int kClusterNs = MoeSm90ClusterNs(kCluster);
  static constexpr int kClusterItems = MoeSm90ClusterItems(kCluster);
  static constexpr int kColumnNTiles = (kNTiles + kClusterNs - 1) / kClusterNs;
};

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_SM90_SHAPE_CUH_
