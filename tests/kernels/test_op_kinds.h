// tests/kernels/test_op_kinds.h — the OpKind values of the test kernels.
//
// Test kernels are not library ops: their names, and the families that
// build them on the CPU and CUDA backends, are registered by the test
// kernels library (test_op_kinds.cc, test_ops.cc, cuda_test_kernels.cc) at
// static initialization. The values are stable (part of every test key's
// hash) and reserved in core/spec_key.h.
#ifndef TAILOR_TESTS_KERNELS_TEST_OP_KINDS_H_
#define TAILOR_TESTS_KERNELS_TEST_OP_KINDS_H_

#include "core/spec_key.h"

namespace tailor::internal {

// Does nothing: measures dispatch overhead.
inline constexpr OpKind kTestEmptyOp = static_cast<OpKind>(1);
// y = a * x + y, used by tests and the first example.
inline constexpr OpKind kTestAxpyOp = static_cast<OpKind>(2);
// TMA descriptor patching and plain TMA copies (CUDA).
inline constexpr OpKind kTmaPatchTestOp = static_cast<OpKind>(30);
inline constexpr OpKind kTmaCopyTestOp = static_cast<OpKind>(31);

}  // namespace tailor::internal

#endif  // TAILOR_TESTS_KERNELS_TEST_OP_KINDS_H_
