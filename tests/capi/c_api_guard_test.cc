// The C ABI's boundary guard: whatever a body throws becomes a status and a
// thread-local message; nothing propagates.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "capi/c_api_internal.h"

namespace tailor::capi {
namespace {

TEST(CApiGuard, OkClearsTheMessage) {
  Guard([] { return absl::InvalidArgumentError("x: bad"); });
  EXPECT_STREQ(tailor_last_error(), "x: bad");
  EXPECT_EQ(Guard([] { return absl::OkStatus(); }), TAILOR_STATUS_OK);
  EXPECT_STREQ(tailor_last_error(), "");
}

TEST(CApiGuard, StatusCodesPassThrough) {
  EXPECT_EQ(Guard([] { return absl::UnavailableError("no device"); }),
            TAILOR_STATUS_UNAVAILABLE);
  EXPECT_STREQ(tailor_last_error(), "no device");
}

TEST(CApiGuard, BadAllocIsResourceExhausted) {
  EXPECT_EQ(Guard([]() -> absl::Status { throw std::bad_alloc(); }),
            TAILOR_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_STREQ(tailor_last_error(), "out of host memory");
}

TEST(CApiGuard, OtherExceptionsAreInternal) {
  EXPECT_EQ(Guard([]() -> absl::Status {
              throw std::length_error("vector::resize");
            }),
            TAILOR_STATUS_INTERNAL);
  EXPECT_STREQ(tailor_last_error(), "unexpected C++ exception: vector::resize");
  EXPECT_EQ(Guard([]() -> absl::Status { throw 42; }), TAILOR_STATUS_INTERNAL);
  EXPECT_STREQ(tailor_last_error(), "unexpected C++ exception");
}

}  // namespace
}  // namespace tailor::capi
