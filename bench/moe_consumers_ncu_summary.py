#!/usr/bin/env python3
"""The Nsight Compute numbers that test the ping-pong consumers' L2
hypothesis (bench/results/moe_hopper_design.txt "Ping-pong consumers"), the
two consumer schedules side by side, from
`ncu --import REP --page raw --csv` over bench/moe_consumers_ncu.py (which
launches the cooperative kernel first, then the ping-pong one, per shape and
projection): duration, L2 traffic and hit rate, DRAM reads, the bf16 tensor
path's activity, issue activity and the leading warp stall reasons.

  python3 bench/moe_consumers_ncu_summary.py ncu_raw.csv [NAME ...]

NAMEs label the launches in order (default: coop pp).
"""
import csv
import re
import sys

# (label, metric, scale): values as ncu reports them, times `scale`.
FIXED = [
    ("L2 throughput %", "lts__t_sectors.avg.pct_of_peak_sustained_elapsed", 1),
    ("L2 hit %", "lts__t_sector_hit_rate.pct", 1),
    ("L2 bytes GB", "lts__t_bytes.sum", 1e-9),
    ("DRAM read GB", "dram__bytes_read.sum", 1e-9),
    ("DRAM throughput %", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
     1),
    ("SM throughput %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("issue active %", "sm__inst_issued.avg.pct_of_peak_sustained_active", 1),
    ("registers / thread", "launch__registers_per_thread", 1),
]
TENSOR = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off" \
         ".avg.pct_of_peak_sustained_elapsed"
STALL = re.compile(
    r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
TIME_UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0,
              "second": 1e3}


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def kernel_rows(path):
    """The header and each profiled kernel's row, as dicts by metric."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        return None, []
    header, units = rows[start], rows[start + 1]
    kernels = [dict(zip(header, r)) for r in rows[start + 2:]
               if len(r) == len(header)]
    return dict(zip(header, units)), kernels


def stalls(kernel, top=6):
    found = []
    for metric, value in kernel.items():
        m = STALL.match(metric)
        if m and number(value) is not None:
            found.append((number(value), m.group(1)))
    return sorted(found, reverse=True)[:top]


def main(path, labels=("coop", "pp")):
    units, kernels = kernel_rows(path)
    if not kernels:
        print(f"moe_consumers_ncu_summary: no kernel rows in {path}")
        return 1
    names = (list(labels) * len(kernels))[:len(kernels)]
    if len(kernels) % len(labels):
        print(f"note: {len(kernels)} kernels (expected groups of "
              f"{', '.join(labels)}); columns labelled by launch order")
    print(f"\nncu, schedules side by side (launch order: {', '.join(labels)})")
    print(f"{'':24s}" + "".join(f"{n:>12s}" for n in names))
    ms = []
    for k in kernels:
        v = number(k.get("gpu__time_duration.sum", ""))
        scale = TIME_UNITS.get(units.get("gpu__time_duration.sum", ""), 1.0)
        ms.append(f"{v * scale:12.3f}" if v is not None else f"{'-':>12s}")
    print(f"{'duration ms':24s}" + "".join(ms))
    for label, metric, scale in FIXED + [("tensor (hgmma bf16) %", TENSOR,
                                          1)]:
        cells = []
        for k in kernels:
            v = number(k.get(metric, ""))
            cells.append(f"{v * scale:12.2f}" if v is not None else
                         f"{'-':>12s}")
        print(f"{label:24s}" + "".join(cells))
    for name, k in zip(names, kernels):
        print(f"stalls {name:4s} (warps per issue): " +
              ", ".join(f"{s} {v:.2f}" for v, s in stalls(k)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(sys.argv[2:]) or ("coop", "pp")))
