"""bench/fp8/fp8_checks.py — correctness of the FP8 MoE kernels on the GPU:
the quantizing Pack bit for bit against the reference quantizer, and every
grouped GEMM (each tile shape x epilogue, split-K on and off) against fp64 on
the dequantized inputs, over awkward per-expert row counts. Outputs start
poisoned (NaN / 0xff); guard rows past R must stay untouched.

Pass rules: bf16 outputs rel err < 5e-3 (fp64, dequantized A and W); the
quantized epilogue's scales within 1e-5 of the reference quantizer applied
to the fp64 output, and its bytes equal to it except for at most 1 % of
values one e4m3 step apart (the f32 sum of the kernel and the fp64 sum may
round across a boundary). NaN never passes.
"""
import torch

from fp8_lib import (BLOCK, E4M3, EPILOGUES, TILES, Plan, dev, quantize_groups,
                     quantize_weights, reference_rows, rel_err, scale_rows)

AWKWARD = [
    [0, 0, 0, 577, 0, 0, 0, 0],          # one expert with everything
    [1, 127, 128, 129, 0, 17, 577, 0],   # tails, exact tiles, empty experts
    [0, 0, 0, 0, 0, 0, 0, 0],            # an empty step
    [31, 32, 33, 63, 64, 65, 7, 9],      # around the swap and 64-row tiles
]
# E, N, K: one N tile; a partial last N tile (plain only: gated needs
# N / 2 % 128 == 0) with split-K (8 K blocks); gated with split-K; 3 N tiles.
SHAPES = [(8, 256, 256), (8, 384, 1024), (8, 512, 1024), (8, 768, 384)]
GUARD = 8  # rows past R that must stay untouched


def check_pack(lib, log):
    """Pack vs the reference quantizer: bytes and scales equal."""
    ok = True
    for tokens, topk, h in [(1, 1, 128), (17, 8, 7168), (577, 2, 2048),
                            (5, 3, 384)]:
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
        a_s = torch.full((h // BLOCK, scale_rows(rows + GUARD)), -1.0,
                         device=dev)
        lib.pack(hidden, perm, a, a_s, topk)
        torch.cuda.synchronize()
        ref_q, ref_s = quantize_groups(hidden[perm.long() // topk],
                                       rows + GUARD)
        got = a[:rows]
        want = ref_q.view(torch.uint8)
        nan_got = (got & 0x7f) == 0x7f
        nan_want = (want & 0x7f) == 0x7f
        bytes_ok = bool(((got == want) | (nan_got & nan_want)).all())
        s_got, s_want = a_s[:, :rows], ref_s[:, :rows]
        scales_ok = bool(((s_got == s_want) |
                          (torch.isnan(s_got) & torch.isnan(s_want))).all())
        guard_ok = bool((a[rows:] == 0x55).all()) and bool(
            (a_s[:, rows:] == -1.0).all())
        passed = bytes_ok and scales_ok and guard_ok
        ok &= passed
        log(f"pack T={tokens:4d} k={topk} H={h:5d}: bytes {bytes_ok} "
            f"scales {scales_ok} guard {guard_ok} -> "
            f"{'PASS' if passed else 'FAIL'}")
    return ok


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


def run_gemm(lib, tile, epilogue, counts, a_q, a_s, w_q, w_s, split_k):
    """Output (c, c_scales) of one launch, poisoned first, GUARD rows on."""
    rows, n = sum(counts), w_q.shape[1]
    out_n = n // 2 if epilogue != "plain" else n
    plan = Plan(counts, TILES[tile][0])
    c_s = None
    if epilogue == "quant":
        c = torch.full((rows + GUARD, out_n), 0xff, dtype=torch.uint8,
                       device=dev)
        c_s = torch.full((out_n // BLOCK, scale_rows(rows + GUARD)),
                         float("nan"), device=dev)
    else:
        c = torch.full((rows + GUARD, out_n), float("nan"),
                       dtype=torch.bfloat16, device=dev)
    gemm = lib.gemm(tile, epilogue, a_q, a_s, w_q, w_s, c, plan, c_s,
                    split_k=split_k)
    gemm.launch()
    gemm.launch()  # twice: the schedule's counters reset for the next launch
    torch.cuda.synchronize()
    gemm.free()
    return c, c_s, plan


def judge_quant(c, c_s, ref, rows_idx):
    """The quantized epilogue against the reference quantizer on fp64."""
    ref_q, ref_s = quantize_groups(ref.float())
    got_s = c_s[:, rows_idx]
    want_s = ref_s[:, : len(rows_idx)]
    s_err = float(((got_s - want_s).abs() / want_s.abs()).max())
    got = c[rows_idx].view(E4M3).float()
    want = ref_q.float()
    diff = (got - want).abs()
    # One e4m3 step: 2^-3 of the larger magnitude, or the subnormal step.
    step = 0.125 * torch.maximum(got.abs(), want.abs()) + 2.0 ** -9
    off = float((diff != 0).float().mean())
    within = bool((diff <= step).all())
    return s_err < 1e-5 and off < 0.01 and within, (
        f"scale err {s_err:.1e} values off {off:.4f} within a step {within}")


def check_gemm_case(lib, tile, epilogue, counts, inputs, refs, split_k):
    a_q, a_s, w_q, w_s = inputs
    c, c_s, plan = run_gemm(lib, tile, epilogue, counts, a_q, a_s, w_q, w_s,
                            split_k)
    rows = sum(counts)
    guard = c[rows:]
    guard_ok = bool((guard == 0xff).all()) if epilogue == "quant" else bool(
        torch.isnan(guard.float()).all())
    if rows == 0:
        return guard_ok, f"empty step, guard {guard_ok}"
    ref = refs[epilogue != "plain"]
    if epilogue == "quant":
        ok, what = judge_quant(c, c_s, ref, list(range(rows)))
    else:
        err = rel_err(c[:rows].float(), ref)
        ok, what = err < 5e-3, f"rel err {err:.2e}"
    return ok and guard_ok, f"{what}, guard {guard_ok}"


def check_gemms(lib, log, small=False):
    ok = True
    tiles = ["128", "64", "s32"] if small else list(TILES)
    for si, (e, n, k) in enumerate(SHAPES[:1] if small else SHAPES):
        for ci, counts in enumerate(AWKWARD):
            if (small and ci > 1) or (si > 0 and ci not in (1, 3)):
                continue
            inputs = gemm_inputs(counts, n, k, seed=17 * ci + n + k)
            idx = list(range(sum(counts)))
            refs = {g: reference_rows(*inputs, counts, idx, gated=g)
                    for g in (False, True)} if idx else {}
            for tile in tiles:
                for epilogue in EPILOGUES:
                    if epilogue != "plain" and (n // 2) % BLOCK:
                        continue
                    for split_k in (True, False):
                        try:
                            passed, what = check_gemm_case(
                                lib, tile, epilogue, counts, inputs, refs,
                                split_k)
                        except Exception as ex:  # one case, not the run
                            passed, what = False, f"raised {ex!r}"
                        ok &= passed
                        if not passed or ci == 1:
                            log(f"gemm N={n:4d} K={k:4d} counts#{ci} "
                                f"{tile:>4s} {epilogue:5s} split={int(split_k)}"
                                f": {what} -> {'PASS' if passed else 'FAIL'}")
    return ok


def check_nan(lib, log):
    """A NaN in one token's hidden row: that token's GEMM rows are NaN, the
    others finite (non-finite inputs propagate, never vanish)."""
    tokens, topk, h, n = 9, 2, 256, 256
    hidden = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16)
    hidden[4, 77] = float("nan")
    perm = torch.arange(tokens * topk, device=dev, dtype=torch.int32)
    rows = perm.numel()
    a = torch.empty(rows, h, dtype=torch.uint8, device=dev)
    a_s = torch.empty(h // BLOCK, scale_rows(rows), device=dev)
    lib.pack(hidden, perm, a, a_s, topk)
    counts = [rows]
    w_q, w_s = gemm_inputs(counts, n, h, seed=3)[2:]
    c, _, _ = run_gemm(lib, "s32", "plain", counts, a.view(E4M3), a_s, w_q,
                       w_s, split_k=False)
    bad = torch.isnan(c[:rows].float()).any(dim=1).cpu()
    expect = torch.tensor([r // topk == 4 for r in range(rows)])
    passed = bool((bad == expect).all())
    log(f"nan propagation: rows with NaN {bad.nonzero().flatten().tolist()} "
        f"-> {'PASS' if passed else 'FAIL'}")
    return passed


def run_all(lib, log, small=False):
    ok = check_pack(lib, log)
    ok &= check_nan(lib, log)
    ok &= check_gemms(lib, log, small)
    log(f"correctness: {'ALL PASS' if ok else 'FAILURES (see above)'}")
    return ok
