"""bench/fp8/moe_fp8_bench.py — the FP8 (e4m3, block-scaled) MoE grouped
GEMM on the GPU: correctness first (fp8_checks.py), then tailor beside the
anchors (fp8_anchors.py) in one process on the same data.

Grid: DeepSeek-V3 (E256 k8 H7168 I2048), the same at tensor-parallel 8
(I = 256 per rank), Qwen3-30B-A3B (E128 k8 H2048 I768) x T in {1, 16, 64,
256, 1024, 4096, 16384}, Zipf(1.0) routing with k distinct experts per token
(the bf16 bench's generator and seed), both projections, block scaling
(A 1 x 128 from tailor's quantizing Pack, W 128 x 128), bf16 outputs. tailor
is timed with each tile shape of moe_fp8_kernels.cu (the cost model is not
wired yet) and reports its best and every shape's time in the JSON.

Floor = max(FLOPs / dense FP8 GEMM rate, minimum bytes / copy bandwidth),
both measured in this run: the rate is torch._scaled_mm on 8192^3 (the faster
of fast accumulation on and off), the bandwidth a 1 GiB device copy (read +
write); minimum bytes = the active experts' e4m3 weights and their scales +
A and its scales + C (bf16).

Timing: CUDA events around one call after writing a 256 MiB buffer (the L2
holds nothing of the last rep), median of the reps. Every method gets one
untimed round first.

Cases (fp8_runner.py runs them in child processes, resuming after a crash):
  ceilings   copy bandwidth, dense FP8 rate, which anchors run (written to
             OUT/fp8_ceilings.json for the later cases)
  MODEL:T    one grid point: Pack, then both projections, every method
Usage: python3 moe_fp8_bench.py --lib DIR --out DIR --cases ceilings,qwen3_30b_a3b:1
  [--exclude TILE_EPILOGUE,...]; prints "@@END case PASS <json row>".
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_anchors  # noqa: E402
import fp8_checks  # noqa: E402
from fp8_lib import (BLOCK, E4M3, FAKE, TILES, Plan, dev,  # noqa: E402
                     make_weights, open_lib, quantize_groups, reference_rows,
                     rel_err, sample_rows, scale_rows, sync)
from fp8_table import MODEL_SHAPES  # noqa: E402

_flush = None
_excluded = set()  # kernels tile_epilogue left out (crashed in the checks)


def log(msg):
    print(msg, flush=True)


def fatal(ex):
    """A sticky CUDA error: the context is gone, the case must end."""
    return "CUDA error" in str(ex)


def bench(fn, warm=3, iters=15):
    global _flush
    if FAKE:  # the self-test times nothing real
        start = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - start)
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    for _ in range(warm):
        fn()
    sync()
    times = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        _flush.zero_()
        s.record()
        fn()
        e.record()
        sync()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def bench_interleaved(fns, warm=3, iters=15):
    """name -> median ms of each fn, as bench() but with the fns interleaved
    rep by rep (rep i starts at fn i mod n): under the power limit a fn
    timed in a block of its own sees the clocks of its moment (the same
    kernel read up to 15 % apart between two blocks of one process)."""
    global _flush
    if FAKE or len(fns) < 2:
        return {name: bench(fn, warm, iters) for name, fn in fns.items()}
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    names = list(fns)
    for _ in range(warm):
        for name in names:
            fns[name]()
    sync()
    times = {name: [] for name in names}
    for i in range(iters):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            _flush.zero_()
            s.record()
            fns[name]()
            e.record()
            sync()
            times[name].append(s.elapsed_time(e))
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def ceilings():
    if FAKE:
        return 1.0, 100.0, {False: 100.0, True: 100.0}
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    b = torch.empty_like(a)
    copy = 2 * n / bench(lambda: b.copy_(a)) / 1e9  # TB/s
    a = b = None
    m = 8192
    x = (torch.randn(m, m, device=dev) * 0.5).to(E4M3)
    w = (torch.randn(m, m, device=dev) * 0.5).to(E4M3)
    one = torch.ones((), device=dev)
    rates = {}
    for fast in (False, True):
        ms = bench(lambda: torch._scaled_mm(x, w.t(), one, one,
                                            out_dtype=torch.bfloat16,
                                            use_fast_accum=fast))
        rates[fast] = 2 * m ** 3 / ms / 1e9
    return copy, max(rates.values()), rates


def routing(gen, tokens, experts, k):
    p = torch.tensor([1.0 / (i + 1) for i in range(experts)])
    p = p[torch.randperm(experts, generator=gen)]
    return torch.multinomial(p.expand(tokens, experts), k, replacement=False,
                             generator=gen)


def floor_ms(counts, n, k, copy_tbps, fp8_tflops):
    rows = sum(counts)
    active = sum(1 for c in counts if c)
    flops = 2.0 * rows * n * k
    w_bytes = active * (n * k + (n // BLOCK) * (k // BLOCK) * 4)
    bytes_ = w_bytes + rows * (k + 4 * k // BLOCK) + rows * n * 2
    return max(flops / fp8_tflops / 1e9, bytes_ / copy_tbps / 1e9)


def prepare_tile(lib, a_q, a_s, w_q, w_s, counts, epilogue, tile):
    """Tile `tile`'s GEMM, launched once: (prepared GEMM, (c, c_s, plan)).
    The GEMM holds the tensors' pointers only: keep the tuple alive until
    it is freed."""
    rows, n = a_q.shape[0], w_q.shape[1]
    out_n = n // 2 if epilogue != "plain" else n
    plan = Plan(counts, TILES[tile][0])
    c_s = None
    if epilogue == "quant":
        c = torch.empty(max(rows, 1), out_n, dtype=torch.uint8, device=dev)
        c_s = torch.empty(out_n // BLOCK, scale_rows(rows), device=dev)
    else:
        c = torch.empty(max(rows, 1), out_n, dtype=torch.bfloat16, device=dev)
    g = lib.gemm(tile, epilogue, a_q, a_s, w_q, w_s, c, plan, c_s)
    log(f"@@LAUNCH {tile}_{epilogue}")
    g.launch()
    sync()
    return g, (c, c_s, plan)


def time_tailor(lib, a_q, a_s, w_q, w_s, counts, epilogue, tiles, judge=None):
    """(tile -> ms, the fastest tile, its output, tile -> error). With
    `judge` (output -> rel err), the fastest tile among those within 5e-3.
    Each tile is launched once and judged, then all are timed interleaved."""
    prepared, outs, errs = {}, {}, {}
    for tile in tiles:
        if f"{tile}_{epilogue}" in _excluded:
            continue
        try:
            prepared[tile], outs[tile] = prepare_tile(
                lib, a_q, a_s, w_q, w_s, counts, epilogue, tile)
            if judge is not None:
                errs[tile] = judge(outs[tile][0])
        except Exception as ex:
            log(f"  tailor {tile} {epilogue}: {ex!r}")
            if fatal(ex):
                raise
    log("@@LAUNCH none")
    times = bench_interleaved({t: g.launch for t, g in prepared.items()})
    for g in prepared.values():
        g.free()
    good = [t for t in times if judge is None or errs[t] < 5e-3] or list(times)
    best = min(good, key=times.get) if good else None
    return times, best, outs[best][:2] if best in outs else None, errs


def candidate_tiles(counts, tiles):
    """The tile shapes worth timing: swap-AB tiles only while the experts'
    average rows are within a few of their tiles (else they only cost time)."""
    active = [c for c in counts if c]
    mean = sum(active) / max(1, len(active))
    limit = {"s8": 64, "s16": 128, "s32": 512}
    return [t for t in tiles if mean <= limit.get(t, float("inf"))]


def prepare_anchors(a_q, a_s, w_q, w_s, counts, ref, rows_idx, rowwise, avail):
    """name -> (function to time, rel err on the sampled rows), each anchor
    run once and judged; the Triton kernel's config is the fastest of
    fp8_anchors.TRITON_CONFIGS (its own tuning, timed here)."""
    out = {}
    avail = [m for m in avail if f"anchor_{m}" not in _excluded]
    if "scaled_mm_loop" in avail and sum(counts):
        log("@@LAUNCH anchor_scaled_mm_loop")
        try:
            run, c, run_store = fp8_anchors.scaled_mm_loop(a_q, a_s, w_q, w_s,
                                                           counts)
            run_store()
            out["scaled_mm_loop"] = (run, rel_err(c[rows_idx].float(), ref))
        except Exception as ex:
            log(f"  scaled_mm_loop: {ex!r}")
            if fatal(ex):
                raise
    if "grouped_rowwise" in avail and rowwise is not None:
        log("@@LAUNCH anchor_grouped_rowwise")
        try:
            run = fp8_anchors.grouped_rowwise(*rowwise, counts)
            out["grouped_rowwise"] = (run,
                                      rel_err(run()[rows_idx].float(), ref))
        except Exception as ex:
            log(f"  grouped_rowwise: {ex!r}")
            if fatal(ex):
                raise
    best = None
    log("@@LAUNCH anchor_triton_padded")
    for cfg in fp8_anchors.TRITON_CONFIGS:
        if "anchor_triton_padded" in _excluded:
            break
        try:
            run, c = fp8_anchors.triton_padded(a_q, a_s, w_q, w_s, counts, cfg)
            ms = bench(run, 2, 10)
            if best is None or ms < best[0]:
                run()
                sync()
                best = (ms, run, rel_err(c[rows_idx].float(), ref))
        except Exception as ex:
            log(f"  triton {cfg}: {ex!r}")
            if fatal(ex):
                raise
    if best is not None:
        out["triton_padded"] = best[1:]
    log("@@LAUNCH none")
    return out


def rowwise_weights(w_q, w_s):
    """Per-channel e4m3 weights from the same dequantized values (once per
    model and projection): (wq [E, N, K], ws [E, N])."""
    wqs, wss = [], []
    for e in range(w_q.shape[0]):
        w = w_q[e].float() * w_s[e].repeat_interleave(BLOCK, 0).repeat_interleave(
            BLOCK, 1)
        s = (w.abs().amax(dim=1).clamp(min=1e-10) / 448.0).float()
        wqs.append((w / s[:, None]).clamp(-448.0, 448.0).to(E4M3))
        wss.append(s)
    return torch.stack(wqs), torch.stack(wss)


def rowwise_for(a_q, a_s, weights):
    """Row-wise A from the same dequantized values, with the projection's
    per-channel weights: the inputs of torch._scaled_grouped_mm."""
    if weights is None or a_q.shape[0] == 0:
        return None
    a = a_q.float() * a_s[:, : a_q.shape[0]].t().repeat_interleave(BLOCK, 1)
    s = (a.abs().amax(dim=1).clamp(min=1e-10) / 448.0).float()
    aq = (a / s[:, None]).clamp(-448.0, 448.0).to(E4M3)
    return aq, s, weights[0], weights[1]


def run_projection(lib, row, name, a_q, a_s, w_q, w_s, counts, ceil, args,
                   avail, rw_weights):
    n, k = w_q.shape[1], w_q.shape[2]
    fl = floor_ms(counts, n, k, ceil[0], ceil[1])
    row[f"{name}_floor_ms"] = fl
    rows_idx = sample_rows(counts)
    ref = reference_rows(a_q, a_s, w_q, w_s, counts, rows_idx, gated=False)
    times, best, out, errs = time_tailor(
        lib, a_q, a_s, w_q, w_s, counts, "plain",
        candidate_tiles(counts, args.tiles),
        judge=lambda c: rel_err(c[rows_idx].float(), ref))
    row[f"{name}_tailor_tiles_ms"] = times
    row[f"{name}_tailor_tiles_err"] = errs
    if best is not None:
        row[f"{name}_tailor_ms"] = times[best]
        row[f"{name}_tailor_tile"] = best
        row[f"{name}_tailor_err"] = errs[best]
    if name == "gate_up" and best is not None:
        # The quantizing epilogue on every tile timed above (the step's
        # gate/up), so that an A/B of tiles covers it too.
        qt, _, _, _ = time_tailor(lib, a_q, a_s, w_q, w_s, counts, "quant",
                                  list(times))
        row["gate_up_tailor_quant_tiles_ms"] = qt
        if best in qt:
            row["gate_up_tailor_silu_quant_ms"] = qt[best]
    rowwise = None
    try:
        rowwise = rowwise_for(a_q, a_s, rw_weights)
    except Exception as ex:
        log(f"  rowwise inputs: {ex!r}")
    anchors = prepare_anchors(a_q, a_s, w_q, w_s, counts, ref, rows_idx,
                              rowwise, avail)
    for m, (_, err) in anchors.items():
        row[f"{name}_{m}_err"] = err
    # tailor's best tile and the anchors, timed interleaved with each other
    # (the tile table above was timed among the tiles).
    fns = {f"anchor {m}": fn for m, (fn, _) in anchors.items()}
    kept = None
    if best is not None and f"{best}_plain" not in _excluded:
        try:
            kept = prepare_tile(lib, a_q, a_s, w_q, w_s, counts, "plain", best)
            fns["tailor"] = kept[0].launch
        except Exception as ex:
            log(f"  tailor {best} plain: {ex!r}")
            if fatal(ex):
                raise
    log("@@LAUNCH none")
    for m, ms in bench_interleaved(fns).items():
        key = "tailor" if m == "tailor" else m[len("anchor "):]
        row[f"{name}_{key}_ms"] = ms
    if kept is not None:
        kept[0].free()


def probe_anchors():
    """Which anchors run here, with the right numbers on a small case."""
    avail = []
    counts = [5, 0, 130, 17]
    a_q, a_s, w_q, w_s = fp8_checks.gemm_inputs(counts, 256, 512, seed=5)
    rows_idx = list(range(sum(counts)))
    ref = reference_rows(a_q, a_s, w_q, w_s, counts, rows_idx, gated=False)
    try:
        run, c, run_store = fp8_anchors.scaled_mm_loop(a_q, a_s, w_q, w_s, counts)
        run_store()
        err = rel_err(c.float(), ref)
        log(f"probe scaled_mm_loop (1x128 / 128x128): rel err {err:.2e}")
        if err < 2e-2:
            avail.append("scaled_mm_loop")
    except Exception as ex:
        log(f"probe scaled_mm_loop unavailable: {str(ex).splitlines()[0]}")
    try:
        rw = rowwise_for(a_q, a_s, rowwise_weights(w_q, w_s))
        out = fp8_anchors.grouped_rowwise(*rw, counts)()
        err = rel_err(out.float(), ref)
        log(f"probe _scaled_grouped_mm (row-wise): rel err {err:.2e}")
        if err < 1e-1:
            avail.append("grouped_rowwise")
    except Exception as ex:
        log(f"probe _scaled_grouped_mm unavailable: {str(ex).splitlines()[0]}")
    return avail


# model -> (w13, s13, w2, s2, rw13, rw2): every model's stay (about 27 GB
# with the row-wise copies), so the grid can run T by T across the models.
_weights = {}


def model_weights(model, avail):
    if model not in _weights:
        E, k, H, I = MODEL_SHAPES[model]
        w13, s13 = make_weights(E, 2 * I, H, gen_seed=11)
        w2, s2 = make_weights(E, H, I, gen_seed=12)
        rw13 = rw2 = None
        if "grouped_rowwise" in avail:
            rw13, rw2 = rowwise_weights(w13, s13), rowwise_weights(w2, s2)
        _weights[model] = (w13, s13, w2, s2, rw13, rw2)
    return _weights[model]


def grid_point(lib, model, T, ceil, args):
    """One row of the table: Pack, then gate/up and down, every method."""
    avail = ceil["anchors"]
    E, k, H, I = MODEL_SHAPES[model]
    w13, s13, w2, s2, rw13, rw2 = model_weights(model, avail)
    t0 = time.time()
    gen = torch.Generator(device="cpu").manual_seed(1234 + T)
    ids = routing(gen, T, E, k)
    counts = torch.bincount(ids.flatten(), minlength=E).tolist()
    R = sum(counts)
    row = {"model": model, "T": T, "rows": R,
           "active": sum(1 for c in counts if c)}
    perm = torch.argsort(ids.flatten(), stable=True).to(torch.int32).to(dev)
    hidden = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    a1 = torch.empty(R, H, dtype=torch.uint8, device=dev)
    a1_s = torch.empty(H // BLOCK, scale_rows(R), device=dev)
    row["pack_us"] = 1e3 * bench(lambda: lib.pack(hidden, perm, a1, a1_s, k))
    ref_q, ref_s = quantize_groups(hidden[perm.long() // k])
    row["pack_exact"] = bool((a1 == ref_q.view(torch.uint8)).all()) and \
        bool((a1_s[:, :R] == ref_s[:, :R]).all())
    ceil_pair = (ceil["copy_tbps"], ceil["fp8_tflops"])
    run_projection(lib, row, "gate_up", a1.view(E4M3), a1_s, w13, s13, counts,
                   ceil_pair, args, avail, rw13)
    a2_q, a2_s = quantize_groups(torch.randn(R, I, device=dev))
    run_projection(lib, row, "down", a2_q, a2_s, w2, s2, counts, ceil_pair,
                   args, avail, rw2)
    row["wall_s"] = time.time() - t0
    return row


def measure_ceilings(lib, out):
    copy, fp8, rates = ceilings()
    name = "cpu (fake)" if FAKE else torch.cuda.get_device_name()
    log(f"device {name} | SMs {lib.sms} | torch {torch.__version__}")
    log(f"copy {copy:.2f} TB/s | dense FP8 {fp8:.0f} TFLOP/s (fast accum "
        f"off {rates[False]:.0f}, on {rates[True]:.0f})")
    data = {"copy_tbps": copy, "fp8_tflops": fp8, "anchors": probe_anchors(),
            "device": name, "torch": torch.__version__}
    with open(os.path.join(out, "fp8_ceilings.json"), "w") as f:
        json.dump(data, f)
    return data


def probe_deepgemm(args):
    """Whether DeepGEMM loads and runs here, its first call's time (the JIT
    compile) and its error, on one Qwen3-30B-A3B gate/up-sized GEMM of 8
    experts (the grid leaves it out until its compiles fit a run)."""
    out = {}
    t0 = time.time()
    try:
        dg = fp8_anchors.load_deepgemm(args.lib, args.out)
        out["import_s"] = time.time() - t0
        counts = [1, 0, 129, 17, 300, 64, 7, 2]
        a_q, a_s, w_q, w_s = fp8_checks.gemm_inputs(counts, 1536, 2048, seed=9)
        run, d, valid = fp8_anchors.deepgemm_contiguous(dg, a_q, a_s, w_q, w_s,
                                                        counts)
        log("@@LAUNCH anchor_deepgemm")
        t1 = time.time()
        run()
        sync()
        out["first_call_s"] = time.time() - t1
        rows = list(range(sum(counts)))
        ref = reference_rows(a_q, a_s, w_q, w_s, counts, rows, gated=False)
        out["err"] = rel_err(d[valid].float(), ref)
        out["ms"] = bench(run)
        log("@@LAUNCH none")
    except Exception as ex:
        out["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"
        if fatal(ex):
            raise
    out["wall_s"] = time.time() - t0
    return out


def run_case(lib, case, args):
    if case == "ceilings":
        return measure_ceilings(lib, args.out)
    if case == "deepgemm":
        return probe_deepgemm(args)
    with open(os.path.join(args.out, "fp8_ceilings.json")) as f:
        ceil = json.load(f)
    model, T = case.split(":")
    return grid_point(lib, model, int(T), ceil, args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cases", default="ceilings")
    ap.add_argument("--tiles", nargs="*", default=list(TILES))
    ap.add_argument("--exclude", default="-")
    args = ap.parse_args()
    _excluded.update(k for k in args.exclude.split(",") if k and k != "-")
    lib = open_lib(args.lib)
    for case in [c for c in args.cases.split(",") if c]:
        print(f"@@BEGIN {case}", flush=True)
        try:
            data = run_case(lib, case, args)
        except Exception as ex:  # the context may be gone: report and leave
            line = str(ex).splitlines()[0] if str(ex) else repr(ex)
            print(f"@@END {case} FAIL raised {type(ex).__name__}: {line}",
                  flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(3)
        print(f"@@END {case} PASS {json.dumps(data)}", flush=True)


if __name__ == "__main__":
    main()
