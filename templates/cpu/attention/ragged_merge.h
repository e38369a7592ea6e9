// templates/cpu/attention/ragged_merge.h — combine the pieces of split query
// tiles by log-sum-exp.
//
// Piece i of a tile wrote, per packed row, o_i = its softmax . v
// (normalized) and lse_i = log of its sum of e^s. Per row:
//   lse = log sum_i e^(lse_i)          (computed from max_i lse_i)
//   out = sum_i e^(lse_i - lse) o_i
// Pieces that attended nothing have lse_i = -inf and weigh nothing; a row
// with none at all gets zeros and -inf.
//
// Template parameters: T (bf16 | f16 output), kHeadDim, kPack (as in
// ragged.h). Params: RaggedMergeParams; work item = merge group.
#ifndef TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_MERGE_H_
#define TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_MERGE_H_

#include "runtime/cpu/half.h"
#include "runtime/cpu/tailor_cpu.h"
#include "runtime/cpu/vector.h"
#include "templates/cpu/attention/ragged_params.h"

namespace tailor::kernels {

template <typename T, int kHeadDim, int kPack>
struct RaggedMergeKernel {
  static_assert(kHeadDim % kLanes == 0, "head_dim must be a multiple of 8");
  static_assert(kRaggedTileRows % kPack == 0,
                "tile rows must hold whole packs");
  static constexpr int kChunks = kHeadDim / kLanes;

  using Params = RaggedMergeParams;

  static void Run(const Params& p, int64_t index) {
    const RaggedMergeGroup group = p.groups[index];
    TAILOR_NO_UNROLL
    for (int r = 0; r < group.rows; ++r) {
      float max_lse = -__builtin_inff();
      for (int i = 0; i < group.pieces; ++i) {
        const int64_t slot =
            (int64_t{group.first_partial} + i) * kRaggedTileRows + r;
        max_lse = Max(max_lse, p.partial_lse[slot]);
      }
      float8 acc[kChunks];
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) acc[c] = 0;
      float lse = -__builtin_inff();
      if (max_lse != -__builtin_inff()) {
        float sum = 0;
        for (int i = 0; i < group.pieces; ++i) {
          const int64_t slot =
              (int64_t{group.first_partial} + i) * kRaggedTileRows + r;
          sum += Exp(p.partial_lse[slot] - max_lse);
        }
        for (int i = 0; i < group.pieces; ++i) {
          const int64_t slot =
              (int64_t{group.first_partial} + i) * kRaggedTileRows + r;
          const float w = Exp(p.partial_lse[slot] - max_lse) / sum;
          const float* row = p.partial_out + slot * kHeadDim;
          TAILOR_NO_UNROLL
          for (int c = 0; c < kChunks; ++c)
            acc[c] += w * Load8(row + c * kLanes);
        }
        lse = max_lse + __builtin_logf(sum);
      }
      const int64_t token = group.q_token + r / kPack;
      const int64_t head = group.q_head + r % kPack;
      T* out = static_cast<T*>(p.out) + token * p.out_stride_token +
               head * p.out_stride_head;
      TAILOR_NO_UNROLL
      for (int c = 0; c < kChunks; ++c) Store8(out + c * kLanes, acc[c]);
      if (p.lse != nullptr) p.lse[token * p.lse_stride_token + head] = lse;
    }
  }
};

}  // namespace tailor::kernels

#endif  // TAILOR_TEMPLATES_CPU_ATTENTION_RAGGED_MERGE_H_
