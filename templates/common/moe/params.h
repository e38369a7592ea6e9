// templates/common/moe/params.h — what the MoE kernels of every GPU vendor
// share: the device work list, the route header and the params of the
// kernels whose source is one for CUDA and HIP (Route, Pack, Combine) and of
// the portable grouped GEMM, with the launch shapes host and device agree on.
//
// Contract: plain C++ that compiles as host code (g++) and as device code
// (NVRTC -default-device; hiprtc inside the vendor header's host-device
// region): no vendor keywords, no standard headers. Namespace tailor::gpu;
// templates/cuda/moe/params.h and templates/hip/moe/params.h bring the names
// into their backends' namespaces.
//
// The device Route writes, per step, into the workspace: counts, offsets,
// permutation, inverse, the work list (MoeWorkItem, the layout of the host
// planner's plan::WorkItem) and, in its scratch, a MoeRouteHeader (the plan's
// real length, the error words) followed by the per-segment histogram.
//
// The device work list holds the host plan's items in expert-major order:
// expert 0's core tiles, then its tail, then expert 1's ... A GPU runs every
// item of a GEMM in one launch, and this order keeps the tiles that stream
// one expert's weights next to each other (the host order, every core tile
// then the tails by class, serves one launch per class on the CPU).
#ifndef TAILOR_TEMPLATES_COMMON_MOE_PARAMS_H_
#define TAILOR_TEMPLATES_COMMON_MOE_PARAMS_H_

#include "templates/common/error_word.h"

namespace tailor::gpu {

// One core tile or tail piece of one expert (plan::WorkItem).
struct MoeWorkItem {
  int row_begin;   // first global row
  int rows;        // tile rows (core) or 1..tail_class (tail)
  int group;       // expert
  int tail_class;  // 0: core
};

// A template dimension of 0 (kMoeRuntimeDim) is read from the params at run
// time: the generic kernels of background JIT (src/backends/cuda/
// generic_kernels.h), built once per dtype and arch, serve every shape with
// the code of the specialized ones. The fields they read are marked
// "(generic)"; the host fills them for every launch.
inline constexpr int kMoeRuntimeDim = 0;

// Largest core tile (moe::kMaxTileRows).
inline constexpr int kMoeMaxTileRows = 128;
// Assignments per block of the count and scatter kernels: one histogram
// column per segment.
inline constexpr int kMoeRouteSegment = 1024;
// The route scratch starts with the header, then the histogram.
inline constexpr int kMoeRouteHeaderBytes = 256;
// "No error recorded" (templates/common/error_word.h).
inline constexpr unsigned long long kMoeNoError = kNoErrorWord;

struct MoeRouteHeader {
  // Error words (templates/common/error_word.h) of the lowest bad topk_ids
  // entry (value outside [0, id limit)) and of the lowest bad expert_map
  // entry (value outside [-1, E)), or kMoeNoError. Sticky until the host
  // takes them (Workspace::TakeRoutingErrors).
  unsigned long long bad_id;
  unsigned long long bad_map_entry;
  int num_work;     // work items of the last plan
  int num_rows;     // R
  int blocks_done;  // count blocks finished (the last one plans); 0 between
  // The Hopper grouped GEMM's tile schedulers: tiles handed out so far past
  // the first wave (dynamic), tiles whose copies every producer has issued
  // (wave sync), and CTAs finished; the last CTA resets them to 0, so they
  // are 0 between launches (the route scratch starts zeroed).
  int gemm_next_tile;
  int gemm_ctas_done;
  int gemm_tiles_issued;
};

// The route kernels (SpecKey::variant of moe.route).
// Per-segment histograms; the last block to finish plans (counts, offsets,
// work list). One launch.
inline constexpr unsigned kMoeRouteCountPlan = 0;
// The same, plus the scatter, in one block: routes of one segment.
inline constexpr unsigned kMoeRouteFused = 1;
// Permutation and inverse, one block per segment.
inline constexpr unsigned kMoeRouteScatter = 2;

struct MoeRouteParams {
  const int* topk_ids;      // [tokens, topk]
  const int* expert_map;    // [map_size] or null
  const int* valid_tokens;  // [1] or null (all tokens)
  long long map_size;       // ids are checked against it when a map is set
  int tokens;               // T
  int topk;                 // k
  int experts;              // E (local)
  int assignments;          // T * k
  int segments;             // ceil(assignments / kMoeRouteSegment)
  int tile_rows;
  int max_work;
  int* counts;        // [E]
  int* offsets;       // [E + 1]
  int* permutation;   // [assignments]; -1 past R
  int* inverse;       // [assignments]; -1 when dropped
  MoeWorkItem* work;  // [max_work]
  MoeRouteHeader* header;
  // [segments, E]: each segment's counts; after the plan, the assignments
  // to e in the segments before s (the scatter adds offsets[e]).
  int* histogram;
  // tail_classes[n]: the class of a tail of n rows, n in [1, tile_rows).
  int tail_classes[kMoeMaxTileRows];
};

// a[r, :] = hidden[permutation[r] / topk, :] for entries in [0, T * k).
struct MoePackParams {
  const void* hidden;      // [tokens, H]
  const int* permutation;  // [rows]
  void* a;                 // [rows, H]
  int rows;
  int tokens;
  int topk;
  int hidden_dim;  // H (generic)
};

// Grouped GEMM over the device work list: one launch, core and tails (the
// portable kernels: CUDA's mma.sync and SIMT, HIP's MFMA and SIMT).
struct MoeGroupedGemmParams {
  const void* a;                 // [R, K]
  const void* w;                 // [E, N, K]
  void* c;                       // [R, N] or [R, N / 2]
  const MoeWorkItem* work;       // [max_work]
  const MoeRouteHeader* header;  // num_work
  int n;                         // N (generic)
  int k;                         // K (generic)
  int tile_rows;                 // rows of a core tile (generic)
};

// out[t, :] = sum_j weights[t, j] * c[inverse[t, j], :] over entries in
// [0, rows).
struct MoeCombineParams {
  const void* c;         // [rows, H]
  const float* weights;  // [tokens, topk]
  const int* inverse;    // [tokens, topk]
  void* out;             // [tokens, H]
  int rows;
  int tokens;
  int hidden_dim;  // H (generic)
  int topk;        // (generic)
};

// Epilogues of the grouped GEMM (SpecKey::variant of moe.grouped_gemm).
inline constexpr int kMoeEpilogueNone = 0;
inline constexpr int kMoeEpilogueSiluAndMul = 1;

// ---- launch shapes of the shared kernels ------------------------------------

// Bytes of the widest vector (16, 8, 4, 2 or 1) that divides `row_bytes`:
// rows of that many bytes laid back to back stay aligned to it.
constexpr int MoeRowVectorBytes(long long row_bytes) {
  return row_bytes % 16 == 0  ? 16
         : row_bytes % 8 == 0 ? 8
         : row_bytes % 4 == 0 ? 4
         : row_bytes % 2 == 0 ? 2
                              : 1;
}

// Pack: grid (rows, ceil(row vectors / kMoePackVectorsPerBlock)).
inline constexpr int kMoePackThreads = 128;
inline constexpr int kMoePackVectorsPerThread = 4;
inline constexpr int kMoePackVectorsPerBlock =
    kMoePackThreads * kMoePackVectorsPerThread;
// Combine: grid (tokens, ceil(row vectors / kMoeCombineThreads)).
inline constexpr int kMoeCombineThreads = 128;
// Route: the count(+plan) and fused kernels' threads. The scatter runs a
// backend's number of warps (its shared memory is (1 + warps) * E ints).
inline constexpr int kMoeRouteCountThreads = 256;

}  // namespace tailor::gpu

#endif  // TAILOR_TEMPLATES_COMMON_MOE_PARAMS_H_
