// backends/cuda/attention/tuning.h — the paged-decode family's tuning keys
// on CUDA.
//
// Every key is declared once here (DecodeTuningKnobs) and read once, into a
// DecodeTuning, when a CUDA backend is created or warm-up lists a layer's
// kernels (DecodeTuningFrom). The first value of each key is its default
// ("auto": the plan's rules, decode_kernels.h); the others fix the plan's
// shape for comparisons:
//
//   decode.workers_per_sm  auto | 1 | 2 | 3 | 4   CTAs of work per SM; two
//                          share an SM at the depth two fit, more run as
//                          extra waves
//   decode.stages          auto | 2 | 3 | 4       pipeline stages, at most
//                          what fits
//   decode.head_group      auto | 1 | 4           never or always 4 KV heads
//                          an item where the kernel allows it (4: and no
//                          cluster launches)
//   decode.cluster         auto | 1 | 8 | 16      never clusters, or only
//                          clusters of that size
//
// Pure host code without CUDA headers.
#ifndef TAILOR_BACKENDS_CUDA_ATTENTION_TUNING_H_
#define TAILOR_BACKENDS_CUDA_ATTENTION_TUNING_H_

#include "absl/types/span.h"
#include "core/tuning.h"

namespace tailor::cuda {

// 0 in a field: "auto".
struct DecodeTuning {
  int workers_per_sm = 0;  // 0: DecodeCtasPerSm
  int stages = 0;          // 0: the deepest pipeline that fits
  int head_group = 0;      // 0: DecodeHeadGroupFor
  int cluster = 0;         // 0: DecodeClusterWorkersFor's rule
};

// The largest decode.stages and decode.head_group values
// (kDecodeMaxStages and kDecodeHeadGroup of the templates, checked there).
inline constexpr int kDecodeTuningMaxStages = 4;
inline constexpr int kDecodeTuningHeadGroup = 4;

// The paged-decode family's keys on CUDA (see the file comment).
absl::Span<const tailor::internal::TuningKnob> DecodeTuningKnobs();

// The decode settings of `tuning` (validated against DecodeTuningKnobs).
DecodeTuning DecodeTuningFrom(const tailor::internal::Tuning& tuning);

// ragged.cuda=off: refuse ragged attention on CUDA (Unimplemented at
// Reserve), e.g. to compare against another attention backend. On by
// default.
// ragged.decode_rows=prefill: run a ragged step's q_len = 1 rows as prefill
// tiles instead of on the paged-decode kernel (the default, "decode"), for
// comparisons.
// ragged.kernel=portable: run ragged attention on the portable kernel
// (mma.sync + cp.async) even where the sm_90a kernel serves the shape; the
// default ("auto") takes the sm_90a kernel where it applies
// (ragged_kernels.h).
absl::Span<const tailor::internal::TuningKnob> RaggedTuningKnobs();

// Whether `tuning` turns the CUDA ragged-attention kernels on.
bool RaggedCudaEnabled(const tailor::internal::Tuning& tuning);

// Whether `tuning` forces the portable ragged kernel (ragged.kernel).
bool RaggedPortableForced(const tailor::internal::Tuning& tuning);

// Whether `tuning` leaves q_len = 1 rows to the decode kernel.
bool RaggedDecodeRowsOnDecodeKernel(const tailor::internal::Tuning& tuning);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_ATTENTION_TUNING_H_
