// serve_demo/flags.h — the demo's command line, checked before it runs.
//
//   serve_demo [--steps N] [--backend auto|cpu|cuda|hip] [--help]
//
// Every argument is checked first: --help prints the usage and runs
// nothing; an unknown flag, a missing value, a backend that is not one of
// the four or a step count that is not an integer in [1, kMaxSteps] is an
// InvalidArgument naming the flag, and the demo exits 2 without running
// (nothing is compiled, no cache is written).
#ifndef TAILOR_EXAMPLES_SERVE_DEMO_FLAGS_H_
#define TAILOR_EXAMPLES_SERVE_DEMO_FLAGS_H_

#include "absl/status/statusor.h"
#include "tailor/runtime.h"

namespace serve_demo {

inline constexpr int kDefaultSteps = 48;
inline constexpr int kMaxSteps = 100000;

inline constexpr char kUsage[] =
    R"(usage: serve_demo [--steps N] [--backend auto|cpu|cuda|hip]

Replays a ragged MoE serving trace through tailor and prints throughput,
cache behaviour and the work core-plus-tail saves over padding.
  --steps N        steps per model shape, 1..100000 (default 48)
  --backend NAME   auto (default: CUDA when a GPU is present, else the CPU),
                   cpu, cuda or hip; a named backend that is not available
                   is an error, never a silent fallback
  --help           this text
)";

struct DemoFlags {
  bool help = false;
  int steps = kDefaultSteps;
  tailor::BackendKind backend = tailor::BackendKind::kAuto;
};

absl::StatusOr<DemoFlags> ParseDemoFlags(int argc, char** argv);

}  // namespace serve_demo

#endif  // TAILOR_EXAMPLES_SERVE_DEMO_FLAGS_H_
