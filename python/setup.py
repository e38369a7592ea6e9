"""Bundles libtailor_c.so into the package when one is found at build time.

`pip install ./python` after building tailor (make, or cmake --build)
copies $TAILOR_LIBRARY, else ../build/src/capi/libtailor_c.so.3, into
tailor/_lib/, so the installed package needs nothing else from the build
tree. Without either, the package loads libtailor_c.so at run time from
$TAILOR_LIBRARY or the loader's path (tailor/_capi.py). It also builds the
optional C fast path tailor._fastcall when a compiler and Python's headers
are there.
"""

import os
import pathlib
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
# The C ABI's soname: TAILOR_C_API_VERSION of include/tailor/c_api.h.
SONAME = "libtailor_c.so.3"


def _library():
    env = os.environ.get("TAILOR_LIBRARY")
    if env:
        return pathlib.Path(env).resolve()
    built = HERE.parent / "build" / "src" / "capi" / SONAME
    return built.resolve() if built.exists() else None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        library = _library()
        if library is None:
            print("tailor: no libtailor_c.so found to bundle; the package "
                  "will look for it at run time ($TAILOR_LIBRARY)")
            return
        target = pathlib.Path(self.build_lib) / "tailor" / "_lib"
        target.mkdir(parents=True, exist_ok=True)
        # A build directory reused across ABI versions keeps the old
        # library; bundle exactly one.
        for old in target.glob("libtailor_c.so*"):
            old.unlink()
        shutil.copy2(library, target / SONAME)
        print(f"tailor: bundled {library}")


# The C fast path of tailor.moe.experts (tailor/_fastcall.c): needs only
# tailor/c_api.h and Python's headers; optional, the ctypes path remains.
FASTCALL = Extension("tailor._fastcall", ["tailor/_fastcall.c"],
                     include_dirs=[str(HERE.parent / "include")],
                     optional=True)

setup(cmdclass={"build_py": BuildPyWithLibrary}, ext_modules=[FASTCALL])
