// tests/kernels/test_ops.h — the smallest op fronts, for tests, benches and
// examples.
//
// They follow the shape every op front has: validate -> build the SpecKey ->
// get the kernel (memory/disk/compile) -> launch. Not part of the public API.
#ifndef TAILOR_TESTS_KERNELS_TEST_OPS_H_
#define TAILOR_TESTS_KERNELS_TEST_OPS_H_

#include "absl/status/status.h"
#include "tailor/runtime.h"
#include "tailor/tensor.h"

namespace tailor::internal {

// y = a * x + y for f32 vectors of equal length on the CPU backend. `block`
// (a multiple of 8 in [8, 65536]) is specialized into the kernel.
absl::Status Axpy(Runtime& runtime, float a, const TensorRef& x,
                  const TensorRef& y, int block = 1024);

// Launches the empty kernel over `items` work items (dispatch overhead).
absl::Status LaunchEmpty(Runtime& runtime, int64_t items = 1);

}  // namespace tailor::internal

#endif  // TAILOR_TESTS_KERNELS_TEST_OPS_H_
