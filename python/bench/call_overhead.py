"""Per-call overhead of the Python binding (ctypes over libtailor_c.so).

Measures, per call, on the CPU backend with warm kernels:
  c_floor       a no-argument C entry (tailor_c_api_version) through ctypes
  convert       the C fast path (tailor._fastcall) converting the 6 tensors
                and calling tailor_moe_experts with a null runtime, which
                returns at its first check: the binding's own cost in C
  c_experts     tailor_moe_experts through ctypes with prebuilt C args
                (the C++ work of one small Experts step + the ctypes floor)
  py_experts    tailor.moe.experts(...) from numpy arrays / torch tensors
  binding       py_experts - c_experts + c_floor: all the Python side adds
                (wrapper, conversion, call); the difference of two noisy
                times, so read it with `convert`
Usage: python bench/call_overhead.py [--torch]
"""

import ctypes
import sys
import time

import numpy as np

import tailor
from tailor import _capi, _tensors


def per_call_us(fns, n, rounds=7):
    """Best time per call of each function, rounds interleaved."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(max(10, n // 20)):
                fn()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / n)
    return {name: t * 1e6 for name, t in best.items()}


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
    fns = {
        "c_floor": lib.tailor_c_api_version,
        "c_experts": lambda: lib.tailor_moe_experts(rt, args_ref, ws),
        "py_experts": lambda: tailor.moe.experts(rt, *tensors, ws),
    }
    fast = tailor.moe._fastcall
    if fast is not None:
        if use_torch:
            tailor.moe._fastcall_learn_torch()
        fns["convert"] = lambda: fast.experts(0, ws._handle, *tensors, None)
    t = per_call_us(fns, 5000)
    kind = "torch" if use_torch else "numpy"
    print(f"python {sys.version.split()[0]}, {kind} inputs, T={T} H={H} "
          f"I={I} E={E} k={k}, fast path "
          f"{'on' if fast is not None else 'off (ctypes)'}")
    for name in ("c_floor", "convert", "c_experts", "py_experts"):
        if name in t:
            print(f"{name:11s} {t[name]:7.2f} us")
    print(f"binding     {t['py_experts'] - t['c_experts'] + t['c_floor']:7.2f}"
          f" us per Experts call (6 tensors)")


if __name__ == "__main__":
    main()
