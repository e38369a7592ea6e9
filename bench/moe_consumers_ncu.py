"""bench/moe_consumers_ncu.py — one grouped-GEMM launch per Hopper consumer
schedule (cooperative, ping-pong: runtimes with moe.consumers forced), each
inside an NVTX range named after it, for Nsight Compute to profile side by
side (scripts/gpu-moe-pingpong with TAILOR_NCU=1 runs it under ncu).

Shapes as bench/moe_gpu_bench.py (the anchors' Zipf routing and seed);
default: the compute-bound launches Mixtral-8x7B T=16384 and Qwen3-30B-A3B
T=16384, both projections (--proj picks); --schedules names other runtimes
(e.g. c1=moe.cluster=1 c2=moe.cluster=2). Each runtime's kernel is compiled and run once
before its range, so the range holds exactly one launch of it. Usage:
  ncu --nvtx --nvtx-include "coop/" --nvtx-include "pp/" ... \\
    python3 bench/moe_consumers_ncu.py [--shapes mixtral:16384 ...]
"""
import argparse

import torch

import tailor
import tailor.moe
from moe_gpu_bench import MODELS, routing, runtime_with

dev = torch.device("cuda")
SCHEDULES = {"coop": "moe.consumers=cooperative",
             "pp": "moe.consumers=pingpong"}


def profile_shape(rts, model, tokens, gen, projections):
    E, k, H, I = MODELS[model]
    ids = routing(gen, tokens, E, k).to(dev, torch.int32)
    R = tokens * k
    for proj, (n, kk) in (("gate_up", (2 * I, H)), ("down", (H, I))):
        if proj not in projections:
            continue
        a = torch.randn(R, kk, device=dev, dtype=torch.bfloat16)
        w = torch.randn(E, n, kk, device=dev, dtype=torch.bfloat16) * 0.02
        c = torch.empty(R, n, device=dev, dtype=torch.bfloat16)
        for name, rt in rts.items():
            ws = tailor.moe.Workspace()
            tailor.moe.reserve_workspace(rt, ws, max_tokens=tokens, topk=k,
                                         num_experts=E, dtype="bf16")
            tailor.moe.route(rt, ids, E, ws)
            tailor.moe.grouped_gemm(rt, a, w, c, ws)  # compiles
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(name)
            tailor.moe.grouped_gemm(rt, a, w, c, ws)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"{model} T={tokens} {proj} {name}: "
                  f"{ws.gemms()[-1]['kernel']}", flush=True)
        del a, w, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*",
                    default=["mixtral:16384", "qwen3_30b_a3b:16384"])
    ap.add_argument("--proj", nargs="*", choices=["gate_up", "down"],
                    default=["gate_up", "down"])
    ap.add_argument("--schedules", nargs="*",
                    default=[f"{n}={t}" for n, t in SCHEDULES.items()],
                    help="NAME=TUNING runtimes in launch order (NVTX range NAME)")
    args = ap.parse_args()
    schedules = dict(s.split("=", 1) for s in args.schedules)
    rts = {name: runtime_with(tuning) for name, tuning in schedules.items()}
    gen = torch.Generator(device="cpu").manual_seed(1234)
    for shape in args.shapes:
        model, tokens = shape.split(":")
        profile_shape(rts, model, int(tokens), gen, args.proj)


if __name__ == "__main__":
    main()
