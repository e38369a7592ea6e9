"""bench/decode_trace.py — summarizes the per-CTA timelines that a decode
kernel built with -DTAILOR_DECODE_TRACE prints (templates/cuda/
decode_trace.cuh): per launch, where the working CTAs are at each mark.

Usage (on the GPU machine):
  TAILOR_NVRTC_FLAGS=-DTAILOR_DECODE_TRACE build-gpu/bin/cuda_decode_bench \\
      --reps=3 --model=llama3-8b "--case=B=1 L=4096" > t.txt
  python3 bench/decode_trace.py t.txt [launch ...]

Lines come a launch at a time (the printf buffer drains when the host syncs),
one per CTA, in no order. Cycles turn into microseconds by each CTA's own
clock64 / globaltimer ratio. A launch whose printf waited on another shows a
long tail: compare the early (warm-up) and later (L2 flushed) launches, and
check the traced launch's span against the untraced bench time: long launches
(B=1 L=32768 on the H100) run several times slower traced and say nothing.
"""
import statistics
import sys

MARKS = ["table", "first_tma", "first_full", "last_full", "finish",
         "combined", "arrived", "merged", "end", "dump"]


def parse(path):
    rows = []
    for line in open(path):
        if not line.startswith("TRACE "):
            continue
        f = line.split()
        rows.append({"cta": int(f[1]), "sm": int(f[2]), "items": int(f[3]),
                     "start_ns": int(f[4]),
                     "cycles": [int(x) for x in f[5:5 + len(MARKS)]],
                     "end_ns": int(f[5 + len(MARKS)])})
    return rows


def summarize(launch, title):
    first_ns = min(r["start_ns"] for r in launch)
    last_ns = max(r["end_ns"] for r in launch)
    work = [r for r in launch if r["items"] > 0]
    per_sm = {}
    for r in work:
        per_sm.setdefault(r["sm"], []).append(r["cta"])
    shared = sum(1 for ctas in per_sm.values() if len(ctas) > 1)
    print(f"{title}: grid {len(launch)}, {len(work)} working CTAs on "
          f"{len(per_sm)} SMs ({shared} with two or more), "
          f"{(last_ns - first_ns) / 1e3:.2f} us first start to last end")
    ghz = statistics.median(r["cycles"][-1] / (r["end_ns"] - r["start_ns"])
                            for r in work if r["end_ns"] > r["start_ns"])
    starts = [(r["start_ns"] - first_ns) / 1e3 for r in work]
    print(f"  {'start':>10}: min {min(starts):6.2f}  med "
          f"{statistics.median(starts):6.2f}  max {max(starts):6.2f} us "
          f"after the first CTA (clock {ghz:.2f} GHz)")
    for m, name in enumerate(MARKS):
        us = [r["cycles"][m] / ghz / 1e3 for r in work if r["cycles"][m] >= 0]
        if us:
            print(f"  {name:>10}: min {min(us):6.2f}  med "
                  f"{statistics.median(us):6.2f}  max {max(us):6.2f} us "
                  f"after the CTA's start (n={len(us)})")


def main():
    rows = parse(sys.argv[1])
    if not rows:
        print("no TRACE lines")
        return
    grid = max(r["cta"] for r in rows) + 1
    launches = [rows[i:i + grid] for i in range(0, len(rows) - grid + 1, grid)]
    picks = [int(a) for a in sys.argv[2:]] or sorted(
        {1, len(launches) // 2, len(launches) - 1})
    for i in picks:
        if 0 <= i < len(launches):
            summarize(launches[i], f"launch {i} of {len(launches)}")


if __name__ == "__main__":
    main()
