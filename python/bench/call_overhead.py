"""Per-call overhead of the Python binding (ctypes over libtailor_c.so).

Measures, per call, on the CPU backend with warm kernels:
  c_floor       a no-argument C entry (tailor_c_api_version) through ctypes
  c_experts     tailor_moe_experts through ctypes with prebuilt C args
                (the C++ work of one small Experts step + the ctypes floor)
  py_experts    tailor.moe.experts(...) from numpy arrays / torch tensors
  binding       py_experts - c_experts + c_floor: what the Python side adds
                (argument conversion + one ctypes call)
Usage: python bench/call_overhead.py [--torch]
"""

import ctypes
import sys
import time

import numpy as np

import tailor
from tailor import _capi, _tensors


def per_call_us(fn, n):
    for _ in range(max(10, n // 20)):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main():
    use_torch = "--torch" in sys.argv
    rt = tailor.Runtime(backend="cpu", log_level="warn")
    T, H, I, E, k = 4, 64, 32, 4, 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, H), dtype=np.float32)
    w13 = rng.standard_normal((E, 2 * I, H), dtype=np.float32)
    w2 = rng.standard_normal((E, H, I), dtype=np.float32)
    ids = np.array([[t % E, (t + 1) % E] for t in range(T)], np.int32)
    tw = np.full((T, k), 0.5, np.float32)
    out = np.empty_like(x)
    tensors = [x, w13, w2, tw, ids, out]
    if use_torch:
        import torch
        tensors = [torch.from_numpy(a) for a in tensors]
    ws = tailor.moe.Workspace()
    tailor.moe.experts(rt, *tensors, ws)

    args = _capi.ExpertsArgs()
    for field, a in zip(("hidden", "w13", "w2", "topk_weights", "topk_ids",
                         "out"), tensors):
        _tensors.fill(getattr(args, field), a)
    lib = _capi.lib
    args_ref = ctypes.byref(args)
    n = 20000
    floor = per_call_us(lib.tailor_c_api_version, n * 5)
    c_experts = per_call_us(
        lambda: lib.tailor_moe_experts(rt, args_ref, ws), n)
    py_experts = per_call_us(lambda: tailor.moe.experts(rt, *tensors, ws), n)
    kind = "torch" if use_torch else "numpy"
    print(f"python {sys.version.split()[0]}, {kind} inputs, T={T} H={H} "
          f"I={I} E={E} k={k}")
    print(f"c_floor     {floor:7.2f} us")
    print(f"c_experts   {c_experts:7.2f} us")
    print(f"py_experts  {py_experts:7.2f} us")
    print(f"binding     {py_experts - c_experts + floor:7.2f} us per Experts "
          f"call (6 tensors)")


if __name__ == "__main__":
    main()
