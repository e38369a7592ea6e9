"""bench/moe_gpu_bench.py — tailor's MoE kernels beside the anchors, every
method in one process on the same data. The anchors are baseline scripts
kept outside this repository (their generator, the pad-to-block Triton
kernel); --anchors names the folder they were copied to.

Part 1, grouped GEMM: Mixtral-8x7B (E8 k2 H4096 I14336), DeepSeek-V3 (E256
k8 H7168 I2048), Qwen3-30B-A3B (E128 k8 H2048 I768) x T in {1, 16, 64, 256,
1024, 4096, 16384}, Zipf(1.0) routing with k distinct experts per token (the
anchors' generator and seed), bf16, both projections:
  tailor        tailor.moe.grouped_gemm (epilogue none: the anchors' work);
                with --consumers both, tailor_coop and tailor_pp instead:
                the Hopper GEMM's cooperative and ping-pong consumer
                schedules forced (moe.consumers), and a table of the two
  tailor+silu   the gate/up projection with silu_and_mul fused (tailor only)
  grouped_mm    torch._grouped_mm (CUTLASS)
  triton        the pad-to-block Triton kernel (vLLM's algorithm), best of
                its config sweep (the anchors' triton_pad_to_block.py)
  loop          a per-expert cuBLAS loop
Each as a fraction of the physical floor = max(FLOPs / dense bf16 GEMM rate,
(active experts' weights + A + C) bytes / copy bandwidth), both rates
measured in this run.

Part 2, the memory-bound ops per step (route + pack + combine) for E=256 k=8
H=7168 and E=8 k=2 H=4096: tailor's against the torch a server would write
(stable argsort permutation, index_select, index_add_), in microseconds.

Timing: CUDA events around one call after an L2 flush (timed_rep()), median
of repeats after warm-ups. At large T the GPU runs at its power limit and its
SM clock drifts by 10-20 % between back-to-back runs, so a method timed in a
block of its own measures its moment as much as itself. The GEMM methods
(tailor, grouped_mm, loop) are therefore timed interleaved, rep by rep in a
rotating order (bench_interleaved), and every method sees the same clocks;
with --rounds R each keeps its best median of R such rounds (the Triton
anchor keeps the best of its config sweep). --timing blocks is the former
protocol: each method in a block of its own, the order reversed every other
round (use an even R), since the first method timed after a pause ran on a
cool GPU (bench/results/moe_gpu_h100.txt, "Method order"); in both, every
projection starts with an untimed round of every method. Usage, on the GPU machine from the repository root
(scripts/gpu-bench-moe does this):
  PYTHONPATH=python TAILOR_LIBRARY=<libtailor_c.so> \\
    python3 bench/moe_gpu_bench.py --anchors .anchors [--models m ...]
Prints tables; writes $OUT/moe_gpu_bench.json (moe_gpu_bench_clean_l2.json
with --l2 clean).
"""
import argparse
import json
import math
import os
import sys
import tempfile

import torch

import tailor
import tailor.moe

MODELS = {"mixtral": (8, 2, 4096, 14336),
          "deepseek_v3": (256, 8, 7168, 2048),
          "qwen3_30b_a3b": (128, 8, 2048, 768)}
TOKENS = [1, 16, 64, 256, 1024, 4096, 16384]
dev = torch.device("cuda")


_flush = None
_rounds = 1  # --rounds
_timing = "interleaved"  # --timing
_tile_rows = 0  # --tile-rows (0: the cost model's choice)
_method_tile_rows = {}  # tailor method -> its tile rows (--tile-rows-ab)
_clean = None  # set by --l2 clean: a 256 MiB buffer read after each fill


def bench(fn, warm=5, iters=30):
    """Median ms of `fn` on the device: each rep writes a 256 MiB buffer
    first (as triton.testing.do_bench and cuda_decode_bench do), so L2 holds
    none of the previous rep's weights and the ~80 us the write takes on the
    GPU hides the host's launch overhead: the events time the kernels alone,
    the way a server replaying CUDA graphs sees them. The fill leaves L2 full
    of dirty lines, whose write-back the timed kernels pay for (up to 50 MiB
    on an H100); with --l2 clean a 256 MiB read follows the fill, so L2 holds
    clean lines and every method pays for its own traffic only."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = sorted(timed_rep(fn) for _ in range(iters))
    return times[len(times) // 2]  # ms


def timed_rep(fn):
    """One rep of bench(): the L2 fill (and read with --l2 clean), then `fn`
    between CUDA events; its ms."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    _flush.zero_()
    if _clean is not None:
        _clean.sum()
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e)


def bench_interleaved(fns, warm=3, iters=20):
    """name -> median ms of each fn, timed as bench() times one, but rep by
    rep with the methods interleaved (rep i starts at method i mod n): a
    method timed in a block of its own runs at the SM clock of its moment
    under the power limit, here every method sees the same clocks."""
    names = list(fns)
    for _ in range(warm):
        for n in names:
            fns[n]()
    torch.cuda.synchronize()
    times = {n: [] for n in names}
    for i in range(iters):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            times[n].append(timed_rep(fns[n]))
    return {n: sorted(v)[len(v) // 2] for n, v in times.items()}


def ceilings():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    b = torch.empty_like(a)
    copy = 2 * n / bench(lambda: b.copy_(a)) / 1e9  # TB/s (read + write)
    del a, b
    m = 8192
    x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    w = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    gemm = 2 * m ** 3 / bench(lambda: x @ w) / 1e9  # TFLOP/s
    return copy, gemm


def routing(gen, tokens, experts, k):
    """The anchors' routing: Zipf(1.0) popularity, k distinct per token."""
    p = torch.tensor([1.0 / (i + 1) for i in range(experts)])
    p = p[torch.randperm(experts, generator=gen)]
    return torch.multinomial(p.expand(tokens, experts), k, replacement=False,
                             generator=gen)


def gemm_methods(tailors, a, w, counts):
    """name -> callable for one projection c = a · w[e]ᵀ, and name -> c of
    each tailor method (`tailors`: name -> (runtime, routed workspace))."""
    rows, n = a.shape[0], w.shape[1]
    offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
    wt = w.transpose(1, 2)
    cl = counts.tolist()
    out, cs = {}, {}
    for name, (rt, ws) in tailors.items():
        cs[name] = torch.empty(rows, n, device=dev, dtype=torch.bfloat16)
        out[name] = (lambda rt=rt, ws=ws, c=cs[name]:
                     tailor.moe.grouped_gemm(rt, a, w, c, ws))
    if hasattr(torch, "_grouped_mm"):
        out["grouped_mm"] = lambda: torch._grouped_mm(a, wt, offs=offs)

    def loop():
        s = 0
        for e, n_e in enumerate(cl):
            if n_e:
                torch.mm(a[s:s + n_e], w[e].t())
                s += n_e
    out["loop"] = loop
    return out, cs


def reference(a, w, counts):
    c = torch.empty(a.shape[0], w.shape[1], device=dev, dtype=torch.float32)
    s = 0
    for e, n_e in enumerate(counts.tolist()):
        if n_e:
            c[s:s + n_e] = a[s:s + n_e].float() @ w[e].float().t()
            s += n_e
    return c


def rel_err(x, ref):
    return float((x.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def run_projection(tailors, row, name, a, w, counts, floor_ms, tpb):
    methods, cs = gemm_methods(tailors, a, w, counts)
    samples = {m: [] for m in methods}
    order = list(methods)
    # One untimed round first: tailor compiles its kernels in its first
    # warm-ups, and the GPU, idle meanwhile, cools; the method timed next ran
    # up to 10 % faster at the power-limited launches (docstring).
    for m in order:
        bench(methods[m], 3, 20)
    for r in range(_rounds):
        if _timing == "interleaved":
            for m, ms in bench_interleaved(methods).items():
                samples[m].append(ms)
            continue
        for m in order if r % 2 == 0 else order[::-1]:
            samples[m].append(bench(methods[m], 3, 20))
    times = {m: min(v) for m, v in samples.items()}
    ref = reference(a, w, counts)
    for m, (rt, ws) in tailors.items():
        methods[m]()
        torch.cuda.synchronize()
        row[f"{name}_{m}_err"] = rel_err(cs[m], ref)
        gemms = ws.gemms()
        row[f"{name}_{m}_kernel"] = gemms[-1]["kernel"] if gemms else ""
    if tpb is not None and w.shape[1] % 128 == 0 and a.shape[1] % 64 == 0:
        best, ct = tpb.best_time(a, w, counts.tolist(), lambda f, *x: bench(f, 2, 10))
        if best:
            times["triton"] = best[0]
    for m, ms in times.items():
        row[f"{name}_{m}_ms"] = ms
        row[f"{name}_{m}_of_floor"] = floor_ms / ms
    return times


def moe_grid(rts, copy_tbps, gemm_tflops, models, tokens, tpb):
    """The grouped-GEMM grid; `rts`: tailor method name -> runtime (one
    "tailor", or one per forced consumer schedule)."""
    gen = torch.Generator(device="cpu").manual_seed(1234)
    rows_out = []
    for model in models:
        E, k, H, I = MODELS[model]
        w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02
        w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) * 0.02
        for T in tokens:
            ids = routing(gen, T, E, k)
            counts = torch.bincount(ids.flatten(), minlength=E)
            R = int(counts.sum())
            active = int((counts > 0).sum())
            tailors = {}
            for m, rt in rts.items():
                rows = _method_tile_rows.get(m, _tile_rows)
                ws = tailor.moe.Workspace()
                tailor.moe.reserve_workspace(rt, ws, max_tokens=T, topk=k,
                                             num_experts=E, dtype="bf16",
                                             tile_rows=rows)
                tailor.moe.route(rt, ids.to(dev, torch.int32), E, ws,
                                 tile_rows=rows)
                tailors[m] = (rt, ws)
            row = {"model": model, "T": T, "rows": R, "active": active,
                   "experts": E}
            a1 = torch.randn(R, H, device=dev, dtype=torch.bfloat16)
            a2 = torch.randn(R, I, device=dev, dtype=torch.bfloat16)
            for name, a, w in (("gate_up", a1, w13), ("down", a2, w2)):
                n, kk = w.shape[1], w.shape[2]
                flops = 2 * R * n * kk
                bytes_ = 2 * (active * n * kk + R * kk + R * n)
                floor = max(flops / (gemm_tflops * 1e9),
                            bytes_ / (copy_tbps * 1e9))  # ms
                row[f"{name}_floor_ms"] = floor
                run_projection(tailors, row, name, a, w, counts, floor, tpb)
            act = torch.empty(R, I, device=dev, dtype=torch.bfloat16)
            for m, (rt, ws) in tailors.items():
                row[f"gate_up_{m}_silu_ms"] = bench(
                    lambda rt=rt, ws=ws: tailor.moe.grouped_gemm(
                        rt, a1, w13, act, ws, epilogue="silu_and_mul"), 3, 20)
            rows_out.append(row)
            print_gemm_row(row, list(rts))
            del a1, a2, act, tailors
        del w13, w2
        torch.cuda.empty_cache()
    return rows_out


def print_gemm_row(r, tailor_methods):
    cells = []
    for proj in ("gate_up", "down"):
        parts = [f"{proj} floor {r[f'{proj}_floor_ms']:.3f}ms"]
        for m in tailor_methods + ["grouped_mm", "triton", "loop"]:
            key = f"{proj}_{m}_of_floor"
            if key in r:
                parts.append(f"{m} {r[f'{proj}_{m}_ms']:.3f}ms {r[key]:.0%}")
        cells.append(" ".join(parts))
    print(f"{r['model']:14s} T={r['T']:5d} rows={r['rows']:6d} "
          f"act={r['active']:3d} | " + " | ".join(cells) +
          " | err " + " ".join(f"{r[f'gate_up_{m}_err']:.1e}/"
                               f"{r[f'down_{m}_err']:.1e}"
                               for m in tailor_methods),
          flush=True)


class _DeviceView:
    """A device buffer of the workspace, for torch.as_tensor."""

    def __init__(self, t):
        shape = tuple(t.dims[i] for i in range(t.rank))
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<i4",
                                         "data": (t.data, False), "version": 3}


def routing_views(ws):
    """permutation [T * k] and inverse [T, k] of a device workspace, as torch
    tensors over its memory."""
    info = ws._views()
    return (torch.as_tensor(_DeviceView(info.permutation), device=dev),
            torch.as_tensor(_DeviceView(info.inverse), device=dev))


def memory_ops(rt, tokens):
    """route + pack + combine: tailor vs torch, microseconds."""
    out = []
    for E, k, H in ((256, 8, 7168), (8, 2, 4096)):
        gen = torch.Generator(device="cpu").manual_seed(99)
        for T in tokens:
            ids = routing(gen, T, E, k).to(dev, torch.int32)
            hidden = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
            weights = torch.rand(T, k, device=dev, dtype=torch.float32)
            a = torch.empty(T * k, H, device=dev, dtype=torch.bfloat16)
            y = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
            ws = tailor.moe.Workspace()
            tailor.moe.reserve_workspace(rt, ws, max_tokens=T, topk=k,
                                         num_experts=E, dtype="bf16")
            tailor.moe.route(rt, ids, E, ws)
            perm, inverse = routing_views(ws)

            def tailor_step():
                tailor.moe.route(rt, ids, E, ws)
                tailor.moe.pack(rt, hidden, perm, k, a)
                tailor.moe.combine(rt, a, weights, inverse, y)

            def torch_step():
                flat = ids.flatten()
                order = torch.argsort(flat, stable=True)
                token = order // k
                packed = hidden.index_select(0, token)
                res = torch.zeros(T, H, device=dev, dtype=torch.float32)
                res.index_add_(0, token, packed.float() *
                               weights.flatten()[order, None])
                return res.to(torch.bfloat16)

            route_us = bench(lambda: tailor.moe.route(rt, ids, E, ws), 5, 50) * 1e3
            t_us = bench(tailor_step, 5, 50) * 1e3
            r_us = bench(torch_step, 5, 50) * 1e3
            row = {"E": E, "k": k, "H": H, "T": T, "tailor_route_us": route_us,
                   "tailor_rpc_us": t_us, "torch_rpc_us": r_us}
            out.append(row)
            print(f"E={E:3d} k={k} H={H} T={T:5d} | tailor route {route_us:7.1f}us "
                  f"route+pack+combine {t_us:8.1f}us | torch sort+index_select+"
                  f"index_add {r_us:8.1f}us | {r_us / t_us:5.1f}x", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anchors", default=".anchors")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--tokens", nargs="*", type=int, default=TOKENS)
    ap.add_argument("--skip-memory-ops", action="store_true")
    ap.add_argument("--l2", choices=["dirty", "clean"], default="dirty",
                    help="dirty: do_bench's flush (the anchors' protocol); "
                         "clean: the fill then a 256 MiB read (see bench())")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time each GEMM method this many times, in turn "
                         "(reversed every other round), and keep its best "
                         "median (see the docstring)")
    ap.add_argument("--timing", choices=["interleaved", "blocks"],
                    default="interleaved",
                    help="interleaved: each round times the GEMM methods rep "
                         "by rep in a rotating order (bench_interleaved); "
                         "blocks: each method's reps in a block of its own, "
                         "the order reversed every other round")
    ap.add_argument("--consumers", choices=["auto", "both"], default="auto",
                    help="auto: one tailor method, the cost model's "
                         "consumer schedule; both: tailor_coop and tailor_pp, "
                         "runtimes with moe.consumers forced to each (the "
                         "Hopper GEMM's cooperative and ping-pong kernels), "
                         "and a table comparing them last")
    ap.add_argument("--tile-rows", type=int, default=0,
                    help="tailor's routing tile rows (0: the cost model's "
                         "choice; 64 or 128 on Hopper compare the kernels)")
    ap.add_argument("--tile-rows-ab", type=int, default=0,
                    help="also time tailor_t<N>: the same runtime routed "
                         "with tile rows N, interleaved with the others")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: must be at least 1")
    global _rounds, _tile_rows, _timing
    _rounds = args.rounds
    _timing = args.timing
    _tile_rows = args.tile_rows
    if args.l2 == "clean":
        global _clean
        _clean = torch.ones(64 << 20, dtype=torch.float32, device=dev)
    print(f"L2 before each rep: {args.l2}; rounds per GEMM method: "
          f"{args.rounds}; timing: {args.timing}", flush=True)
    sys.path.insert(0, args.anchors)
    try:
        import triton_pad_to_block as tpb
    except Exception as e:  # the Triton anchor is optional
        print("triton pad-to-block anchor unavailable:", e)
        tpb = None
    props = torch.cuda.get_device_properties(0)
    rts = {"tailor": runtime_with("")}
    if args.consumers == "both":
        # One fresh disk cache: the kernels both schedules share (every
        # launch but the 128-row ones) compile once.
        cache = tempfile.mkdtemp(prefix="tailor-bench-cache-")
        os.chmod(cache, 0o700)
        rts = {"tailor_coop": runtime_with("moe.consumers=cooperative", cache),
               "tailor_pp": runtime_with("moe.consumers=pingpong", cache)}
    rt = next(iter(rts.values()))
    if args.tile_rows_ab:
        name = f"tailor_t{args.tile_rows_ab}"
        rts[name] = rt
        _method_tile_rows[name] = args.tile_rows_ab
    copy, gemm = ceilings()
    print(f"device {props.name} | tailor {rt.arch} | copy {copy:.2f} TB/s "
          f"(read+write) | dense bf16 GEMM {gemm:.0f} TFLOP/s | torch "
          f"{torch.__version__}", flush=True)
    res = {"device": props.name, "copy_TBps": copy, "gemm_TFLOPs": gemm}
    res["moe"] = moe_grid(rts, copy, gemm, args.models, args.tokens, tpb)
    if not args.skip_memory_ops:
        res["memory_ops"] = memory_ops(rt, args.tokens)
    summarize(res["moe"], list(rts))
    if args.consumers == "both":
        consumers_table(res["moe"])
    res["l2"] = args.l2
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."),
                                     "moe_gpu_bench.json" if args.l2 == "dirty"
                                     else "moe_gpu_bench_clean_l2.json"), "w"),
              indent=1)


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def runtime_with(tuning, cache_dir=None):
    """A CUDA runtime created under TAILOR_TUNING=`tuning` ("": as set);
    with `cache_dir`, on that disk cache (runtimes that share one compile a
    key once), else without one."""
    saved = os.environ.get("TAILOR_TUNING")
    if tuning:
        os.environ["TAILOR_TUNING"] = tuning
    try:
        return tailor.Runtime(backend="cuda", cache_dir=cache_dir,
                              disable_disk_cache=cache_dir is None,
                              log_level="warn")
    finally:
        if saved is None:
            os.environ.pop("TAILOR_TUNING", None)
        else:
            os.environ["TAILOR_TUNING"] = saved


def summarize(rows, tailor_methods):
    for m in tailor_methods + ["grouped_mm", "triton", "loop"]:
        fr = [r[f"{p}_{m}_of_floor"] for r in rows for p in ("gate_up", "down")
              if f"{p}_{m}_of_floor" in r]
        if fr:
            print(f"summary {m:10s} geomean {geomean(fr):.2f} of floor, min "
                  f"{min(fr):.2f} ({len(fr)} shapes)")
    for m in tailor_methods:
        ratios = [r[f"{p}_grouped_mm_ms"] / r[f"{p}_{m}_ms"] for r in rows
                  for p in ("gate_up", "down") if f"{p}_grouped_mm_ms" in r]
        if ratios:
            print(f"summary {m} vs grouped_mm: geomean speedup "
                  f"{geomean(ratios):.2f}x, worst {min(ratios):.2f}x")


def auto_pingpong(row):
    """The cost model's consumer schedule for `row`: cooperative at every
    step (src/backends/cuda/moe/heuristics.h, MoeSm90PingPongFits; the H200
    table in bench/results/moe_hopper_design.txt "Ping-pong consumers")."""
    del row
    return False


def ran(kernel):
    """What the ping-pong runtime ran: pp, or coop (its 64-row and swap-AB
    tiles have no ping-pong kernel), from the plan's kernel name."""
    return "pp" if kernel.endswith("_pingpong") else "coop"


def consumers_table(rows):
    """The two forced schedules side by side, then what the cost model's
    pick (auto) and the better of the two (best) read against the anchors
    and the floor, and the issue's targets: no shape slower than the cuBLAS
    loop or grouped_mm, launches of T >= 4096 at >= 0.88 of the floor, grid
    geomean >= 0.90."""
    print("\nconsumer schedules: ms, pp/coop = cooperative ms / ping-pong ms;"
          " auto = the cost model's pick; x loop, x gmm = anchor ms / auto "
          "ms; ran = the kernel of the ping-pong runtime")
    print(f"{'model':14s} {'T':>5s} {'proj':7s} {'floor':>7s} {'coop':>7s} "
          f"{'pp':>7s} {'pp/coop':>7s} {'auto':>4s} {'of_fl':>5s} "
          f"{'x loop':>6s} {'x gmm':>6s} ran")
    picks = {"auto": [], "best": [], "tailor_coop": [], "tailor_pp": []}
    misses = []
    for r in rows:
        pp_rule = auto_pingpong(r)
        for p in ("gate_up", "down"):
            coop, pp = r[f"{p}_tailor_coop_ms"], r[f"{p}_tailor_pp_ms"]
            auto = pp if pp_rule else coop
            floor = r[f"{p}_floor_ms"]
            loop = r.get(f"{p}_loop_ms", float("nan"))
            gmm = r.get(f"{p}_grouped_mm_ms", float("nan"))
            print(f"{r['model']:14s} {r['T']:5d} {p:7s} {floor:7.3f} "
                  f"{coop:7.3f} {pp:7.3f} {coop / pp:7.3f} "
                  f"{'pp' if pp_rule else 'coop':>4s} {floor / auto:5.2f} "
                  f"{loop / auto:6.2f} {gmm / auto:6.2f} "
                  f"{ran(r[f'{p}_tailor_pp_kernel'])}")
            for name, ms in (("auto", auto), ("best", min(coop, pp)),
                             ("tailor_coop", coop), ("tailor_pp", pp)):
                picks[name].append(floor / ms)
            if auto > min(loop, gmm):
                misses.append(f"{r['model']} T={r['T']} {p}: auto "
                              f"{auto:.3f}ms, loop {loop:.3f}, gmm {gmm:.3f}")
            if r["T"] >= 4096 and floor / auto < 0.88:
                misses.append(f"{r['model']} T={r['T']} {p}: "
                              f"{floor / auto:.2f} of the floor (< 0.88)")
    for name, fr in picks.items():
        print(f"consumers {name:11s} geomean {geomean(fr):.3f} of floor, "
              f"min {min(fr):.2f} ({len(fr)} launches)")
    print(f"targets missed by auto ({len(misses)}):")
    for line in misses:
        print("  " + line)


if __name__ == "__main__":
    main()
