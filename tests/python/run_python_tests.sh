#!/usr/bin/env bash
# The Python package as a user gets it: a virtual environment in the build
# tree, `pip install ./python` (which bundles the freshly built
# libtailor_c.so), then pytest from outside the source tree.
#   torch: installed from PyPI (torch==$TAILOR_TORCH_VERSION, the CUDA build
#   PyPI serves for Linux x86_64: ~2.8 GB of wheels, ~5 GB installed) only
#   when TAILOR_TEST_TORCH=1 (CI sets it); otherwise the torch tests skip
#   unless the venv already has torch. transformers (for the integration
#   test, pure Python: ~1-5 min with its dependencies) comes with torch.
#   ml_dtypes (bf16 numpy arrays, a small wheel) always.
# Usage: run_python_tests.sh <build dir> <source dir>
set -euo pipefail
build=$1 source=$2
venv=$build/python-venv
python=${TAILOR_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install numpy pytest wheel ml_dtypes
if [ "${TAILOR_TEST_TORCH:-0}" = 1 ]; then
  start=$(date +%s)
  "${pip[@]}" install "torch==${TAILOR_TORCH_VERSION:-2.15.0}"
  echo "torch install: $(( $(date +%s) - start )) s"
  start=$(date +%s)
  "${pip[@]}" install "transformers>=5,<6"
  echo "transformers install: $(( $(date +%s) - start )) s"
fi
# --no-build-isolation: the venv's setuptools builds it, nothing downloaded.
TAILOR_LIBRARY=$build/src/capi/libtailor_c.so.3 \
  "${pip[@]}" install --no-build-isolation --force-reinstall --no-deps "$source/python"
unset TAILOR_LIBRARY  # the installed package must find its bundled library
export TAILOR_CACHE_DIR=$build/tests/python/kernel_cache
cd "$build"  # not the source tree: import the installed package
"$venv/bin/python" -c "import tailor; print('tailor', tailor.__version__, 'from', tailor.library_path)"
"$venv/bin/python" -c "import torch; print('torch', torch.__version__)" 2>/dev/null ||
  echo "torch: not installed, torch tests skip (TAILOR_TEST_TORCH=1 installs it)"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$source/python/tests"
