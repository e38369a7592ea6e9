"""bench/fp8/fp8_table.py — the FP8 harness's grid and its printed tables
(plain Python: the driver prints them without importing torch)."""
import math

# name -> (experts, top-k, hidden, moe intermediate)
MODEL_SHAPES = {"deepseek_v3": (256, 8, 7168, 2048),
                "deepseek_v3_tp8": (256, 8, 7168, 256),
                "qwen3_30b_a3b": (128, 8, 2048, 768)}
MODELS = list(MODEL_SHAPES)
TOKENS = [1, 16, 64, 256, 1024, 4096, 16384]
METHODS = ["tailor", "scaled_mm_loop", "grouped_rowwise", "triton_padded"]


def check_summary(cases, results):
    """Per kernel (tile x epilogue, pack, nan): pass / fail / crash counts,
    the failures' details, and a closing line."""
    by_kernel = {}
    for case in cases:
        parts = case.split(":")
        kernel = f"{parts[1]} {parts[2]}" if parts[0] == "gemm" else parts[0]
        status = results.get(case, ("SKIP", "never ran"))[0]
        by_kernel.setdefault(kernel, {}).setdefault(status, 0)
        by_kernel[kernel][status] += 1
    lines = ["checks per kernel:"]
    for kernel, counts in by_kernel.items():
        lines.append(f"  {kernel:12s} " + " ".join(
            f"{s} {n}" for s, n in sorted(counts.items())))
    bad = [(c, results.get(c, ("SKIP", "never ran"))) for c in cases
           if results.get(c, ("SKIP", ""))[0] != "PASS"]
    for case, (status, detail) in bad[:25]:
        lines.append(f"  {status:7s} {case}: {detail[:220]}")
    if len(bad) > 25:
        lines.append(f"  ... {len(bad) - 25} more not passing (checks.json)")
    passed = len(cases) - len(bad)
    lines.append(f"checks: {passed} of {len(cases)} pass"
                 + ("" if bad else " (ALL PASS)"))
    return lines


def summary_line(r):
    parts = [f"{r['model']:16s} T={r['T']:5d} rows={r['rows']:6d} "
             f"act={r['active']:3d} pack {r.get('pack_us', 0):6.1f}us "
             f"exact={r.get('pack_exact')}"]
    for proj in ("gate_up", "down"):
        fl = r.get(f"{proj}_floor_ms")
        if fl is None:
            continue
        s = f"| {proj} floor {fl:.3f}"
        for m in METHODS:
            ms = r.get(f"{proj}_{m}_ms")
            if ms is not None:
                tag = f"[{r[f'{proj}_tailor_tile']}]" if m == "tailor" else ""
                s += f" {m}{tag} {ms:.3f} {100 * fl / ms:3.0f}%"
        s += f" err {r.get(f'{proj}_tailor_err', float('nan')):.1e}"
        parts.append(s)
    return " ".join(parts)


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float(
        "nan")


def summarize(results):
    lines = []
    for m in METHODS:
        fr = [r[f"{p}_floor_ms"] / r[f"{p}_{m}_ms"] for r in results
              for p in ("gate_up", "down") if f"{p}_{m}_ms" in r]
        if fr:
            lines.append(f"summary {m:16s} geomean {geomean(fr):.2f} of floor, "
                         f"min {min(fr):.2f} ({len(fr)} shapes)")
    speed, worst = [], (float("inf"), "")
    for r in results:
        for p in ("gate_up", "down"):
            t = r.get(f"{p}_tailor_ms")
            anchors = [r[f"{p}_{m}_ms"] for m in METHODS[1:]
                       if f"{p}_{m}_ms" in r]
            if t and anchors:
                x = min(anchors) / t
                speed.append(x)
                if x < worst[0]:
                    worst = (x, f"{r['model']} T={r['T']} {p}")
    if speed:
        lines.append(f"summary tailor vs best anchor per shape: geomean "
                     f"{geomean(speed):.2f}x, worst {worst[0]:.2f}x "
                     f"({worst[1]})")
    errs = [r.get(f"{p}_tailor_err", 0) for r in results
            for p in ("gate_up", "down")]
    errs = [e for e in errs if e is not None]
    lines.append(f"summary tailor max rel err {max(errs + [0]):.2e} (limit "
                 f"5e-3); pack exact on every step: "
                 f"{all(r.get('pack_exact', False) for r in results)}")
    return lines


def bench_table(ceil, rows):
    if ceil is None:
        return ["bench: no ceilings measured (see bench.log)"]
    if "copy_tbps" not in ceil:
        return [f"bench: no ceilings measured (see bench.log); {ceil}"]
    lines = [f"copy {ceil['copy_tbps']:.2f} TB/s | dense FP8 "
             f"{ceil['fp8_tflops']:.0f} TFLOP/s | anchors {ceil['anchors']}"]
    dg = ceil.get("deepgemm")
    if dg is not None:
        lines.append("deepgemm probe: " + ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in dg.items()))
    lines += [summary_line(r) for r in rows]
    return lines + summarize(rows)
