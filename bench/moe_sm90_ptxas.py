#!/usr/bin/env python3
"""ptxas -v of the Hopper grouped GEMM's variants, compiled as the library does.

Compiles each MoeGroupedGemmSm90 instantiation below through NVRTC (ctypes,
the flags of src/backends/cuda/nvrtc_compiler.cc: -std=c++20 -default-device
-minimal, the toolkit's include directories, -arch=sm_90a) with
--ptxas-options=-v, and prints per variant the registers, spill bytes, stack
frame and short hashes of the PTX code (every line but the .global
declarations of class constants) and of the cubin. Two trees whose tables
match in the code column produce the same instructions.

No GPU is needed. Usage (from the repository root):
  python3 bench/moe_sm90_ptxas.py [--root DIR] [--header PATH]
The kernel header defaults to templates/cuda/moe/sm90/kernel.cuh when it
exists, else templates/cuda/moe/grouped_gemm_sm90.cuh (the layout before the
kernel was split into kernel / scheduler / mainloop / epilogue).
"""

import argparse
import ctypes
import ctypes.util
import hashlib
import os
import re
import sys

# (name, N, K, tile rows, epilogue (0 none, 1 silu_and_mul), TMA store,
#  cluster, swap-AB, pipeline checks): the nvrtc compile test's Hopper cases,
# the Hopper-eligible cases of the MoE CUDA test's awkward dims (as the
# launch picks swap-AB and TMA stores for them), and the serving profiles'
# shapes on every schedule (clusters, swap-AB, both epilogues).
VARIANTS = [
    ("nvrtc_rows64", 7168, 2048, 64, 0, 0, 1, 0, 0),
    ("nvrtc_silu_rows128", 4096, 7168, 128, 1, 0, 1, 0, 0),
    ("nvrtc_tma_store_rows128", 7168, 2048, 128, 0, 1, 1, 0, 0),
    ("nvrtc_tma_store_silu_rows64", 1536, 2048, 64, 1, 1, 1, 0, 0),
    ("nvrtc_checks_ragged", 200, 40, 17, 0, 0, 1, 0, 1),
    ("awkward_64x64_m64", 64, 64, 64, 0, 1, 1, 0, 0),
    ("awkward_64x64_m128_silu", 64, 64, 128, 1, 0, 1, 0, 0),
    ("awkward_520x136_m100", 520, 136, 100, 0, 0, 1, 0, 0),
    ("awkward_200x72_m17", 200, 72, 17, 0, 0, 1, 0, 0),
    ("awkward_96x40_m16_silu_swap", 96, 40, 16, 1, 0, 1, 1, 0),
    ("awkward_520x136_m8_swap", 520, 136, 8, 0, 0, 1, 1, 0),
    ("awkward_200x72_m32_silu_swap", 200, 72, 32, 1, 0, 1, 1, 0),
    ("awkward_96x40_m5_silu_swap", 96, 40, 5, 1, 0, 1, 1, 0),
    ("qwen3_gate_up_m128", 1536, 2048, 128, 1, 1, 1, 0, 0),
    ("qwen3_down_m128", 2048, 768, 128, 0, 1, 1, 0, 0),
    ("qwen3_gate_up_m8_swap", 1536, 2048, 8, 1, 0, 1, 1, 0),
    ("qwen3_down_m32_swap", 2048, 768, 32, 0, 0, 1, 1, 0),
    ("mixtral_gate_up_m128_cluster2", 28672, 4096, 128, 1, 1, 2, 0, 0),
    ("mixtral_down_m128_cluster4", 4096, 14336, 128, 0, 1, 4, 0, 0),
    ("deepseek_gate_up_m64", 4096, 7168, 64, 1, 1, 1, 0, 0),
    ("deepseek_down_m128_checks", 7168, 2048, 128, 0, 1, 1, 0, 1),
    ("cluster2_checks", 4096, 7168, 128, 1, 0, 2, 0, 1),
]


def load_nvrtc():
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for name in (os.path.join(cuda, "lib64", "libnvrtc.so"),
                 ctypes.util.find_library("nvrtc"), "libnvrtc.so"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name), cuda
        except OSError:
            continue
    sys.exit("libnvrtc not found (set CUDA_HOME)")


def compile_variant(nvrtc, cuda, root, header, v):
    name, n, k, rows, epilogue, tma_store, cluster, swap, checks = v
    code = ""
    if checks:
        code += "#define TAILOR_PIPELINE_CHECKS 1\n"
    code += (f'#include "{header}"\n'
             "TAILOR_CUDA_ENTRY(tailor_entry, (tailor::cuda::MoeGroupedGemmSm90<"
             f"{n}, {k}, {rows}, {epilogue}, {tma_store}, {cluster}, {swap}>))\n")
    program = ctypes.c_void_p()
    rc = nvrtc.nvrtcCreateProgram(ctypes.byref(program), code.encode(),
                                  b"tailor_entry.cu", 0, None, None)
    if rc != 0:
        sys.exit(f"{name}: nvrtcCreateProgram failed ({rc})")
    include = os.path.join(cuda, "include")
    flags = ["-arch=sm_90a", "-std=c++20", "-default-device", "-minimal"]
    if os.path.isdir(os.path.join(include, "cccl")):
        flags.append("-I" + os.path.join(include, "cccl"))
    flags += ["-I" + include, "-I" + root, "--ptxas-options=-v"]
    argv = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    rc = nvrtc.nvrtcCompileProgram(program, len(flags), argv)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    log = log.value.decode(errors="replace")
    if rc != 0:
        sys.exit(f"{name}: compile failed ({rc})\n{log}")
    blobs = {}
    for what, get_size, get in (("ptx", nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX),
                                ("cubin", nvrtc.nvrtcGetCUBINSize,
                                 nvrtc.nvrtcGetCUBIN)):
        get_size(program, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        get(program, buffer)
        blobs[what] = buffer.raw
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return log, blobs


def code_lines(ptx):
    """The PTX without its .global declarations: NVRTC emits one for every
    static constexpr member of the kernel's classes, so moving a constant
    from one class to another renames them without changing any code."""
    return b"\n".join(line for line in ptx.split(b"\n")
                      if not line.startswith(b".global"))


def number(log, pattern):
    m = re.search(pattern, log)
    return int(m.group(1)) if m else -1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="repository root")
    parser.add_argument("--header", default=None, help="kernel header")
    parser.add_argument("--filter", default="", help="variant name substring")
    parser.add_argument("--dump", default=None,
                        help="directory for each variant's .ptx and .cubin")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    header = args.header
    if header is None:
        split = "templates/cuda/moe/sm90/kernel.cuh"
        header = split if os.path.exists(os.path.join(root, split)) else \
            "templates/cuda/moe/grouped_gemm_sm90.cuh"
    nvrtc, cuda = load_nvrtc()
    # NVRTC looks for the main source's includes in the working directory
    # first: make that the tree under test.
    os.chdir(root)
    print(f"# header {header}")
    print(f"{'variant':34} {'regs':>4} {'spill st':>8} {'spill ld':>8} "
          f"{'stack':>5}  {'ptx code':12} {'cubin':12}")
    for v in VARIANTS:
        if args.filter not in v[0]:
            continue
        log, blobs = compile_variant(nvrtc, cuda, root, header, v)
        regs = number(log, r"Used (\d+) registers")
        stores = number(log, r"(\d+) bytes spill stores")
        loads = number(log, r"(\d+) bytes spill loads")
        stack = number(log, r"(\d+) bytes stack frame")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            for what, blob in blobs.items():
                with open(os.path.join(args.dump, f"{v[0]}.{what}"), "wb") as f:
                    f.write(blob.rstrip(b"\0") if what == "ptx" else blob)
        code = hashlib.sha256(code_lines(blobs["ptx"])).hexdigest()[:12]
        cubin = hashlib.sha256(blobs["cubin"]).hexdigest()[:12]
        print(f"{v[0]:34} {regs:4} {stores:8} {loads:8} {stack:5}  "
              f"{code:12} {cubin:12}", flush=True)


if __name__ == "__main__":
    main()
