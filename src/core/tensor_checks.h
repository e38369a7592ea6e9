// core/tensor_checks.h — the argument checks every public entry runs on its
// tensor views (defined in core/tensor.cc). Internal: the op fronts and the
// C ABI call them; users get their errors.
#ifndef TAILOR_CORE_TENSOR_CHECKS_H_
#define TAILOR_CORE_TENSOR_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tailor/tensor.h"

namespace tailor {

// Checks the invariants of a view named `name`: rank in [0, kMaxRank], dims
// and strides non-negative, and data non-null and aligned to the element
// size (4 bytes for i32, ...) unless the view is empty.
// Returns InvalidArgument naming `name` and the broken rule.
absl::Status ValidateTensor(absl::string_view name, const TensorRef& t);

// ValidateTensor plus: exactly `rank` dims and element type `dtype`.
absl::Status ExpectTensor(absl::string_view name, const TensorRef& t, int rank,
                          DType dtype);

}  // namespace tailor

#endif  // TAILOR_CORE_TENSOR_CHECKS_H_
