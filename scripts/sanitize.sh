#!/usr/bin/env bash
# scripts/sanitize.sh asan|asan-ci|tsan [BUILD_DIR [TARGET]] — `make asan`,
# `make asan-ci`, `make tsan`.
#
# Builds tailor with Clang 14 and a sanitizer in a build directory of its own
# (default build-asan / build-tsan; RelWithDebInfo, benches off), then runs
# the CPU test suite under it through ctest (GPU tests skip without a device):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer, leak detection on;
#         every finding aborts the test that hit it. The fuzz targets are
#         linked against libFuzzer here, so their ctest smoke runs are real
#         libFuzzer runs (make fuzz runs them longer).
#   tsan  ThreadSanitizer over the same suite, concurrency tests included.
#   asan-ci  the CI-sized subset (.ci/run runs it with TAILOR_CI_ASAN=1):
#         ASan + UBSan as asan, but only the tests labelled sanitize-ci
#         (tests/CMakeLists.txt: core, kernel cache over the CPU JIT,
#         reliability, C ABI, fuzz smoke runs) and only the targets they
#         need (sanitize_ci); without libFuzzer, so the fuzz smoke tests
#         replay their corpus through fuzz_driver.cc as in make test and no
#         extra package is needed. Default BUILD_DIR build-asan-ci.
# With TARGET, only that target is built and nothing runs (run-fuzzers.sh).
# Third-party reports that are not tailor's are suppressed in
# tests/sanitizers/*.supp, each with its reason.
# Extra CMake flags: $CMAKE_FLAGS (e.g. a compiler launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:?usage: scripts/sanitize.sh asan|asan-ci|tsan [BUILD_DIR [TARGET]]}"
dir="${2:-build-$kind}"
target="${3:-}"
build_args=()
ctest_args=()
case "$kind" in
  asan) flags=(-DTAILOR_SANITIZE=ON -DTAILOR_FUZZ=ON) ;;
  asan-ci)
    flags=(-DTAILOR_SANITIZE=ON -DTAILOR_FUZZ=OFF)
    build_args=(--target sanitize_ci)
    ctest_args=(-L sanitize-ci) ;;
  tsan) flags=(-DTAILOR_TSAN=ON) ;;
  *) echo "sanitize.sh: unknown sanitizer '$kind' (asan, asan-ci or tsan)" >&2; exit 2 ;;
esac
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$dir/CMakeCache.txt" ]; then
  # shellcheck disable=SC2086  # CMAKE_FLAGS is a list of flags
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAILOR_BUILD_BENCH=OFF "${flags[@]}" \
    ${CMAKE_FLAGS:-}
fi
if [ -n "$target" ]; then
  cmake --build "$dir" -j "$(nproc)" --target "$target"
  exit 0
fi
start=$(date +%s)
cmake --build "$dir" -j "$(nproc)" "${build_args[@]}"
echo "sanitize.sh: $kind build took $(( $(date +%s) - start )) s"

supp="$PWD/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
# die_after_fork=0: the fork tests (tests/reliability) start threads in
# the child of a multi-threaded parent on purpose; TSan kills such a child
# by default.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$supp/tsan.supp"
start=$(date +%s)
status=0
(cd "$dir" && ctest --output-on-failure -j "$(nproc)" "${ctest_args[@]}") || status=$?
echo "sanitize.sh: $kind suite took $(( $(date +%s) - start )) s (exit $status)"
exit $status
