#!/usr/bin/env bash
# scripts/run-fuzzers.sh [BUILD_DIR] [SECONDS] — `make fuzz`.
#
# Builds every fuzz target (tests/fuzz/*_fuzz.cc) against libFuzzer with
# ASan + UBSan in the asan build directory (default build-asan, shared with
# `make asan`) and runs each for SECONDS (default 60), one after the other:
#   corpus     BUILD_DIR/fuzz/corpus/<name>: the working corpus, kept between
#              runs; the committed seeds (tests/fuzz/corpus/<name>) are read,
#              never written. To refresh the seeds with what a run found:
#                <target> -merge=1 tests/fuzz/corpus/<name> BUILD_DIR/fuzz/corpus/<name>
#   crashes    BUILD_DIR/fuzz/artifacts/<name>/crash-*: replay one with
#              BUILD_DIR/tests/fuzz/<name>_fuzz <file>; fix the bug, add a
#              regression test, and commit the input to the seed corpus.
#   logs       BUILD_DIR/fuzz/logs/<name>.log
# Ends with a table (runs, exec/s, coverage, corpus size, result) and exits
# non-zero when any target crashed.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build-asan}"
seconds="${2:-60}"
bash scripts/sanitize.sh asan "$dir" fuzz_targets || exit 2

supp="$PWD/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TAILOR_FUZZ_CACHE_DIR="$PWD/$dir/fuzz/moe_kernel_cache"
mkdir -p "$TAILOR_FUZZ_CACHE_DIR" "$dir/fuzz/logs"

declare -a rows=()
failed=0
for binary in "$dir"/tests/fuzz/*_fuzz; do
  name=$(basename "$binary" _fuzz)
  corpus="$dir/fuzz/corpus/$name"
  artifacts="$dir/fuzz/artifacts/$name/"
  log="$dir/fuzz/logs/$name.log"
  mkdir -p "$corpus" "$artifacts"
  echo "run-fuzzers: $name for ${seconds}s"
  "$binary" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts" \
    "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  # tail -1: after a crash libFuzzer prints its final stats twice.
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  speed=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  result=ok
  if [ $rc -ne 0 ]; then
    result="CRASH (rc $rc): $(ls "$artifacts" | head -1)"
    failed=1
  fi
  rows+=("$(printf '%-18s %10s %8s  %-20s %7s  %s' "$name" "${runs:-?}" \
    "${speed:-?}" "${cov:-?}" "$(ls "$corpus" | wc -l)" "$result")")
done

echo
echo "==== make fuzz: ${seconds}s per target, libFuzzer + ASan + UBSan ($(date -u +%Y-%m-%dT%H:%M:%SZ)) ===="
printf '%-18s %10s %8s  %-20s %7s  %s\n' target runs exec/s coverage corpus result
for row in "${rows[@]}"; do echo "$row"; done
exit $failed
