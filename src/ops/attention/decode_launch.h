// ops/attention/decode_launch.h — the device half of a paged-decode step,
// shared by RunDecode (ops/attention/decode.cc) and a ragged step's decode
// rows (ops/attention/ragged_decode.cc): the launch flags of a built plan,
// its upload into a decode block, and the DecodeLaunch of the caller's
// tensors over that block.
//
// What differs stays with the callers: RunDecode uploads the plan's own
// items and reads q / out / lse row b and the caller's seq_lens; a ragged
// step uploads items renumbered to the step's sequences and sets q_rows and
// seq_lens to its own uploaded arrays.
#ifndef TAILOR_OPS_ATTENTION_DECODE_LAUNCH_H_
#define TAILOR_OPS_ATTENTION_DECODE_LAUNCH_H_

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ops/attention/kernels.h"
#include "ops/attention/workspace.h"
#include "plan/decode_plan.h"

namespace tailor::internal {

// The flags the decode kernel runs `plan` (built with `config`) under:
// config's own, plus its head-group and cluster bits when the plan uses them.
int32_t DecodeLaunchFlagsOf(const DecodePlanConfig& config,
                            const plan::DecodePlan& plan);

// A built plan as the decode block holds it (workspace.h). `launch_flags`
// must stay alive until the stream has run the copy.
struct DecodeUpload {
  absl::Span<const plan::DecodeWorkItem> items;
  absl::Span<const plan::DecodeWorkItem> first_items;
  absl::Span<const int32_t> worker_begin;
  const int32_t* launch_flags = nullptr;
};

// Enqueues the copies of `upload` into `d` on `stream`: items, first items,
// worker ranges, and the launch flags right after the last worker range.
absl::Status UploadDecodeWork(DecodeKernels& kernels, Engine& engine,
                              const DecodeUpload& upload,
                              const DecodeDeviceBuffers& d, void* stream);

// The work of a plan with `params` uploaded into `d`.
DecodeWorkRef DeviceDecodeWork(const DecodeDeviceBuffers& d,
                               const plan::DecodePlanParams& params);

// The launch of `args` (attention::RunDecodeArgs or RunRaggedArgs: q, the
// caches, a block table whose last dim is max_pages, out, lse, scale, soft
// cap, stream) for `shape`: row b of q / out / lse, no work, no seq_lens.
template <typename Args>
DecodeLaunch DecodeLaunchOf(const Args& args, const DecodeShape& shape) {
  DecodeLaunch l;
  l.shape = shape;
  l.q = args.q.data;
  l.q_stride_b = args.q.strides[0];
  l.q_stride_h = args.q.strides[1];
  l.k_cache = args.k_cache.data;
  l.v_cache = args.v_cache.data;
  for (int i = 0; i < 3; ++i) {
    l.k_strides[i] = args.k_cache.strides[i];
    l.v_strides[i] = args.v_cache.strides[i];
  }
  l.num_pages = args.k_cache.dims[0];
  l.block_table = args.block_table.template as<int32_t>();
  l.block_table_stride = args.block_table.strides[0];
  l.max_pages = args.block_table.dims[args.block_table.rank - 1];
  l.out = args.out.data;
  l.out_stride_b = args.out.strides[0];
  l.out_stride_h = args.out.strides[1];
  if (args.lse.has_value()) {
    l.lse = args.lse->template as<float>();
    l.lse_stride_b = args.lse->strides[0];
  }
  l.sm_scale = args.sm_scale.value_or(
      1.0f / std::sqrt(static_cast<float>(shape.head_dim)));
  l.soft_cap = args.logits_soft_cap;
  l.stream = args.stream;
  return l;
}

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_DECODE_LAUNCH_H_
