// Log levels: an explicit bad name is an error naming log_level; a bad
// TAILOR_LOG_LEVEL is reported as a warning and "info" applies.
#include "core/logging.h"

#include <sstream>

#include "spdlog/sinks/ostream_sink.h"
#include "test_util.h"

namespace tailor::internal {
namespace {

using ::tailor::testing::StatusIs;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    Logger().sinks().push_back(sink_);
  }
  void TearDown() override {
    Logger().sinks().pop_back();
    unsetenv("TAILOR_LOG_LEVEL");
    TAILOR_ASSERT_OK(SetLogLevel("info"));
  }
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_F(LoggingTest, ExplicitNamesAreCheckedStrictly) {
  TAILOR_EXPECT_OK(SetLogLevel("warning"));
  EXPECT_EQ(Logger().level(), spdlog::level::warn);
  TAILOR_EXPECT_OK(SetLogLevel("off"));
  EXPECT_EQ(Logger().level(), spdlog::level::off);
  EXPECT_THAT(SetLogLevel("verbose"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "log_level: must be one of trace, debug, info, warn, "
                       "error, critical, off; got \"verbose\""));
}

TEST_F(LoggingTest, EnvironmentLevelApplies) {
  setenv("TAILOR_LOG_LEVEL", "error", 1);
  TAILOR_EXPECT_OK(SetLogLevel(""));
  EXPECT_EQ(Logger().level(), spdlog::level::err);
  EXPECT_EQ(log_.str(), "");
}

TEST_F(LoggingTest, UnknownEnvironmentLevelIsAWarningNotSilence) {
  setenv("TAILOR_LOG_LEVEL", "loud", 1);
  TAILOR_EXPECT_OK(SetLogLevel(""));
  EXPECT_EQ(Logger().level(), spdlog::level::info);
  EXPECT_THAT(log_.str(),
              ::testing::HasSubstr(
                  "[warning] TAILOR_LOG_LEVEL=\"loud\" is not a log level (one "
                  "of trace, debug, info, warn, error, critical, off); using "
                  "info"));
}

}  // namespace
}  // namespace tailor::internal
