// serve_demo's command line: every argument is checked before anything
// runs. --help, unknown flags, an unknown backend and bad step counts used
// to run the whole demo (compiling, writing into the default cache), on the
// CPU for "--backend tpu", for one step for "--steps -1" or "abc", and on
// and on for "--steps 99999999999".
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"
#include "tool_runner.h"

namespace tailor {
namespace {

using ::tailor::testing::RunTool;
using ::tailor::testing::TempDir;
using ::tailor::testing::ToolRun;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// serve_demo `args` with its cache in `cache`, killed after 30 s (exit 124).
ToolRun Demo(const std::string& cache, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-s", "KILL", "30",
                                   TAILOR_SERVE_DEMO_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunTool(argv, {.env = {{"TAILOR_CACHE_DIR", cache}}});
}

TEST(ServeDemoFlagsTest, HelpPrintsTheUsageAndRunsNothing) {
  TempDir dir;
  const std::string cache = dir.path() + "/cache";
  for (const char* help : {"--help", "-h"}) {
    ToolRun run = Demo(cache, {"--steps", "3", help});
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output, StartsWith("usage: serve_demo [--steps N]"));
    EXPECT_FALSE(std::filesystem::exists(cache));
  }
}

TEST(ServeDemoFlagsTest, BadArgumentsAreRefusedBeforeAnythingRuns) {
  TempDir dir;
  const std::string cache = dir.path() + "/cache";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--bogus", "x"}, "unknown flag --bogus"},
      {{"extra"}, "unexpected argument extra"},
      {{"--steps"}, "--steps: needs a value"},
      {{"--backend", "tpu"},
       "--backend: must be auto, cpu, cuda or hip, got \"tpu\""},
      {{"--steps", "-1"},
       "--steps: must be an integer in [1, 100000], got "
       "\"-1\""},
      {{"--steps", "abc"},
       "--steps: must be an integer in [1, 100000], got "
       "\"abc\""},
      {{"--steps", "0"},
       "--steps: must be an integer in [1, 100000], got "
       "\"0\""},
      {{"--steps", "99999999999"},
       "--steps: must be an integer in [1, 100000], got \"99999999999\""},
      {{"--steps", "12x"},
       "--steps: must be an integer in [1, 100000], got "
       "\"12x\""},
  };
  for (const auto& [args, message] : cases) {
    ToolRun run = Demo(cache, args);
    EXPECT_EQ(run.exit_code, 2) << message << "\n" << run.output;
    EXPECT_EQ(run.output, "serve_demo: " + message +
                              "\n(serve_demo --help prints the usage)\n");
  }
  EXPECT_FALSE(std::filesystem::exists(cache));
}

}  // namespace
}  // namespace tailor
