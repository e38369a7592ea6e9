# The two commands (README.md): `make demo` and `make test`. Each installs
# missing Debian packages (scripts/install-deps.sh, idempotent), configures
# and builds with CMake (Release, Ninja when present), then runs.
# The reliability targets (README.md, "Tests and benchmarks"): `make asan`
# and `make tsan` (the CPU suite under sanitizers, each in its own build
# directory), `make asan-ci` (the CI-sized subset of the ASan suite),
# `make fuzz` (every fuzz target for FUZZ_SECONDS under libFuzzer +
# ASan/UBSan) and `make soak` (the long mixed-launch soak).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CMAKE_FLAGS ?=
ASAN_DIR ?= build-asan
ASAN_CI_DIR ?= build-asan-ci
TSAN_DIR ?= build-tsan
FUZZ_SECONDS ?= 60
SOAK_ITERATIONS ?= 100000

.PHONY: deps deps-fuzz configure build demo test bench clean asan asan-ci tsan fuzz soak

deps:
	@bash scripts/install-deps.sh

deps-fuzz:
	@bash scripts/install-deps.sh fuzz

configure: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD_DIR) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS); \
	fi

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/examples/serve_demo

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

asan: deps-fuzz
	CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/sanitize.sh asan $(ASAN_DIR)

asan-ci: deps
	CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/sanitize.sh asan-ci $(ASAN_CI_DIR)

tsan: deps
	CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/sanitize.sh tsan $(TSAN_DIR)

fuzz: deps-fuzz
	CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/run-fuzzers.sh $(ASAN_DIR) $(FUZZ_SECONDS)

soak: build
	TAILOR_SOAK_ITERATIONS=$(SOAK_ITERATIONS) $(BUILD_DIR)/tests/reliability/soak_test

bench: build
	bash scripts/run-benches.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(ASAN_CI_DIR) $(TSAN_DIR)
