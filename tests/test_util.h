// tests/test_util.h — small helpers shared by tailor's tests.
#ifndef TAILOR_TESTS_TEST_UTIL_H_
#define TAILOR_TESTS_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tailor::testing {

// EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
// HasSubstr("k")));
MATCHER_P2(StatusIs, code, message_matcher, "") {
  absl::Status status = [&] {
    if constexpr (std::is_same_v<std::decay_t<arg_type>, absl::Status>) {
      return arg;
    } else {
      return arg.status();
    }
  }();
  if (status.code() != code) {
    *result_listener << "code is " << absl::StatusCodeToString(status.code())
                     << ": " << status.message();
    return false;
  }
  return ::testing::ExplainMatchResult(
      message_matcher, std::string(status.message()), result_listener);
}

#define TAILOR_ASSERT_OK(expr)                                    \
  do {                                                            \
    const auto& tailor_test_status_ = (expr);                     \
    ASSERT_TRUE(tailor_test_status_.ok()) << tailor_test_status_; \
  } while (false)
#define TAILOR_EXPECT_OK(expr)                                    \
  do {                                                            \
    const auto& tailor_test_status_ = (expr);                     \
    EXPECT_TRUE(tailor_test_status_.ok()) << tailor_test_status_; \
  } while (false)

// A fresh seed per run, printed so a failure can be replayed with
// TAILOR_TEST_SEED=<seed>.
inline uint64_t TestSeed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("TAILOR_TEST_SEED");
    uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10)
                                : std::random_device{}();
    std::printf("[ seed     ] TAILOR_TEST_SEED=%llu\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A private temporary directory (mode 0700), removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tailor-test-XXXXXX")
            .string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tailor::testing

#endif  // TAILOR_TESTS_TEST_UTIL_H_
