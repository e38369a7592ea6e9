// templates/cpu/attention/decode_merge.h — combine the pieces of split (sequence, KV
// head) pairs by log-sum-exp.
//
// Piece i of a pair wrote o_i = softmax over its tokens . v (normalized) and
// lse_i = log of its sum of e^s. For each of the kGroup query heads:
//   lse = log sum_i e^(lse_i)          (computed from max_i lse_i)
//   out = sum_i e^(lse_i - lse) o_i
// Pieces with no attended tokens have lse_i = -inf and weigh nothing; a
// pair with none at all gets zeros and -inf.
//
// Template parameters: T (bf16 | f16 output), kHeadDim, kGroup (as in
// decode_attention.h). Params: DecodeMergeParams; work item = split pair.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_MERGE_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_MERGE_H_

#include "runtime/cpu/half.h"
#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/attention/decode_params.h"

namespace tailor::kernels {

template <typename T, int kHeadDim, int kGroup>
struct DecodeMergeKernel {
  static_assert(kHeadDim % kLanes == 0, "head_dim must be a multiple of 8");
  static_assert(kGroup >= 1 && kGroup <= 16, "group must be in [1, 16]");
  static constexpr int kChunks = kHeadDim / kLanes;

  using Params = DecodeMergeParams;

  static void Run(const Params& p, int64_t index) {
    const DecodeMergeGroup group = p.groups[index];
    TAILOR_NO_UNROLL
    for (int g = 0; g < kGroup; ++g) {
      float max_lse = -__builtin_inff();
      for (int i = 0; i < group.pieces; ++i) {
        const int64_t slot = (int64_t{group.first_partial} + i) * kGroup + g;
        max_lse = Max(max_lse, p.partial_lse[slot]);
      }
      float8 acc[kChunks];
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) acc[c] = 0;
      float lse = -__builtin_inff();
      if (max_lse != -__builtin_inff()) {
        float sum = 0;
        for (int i = 0; i < group.pieces; ++i) {
          const int64_t slot = (int64_t{group.first_partial} + i) * kGroup + g;
          sum += Exp(p.partial_lse[slot] - max_lse);
        }
        for (int i = 0; i < group.pieces; ++i) {
          const int64_t slot = (int64_t{group.first_partial} + i) * kGroup + g;
          const float w = Exp(p.partial_lse[slot] - max_lse) / sum;
          const float* row = p.partial_out + slot * kHeadDim;
          TAILOR_NO_UNROLL
          for (int c = 0; c < kChunks; ++c)
            acc[c] += w * Load8(row + c * kLanes);
        }
        lse = max_lse + __builtin_logf(sum);
      }
      const int64_t head = int64_t{group.kv_head} * kGroup + g;
      T* out = static_cast<T*>(p.out) + group.seq * p.out_stride_b +
               head * p.out_stride_h;
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) Store8(out + c * kLanes, acc[c]);
      if (p.lse != nullptr) p.lse[group.seq * p.lse_stride_b + head] = lse;
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_DECODE_MERGE_H_
