#!/usr/bin/env bash
# scripts/install-deps.sh [fuzz]
# Installs the Debian 12 packages tailor builds against. With "fuzz" (make
# asan, make fuzz), also libfuzzer-14-dev, which links the fuzz targets
# against libFuzzer; `make test` does not need it, so CI does not install it.
# Idempotent: a package that is already installed is skipped, and apt is not
# touched at all when nothing is missing. Needs root (or sudo) only when
# something must be installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  llvm-14-dev libclang-cpp14-dev libclang-14-dev clang-14
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev nlohmann-json3-dev
  zlib1g-dev libzstd-dev libedit-dev libtinfo-dev libxml2-dev libffi-dev
  libcpp-httplib-dev
  # tests of the serving surfaces: the Python package's venv, the stats
  # endpoint's scrape (curl, promtool from prometheus) and load (wrk)
  python3-venv python3-dev curl prometheus wrk
  # the HIP backend: HIP headers for the host code (libamdhip64 is dlopened),
  # and what hiprtc compiles with in CI (no AMD GPU needed): its builtin
  # headers, the code-object manager and the device bitcode (ROCm 5.2)
  libamdhip64-dev libhiprtc-builtins5 libamd-comgr2 rocm-device-libs
)

case "${1:-}" in
  "") ;;
  fuzz) packages+=(libfuzzer-14-dev) ;;
  *) echo "install-deps: unknown group '$1' (only 'fuzz')" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
