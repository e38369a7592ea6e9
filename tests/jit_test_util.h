// tests/jit_test_util.h — helpers of the background-JIT tests (CPU and CUDA,
// MoE and decode): waiting for queued compiles, timing a first call.
#ifndef TAILOR_TESTS_JIT_TEST_UTIL_H_
#define TAILOR_TESTS_JIT_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tailor/runtime.h"

namespace tailor::testing {

// Waits until `runtime` has no pending compile (at most `limit`), then
// asserts that none is left.
inline void WaitForCompiles(
    Runtime& runtime, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (runtime.stats().pending_compiles > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(runtime.stats().pending_compiles, 0u);
}

// Wall milliseconds that `body` took.
inline double MillisecondsOf(const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace tailor::testing

#endif  // TAILOR_TESTS_JIT_TEST_UTIL_H_
