// tests/fuzz/fuzz_driver.cc — runs a libFuzzer target without libFuzzer.
//
// Builds whose compiler has no libFuzzer (GCC: the default `make test`
// build) link every fuzz target with this main instead, so that the targets'
// seed corpora and a few seconds of mutations run in every test run:
//
//   <target> [--seconds=S] [--seed=N] [--max_len=B] <file-or-dir>...
//
//   1. every file given (directories: every file in them) runs once;
//   2. then, for S seconds (default 0), inputs made by mutating the corpus
//      (bit flips, interesting bytes, inserts, erases, splices) run;
//      the seed (printed) replays the same sequence.
// A crash saves the input that caused it to ./crash-<target>-<pid> before
// the process dies, so it can be replayed: `<target> crash-...` (or with the
// libFuzzer build of the same target) and committed to the seed corpus.
// This is a smoke test, not a fuzzer: it has no coverage feedback. `make
// fuzz` runs the real thing (libFuzzer, ASan, UBSan).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc,
                                                          char*** argv);

namespace {

// The input being run, for the crash handler (which may only use
// async-signal-safe calls).
const std::string* g_current = nullptr;
char g_crash_path[256];

void SaveInputAndDie(int sig) {
  if (g_current != nullptr) {
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, g_current->data(), g_current->size());
      (void)ignored;
      close(fd);
      const char note[] = "fuzz_driver: crashing input saved to ";
      ignored = write(2, note, sizeof(note) - 1);
      ignored = write(2, g_crash_path, strlen(g_crash_path));
      ignored = write(2, "\n", 1);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashHandler(const char* argv0) {
  std::string name = std::filesystem::path(argv0).filename().string();
  snprintf(g_crash_path, sizeof(g_crash_path), "crash-%s-%d", name.c_str(),
           static_cast<int>(getpid()));
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) {
    signal(sig, SaveInputAndDie);
  }
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
  g_current = nullptr;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> LoadCorpus(const std::vector<std::string>& paths) {
  std::vector<std::filesystem::path> files;
  for (const std::string& p : paths) {
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());  // a fixed order: reproducible
  std::vector<std::string> corpus;
  for (const auto& f : files) corpus.push_back(ReadFile(f));
  return corpus;
}

// One random edit of `input` (which may be empty).
void Mutate(std::string& input, const std::vector<std::string>& corpus,
            size_t max_len, std::mt19937_64& rng) {
  static constexpr uint8_t kInteresting[] = {0,    1,    2,    0x7f, 0x80,
                                             0xff, 0xfe, 0x10, 0x40, 0x20};
  auto pos = [&](size_t n) { return n == 0 ? 0 : rng() % n; };
  switch (rng() % 6) {
    case 0:  // flip one bit
      if (!input.empty()) input[pos(input.size())] ^= 1 << (rng() % 8);
      break;
    case 1:  // an interesting byte
      if (!input.empty())
        input[pos(input.size())] =
            static_cast<char>(kInteresting[rng() % std::size(kInteresting)]);
      break;
    case 2:  // a random byte
      if (!input.empty()) input[pos(input.size())] = static_cast<char>(rng());
      break;
    case 3: {  // insert random bytes
      std::string bytes(1 + rng() % 8, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      input.insert(pos(input.size() + 1), bytes);
      break;
    }
    case 4:  // erase a range
      if (!input.empty()) {
        size_t at = pos(input.size());
        input.erase(at, 1 + rng() % std::min<size_t>(16, input.size() - at));
      }
      break;
    case 5:  // splice with another corpus input
      if (!corpus.empty()) {
        const std::string& other = corpus[rng() % corpus.size()];
        size_t at = pos(input.size() + 1);
        size_t from = pos(other.size() + 1);
        input = input.substr(0, at) + other.substr(from);
      }
      break;
  }
  if (input.size() > max_len) input.resize(max_len);
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  double seconds = 0;
  uint64_t seed = std::random_device{}();
  size_t max_len = 4096;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::stod(arg.substr(10));
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::stoull(arg.substr(7));
    } else if (arg.rfind("--max_len=", 0) == 0) {
      max_len = std::stoull(arg.substr(10));
    } else {
      paths.push_back(arg);
    }
  }
  InstallCrashHandler(argv[0]);
  std::vector<std::string> corpus = LoadCorpus(paths);
  for (const std::string& input : corpus) Run(input);
  std::printf("fuzz_driver: %zu corpus inputs ok\n", corpus.size());

  std::mt19937_64 rng(seed);
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string input =
        corpus.empty() ? std::string() : corpus[rng() % corpus.size()];
    for (int edits = 1 + rng() % 4; edits > 0; --edits)
      Mutate(input, corpus, max_len, rng);
    Run(input);
    ++runs;
  }
  std::printf("fuzz_driver: %llu mutated inputs ok in %.1f s (--seed=%llu)\n",
              static_cast<unsigned long long>(runs), seconds,
              static_cast<unsigned long long>(seed));
  return 0;
}
