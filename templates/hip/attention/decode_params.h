// templates/hip/attention/decode_params.h — params and launch shape of the paged-decode
// HIP kernel (templates/hip/attention/decode.h), the one definition that the host glue
// (src/backends/hip/attention/decode_kernels.cc) and the device template include.
//
// Contract: plain C++ (host g++ and device hiprtc), no HIP keywords, no
// standard headers. Strides count elements.
//
// The work list, its item layout, the error words and the scratch layout are
// the CUDA kernels' (templates/cuda/attention/decode_params.h: DecodeWorkItem,
// kDecodeTileTokens, kDecodeError*, DecodeScratchBytes): the same host
// planner cuts the same plan, and the op front reads the same errors. The
// params differ only in carrying no TMA maps.
#ifndef TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_PARAMS_H_
#define TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_PARAMS_H_

#include "templates/cuda/attention/decode_params.h"

namespace tailor::hip {

using ::tailor::cuda::DecodeWorkItem;
using ::tailor::cuda::kDecodeErrorBadPage;
using ::tailor::cuda::kDecodeErrorBadSeqLen;
using ::tailor::cuda::kDecodeErrorTooManyPages;
using ::tailor::cuda::kDecodeErrorWords;
using ::tailor::cuda::kDecodeTileTokens;

// One work-group per worker: 4 waves, each stepping through whole 64-token
// tiles of the work-group's items (tile t of an item goes to wave t % 4).
inline constexpr int kHipDecodeWaves = 4;
inline constexpr int kHipDecodeThreads = 64 * kHipDecodeWaves;
static_assert(kDecodeTileTokens == 64, "one token per lane of a wave64 tile");

// The merge of the four waves' accumulators is staged in LDS as f32
// [waves][group][D]: group * D is bounded so that it, the query rows and
// the probabilities fit 64 KiB.
inline constexpr int kHipDecodeMaxGroupTimesDim = 2048;
constexpr bool HipDecodeShapeFits(long long head_dim, long long group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 &&
         group <= 16 && group * head_dim <= kHipDecodeMaxGroupTimesDim;
}

// LDS of one work-group (all static in the kernel; the host checks it).
constexpr int HipDecodeLdsBytes(int head_dim, int group) {
  return 4 * (group * head_dim                      // query rows, f32
              + kHipDecodeWaves * group * 64        // probabilities
              + kHipDecodeWaves * 64                // page ids
              + kHipDecodeWaves * group * head_dim  // merge: accumulators
              + 2 * kHipDecodeWaves * group         // merge: max, sum
              + 1);                                 // merge flag
}

struct HipDecodeParams {
  const void* q;  // [B, Hq, D]
  long long q_stride_b;
  long long q_stride_h;
  const void* k_cache;  // [num_pages, page_size, Hkv, D]
  const void* v_cache;
  long long k_stride_page, k_stride_token, k_stride_head;
  long long v_stride_page, v_stride_token, v_stride_head;
  const int* block_table;  // [B, max_pages]
  long long block_table_stride;
  int max_pages;
  int num_pages;
  const int* seq_lens;  // [B] device lengths (checked against the plan)
  void* out;            // [B, Hq, D]
  long long out_stride_b;
  long long out_stride_h;
  float* lse;  // [B, Hq] natural log, or null
  long long lse_stride_b;
  float score_scale;  // sm_scale * log2(e) (no cap); log2(e) * soft_cap
  float cap_scale;    // sm_scale / soft_cap; 0: no soft cap
  const DecodeWorkItem* items;  // [num_items]
  const int* worker_begin;      // [gridDim.x + 1]
  float* partial_out;           // [partials, group, D] normalized
  float* partial_lse;           // [partials, group] log2 domain
  int* counters;                // [partials] zero between launches
  unsigned long long* errors;   // [kDecodeErrorWords]
};

}  // namespace tailor::hip

#endif  // TAILOR_TEMPLATES_HIP_ATTENTION_DECODE_PARAMS_H_
