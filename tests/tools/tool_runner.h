// tests/tools/tool_runner.h — run a command-line tool as a child process
// and capture its exit status and output (stdout and stderr together).
#ifndef TAILOR_TESTS_TOOLS_TOOL_RUNNER_H_
#define TAILOR_TESTS_TOOLS_TOOL_RUNNER_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tailor::testing {

struct ToolRun {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;
};

struct ToolOptions {
  // NAME=VALUE entries added to (or replacing in) the environment.
  std::vector<std::pair<std::string, std::string>> env;
  // RLIMIT_FSIZE for the child (writes past it fail with EFBIG; SIGXFSZ is
  // ignored), to simulate a disk that fills up.
  std::optional<rlim_t> max_file_bytes;
};

inline ToolRun RunTool(const std::vector<std::string>& argv,
                       const ToolOptions& options = {}) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [name, value] : options.env)
      setenv(name.c_str(), value.c_str(), 1);
    if (options.max_file_bytes.has_value()) {
      signal(SIGXFSZ, SIG_IGN);
      rlimit limit = {*options.max_file_bytes, *options.max_file_bytes};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  ToolRun run;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0)
    run.output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Names of the cache entries ("*.tkc") in `dir`.
inline std::vector<std::string> CacheEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".tkc") names.push_back(e.path().filename());
  }
  return names;
}

inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// A serving profile small enough to compile in a second or two: one MoE
// layer (H = 64, I = 32, top-2, f32) with the default routing policy.
inline std::string SmallProfileJson(const std::string& extra_target = "") {
  return R"({"schema": "tailor.profile/1", "name": "small-test",
    "target": {"backend": "cpu")" +
         extra_target + R"(},
    "moe": {"experts": 8, "topk": 2, "hidden": 64, "intermediate": 32,
            "dtypes": ["f32"], "routing": {"tile_rows": 16, "tail": "pow2"}}})";
}
// The kernels of SmallProfileJson: pack, combine, 2 GEMMs x 6 tail classes.
inline constexpr int kSmallProfileKernels = 14;

}  // namespace tailor::testing

#endif  // TAILOR_TESTS_TOOLS_TOOL_RUNNER_H_
