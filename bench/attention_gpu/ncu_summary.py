#!/usr/bin/env python3
"""The few Nsight Compute numbers that place the prefill kernel's time, per
profiled kernel, from `ncu --import REP --page raw --csv` (scripts/gpu-attention-dev
--ncu / --all): duration, tensor (wgmma) pipe activity, issue activity,
achieved occupancy, the leading warp stall reasons, L2 and DRAM.

  python3 bench/attention_gpu/ncu_summary.py ncu_raw.csv
"""
import csv
import re
import sys

FIXED = [
    ("duration us", "gpu__time_duration.sum", 1e-3),
    ("SM throughput %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("issue active %", "sm__inst_issued.avg.pct_of_peak_sustained_active", 1),
    ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
    ("registers / thread", "launch__registers_per_thread", 1),
    ("L2 hit %", "lts__t_sector_hit_rate.pct", 1),
    ("L2 throughput %", "lts__t_sectors.avg.pct_of_peak_sustained_elapsed", 1),
    ("DRAM throughput %", "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("DRAM bytes MB", "dram__bytes.sum", 1e-6),
]
TENSOR = re.compile(r"(gmma|pipe_tensor).*(pct|ratio)")
STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        print(f"ncu_summary: no kernel rows in {path}")
        return
    header, units = rows[start], rows[start + 1]
    col = {name: i for i, name in enumerate(header)}
    for r in rows[start + 2:]:
        if len(r) != len(header):
            continue
        name = r[col["Kernel Name"]]
        print(f"== ncu {name}")
        for label, metric, scale in FIXED:
            if metric in col and number(r[col[metric]]) is not None:
                v = number(r[col[metric]])
                if metric == "gpu__time_duration.sum" and units[col[metric]] == "usecond":
                    scale = 1
                print(f"  {label:<24} {v * scale:.1f}")
        for metric, i in sorted(col.items()):
            if TENSOR.search(metric) and number(r[i]) is not None:
                print(f"  {metric:<70} {number(r[i]):.1f}")
        stalls = []
        for metric, i in col.items():
            m = STALL.match(metric)
            if m and number(r[i]) is not None:
                stalls.append((number(r[i]), m.group(1)))
        stalls.sort(reverse=True)
        print("  stalls (warps per issue): " +
              ", ".join(f"{n} {v:.2f}" for v, n in stalls[:8]))


if __name__ == "__main__":
    main(sys.argv[1])
