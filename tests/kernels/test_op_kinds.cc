// Registers the test kernels' op names (test_op_kinds.h) at static
// initialization, before any test creates a Runtime or prints a key.
#include "kernels/test_op_kinds.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace tailor::internal {
namespace {

constexpr OpInfo kTestEmpty = {"test.empty", {}};
constexpr OpInfo kTestAxpy = {"test.axpy", {}};
constexpr OpInfo kTmaPatchTest = {"tma.patch_test", {"cols"}};
constexpr OpInfo kTmaCopyTest = {"tma.copy_test", {"cols"}};

const bool kRegistered = [] {
  for (const auto& [op, info] : {std::pair{kTestEmptyOp, &kTestEmpty},
                                 std::pair{kTestAxpyOp, &kTestAxpy},
                                 std::pair{kTmaPatchTestOp, &kTmaPatchTest},
                                 std::pair{kTmaCopyTestOp, &kTmaCopyTest}}) {
    if (absl::Status s = RegisterOpKind(op, info); !s.ok()) {
      std::fprintf(stderr, "test op kinds: %s\n", s.ToString().c_str());
      std::abort();
    }
  }
  return true;
}();

}  // namespace
}  // namespace tailor::internal
