// ops/attention/checks.h — argument checks of the attention:: op fronts.
//
// Each returns InvalidArgument with a message that starts with the
// argument's name and states the rule, e.g. "k_cache: dims[2] must equal
// num_kv_heads (8), got 4". They read shapes and metadata only, except the
// *Contents checks, which read host tensors (host-memory backends).
#ifndef TAILOR_OPS_ATTENTION_CHECKS_H_
#define TAILOR_OPS_ATTENTION_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ops/attention/kernels.h"
#include "plan/decode_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The layer shape of PlanDecodeArgs / DecodeLimits fields; `prefix` ("" or
// "limits.") prefixes the field names in messages.
struct DecodeShapeFields {
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  DType dtype = DType::kBF16;
};
// The names CheckDecodeShape's messages give the fields: the API's by
// default; the serving profile (warmup/profile.h) checks its paged_decode
// sections with these same rules under its own names (heads_q, ...).
struct DecodeShapeNames {
  absl::string_view num_qo_heads = "num_qo_heads";
  absl::string_view num_kv_heads = "num_kv_heads";
  absl::string_view head_dim = "head_dim";
  absl::string_view page_size = "page_size";
  absl::string_view dtype = "dtype";
};
absl::StatusOr<DecodeShape> CheckDecodeShape(
    const DecodeShapeFields& fields, absl::string_view prefix,
    const DecodeShapeNames& names = DecodeShapeNames{});

// Every RunDecode argument against the plan of `ws` and `device` (the
// runtime's). Shapes, dtypes, strides, alignment (16 bytes on GPUs),
// scales, overlaps; block_table wide enough for the plan's longest
// sequence.
absl::Status CheckRunDecodeArgs(const attention::RunDecodeArgs& args,
                                const DecodeShape& shape, int64_t num_qo_heads,
                                const plan::DecodePlan& plan, Device device);

// Host-memory backends: seq_lens[b] equals the planned length and every
// block_table entry of a page that holds tokens is in [0, num_pages), for
// the plan's B sequences.
absl::Status CheckRunDecodeContents(const attention::RunDecodeArgs& args,
                                    const plan::DecodePlan& plan,
                                    int64_t page_size);

// ---- view checks both attention fronts use ----------------------------------
// "<name>: dims[<dim>] must equal <what> (<expected>), got <n>".
absl::Status ExpectDims(absl::string_view name, const TensorRef& t, int dim,
                        int64_t expected, absl::string_view what);
// ExpectTensor, on `device`, and an element count and reach that fit int64.
absl::Status ExpectView(absl::string_view name, const TensorRef& t, int rank,
                        DType dtype, Device device);
// The last dim is contiguous; on a GPU, data is 16-byte aligned and the
// other strides are multiples of 8 elements (16 bytes).
absl::Status ExpectRowsOfVectors(absl::string_view name, const TensorRef& t,
                                 Device device);
// `t` and `other` share no byte.
absl::Status ExpectApart(absl::string_view name, const TensorRef& t,
                         absl::string_view other_name, const TensorRef& other);

// The texts of DecodeErrors (device checks), identical to the host checks'.
std::string BadPageText(int64_t seq, int64_t slot, int32_t page,
                        int64_t num_pages);
std::string BadSeqLenText(int64_t seq, int32_t device_len, int64_t planned_len);
std::string TooManyPagesText(int64_t seq, int32_t pages, int64_t max_pages);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_CHECKS_H_
