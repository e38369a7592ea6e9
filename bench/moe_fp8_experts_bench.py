"""bench/moe_fp8_experts_bench.py — a whole FP8 MoE layer step through
tailor's public path (tailor.moe.experts(..., scale_mode="block"): the C ABI,
moe::Experts, the device Route, the quantizing Pack, both FP8 GEMMs, Combine)
beside tailor's bf16 step and a torch FP8 step, in one process on the same
data.

Models: DeepSeek-V3 (E256 k8 H7168 I2048) and Qwen3-30B-A3B-FP8 (E128 k8
H2048 I768) x T in {1, 16, 128, 1024, 4096}, Zipf(1.0) routing with k
distinct experts per token (the anchors' generator). Weights: e4m3 with
128 x 128 f32 block scales, as the checkpoints ship; the bf16 step runs on
the same weights dequantized.

Methods, each one layer step hidden [T, H] bf16 -> out [T, H] bf16:
  tailor_fp8   tailor.moe.experts, scale_mode "block"
  tailor_bf16  tailor.moe.experts on the dequantized bf16 weights
  torch_fp8    what a server writes without a fused FP8 MoE kernel: gather
               the rows in expert order, quantize them 1 x 128 (torch ops),
               a per-expert loop of torch._scaled_mm blockwise (1 x 128 /
               128 x 128, cuBLASLt), silu_and_mul in bf16, requantize, the
               down projection's loop, index_add_ combine. Its routing (the
               per-expert split, rows padded to 4 as _scaled_mm insists) is
               computed on the host outside the timed call, which favours it.
Every method is captured in a CUDA graph and timed by its replay (a server
replays graphs; --eager times the calls), CUDA events around one replay
after a 256 MiB write (L2 holds no weights of the previous replay), median
of --iters. Floor = max(FLOPs / dense FP8 GEMM rate, bytes / copy rate),
both measured in this run (torch._scaled_mm 8192^3 tensorwise; a 1 GiB
copy, read + write counted); bytes = the e4m3 weights and scales of the
experts that received tokens + hidden + out. err columns: ||out - ref|| /
||ref|| of each method's out (its last replay) against an f32 reference on
the dequantized weights and the unquantized activations (TF32 off), over the
finite elements; column nonfin counts the non-finite elements of the three
outs (they start NaN-poisoned), so a broken output shows as a count, never
as an error of inf.

Usage, on the GPU machine from the repository root (scripts/gpu-moe-fp8
does this over the bundle of scripts/gpu-bundle):
  PYTHONPATH=python TAILOR_LIBRARY=build-gpu/lib/libtailor_c.so.3 \\
    python3 bench/moe_fp8_experts_bench.py [--models ...] [--tokens ...]
Prints a table last; writes $OUT/moe_fp8_experts_bench.json.
"""
import argparse
import json
import math
import os
import sys

import torch

import tailor
import tailor.moe

E4M3 = torch.float8_e4m3fn
BLOCK = 128
FP8_MAX = 448.0
MODELS = {"deepseek_v3": (256, 8, 7168, 2048),
          "qwen3_30b_a3b": (128, 8, 2048, 768)}
TOKENS = [1, 16, 128, 1024, 4096]
dev = torch.device("cuda")
_flush = None


def bench(fn, iters, warm=3):
    """Median ms of `fn` on the device, each rep after a 256 MiB write."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        _flush.zero_()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def graphed(fn, eager):
    """A replay of `fn` captured in a CUDA graph (or `fn` with --eager)."""
    if eager:
        return fn
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        fn()
    torch.cuda.synchronize()
    return g.replay


def ceilings():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    b = torch.empty_like(a)
    copy = 2 * n / bench(lambda: b.copy_(a), 20) / 1e9  # TB/s
    del a, b
    m = 8192
    x = torch.randn(m, m, device=dev).to(E4M3)
    w = torch.randn(m, m, device=dev).to(E4M3)
    one = torch.ones((), device=dev)
    fp8 = 2 * m ** 3 / bench(lambda: torch._scaled_mm(
        x, w.t(), one, one, out_dtype=torch.bfloat16), 20) / 1e9
    return copy, fp8


def routing(gen, tokens, experts, k):
    p = torch.tensor([1.0 / (i + 1) for i in range(experts)])
    p = p[torch.randperm(experts, generator=gen)]
    return torch.multinomial(p.expand(tokens, experts), k, replacement=False,
                             generator=gen)


def quantize_1x128(x):
    """x [R, K] -> (e4m3 [R, K], scales f32 [K / 128, R]): 1 x 128 groups."""
    r, k = x.shape
    xf = x.float().view(r, k // BLOCK, BLOCK)
    scale = xf.abs().amax(dim=-1).clamp(min=1e-10) / FP8_MAX
    q = (xf / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(E4M3)
    return q.view(r, k), scale.t().contiguous()


def fp8_weights(gen, experts, n, k):
    """e4m3 [E, N, K], block scales [E, N/128, K/128] and the dequantized
    bf16 [E, N, K]; rows of different magnitudes, so the scales differ."""
    q = torch.empty(experts, n, k, dtype=E4M3, device=dev)
    s = torch.empty(experts, n // BLOCK, k // BLOCK, device=dev)
    d = torch.empty(experts, n, k, dtype=torch.bfloat16, device=dev)
    for e in range(experts):
        w = torch.randn(n, k, device=dev, generator=gen) * 0.02
        w *= torch.rand(n, 1, device=dev, generator=gen) + 0.25
        blocks = w.view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
        scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-10) / FP8_MAX
        qe = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
        q[e] = qe.to(E4M3).view(n, k)
        s[e] = scale
        d[e] = (q[e].float().view_as(blocks) *
                scale[:, None, :, None]).view(n, k).to(torch.bfloat16)
    return q, s, d


class TorchFp8Step:
    """The torch FP8 step (see the banner), its routing split on the host."""

    def __init__(self, layer, hidden_ext, ids, weights, out_ext):
        tokens, k = ids.shape
        experts = layer["experts"]
        flat = ids.flatten().cpu()
        order = torch.argsort(flat, stable=True).tolist()
        counts = torch.bincount(flat, minlength=experts).tolist()
        src, dst, wts, self.calls, start, pos = [], [], [], [], 0, 0
        w_flat = weights.flatten().cpu().tolist()
        for e, m in enumerate(counts):
            if m == 0:
                continue
            mp = (m + 3) // 4 * 4
            rows = order[pos:pos + m]
            pos += m
            src += [a // k for a in rows] + [tokens] * (mp - m)
            dst += [a // k for a in rows] + [tokens] * (mp - m)
            wts += [w_flat[a] for a in rows] + [0.0] * (mp - m)
            self.calls.append((e, start, mp))
            start += mp
        self.src = torch.tensor(src, dtype=torch.long, device=dev)
        self.dst = torch.tensor(dst, dtype=torch.long, device=dev)
        self.wts = torch.tensor(wts, device=dev)
        h, i = layer["hidden"], layer["intermediate"]
        self.gu = torch.empty(start, 2 * i, dtype=torch.bfloat16, device=dev)
        self.dn = torch.empty(start, h, dtype=torch.bfloat16, device=dev)
        self.layer, self.hidden_ext, self.out_ext = layer, hidden_ext, out_ext
        self.w13_st = [s.t() for s in layer["w13_s"]]
        self.w2_st = [s.t() for s in layer["w2_s"]]

    def _gemms(self, q, s_t, w_q, w_st, c):
        for e, start, mp in self.calls:
            c[start:start + mp] = torch._scaled_mm(
                q[start:start + mp], w_q[e].t(),
                s_t[:, start:start + mp].contiguous().t(), w_st[e],
                out_dtype=torch.bfloat16)

    def __call__(self):
        i = self.layer["intermediate"]
        x = self.hidden_ext.index_select(0, self.src)
        q, s_t = quantize_1x128(x)
        self._gemms(q, s_t, self.layer["w13_q"], self.w13_st, self.gu)
        act = torch.nn.functional.silu(self.gu[:, :i]) * self.gu[:, i:]
        q2, s2_t = quantize_1x128(act)
        self._gemms(q2, s2_t, self.layer["w2_q"], self.w2_st, self.dn)
        self.out_ext.zero_()
        self.out_ext.index_add_(0, self.dst,
                                self.dn * self.wts.unsqueeze(1).to(self.dn))


def make_layer(gen, experts, k, h, i):
    w13_q, w13_s, w13_d = fp8_weights(gen, experts, 2 * i, h)
    w2_q, w2_s, w2_d = fp8_weights(gen, experts, h, i)
    return {"experts": experts, "topk": k, "hidden": h, "intermediate": i,
            "w13_q": w13_q, "w13_s": w13_s, "w13_d": w13_d,
            "w2_q": w2_q, "w2_s": w2_s, "w2_d": w2_d}


def reference(layer, hidden, ids, weights):
    """out [T, H] f32: sum over k of weight * down(silu(gate) * up) on the
    dequantized weights and the unquantized hidden, one expert at a time."""
    tokens, k = ids.shape
    i = layer["intermediate"]
    flat = ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=layer["experts"]).tolist()
    w_flat = weights.flatten().float()
    x = hidden.float()
    out = torch.zeros(tokens, layer["hidden"], device=dev)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    pos = 0
    for e, m in enumerate(counts):
        if m == 0:
            continue
        sel = order[pos:pos + m]
        pos += m
        tok = sel // k
        gu = x.index_select(0, tok) @ layer["w13_d"][e].float().t()
        act = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        y = act @ layer["w2_d"][e].float().t()
        out.index_add_(0, tok, y * w_flat[sel].unsqueeze(1))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return out


def rel_err(out, ref):
    """(||out - ref|| / ||ref|| over out's finite elements, the count of
    its non-finite ones)."""
    out, ref = out.double(), ref.double()
    finite = torch.isfinite(out)
    bad = int(finite.numel() - finite.sum())
    diff = torch.where(finite, out - ref, torch.zeros_like(ref))
    return float(diff.norm() / ref.norm().clamp(min=1e-30)), bad


def tailor_step(rt, layer, hidden, ids, weights, out, fp8):
    """A tailor step on its own reserved workspace, and the workspace."""
    t, k = ids.shape
    ws = tailor.moe.Workspace()
    tailor.moe.reserve_workspace(
        rt, ws, max_tokens=t, topk=k, num_experts=layer["experts"],
        hidden=layer["hidden"], intermediate=layer["intermediate"],
        dtype="bf16")
    if fp8:
        def run():
            tailor.moe.experts(rt, hidden, layer["w13_q"], layer["w2_q"],
                               weights, ids, out, ws, scale_mode="block",
                               w13_scale=layer["w13_s"],
                               w2_scale=layer["w2_s"],
                               block_shape=[BLOCK, BLOCK])
    else:
        def run():
            tailor.moe.experts(rt, hidden, layer["w13_d"], layer["w2_d"],
                               weights, ids, out, ws)
    return run, ws


def one_step(rt, layer, tokens, gens, args, floor_rates):
    gen, gen_dev = gens  # routing on the host, data on the device
    experts, k = layer["experts"], layer["topk"]
    h, i = layer["hidden"], layer["intermediate"]
    ids = routing(gen, tokens, experts, k)
    hidden_ext = torch.zeros(tokens + 1, h, dtype=torch.bfloat16, device=dev)
    hidden_ext[:tokens] = torch.randn(tokens, h, device=dev,
                                      generator=gen_dev)
    hidden = hidden_ext[:tokens]
    weights = torch.rand(tokens, k, device=dev, generator=gen_dev)
    ids_d = ids.to(dev, torch.int32)
    outs = {m: torch.full((tokens + 1, h), float("nan"), dtype=torch.bfloat16,
                          device=dev) for m in ("tailor_fp8", "tailor_bf16",
                                                "torch_fp8")}
    row = {"tokens": tokens, "rows": tokens * k,
           "active": int(torch.bincount(ids.flatten(),
                                        minlength=experts).gt(0).sum())}
    methods = {}
    fp8_run, fp8_ws = tailor_step(rt, layer, hidden, ids_d, weights,
                                  outs["tailor_fp8"][:tokens], True)
    methods["tailor_fp8"] = fp8_run
    methods["tailor_bf16"], _ = tailor_step(rt, layer, hidden, ids_d, weights,
                                            outs["tailor_bf16"][:tokens],
                                            False)
    methods["torch_fp8"] = TorchFp8Step(layer, hidden_ext, ids, weights,
                                        outs["torch_fp8"])
    for name, fn in methods.items():
        try:
            row[name] = bench(graphed(fn, args.eager), args.iters)
        except Exception as e:  # one method's failure is one cell
            row[name] = None
            row[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()
    row["kernels"] = [g["kernel"] + "/" + str(g["cta_rows"])
                      for g in fp8_ws.gemms()]
    ref = reference(layer, hidden, ids_d, weights)
    row["nonfinite"] = 0
    for name in outs:
        err, bad = rel_err(outs[name][:tokens], ref)
        row["err_" + name] = err
        row["nonfinite_" + name] = bad
        row["nonfinite"] += bad
    del ref
    copy, fp8 = floor_rates
    flops = 6.0 * tokens * k * h * i
    weight_bytes = row["active"] * 3 * h * i * (1 + 4 / (BLOCK * BLOCK))
    row["floor"] = max(flops / fp8 / 1e9,
                       (weight_bytes + 4 * tokens * h) / copy / 1e9)
    return row


def fmt(ms, floor):
    if ms is None:
        return f"{'fail':>17}"
    return f"{ms:9.3f} ({floor / ms:4.0%})"


def print_table(rows, copy, fp8):
    print(f"\n== moe::Experts FP8 block mode, whole step (ms, % of floor) "
          f"| copy {copy:.2f} TB/s | dense FP8 {fp8:.0f} TFLOP/s ==")
    print(f"{'model':<14} {'T':>5} {'rows':>6} {'act':>4} {'floor':>7} "
          f"{'tailor_fp8':>17} {'tailor_bf16':>17} {'torch_fp8':>17} "
          f"{'x bf16':>6} {'x torch':>7} {'err_fp8':>8} {'err_bf16':>8} "
          f"{'err_tch':>8} {'nonfin':>6}")
    ratios = {"floor": [], "bf16": [], "torch": []}
    for r in rows:
        f8, bf, tf = r["tailor_fp8"], r["tailor_bf16"], r["torch_fp8"]
        x_bf = bf / f8 if f8 and bf else None
        x_tf = tf / f8 if f8 and tf else None
        if f8:
            ratios["floor"].append(r["floor"] / f8)
        if x_bf:
            ratios["bf16"].append(x_bf)
        if x_tf:
            ratios["torch"].append(x_tf)
        print(f"{r['model']:<14} {r['tokens']:>5} {r['rows']:>6} "
              f"{r['active']:>4} {r['floor']:7.3f} {fmt(f8, r['floor'])} "
              f"{fmt(bf, r['floor'])} {fmt(tf, r['floor'])} "
              f"{x_bf or 0:6.2f} {x_tf or 0:7.2f} "
              f"{r['err_tailor_fp8']:8.1e} {r['err_tailor_bf16']:8.1e} "
              f"{r['err_torch_fp8']:8.1e} {r['nonfinite']:6d}")
    for name, values in ratios.items():
        if values:
            geo = math.exp(sum(math.log(v) for v in values) / len(values))
            print(f"summary tailor_fp8 vs {name:<6} geomean {geo:.2f}, "
                  f"min {min(values):.2f} ({len(values)} shapes)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--tokens", nargs="+", type=int, default=TOKENS)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--eager", action="store_true",
                        help="time the calls, not graph replays")
    args = parser.parse_args()
    rt = tailor.Runtime(backend="cuda", disable_disk_cache=True,
                        log_level="warn")
    copy, fp8 = ceilings()
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name} | tailor {rt.arch} | torch {torch.__version__}"
          f" | copy {copy:.2f} TB/s | dense FP8 {fp8:.0f} TFLOP/s", flush=True)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    gen_dev = torch.Generator(device=dev).manual_seed(1234)
    rows = []
    for model in args.models:
        experts, k, h, i = MODELS[model]
        layer = make_layer(gen_dev, experts, k, h, i)
        for tokens in args.tokens:
            row = one_step(rt, layer, tokens, (gen, gen_dev), args,
                           (copy, fp8))
            row["model"] = model
            rows.append(row)
            errors = {m: row[m + "_error"] for m in
                      ("tailor_fp8", "tailor_bf16", "torch_fp8")
                      if m + "_error" in row}
            print(model, tokens, {m: row[m] for m in
                                  ("floor", "tailor_fp8", "tailor_bf16",
                                   "torch_fp8")},
                  row["kernels"], errors or "", flush=True)
        del layer
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "moe_fp8_experts_bench.json"), "w") as f:
        json.dump({"device": props.name, "copy_TBps": copy,
                   "fp8_TFLOPs": fp8, "rows": rows}, f, indent=1)
    print_table(rows, copy, fp8)


if __name__ == "__main__":
    sys.exit(main())
