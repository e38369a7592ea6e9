// backends/cpu/attention/decode_generic.h — the generic CPU paged-decode kernels:
// built into the library by the host compiler, runtime shapes, always
// available.
//
// Background JIT (Runtime::Options::jit_mode) serves a RunDecode whose
// specialized kernels (templates/cpu/decode_{attention,merge}.h) are still
// compiling with these: the same params (templates/cpu/attention/decode_params.h)
// plus the quantities the templates take as template arguments (head_dim,
// group, page size), the same work-item grids (one item per plan worker,
// one per split pair), the same online softmax over blocks of
// kGenericDecodeBlock tokens, and the same results up to f32 rounding
// (scalar loops, no tail specialization).
//
// Example (the launch glue, src/backends/cpu/attention/decode_kernels.cc):
//   GenericDecodeParams p = {.base = params, .dtype = DType::kBF16,
//                            .head_dim = 128, .group = 4, .page_size = 16};
//   engine.LaunchFallback(OpKind::kAttentionDecode,
//                         GenericDecodeAttentionKernel(), config, &p,
//                         sizeof(p));
#ifndef TAILOR_BACKENDS_CPU_ATTENTION_DECODE_GENERIC_H_
#define TAILOR_BACKENDS_CPU_ATTENTION_DECODE_GENERIC_H_

#include <cstdint>

#include "core/backend.h"
#include "tailor/tensor.h"
#include "templates/cpu/attention/decode_params.h"

namespace tailor::internal::cpu {

// What the generic kernels serve (their per-item state lives on the stack).
inline constexpr int32_t kGenericDecodeMaxHeadDim = 256;
inline constexpr int32_t kGenericDecodeMaxGroup = 16;
// Tokens per online-softmax step, as decode_attention.h.
inline constexpr int32_t kGenericDecodeBlock = 16;

// Work item w: plan worker w runs its items (as DecodeAttentionKernel).
struct GenericDecodeParams {
  kernels::DecodeParams base;
  DType dtype;        // bf16 or f16: q, caches, out
  int32_t head_dim;   // D, a multiple of 8, <= kGenericDecodeMaxHeadDim
  int32_t group;      // query heads per KV head, 1..kGenericDecodeMaxGroup
  int32_t page_size;  // tokens per page, >= 1
};

// Work item i: split pair i (as DecodeMergeKernel).
struct GenericDecodeMergeParams {
  kernels::DecodeMergeParams base;
  DType dtype;       // of out
  int32_t head_dim;  // D
  int32_t group;     // query heads per KV head
};

// True when the generic kernels serve this head_dim and group (every shape
// attention::PlanDecode accepts).
inline bool GenericDecodeServes(int64_t head_dim, int64_t group) {
  return head_dim >= 8 && head_dim <= kGenericDecodeMaxHeadDim &&
         head_dim % 8 == 0 && group >= 1 && group <= kGenericDecodeMaxGroup;
}

// The kernels (process-lifetime singletons, launched like JIT kernels).
const Kernel& GenericDecodeAttentionKernel();
const Kernel& GenericDecodeMergeKernel();

}  // namespace tailor::internal::cpu

#endif  // TAILOR_BACKENDS_CPU_ATTENTION_DECODE_GENERIC_H_
