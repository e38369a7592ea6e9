"""bench/fp8/fp8_checks.py — correctness of the FP8 MoE kernels on the GPU,
as named cases that fp8_runner.py runs in child processes (a kernel that
faults kills its CUDA context, so one bad case must not take the rest):

  pack:T:k:H                  the quantizing Pack, bit for bit against the
                              reference quantizer (bytes and scales)
  nan                         a NaN in one token's hidden row reaches exactly
                              that token's GEMM rows
  gemm:TILE:EPI:SHAPE:COUNTS:SPLIT[:dDYN:gGROUPS]
                              one grouped GEMM launch against fp64 on the
                              dequantized inputs, over awkward per-expert rows

Every GEMM case launches twice with the output re-poisoned in between (the
schedule's counters must reset; the second output must equal the first, bit
for bit unless split-K reordered a sum), then checks guard rows past R, the
route header's counters and the split-K arrivals (back to 0).

Pass rules: bf16 outputs rel err < 5e-3 against fp64. The quantized
epilogue (silu_and_mul -> e4m3 + 1 x 128 scales): against the same tile's
silu (bf16) output, which rounds the same f32 values to bf16 (within 2^-8
of them), each scale within 2^-7 of amax(|bf16|) / 448 and each value within
half an e4m3 step plus 2^-7 of bf16 / scale; against fp64 the dequantized values
within 6 % (e4m3 keeps 3 mantissa bits). NaN never passes.

Child protocol (stdout): "@@BEGIN id" before a case, "@@LAUNCH kernel"
before each kernel it launches, "@@END id PASS|FAIL detail" after it; on an
exception the child reports the case and exits 3 (its CUDA context may be
gone). Kernels named by --exclude are not launched: a quantized case whose
silu kernel is excluded is judged against fp64 alone. Usage:
  python3 fp8_checks.py --lib DIR [--cubin F] [--exclude k,...] --cases id,...
  python3 fp8_checks.py --list [--small]      (the case ids, one a line)
"""
import argparse
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp8_lib import (BLOCK, E4M3, EPILOGUES, FP8_MAX, TILES,  # noqa: E402
                     Plan, dev, e4m3_half_step, f32_div, open_lib,
                     quantize_groups, quantize_weights, reference_rows,
                     rel_err, scale_rows, sync)

AWKWARD = [
    [0, 0, 0, 577, 0, 0, 0, 0],          # one expert with everything
    [1, 127, 128, 129, 0, 17, 577, 0],   # tails, exact tiles, empty experts
    [0, 0, 0, 0, 0, 0, 0, 0],            # an empty step
    [31, 32, 33, 63, 64, 65, 7, 9],      # around the swap and 64-row tiles
]
# E, N, K: one N tile; a partial last N tile (plain only: gated needs
# N / 2 % 128 == 0); gated, 2 N tiles; 3 N tiles; K = 2048, where the 128-
# and 64-row tiles split K (16 blocks) as well as swap-AB.
SHAPES = [(8, 256, 256), (8, 384, 1024), (8, 512, 1024), (8, 768, 384),
          (8, 256, 2048)]
PACKS = [(1, 1, 128), (17, 8, 7168), (577, 2, 2048), (5, 3, 384)]
GUARD = 8  # rows past R that must stay untouched
_excluded = set()  # kernels (tile_epilogue) not to launch
HEADER_NEXT_TILE, HEADER_CTAS_DONE = 7, 8  # MoeRouteHeader, int words


def list_cases(small=False):
    cases = [f"pack:{t}:{k}:{h}" for t, k, h in PACKS] + ["nan"]
    tiles = ["128", "64", "s32"] if small else list(TILES)
    for si, (_, n, _) in enumerate(SHAPES[:1] if small else SHAPES):
        for ci in range(len(AWKWARD)):
            if (small and ci > 1) or (si > 0 and ci not in (1, 3)):
                continue
            for tile in tiles:
                for epi in EPILOGUES:
                    if epi != "plain" and (n // 2) % BLOCK:
                        continue
                    for split in (1, 0):
                        cases.append(f"gemm:{tile}:{epi}:{si}:{ci}:{split}")
    if not small:  # the static schedule and the raster group bounds
        for tile in ("128", "s16"):
            cases.append(f"gemm:{tile}:plain:0:3:0:d0:g0")
            cases.append(f"gemm:{tile}:plain:0:3:0:d1:g1")
            cases.append(f"gemm:{tile}:plain:0:3:0:d1:g2")
    return cases


def kernel_of(case):
    """The kernel a case launches (fp8_runner skips a kernel that crashed)."""
    parts = case.split(":")
    return f"{parts[1]}_{parts[2]}" if parts[0] == "gemm" else parts[0]


# ---- Pack -------------------------------------------------------------------
def check_pack(lib, tokens, topk, h):
    g = torch.Generator(device=dev).manual_seed(tokens)
    hidden = torch.randn(tokens, h, generator=g, device=dev,
                         dtype=torch.bfloat16) * 3
    hidden[0, 5] = 0.0
    if tokens > 3:
        hidden[2, :128] = 0.0                 # an all-zero group
        hidden[3, 200 % h] = float("nan")     # NaN propagates
    perm = torch.randperm(tokens * topk, generator=g,
                          device=dev).to(torch.int32)
    rows = perm.numel()
    a = torch.full((rows + GUARD, h), 0x55, dtype=torch.uint8, device=dev)
    a_s = torch.full((h // BLOCK, scale_rows(rows + GUARD)), -1.0, device=dev)
    print("@@LAUNCH pack", flush=True)
    lib.pack(hidden, perm, a, a_s, topk)
    sync()
    ref_q, ref_s = quantize_groups(hidden[perm.long() // topk], rows + GUARD)
    got, want = a[:rows], ref_q.view(torch.uint8)
    nan_both = ((got & 0x7f) == 0x7f) & ((want & 0x7f) == 0x7f)
    bad_bytes = int((~((got == want) | nan_both)).sum())
    s_got, s_want = a_s[:, :rows], ref_s[:, :rows]
    s_same = (s_got == s_want) | (torch.isnan(s_got) & torch.isnan(s_want))
    bad_scales = int((~s_same).sum())
    s_rel = float(((s_got - s_want).abs() / s_want.abs()).nan_to_num(0).max())
    guard_ok = bool((a[rows:] == 0x55).all()) and bool(
        (a_s[:, rows:] == -1.0).all())
    passed = bad_bytes == 0 and bad_scales == 0 and guard_ok
    return passed, (f"bytes off {bad_bytes}/{got.numel()}, scales off "
                    f"{bad_scales}/{s_got.numel()} (max rel {s_rel:.1e}), "
                    f"guard {guard_ok}")


# ---- GEMM inputs, launches and judges ------------------------------------------
_inputs_cache = {}


def gemm_inputs(counts, n, k, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    rows = sum(counts)
    x = torch.randn(max(rows, 1), k, generator=g, device=dev)
    a_q, a_s = quantize_groups(x)
    experts = len(counts)
    wx = torch.randn(experts, n, k, generator=g, device=dev) * 0.05
    w_q = torch.empty(experts, n, k, dtype=E4M3, device=dev)
    w_s = torch.empty(experts, n // BLOCK, k // BLOCK, device=dev)
    for e in range(experts):
        w_q[e], w_s[e] = quantize_weights(wx[e])
    return a_q, a_s, w_q, w_s


def case_data(si, ci):
    """Inputs and fp64 references of shape si, counts ci (cached)."""
    if (si, ci) not in _inputs_cache:
        _, n, k = SHAPES[si]
        counts = AWKWARD[ci]
        inputs = gemm_inputs(counts, n, k, seed=17 * ci + n + k)
        idx = list(range(sum(counts)))
        refs = {g: reference_rows(*inputs, counts, idx, gated=g)
                for g in (False, True)} if idx else {}
        _inputs_cache.clear()
        _inputs_cache[(si, ci)] = (counts, inputs, refs)
    return _inputs_cache[(si, ci)]


def poison(c, c_s):
    if c.dtype == torch.uint8:
        c.fill_(0xff)
    else:
        c.fill_(float("nan"))
    if c_s is not None:
        c_s.fill_(float("nan"))


def launch_twice(lib, tile, epilogue, counts, inputs, split_k, dynamic=True,
                 groups=0):
    """(c, c_s, notes): the second launch's output, re-poisoned in between;
    notes flag a second output that differs from the first and counters or
    arrivals left non-zero."""
    a_q, a_s, w_q, w_s = inputs
    rows, n = sum(counts), w_q.shape[1]
    out_n = n // 2 if epilogue != "plain" else n
    plan = Plan(counts, TILES[tile][0])
    c_s = None
    if epilogue == "quant":
        c = torch.empty((rows + GUARD, out_n), dtype=torch.uint8, device=dev)
        c_s = torch.empty((out_n // BLOCK, scale_rows(rows + GUARD)),
                          device=dev)
    else:
        c = torch.empty((rows + GUARD, out_n), dtype=torch.bfloat16,
                        device=dev)
    lib.arrivals.zero_()
    gemm = lib.gemm(tile, epilogue, a_q, a_s, w_q, w_s, c, plan, c_s,
                    split_k=split_k, dynamic=dynamic, expert_groups=groups)
    notes = [f"grid {gemm.grid} units {gemm.schedule[2]} splits "
             f"{gemm.schedule[1]}"]
    poison(c, c_s)
    print(f"@@LAUNCH {tile}_{epilogue}", flush=True)
    gemm.launch()
    sync()
    first = (c.clone(), None if c_s is None else c_s.clone())
    poison(c, c_s)
    gemm.launch()
    sync()
    gemm.free()
    if not same_output(first[0], c, gemm.schedule[1] > 1):
        notes.append("RELAUNCH DIFFERS")
    if c_s is not None and not same_output(first[1], c_s, True):
        notes.append("RELAUNCH SCALES DIFFER")
    header = plan.header.cpu()
    if int(header[HEADER_NEXT_TILE]) or int(header[HEADER_CTAS_DONE]):
        notes.append(f"COUNTERS LEFT {header[HEADER_NEXT_TILE]}/"
                     f"{header[HEADER_CTAS_DONE]}")
    if int(lib.arrivals.abs().sum()):
        notes.append("SPLIT ARRIVALS LEFT")
    return c, c_s, notes


def same_output(x, y, reordered):
    """Bit-equal (NaN equal to NaN), or with a reordered split-K sum within
    one bf16 rounding / one e4m3 step on at most 0.1 % of values."""
    if x.dtype == torch.uint8:
        x, y = x.view(E4M3).float(), y.view(E4M3).float()
    x, y = x.float(), y.float()
    both_nan = torch.isnan(x) & torch.isnan(y)
    equal = (x == y) | both_nan
    if bool(equal.all()):
        return True
    if not reordered:
        return False
    close = (x - y).abs() <= 0.126 * torch.maximum(x.abs(), y.abs()) + 2e-3
    return bool((equal | close).all()) and float((~equal).float().mean()) < 1e-3


def judge_quant(c, c_s, silu, ref, rows):
    """The quantized epilogue (see the banner). silu: the same tile's bf16
    silu_and_mul output [rows, N / 2]; ref: fp64."""
    q = c[:rows].view(E4M3).float()
    s = c_s[:, :rows].t().repeat_interleave(BLOCK, dim=1)  # [rows, out_n]
    nan_q = int(torch.isnan(q).sum()) + int(torch.isnan(c_s[:, :rows]).sum())
    b = silu.float()
    groups = b.view(rows, -1, BLOCK).abs().amax(-1)       # [rows, groups]
    want_s = f32_div(groups.clamp(min=1e-10), FP8_MAX)
    s_err = float(((c_s[:, :rows].t() - want_s).abs() / want_s).max())
    x = (b / s).clamp(-FP8_MAX, FP8_MAX)  # the bf16 value in e4m3 units
    bound = e4m3_half_step(x) + x.abs() * 2.0 ** -7 + 1e-6
    dev_q = (q - x).abs() / bound
    worst = float(dev_q.nan_to_num(float("inf")).max())
    deq = q.double() * s.double()
    err64 = rel_err(deq, ref)
    ok = nan_q == 0 and s_err <= 2.0 ** -7 and worst <= 1.0 and err64 < 0.06
    return ok, (f"scale vs bf16 {s_err:.1e}, worst value {worst:.2f} of its "
                f"bound, deq rel err vs fp64 {err64:.2e}, NaN {nan_q}")


def judge_quant_fp64(c, c_s, ref, rows):
    """The quantized epilogue against fp64 alone (its silu kernel is out):
    scales within 5e-3 of amax(|ref|) / 448, dequantized values within 6 %."""
    q = c[:rows].view(E4M3).float()
    nan_q = int(torch.isnan(q).sum()) + int(torch.isnan(c_s[:, :rows]).sum())
    want_s = ref.abs().view(rows, -1, BLOCK).amax(-1) / FP8_MAX
    s_err = float(((c_s[:, :rows].t().double() - want_s).abs() / want_s).max())
    s = c_s[:, :rows].t().repeat_interleave(BLOCK, dim=1)
    err64 = rel_err(q.double() * s.double(), ref)
    ok = nan_q == 0 and s_err < 5e-3 and err64 < 0.06
    return ok, (f"(silu kernel out: fp64 only) scale vs fp64 {s_err:.1e}, deq "
                f"rel err vs fp64 {err64:.2e}, NaN {nan_q}")


def check_gemm(lib, case):
    parts = case.split(":")
    tile, epilogue, si, ci, split = parts[1], parts[2], *map(int, parts[3:6])
    dynamic = int(parts[6][1:]) if len(parts) > 6 else 1
    groups = int(parts[7][1:]) if len(parts) > 7 else 0
    counts, inputs, refs = case_data(si, ci)
    rows = sum(counts)
    c, c_s, notes = launch_twice(lib, tile, epilogue, counts, inputs,
                                 bool(split), bool(dynamic), groups)
    quant = epilogue == "quant"
    guard = c[rows:]
    guard_ok = bool((guard == 0xff).all()) if quant else bool(
        torch.isnan(guard.float()).all())
    if quant:
        guard_ok &= bool(torch.isnan(c_s[:, rows:]).all())
    flags_ok = len(notes) == 1  # anything past the schedule is a flag
    if rows == 0:
        return guard_ok and flags_ok, f"empty step, guard {guard_ok}; " + \
            "; ".join(notes)
    if quant and f"{tile}_silu" in _excluded:
        ok, what = judge_quant_fp64(c, c_s, refs[True], rows)
    elif quant:
        silu, _, _ = launch_twice(lib, tile, "silu", counts, inputs,
                                  bool(split), bool(dynamic), groups)
        ok, what = judge_quant(c, c_s, silu[:rows], refs[True], rows)
    else:
        err = rel_err(c[:rows].float(), refs[epilogue != "plain"])
        ok, what = err < 5e-3, f"rel err {err:.2e}"
    return ok and guard_ok and flags_ok, (f"{what}, guard {guard_ok}; " +
                                          "; ".join(notes))


def check_nan(lib):
    """A NaN in one token's hidden row: that token's GEMM rows are NaN, the
    others finite (non-finite inputs propagate, never vanish)."""
    tokens, topk, h, n = 9, 2, 256, 256
    hidden = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16)
    hidden[4, 77] = float("nan")
    perm = torch.arange(tokens * topk, device=dev, dtype=torch.int32)
    rows = perm.numel()
    a = torch.empty(rows, h, dtype=torch.uint8, device=dev)
    a_s = torch.empty(h // BLOCK, scale_rows(rows), device=dev)
    print("@@LAUNCH pack", flush=True)
    lib.pack(hidden, perm, a, a_s, topk)
    counts = [rows]
    w_q, w_s = gemm_inputs(counts, n, h, seed=3)[2:]
    inputs = (a.view(E4M3), a_s, w_q, w_s)
    c, _, _ = launch_twice(lib, "s32", "plain", counts, inputs, False)
    bad = torch.isnan(c[:rows].float()).any(dim=1).cpu()
    expect = torch.tensor([r // topk == 4 for r in range(rows)])
    return bool((bad == expect).all()), (
        f"rows with NaN {bad.nonzero().flatten().tolist()}")


def run_case(lib, case):
    if case.startswith("pack:"):
        return check_pack(lib, *map(int, case.split(":")[1:]))
    if case == "nan":
        return check_nan(lib)
    return check_gemm(lib, case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--cubin", default="moe_fp8.cubin")
    ap.add_argument("--cases", default="")
    ap.add_argument("--exclude", default="-")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(list_cases(args.small)))
        return
    _excluded.update(k for k in args.exclude.split(",") if k and k != "-")
    lib = open_lib(args.lib, args.cubin)
    for case in [c for c in args.cases.split(",") if c]:
        print(f"@@BEGIN {case}", flush=True)
        try:
            passed, what = run_case(lib, case)
        except Exception as ex:  # the context may be gone: report and leave
            line = str(ex).splitlines()[0] if str(ex) else repr(ex)
            print(f"@@END {case} FAIL raised {type(ex).__name__}: {line}",
                  flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(3)
        print(f"@@END {case} {'PASS' if passed else 'FAIL'} {what}",
              flush=True)


if __name__ == "__main__":
    main()
