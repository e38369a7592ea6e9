#!/usr/bin/env bash
# Runs the CPU benchmarks and writes bench/results/*.txt, each headed by the
# command, the date and the machine. Usage: scripts/run-benches.sh [build_dir]
# (make bench). GPU benches run on a GPU machine through scripts/gpu-check.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
out=bench/results
mkdir -p "$out"
machine="$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"

run() {  # run NAME COMMAND...
  local name="$1"; shift
  echo "== $name: $*"
  { echo "# command: $*"; echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)"; echo "# machine: $machine";
    echo; "$@" 2>&1; } | tee "$out/$name.txt"
}

run cpu_dispatch "$build/bench/cpu_dispatch_bench" --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true
run plan "$build/bench/plan_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run moe_cpu "$build/bench/moe_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run decode_cpu "$build/bench/decode_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run compile_time_cpu "$build/bench/compile_time_bench" --cpu-only --repetitions 5
cache=$(mktemp -d)
TAILOR_CACHE_DIR="$cache" "$build/examples/serve_demo" > /dev/null  # first run: compiles
run serve_demo env TAILOR_CACHE_DIR="$cache" "$build/examples/serve_demo"
rm -rf "$cache"
