// ops/attention/ragged_checks.h — argument checks of PlanRagged, RunRagged
// and the FlashInfer adapter.
//
// Each returns InvalidArgument with a message that starts with the
// argument's name and states the rule, e.g. "q_indptr[0]: must be 0, got
// 3". They read shapes and host metadata only, except
// CheckRunRaggedContents, which reads host tensors (host-memory backends).
#ifndef TAILOR_OPS_ATTENTION_RAGGED_CHECKS_H_
#define TAILOR_OPS_ATTENTION_RAGGED_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ops/attention/ragged_kernels.h"
#include "plan/attention_plan.h"
#include "tailor/ops/attention.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// The layer fields of PlanRaggedArgs / RaggedLimits; `prefix` ("" or
// "limits.") prefixes the field names in messages.
struct RaggedShapeFields {
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  DType dtype = DType::kBF16;
  bool causal = true;
  int64_t window_left = -1;
};
absl::StatusOr<RaggedShape> CheckRaggedShape(const RaggedShapeFields& fields,
                                             absl::string_view prefix);

// A [n] i32 tensor in host memory, contiguous: "<name>: must be in host
// memory (<op> reads it on the host), got cuda:0".
absl::Status CheckHostVector(absl::string_view name, const TensorRef& t,
                             absl::string_view op);

// q_indptr [B + 1] (host) -> q_lens [B]: q_indptr[0] = 0, non-decreasing,
// total <= plan::kMaxAttentionLen.
absl::Status QueryLengthsOf(absl::string_view name, const TensorRef& q_indptr,
                            std::vector<int32_t>& q_lens);

// FlashInfer's kv_indptr / kv_last_page_len (host) -> kv_lens [B].
absl::Status KvLengthsFromPages(const TensorRef& kv_indptr,
                                const TensorRef& kv_last_page_len,
                                int64_t page_size, int64_t batch,
                                std::vector<int32_t>& kv_lens);

// Every RunRagged argument against the plan and `device` (the runtime's).
absl::Status CheckRunRaggedArgs(const attention::RunRaggedArgs& args,
                                const RaggedShape& shape,
                                const plan::AttentionPlan& plan, Device device);

// "kv_lens[<b>]: <device_len> differs from <planned>, the length PlanRagged
// planned": the host check's text, and the device errors'.
std::string BadKvLenText(int64_t seq, int32_t device_len, int64_t planned);

// Host-memory backends: kv_lens (when given) equal the plan's, page_indptr
// (when given) is consistent, and every page entry a planned token reads
// is in [0, num_pages).
absl::Status CheckRunRaggedContents(const attention::RunRaggedArgs& args,
                                    const plan::AttentionPlan& plan,
                                    int64_t page_size);

}  // namespace tailor::internal

#endif  // TAILOR_OPS_ATTENTION_RAGGED_CHECKS_H_
