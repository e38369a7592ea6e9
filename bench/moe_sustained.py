"""bench/moe_sustained.py — the compute-bound grouped GEMMs under sustained
load: tailor's kernel, the per-expert cuBLAS loop and torch._grouped_mm,
each run back to back for a few seconds while nvidia-smi samples the SM
clock and the board power.

Why: moe_gpu_bench.py times one launch after an L2 flush; at the
compute-bound shapes the H200 runs at its power limit and its SM clock
drifts, so a method's time there mixes its issue efficiency with the clock
it is allowed. This bench reports both for each method on the same data:
ms per launch, the mean SM clock and power while it ran, and cycles per
launch (ms x MHz), which a clock change does not move.

Usage, on the GPU machine from the repository root (as scripts/gpu-bench-moe):
  PYTHONPATH=python:bench TAILOR_LIBRARY=<libtailor_c.so> \\
    python3 bench/moe_sustained.py [--shapes mixtral:4096 ...] [--seconds 3]
Prints one row per (shape, projection, method, pass); two passes in reverse
method order.
"""
import argparse
import os
import subprocess
import tempfile
import time

import torch

import tailor.moe
from moe_gpu_bench import MODELS, dev, gemm_methods, routing, runtime_with


class ClockSampler:
    """nvidia-smi sampling the SM clock (MHz) and power (W) every 50 ms."""

    def __init__(self):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".csv")
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", str(torch.cuda.current_device()),
             "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "50"], stdout=self.log, stderr=subprocess.DEVNULL)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.seek(0)
        rows = []
        for line in self.log.read().splitlines():
            try:
                mhz, watts = (float(x) for x in line.split(","))
                rows.append((mhz, watts))
            except ValueError:
                pass
        # The first samples belong to the ramp from the previous method.
        rows = rows[len(rows) // 5:] or rows
        if not rows:
            return float("nan"), float("nan")
        return (sum(r[0] for r in rows) / len(rows),
                sum(r[1] for r in rows) / len(rows))


def sustained(fn, seconds):
    """ms per launch over `seconds` of back-to-back launches (median of
    ~20 event-timed chunks), with the mean SM clock and power."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    per_chunk = max(1, int(seconds / 20 / max(s.elapsed_time(e) / 1e3, 1e-6)))
    sampler = ClockSampler()
    chunks = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.record()
        for _ in range(per_chunk):
            fn()
        e.record()
        e.synchronize()
        chunks.append(s.elapsed_time(e) / per_chunk)
    mhz, watts = sampler.stop()
    chunks.sort()
    return chunks[len(chunks) // 2], mhz, watts


def shape_data(model, tokens, gen):
    E, k, H, I = MODELS[model]
    ids = routing(gen, tokens, E, k)
    counts = torch.bincount(ids.flatten(), minlength=E)
    rows = int(counts.sum())
    projections = {
        "gate_up": (torch.randn(rows, H, device=dev, dtype=torch.bfloat16),
                    torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02),
        "down": (torch.randn(rows, I, device=dev, dtype=torch.bfloat16),
                 torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) * 0.02)}
    return ids, counts, projections


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=["mixtral:4096", "mixtral:16384"],
                    help="model:T pairs")
    ap.add_argument("--projections", nargs="*", default=["gate_up", "down"])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--variants", nargs="*", default=["tailor="],
                    help="NAME=TUNING: a tailor method per TAILOR_TUNING string, "
                         "e.g. tailor_c2=moe.cluster=2")
    args = ap.parse_args()
    variants = dict(v.split("=", 1) for v in args.variants)
    runtimes = {name: runtime_with(tuning) for name, tuning in variants.items()}
    rt = next(iter(runtimes.values()))
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name} | tailor {rt.arch} | torch {torch.__version__} | "
          f"{args.seconds:.1f} s per method and pass", flush=True)
    print(f"{'shape':22s} {'proj':8s} {'method':11s} pass {'ms':>8s} {'TFLOP/s':>8s} "
          f"{'MHz':>6s} {'W':>6s} {'Mcycles':>8s}", flush=True)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    for shape in args.shapes:
        model, tokens = shape.split(":")
        E, k = MODELS[model][:2]
        ids, counts, projections = shape_data(model, int(tokens), gen)
        tailors = {}
        for name, r in runtimes.items():
            ws = tailor.moe.Workspace()
            tailor.moe.reserve_workspace(r, ws, max_tokens=int(tokens), topk=k,
                                         num_experts=E, dtype="bf16")
            tailor.moe.route(r, ids.to(dev, torch.int32), E, ws)
            tailors[name] = (r, ws)
        for proj in args.projections:
            a, w = projections[proj]
            methods, _ = gemm_methods(tailors, a, w, counts)
            flops = 2 * a.shape[0] * w.shape[1] * w.shape[2]
            order = list(methods)
            for p, names in enumerate((order, order[::-1])):
                for m in names:
                    ms, mhz, watts = sustained(methods[m], args.seconds)
                    print(f"{shape:22s} {proj:8s} {m:11s} {p:4d} {ms:8.3f} "
                          f"{flops / ms / 1e9:8.0f} {mhz:6.0f} {watts:6.0f} "
                          f"{ms * mhz / 1e3:8.2f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
