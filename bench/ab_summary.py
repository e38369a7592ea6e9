"""bench/ab_summary.py DIR — B/A per shape from scripts/gpu-ab-bundles' runs
(DIR/a1, b1, b2, a2: cuda_decode_bench.json and moe_gpu_bench.json each).

Each build's time is the mean of its two runs (A ran first and last, B in
the middle, so a steady drift of the clock cancels); the min column takes
the faster of each build's two runs instead, which a one-run spike (a host
hiccup in a 10 us launch) cannot move. Beside tailor's B/A it
prints the same ratio of a yardstick that does not depend on tailor's code
(decode: the raw TMA read of the same bytes; MoE: torch._grouped_mm on the
same data), and the geomean and worst of each column last.
"""
import json
import math
import os
import sys


def load(path):
    if not os.path.exists(path):
        return None
    if path.endswith("cuda_decode_bench.json"):
        return [json.loads(line) for line in open(path) if line.strip()]
    return json.load(open(path))


def mean2(x, y):
    return (x + y) / 2


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def table(title, rows):
    """rows: (name, a_ms, b_ms, yard_a, yard_b, a_min_ms, b_min_ms)."""
    if not rows:
        return
    print(f"## {title}: B/A of the mean of two runs each (<1: B faster)")
    print(f"{'shape':44s} {'A us':>9s} {'B us':>9s} {'B/A':>6s} "
          f"{'min B/A':>7s} | yardstick B/A")
    ratios, mins, yards = [], [], []
    for name, a, b, ya, yb, a_min, b_min in rows:
        r, m, y = b / a, b_min / a_min, yb / ya
        ratios.append(r)
        mins.append(m)
        yards.append(y)
        print(f"{name:44s} {a * 1e3:9.1f} {b * 1e3:9.1f} {r:6.3f} {m:7.3f} "
              f"| {y:6.3f}")
    print(f"geomean B/A {geomean(ratios):.3f} (worst {max(ratios):.3f}); "
          f"min B/A {geomean(mins):.3f} (worst {max(mins):.3f}); "
          f"yardstick {geomean(yards):.3f} (worst {max(yards):.3f}); "
          f"{len(rows)} shapes")


def decode_rows(runs):
    keyed = [{(r["model"], r["case"]): r for r in run} for run in runs]
    out = []
    for key in keyed[0]:
        if not all(key in k for k in keyed):
            continue
        a1, b1, b2, a2 = (k[key] for k in keyed)
        out.append((f"decode {key[0]} {key[1]}",
                    mean2(a1["tailor_ms"], a2["tailor_ms"]),
                    mean2(b1["tailor_ms"], b2["tailor_ms"]),
                    mean2(a1["read_ms"], a2["read_ms"]),
                    mean2(b1["read_ms"], b2["read_ms"]),
                    min(a1["tailor_ms"], a2["tailor_ms"]),
                    min(b1["tailor_ms"], b2["tailor_ms"])))
    return out


def moe_rows(runs):
    out = []
    keyed = [{(r["model"], r["T"]): r for r in run["moe"]} for run in runs]
    for key in keyed[0]:
        if not all(key in k for k in keyed):
            continue
        a1, b1, b2, a2 = (k[key] for k in keyed)
        for p in ("gate_up", "down"):
            t, y = f"{p}_tailor_ms", f"{p}_grouped_mm_ms"
            if not all(t in r and y in r for r in (a1, b1, b2, a2)):
                continue
            out.append((f"moe {key[0]} T={key[1]} {p}",
                        mean2(a1[t], a2[t]), mean2(b1[t], b2[t]),
                        mean2(a1[y], a2[y]), mean2(b1[y], b2[y]),
                        min(a1[t], a2[t]), min(b1[t], b2[t])))
    mem = [{(r["E"], r["T"]): r for r in run.get("memory_ops", [])}
           for run in runs]
    for key in mem[0]:
        if not all(key in m for m in mem):
            continue
        a1, b1, b2, a2 = (m[key] for m in mem)
        t, y = "tailor_rpc_us", "torch_rpc_us"
        out.append((f"route+pack+combine E={key[0]} T={key[1]}",
                    mean2(a1[t], a2[t]) / 1e3, mean2(b1[t], b2[t]) / 1e3,
                    mean2(a1[y], a2[y]), mean2(b1[y], b2[y]),
                    min(a1[t], a2[t]) / 1e3, min(b1[t], b2[t]) / 1e3))
    return out


def main():
    top = sys.argv[1]
    names = ("a1", "b1", "b2", "a2")
    dec = [load(os.path.join(top, n, "cuda_decode_bench.json")) for n in names]
    moe = [load(os.path.join(top, n, "moe_gpu_bench.json")) for n in names]
    if all(dec):
        table("decode (cuda_decode_bench, tailor mean)", decode_rows(dec))
    if all(moe):
        table("moe (moe_gpu_bench, tailor median)", moe_rows(moe))
    if not all(dec) and not all(moe):
        print("ab_summary: no complete set of four runs under", top)


if __name__ == "__main__":
    main()
