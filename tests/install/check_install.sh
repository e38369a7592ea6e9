#!/usr/bin/env bash
# Installs a built tailor into a fresh prefix, then builds and runs outside
# programs against that prefix only:
#   1. CMake: find_package(tailor CONFIG) -> tailor::tailor, tailor::tailor_c,
#      from a C and C++ project and from a project(x CXX) one
#   2. pkg-config: a C program (tailor_c) and a C++ program (tailor); the C
#      program also linked with the .pc's rpath and run without
#      LD_LIBRARY_PATH
# Usage: check_install.sh <build dir> <scratch dir> <source dir>
# $CC and $CXX (default cc, c++) build the programs, with
# $TAILOR_CONSUMER_FLAGS (the sanitizer of a sanitizer build) when set, and
# $TAILOR_CONSUMER_C_LIBS on the link lines of the C programs.
set -euo pipefail
build=$1 scratch=$2 source=$3
cc=${CC:-cc} cxx=${CXX:-c++}
read -r -a flags <<< "${TAILOR_CONSUMER_FLAGS:-}"
read -r -a c_libs <<< "${TAILOR_CONSUMER_C_LIBS:-}"
rm -rf "$scratch" && mkdir -p "$scratch"
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" > "$scratch/install.log"
export TAILOR_CACHE_DIR=$scratch/cache LD_LIBRARY_PATH=$prefix/lib

echo "== 1. find_package(tailor CONFIG)"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
# consume <project folder> <build folder>: configure and build it.
consume() {
  local log=$scratch/$(basename "$2")
  if ! cmake -S "$1" -B "$2" "${generator[@]}" \
      -DCMAKE_PREFIX_PATH="$prefix" -DTAILOR_EXAMPLES_DIR="$source/examples" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_C_FLAGS="${flags[*]}" -DCMAKE_CXX_FLAGS="${flags[*]}" \
      -DCMAKE_EXE_LINKER_FLAGS="${flags[*]} ${c_libs[*]}" \
      -DCMAKE_BUILD_TYPE=Release > "$log.configure.log" 2>&1; then
    tail -n 30 "$log.configure.log"
    echo "install check: configuring $1 failed" >&2
    return 1
  fi
  cmake --build "$2" > "$log.build.log"
}
consume "$source/tests/install/consumer" "$scratch/consumer"
consume "$source/tests/install/consumer_cxx" "$scratch/consumer_cxx"
# Whole outputs to files first: head closing a pipe early would fail them.
run() { "$1" > "$1.out"; head -n "$2" "$1.out"; }
run "$scratch/consumer/consumer_cpp" 1
run "$scratch/consumer/consumer_c" 3
run "$scratch/consumer_cxx/consumer_cxx_only" 1

echo "== 2. pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
"$cc" "${flags[@]}" -std=c11 -o "$scratch/pc_c" "$source/examples/02_c_api.c" \
  $(pkg-config --cflags --libs tailor_c) -lm "${c_libs[@]}"
# shellcheck disable=SC2046
"$cxx" "${flags[@]}" -std=c++20 -o "$scratch/pc_cpp" "$source/examples/01_jit_cache.cc" \
  $(pkg-config --cflags --libs tailor)
run "$scratch/pc_c" 1
run "$scratch/pc_cpp" 1
# The run-time library path the .pc names: no LD_LIBRARY_PATH needed.
# shellcheck disable=SC2046
"$cc" "${flags[@]}" -std=c11 -o "$scratch/pc_c_rpath" "$source/examples/02_c_api.c" \
  $(pkg-config --cflags --libs tailor_c) \
  $(pkg-config --variable=rpath tailor_c) -lm "${c_libs[@]}"
(unset LD_LIBRARY_PATH; run "$scratch/pc_c_rpath" 1)
echo "install check: ok"
