"""bench/fp8/moe_fp8_step_bench.py — the whole block-FP8 MoE step (route,
quantizing pack, both GEMMs, combine) at DeepSeek-V3 tensor-parallel-8
decode sizes: tailor's public torch op against vLLM's algorithm in Triton,
in one GPU process on the same data.

Shape: E 256, top-8, H 7168, I 256 per rank: w1 [E, 512, 7168] and w2
[E, 7168, 256] e4m3 with 128 x 128 f32 block scales; T in {1, 16, 64, 256,
1024}; Zipf(1.0) routing with k distinct experts per token, f32 routing
weights and int32 ids as vLLM passes them.

  tailor  torch.ops.tailor.fused_experts(..., use_fp8_w8a8=True, w1_scale,
          w2_scale, block_shape=[128, 128]) (its workspace reserved first)
  triton  fp8_step_anchor.VllmStyleStep: moe_align_block_size, the 1 x 128
          activation quantization, vLLM's fused_moe_kernel twice, silu_and_mul
          with its quantization, the top-k sum; every config of
          fp8_step_anchor.STEP_CONFIGS is checked and timed, the best kept

Correctness before timing, per T: each output against fp64 steps on the
dequantized weights with the activations quantized by the reference rule
(fp8_lib's) at both points, rel = ||out - ref|| / ||ref||: ref_f32 quantizes
the SiLU-and-mul output from f32 (a fused epilogue, tailor), ref_bf16 from
gate/up and SiLU-and-mul rounded to bf16 (vLLM stores both): one bf16
rounding moves ~10% of the e4m3 roundings, ~2e-2 of rel, so each method is
judged by the reference of its own rounding, the nearer of the two. rel >=
--max-rel (1e-2) or any non-finite output: WRONG, not timed. The anchor's
quantization of hidden is compared byte for byte with the reference (q
bytes and scales that differ are counted). A graph of one step is
captured, its output poisoned, replayed once and judged again. Timing:
CUDA events around each replay after a 256 MiB write, median of --iters;
eager: the same around one call.

  PYTHONPATH=python:bench/fp8 TAILOR_LIBRARY=.../libtailor_c.so.3 \\
    python3 bench/fp8/moe_fp8_step_bench.py [--quick] [--json PATH]
(scripts/gpu-moe-fp8-step on the GPU machine). --quick: T in {1, 17, 64},
correctness and one replay, no timing. Prints a table last.
"""
import argparse
import json
import math
import sys

import torch

E4M3 = torch.float8_e4m3fn
GROUP = 128
SHAPE = {"experts": 256, "topk": 8, "hidden": 7168, "inter": 256}
TOKENS = [1, 16, 64, 256, 1024]
QUICK_TOKENS = [1, 17, 64]


# ---- data and reference (device-agnostic: the CPU self-test uses them) -----------
def zipf_routing(gen, tokens, experts, k):
    p = torch.tensor([1.0 / (i + 1) for i in range(experts)])
    p = p[torch.randperm(experts, generator=gen)]
    return torch.multinomial(p.expand(tokens, experts), k, replacement=False,
                             generator=gen)


def quantize_rows(x):
    """Reference 1 x 128 quantization, vLLM's layout: (q e4m3 [R, K],
    scales f32 [R, K / 128])."""
    from fp8_lib import quantize_groups
    q, s = quantize_groups(x)
    return q, s[:, :x.shape[0]].t().contiguous()


def dequant_rows(q, s):
    return q.double() * s.double().repeat_interleave(GROUP, dim=1)


def dequant_weight(w, s):
    return w.double() * s.double().repeat_interleave(GROUP, 0).repeat_interleave(
        GROUP, 1)


def reference_step(hidden, w1, w1_scale, w2, w2_scale, topk_weights, topk_ids,
                   bf16_intermediates=False):
    """fp64 out [T, H]: per (token, slot), weight x down(q(silu(gate) * up))
    of q(hidden), q the reference 1 x 128 quantize-dequantize, on the
    dequantized weights, one expert at a time. bf16_intermediates: gate/up
    and silu(gate) * up rounded to bf16 first, as vLLM's step stores them
    (else f32, as a fused epilogue quantizes them)."""
    tokens, k = topk_ids.shape
    inter = w2.shape[2]
    x = dequant_rows(*quantize_rows(hidden))
    flat = topk_ids.reshape(-1).long()
    w_flat = topk_weights.reshape(-1).double()
    out = torch.zeros(tokens, hidden.shape[1], dtype=torch.float64,
                      device=hidden.device)
    for e in torch.unique(flat).tolist():
        sel = (flat == e).nonzero().flatten()
        tok = sel // k
        gu = x[tok] @ dequant_weight(w1[e], w1_scale[e]).t()
        if bf16_intermediates:
            gu = gu.to(torch.bfloat16).double()
        act = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
        act = act.to(torch.bfloat16 if bf16_intermediates else torch.float32)
        act = dequant_rows(*quantize_rows(act))
        y = act @ dequant_weight(w2[e], w2_scale[e]).t()
        out.index_add_(0, tok, y * w_flat[sel].unsqueeze(1))
    return out


def rel_err(out, ref):
    """(||out - ref|| / ||ref|| over out's finite elements, non-finite count)."""
    out = out.double()
    finite = torch.isfinite(out)
    diff = torch.where(finite, out - ref, torch.zeros_like(ref))
    return (float(diff.norm() / ref.norm().clamp(min=1e-30)),
            int(finite.numel() - finite.sum()))


def quant_mismatch(step, hidden):
    """(q bytes, scales) of the anchor's hidden quantization that differ
    from the reference (run after a step)."""
    q, s = quantize_rows(hidden)
    q_bad = int((step.a_q.view(torch.uint8) != q.view(torch.uint8)).sum())
    return q_bad, int((step.a_s != s).sum())


def make_problem(tokens, shape, gen, gen_dev, dev):
    """(hidden bf16 [T, H], topk_weights f32 [T, k], topk_ids int32 [T, k])."""
    ids = zipf_routing(gen, tokens, shape["experts"], shape["topk"])
    hidden = torch.randn(tokens, shape["hidden"], generator=gen_dev,
                         device=dev).to(torch.bfloat16)
    weights = torch.rand(tokens, shape["topk"], generator=gen_dev, device=dev)
    return hidden, weights, ids.to(dev, torch.int32)


# ---- the two methods -------------------------------------------------------------
def tailor_step(layer, hidden, weights, ids):
    """A callable running tailor's public op; it returns the op's output."""
    def run():
        return torch.ops.tailor.fused_experts(
            hidden, layer["w1"], layer["w2"], weights, ids, False, "silu", -1,
            None, True, layer["w1_scale"], layer["w2_scale"], None, None,
            [GROUP, GROUP])
    return run


def triton_step(layer, hidden, weights, ids, config):
    from fp8_step_anchor import VllmStyleStep
    out = torch.full_like(hidden, float("nan"))
    step = VllmStyleStep(hidden, layer["w1"], layer["w1_scale"], layer["w2"],
                         layer["w2_scale"], weights, ids, out, config)

    def run():
        step()
        return out
    return run, step


# ---- timing ----------------------------------------------------------------------
_flush = None


def median_ms(fn, iters, warm=3):
    """Median ms of fn() by CUDA events, each call after a 256 MiB write."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        _flush.zero_()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def capture(fn):
    """(replay, the output tensor the replays write): fn captured once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn()
    torch.cuda.synchronize()
    return graph.replay, out


def judge(out, refs, row, name):
    """rel to each reference (refs: rounding -> fp64 out) and the best of
    them, which the gate judges; returns (best rel, non-finite count)."""
    errs = {}
    for rounding, ref in refs.items():
        errs[rounding], bad = rel_err(out, ref)
        row[f"{name}_rel_{rounding}"] = errs[rounding]
    row[f"{name}_rel"], row[f"{name}_nonfinite"] = min(errs.values()), bad
    return min(errs.values()), bad


def check_and_time(name, fn, refs, args, row):
    """Checks fn's eager output against refs, then (unless WRONG or --quick
    skips timing) times eager and graph replays; fills row[name + ...]."""
    try:
        eager_out = fn().clone()
        torch.cuda.synchronize()
        err, bad = judge(eager_out, refs, row, name)
        if bad or not err < args.max_rel:
            row[f"{name}_status"] = "WRONG"
            return
        replay, graph_out = capture(fn)
        graph_out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        # Judged again, not compared bit for bit: a split-K reduction may
        # add in another order.
        row[f"{name}_replay_equal"] = torch.equal(graph_out, eager_out)
        err, bad = judge(graph_out, refs, {}, name)
        row[f"{name}_replay_rel"] = err
        ok = not bad and err < args.max_rel
        row[f"{name}_status"] = "ok" if ok else "REPLAY_WRONG"
        if not ok or args.quick:
            return
        row[f"{name}_graph_us"] = 1e3 * median_ms(replay, args.iters)
        row[f"{name}_eager_us"] = 1e3 * median_ms(fn, max(5, args.iters // 4))
    except Exception as e:  # one method's failure is one cell
        row[f"{name}_status"] = f"ERROR {type(e).__name__}: {e}"[:300]
        torch.cuda.synchronize()


def one_tokens(layer, tokens, gens, args):
    hidden, weights, ids = make_problem(tokens, SHAPE, *gens,
                                        layer["w1"].device)
    refs = {rounding: reference_step(
        hidden, layer["w1"], layer["w1_scale"], layer["w2"], layer["w2_scale"],
        weights, ids, bf16_intermediates=rounding == "bf16")
        for rounding in ("f32", "bf16")}
    counts = torch.bincount(ids.flatten().long(), minlength=SHAPE["experts"])
    row = {"tokens": tokens, "rows": tokens * SHAPE["topk"],
           "active": int(counts.gt(0).sum())}
    check_and_time("tailor", tailor_step(layer, hidden, weights, ids), refs,
                   args, row)
    for cname in args.configs:
        from fp8_step_anchor import STEP_CONFIGS
        try:
            run, step = triton_step(layer, hidden, weights, ids,
                                    STEP_CONFIGS[cname])
        except Exception as e:
            row[f"triton_{cname}_status"] = f"ERROR {type(e).__name__}: {e}"
            continue
        check_and_time(f"triton_{cname}", run, refs, args, row)
        if f"triton_{cname}_rel" in row:
            row[f"triton_{cname}_quant_mismatch"] = quant_mismatch(step, hidden)
        del step
    timed = {c: row[f"triton_{c}_graph_us"] for c in args.configs
             if f"triton_{c}_graph_us" in row}
    if timed:
        best = min(timed, key=timed.get)
        row["triton_best"] = best
        row["triton_graph_us"] = timed[best]
        row["triton_eager_us"] = row[f"triton_{best}_eager_us"]
    return row


def make_layer(shape, seed):
    from fp8_lib import make_weights
    e, h, i = shape["experts"], shape["hidden"], shape["inter"]
    w1, w1_scale = make_weights(e, 2 * i, h, seed)
    w2, w2_scale = make_weights(e, h, i, seed + 1)
    return {"w1": w1, "w1_scale": w1_scale, "w2": w2, "w2_scale": w2_scale}


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def print_table(rows, configs):
    print(f"\n== FP8 MoE whole step, DeepSeek-V3 TP8 (E {SHAPE['experts']} k "
          f"{SHAPE['topk']} H {SHAPE['hidden']} I {SHAPE['inter']}), block "
          f"mode, CUDA graph replay, median us ==")
    print(f"{'T':>5} {'rows':>5} {'act':>4} {'tailor_us':>9} {'triton_us':>9} "
          f"{'ratio':>6} {'best_config':>16} {'tl_eager':>8} {'tr_eager':>8} "
          f"{'rel_tailor':>10} {'rel_triton':>10} {'status'}")
    ratios = []
    for r in rows:
        t_us, tr_us = r.get("tailor_graph_us"), r.get("triton_graph_us")
        ratio = tr_us / t_us if t_us and tr_us else None
        if ratio:
            ratios.append(ratio)
        best = r.get("triton_best", configs[0])
        statuses = {k[:-7]: v for k, v in r.items()
                    if k.endswith("_status") and v != "ok"}
        print(f"{r['tokens']:>5} {r['rows']:>5} {r['active']:>4} "
              f"{fmt(t_us, '9.1f')} {fmt(tr_us, '9.1f')} {fmt(ratio, '6.2f')} "
              f"{best:>16} {fmt(r.get('tailor_eager_us'), '8.1f')} "
              f"{fmt(r.get('triton_eager_us'), '8.1f')} "
              f"{fmt(r.get('tailor_rel'), '10.2e')} "
              f"{fmt(r.get(f'triton_{best}_rel'), '10.2e')} "
              f"{statuses or 'ok'}")
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"summary triton/tailor geomean {geo:.2f}, min {min(ratios):.2f} "
              f"({len(ratios)} T; target >= 2)")


def main():
    from fp8_step_anchor import STEP_CONFIGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", nargs="+", type=int)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--configs", nargs="+", default=list(STEP_CONFIGS),
                        choices=list(STEP_CONFIGS))
    parser.add_argument("--max-rel", type=float, default=1e-2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_fp8_step_bench: needs a CUDA device (torch sees none); "
                 "without a GPU run bench/fp8/fp8_step_selftest.py")
    import tailor.torch_ops
    tokens = args.tokens or (QUICK_TOKENS if args.quick else TOKENS)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", torch.cuda.current_device())
    tailor.torch_ops.reserve(device, max_tokens=max(tokens),
                             topk=SHAPE["topk"], num_experts=SHAPE["experts"],
                             hidden=SHAPE["hidden"], intermediate=SHAPE["inter"])
    layer = make_layer(SHAPE, 1234)
    gens = (torch.Generator().manual_seed(7),
            torch.Generator(device="cuda").manual_seed(7))
    props = torch.cuda.get_device_properties(0)
    import triton
    print(f"device {props.name} | torch {torch.__version__} | triton "
          f"{triton.__version__} | configs {args.configs}", flush=True)
    rows = []
    for t in tokens:
        row = one_tokens(layer, t, gens, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "shape": SHAPE,
                       "configs": {c: STEP_CONFIGS[c] for c in args.configs},
                       "rows": rows}, f, indent=1)
    print_table(rows, args.configs)
    wrong = [k for r in rows for k, v in r.items()
             if k.endswith("_status") and v != "ok"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
