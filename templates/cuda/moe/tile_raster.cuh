// templates/cuda/moe/tile_raster.cuh — the order in which the grouped GEMMs
// (grouped_gemm_sm80.cuh, sm90/) walk their (work item, N tile) tiles.
//
// Contract: device-only code for NVRTC. Tile t of a launch over num_work
// items x n_tiles N tiles maps to one (item, N tile); tiles run in raster
// groups of about kGroupItems items, N tile by N tile within a group, so a
// CTA wave reuses each W tile across neighbouring items of one expert and
// each A tile across N tiles in the L2. The group bounds (params
// expert_groups, kMoeGroups* in params.h) may move to expert starts.
#ifndef TAILOR_TEMPLATES_CUDA_MOE_TILE_RASTER_CUH_
#define TAILOR_TEMPLATES_CUDA_MOE_TILE_RASTER_CUH_

#include "runtime/cuda/arch.cuh"
#include "runtime/cuda/numeric.cuh"
#include "templates/cuda/moe/params.h"

namespace tailor::cuda {

inline constexpr int kGroupItems = 8;

struct TileCoord {
  int item;
  int n_tile;
};

// Where a raster group that nominally starts at item `s` starts with
// forward bounds (kMoeGroupsForward; items of one expert are consecutive in
// the work list): the first item in [s, s + kGroupItems) that starts an
// expert (num_work past the end). An expert that runs past s + kGroupItems
// fills whole groups anyway: its bound stays at s. One round of independent
// loads.
TAILOR_DEVICE int ExpertGroupStart(const MoeWorkItem* work, int s,
                                   int num_work) {
  if (s <= 0) return 0;
  if (s >= num_work) return num_work;
  const int expert = __ldg(&work[s - 1].group);
  int start = s;  // the expert runs past the window
#pragma unroll
  for (int i = kGroupItems - 1; i >= 0; --i) {
    if (s + i >= num_work) {
      start = num_work;
    } else if (__ldg(&work[s + i].group) != expert) {
      start = s + i;
    }
  }
  return start;
}

// The same with back bounds (kMoeGroupsBack): the start of the expert of
// item s when it lies in (s - kGroupItems, s]; else s (the expert began at
// least kGroupItems items before: it fills whole groups anyway). One round
// of independent loads. (One function for both, with the window and the
// test chosen at run time, compiles slower: ptxas then keeps four inlined
// copies of the larger body.)
TAILOR_DEVICE int ExpertGroupStartBack(const MoeWorkItem* work, int s,
                                       int num_work) {
  if (s <= 0) return 0;
  if (s >= num_work) return num_work;
  const int expert = __ldg(&work[s].group);
  if (s >= kGroupItems && __ldg(&work[s - kGroupItems].group) == expert) {
    return s;
  }
  int start = s;
#pragma unroll
  for (int i = 1; i < kGroupItems; ++i) {
    if (s - i >= 0 && __ldg(&work[s - i].group) == expert) start = s - i;
  }
  return start;
}

// Tile t of a launch over num_work items x n_tiles N tiles. Group g is
// items [B(g), B(g + 1)) with B(g) = g kGroupItems (kMoeGroupsFixed), or
// that moved to an expert start (`groups`: ExpertGroupStart or
// ExpertGroupStartBack; see kMoeGroupsFixed in params.h); tiles run
// group by group, N tile by N tile within a group.
TAILOR_DEVICE TileCoord TileOf(int t, const MoeWorkItem* work, int num_work,
                               int n_tiles, int groups = kMoeGroupsFixed) {
  const int slot = t / n_tiles;
  const int nominal = slot / kGroupItems;
  int first = nominal * kGroupItems;
  int end = Min(first + kGroupItems, num_work);
  if (groups == kMoeGroupsForward) {
    // B(g) lies in [g kGroupItems, (g + 1) kGroupItems): the slot's group
    // is `nominal` or the one before it.
    first = ExpertGroupStart(work, first, num_work);
    if (first > slot) {
      end = first;
      first = ExpertGroupStart(work, (nominal - 1) * kGroupItems, num_work);
    } else {
      end = ExpertGroupStart(work, (nominal + 1) * kGroupItems, num_work);
    }
  } else if (groups == kMoeGroupsBack) {
    // B(g) lies in ((g - 1) kGroupItems, g kGroupItems]: the slot's group
    // is `nominal` or the one after it.
    first = ExpertGroupStartBack(work, first, num_work);
    end = ExpertGroupStartBack(work, (nominal + 1) * kGroupItems, num_work);
    if (end <= slot) {
      first = end;
      end = ExpertGroupStartBack(work, (nominal + 2) * kGroupItems, num_work);
    }
  }
  const int items = end - first;
  const int rest = t - first * n_tiles;
  return {first + rest % items, rest / items};
}

}  // namespace tailor::cuda

#endif  // TAILOR_TEMPLATES_CUDA_MOE_TILE_RASTER_CUH_
