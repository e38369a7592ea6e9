"""bench/moe_gpu_ab.py — tailor's Hopper grouped GEMM under several settings
and several routing draws, in one process on the same data.

The grid (moe_gpu_bench.py) times one routing draw per shape. At the launches
the H100's power limit holds, the order of the tiles (the raster) moves a
launch by up to 10 % from one Zipf draw to another with the same tile count
(bench/results/moe_gpu_h100.txt, "Routing draws"), so a setting judged on one
draw can be judged wrong. This times every setting on each of several draws:

  variants  one tailor Runtime per variant, built with the variant's
            environment set (the Hopper kernels read $TAILOR_TUNING when the
            Runtime is made), e.g.
            "groups:TAILOR_TUNING=moe.expert_groups=forward" or
            "c2:TAILOR_TUNING=moe.cluster=2"; "base:" takes the cost model's
            choices. The first is the base of the printed ratios.
  draws     --seeds: each a Zipf(1.0) routing from its own generator; -1 is
            the grid's draw for that model and T.
  yardstick torch._grouped_mm on the same data: a draw that is harder for
            every method shows there too.

Timing as the grid's (moe_gpu_bench.bench: an L2 flush before each rep,
median of 20): an untimed round of every method, then --rounds rounds in
alternating order, best median each. Usage, on the GPU machine from the
repository root over the bundle of scripts/gpu-bundle:
  LD_LIBRARY_PATH=build-gpu/lib TAILOR_LIBRARY=build-gpu/lib/libtailor_c.so.3 \\
  PYTHONPATH=python python3 bench/moe_gpu_ab.py \\
    --cases mixtral:1024:gate_up,mixtral:1024:down --seeds=-1,1,2,3 \\
    base: groups:TAILOR_TUNING=moe.expert_groups=forward
Prints one line per (case, draw).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_gpu_bench as mb  # noqa: E402  (bench's timing and routing)

import tailor  # noqa: E402
import tailor.moe  # noqa: E402


def runtimes(variants):
    """name -> Runtime, each made with its variant's knobs set."""
    out = {}
    for spec in variants:
        name, sep, envs = spec.partition(":")
        if not sep or not name or name in out:
            raise SystemExit(f"variant {spec!r}: NAME:[ENV=V[;ENV=V...]], "
                             "names distinct")
        pairs = [e.split("=", 1) for e in envs.split(";") if e]
        if any(len(p) != 2 for p in pairs):
            raise SystemExit(f"variant {spec!r}: each knob is ENV=V")
        saved = {k: os.environ.get(k) for k, _ in pairs}
        os.environ.update(dict(pairs))
        out[name] = tailor.Runtime(backend="cuda", disable_disk_cache=True,
                                   log_level="warn")
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    return out


def grid_draw(model, tokens):
    """The grid's routing: moe_grid draws from one generator, model by model
    and T by T."""
    gen = torch.Generator(device="cpu").manual_seed(1234)
    for m, (e, k, _, _) in mb.MODELS.items():
        for t in mb.TOKENS:
            ids = mb.routing(gen, t, e, k)
            if (m, t) == (model, tokens):
                return ids
    raise SystemExit(f"seed -1: ({model}, T={tokens}) is not in the grid")


def draw(model, tokens, seed):
    e, k, _, _ = mb.MODELS[model]
    if seed < 0:
        return grid_draw(model, tokens)
    return mb.routing(torch.Generator(device="cpu").manual_seed(seed),
                      tokens, e, k)


def time_draw(rts, model, tokens, proj, w, ids, rounds):
    """Best median (ms) of every variant and of torch._grouped_mm."""
    e, k, _, _ = mb.MODELS[model]
    counts = torch.bincount(ids.flatten(), minlength=e)
    n, kk = w.shape[1], w.shape[2]
    a = torch.randn(int(counts.sum()), kk, device=mb.dev, dtype=torch.bfloat16)
    c = torch.empty(a.shape[0], n, device=mb.dev, dtype=torch.bfloat16)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(mb.dev)
    wt = w.transpose(1, 2)
    methods = {}
    workspaces = []
    for name, rt in rts.items():
        ws = tailor.moe.Workspace()
        tailor.moe.reserve_workspace(rt, ws, max_tokens=tokens, topk=k,
                                     num_experts=e, dtype="bf16")
        tailor.moe.route(rt, ids.to(mb.dev, torch.int32), e, ws)
        workspaces.append(ws)
        methods[name] = (lambda rt=rt, ws=ws:
                         tailor.moe.grouped_gemm(rt, a, w, c, ws))
    methods["grouped_mm"] = lambda: torch._grouped_mm(a, wt, offs=offs)
    for fn in methods.values():
        mb.bench(fn, 3, 20)
    best = {}
    order = list(methods.items())
    for r in range(rounds):
        for name, fn in order if r % 2 == 0 else order[::-1]:
            best[name] = min(best.get(name, float("inf")), mb.bench(fn, 3, 20))
    return best, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True,
                    help="MODEL:T:gate_up|down,... (models of moe_gpu_bench)")
    ap.add_argument("--seeds", default="-1",
                    help="routing draws, comma-separated; -1: the grid's "
                         "(write --seeds=-1,...)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("variants", nargs="+", help="NAME:[ENV=V[;ENV=V...]]")
    args = ap.parse_args()
    cases = []
    for spec in args.cases.split(","):
        model, tokens, proj = spec.split(":")
        if model not in mb.MODELS or proj not in ("gate_up", "down"):
            raise SystemExit(f"case {spec!r}: MODEL:T:gate_up|down, MODEL "
                             f"one of {sorted(mb.MODELS)}")
        cases.append((model, int(tokens), proj))
    seeds = [int(s) for s in args.seeds.split(",")]
    rts = runtimes(args.variants)
    base = args.variants[0].partition(":")[0]
    for model, tokens, proj in cases:
        e, _, h, i = mb.MODELS[model]
        n, kk = (2 * i, h) if proj == "gate_up" else (h, i)
        torch.manual_seed(5)
        w = torch.randn(e, n, kk, device=mb.dev, dtype=torch.bfloat16) * 0.02
        for seed in seeds:
            best, counts = time_draw(rts, model, tokens, proj, w,
                                     draw(model, tokens, seed), args.rounds)
            ratios = " ".join(f"{v}/{base} {best[v] / best[base]:.3f}"
                              for v in rts if v != base)
            tiles = ([(x + 127) // 128 for x in counts.tolist()]
                     if e <= 16 else "")
            print(f"{model:13s} T={tokens:5d} {proj:7s} seed={seed:5d} " +
                  " ".join(f"{m} {t:.4f}" for m, t in best.items()) +
                  f" | {ratios}" + (f" | 128-row tiles by expert {tiles}"
                                    if tiles else ""), flush=True)
        del w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
