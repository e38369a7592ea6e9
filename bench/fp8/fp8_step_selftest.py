"""bench/fp8/fp8_step_selftest.py — the whole-step bench checked without a
GPU: fp8_step_anchor's Triton kernels run in Triton's interpreter on the CPU
(TRITON_INTERPRET=1) at a small shape, against plain-Python references:

  compile    every kernel compiled ahead of time for sm_90 (the
             interpreter does not run Triton's compiler)
  scales     the Triton 1 x 128 quantization's scales, bit for bit
  align      sorted ids (each expert's flat ids in token order, padded with
             the sentinel), block experts, padded total, the tail beyond it
  step       VllmStyleStep with f32 intermediates against the bench's
             fp64 reference of that rounding (to 1e-5); the bench's gate
             rejects a step whose routing is wrong (ids shifted)
  bf16       the same step rounding gate/up and SiLU-and-mul to bf16 (as
             vLLM's does) within the gate of the bf16 reference, not of f32
  reference  reference_step against a per-(token, slot) loop
  flow       the bench's per-T checks, replay, timing and table, with
             graph replay and CUDA events replaced by plain calls
  tailor     with $TAILOR_LIBRARY (a CPU build of libtailor_c.so.3):
             torch.ops.tailor.fused_experts on the CPU within the gate

The interpreter's f32 -> e4m3 and f32 -> bf16 conversions do not round to
nearest even like the GPU's (cvt.rn), so here the step keeps f32
intermediates and its two quantization kernels are replaced by the reference
quantizer (F32Step); on the GPU the bench checks the bf16 step against the
bf16-rounding reference and the anchor's quantization byte for byte.

  TRITON_INTERPRET=1 FP8_FAKE=1 PYTHONPATH=python:bench/fp8 \\
    python3 bench/fp8/fp8_step_selftest.py
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("FP8_FAKE", "1")

import torch  # noqa: E402

import fp8_step_anchor as anchor  # noqa: E402
import moe_fp8_step_bench as bench  # noqa: E402

SHAPE = {"experts": 8, "topk": 3, "hidden": 256, "inter": 128}
GATE = 1e-2  # the bench's --max-rel
F32_GATE = 1e-5  # f32 accumulation order only (F32Step)
problems = []


def expect(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        problems.append(what)


class F32Step(anchor.VllmStyleStep):
    """The step with f32 intermediates (gate/up, down, out: the GEMM kernel
    stores its C's dtype) and the reference quantizer in place of the two
    Triton quantization kernels: the interpreter's f32 -> e4m3 and f32 ->
    bf16 conversions do not round to nearest even as the GPU's do, so here
    the step must match the f32-rounding reference almost exactly."""

    def __init__(self, *args):
        super().__init__(*args)
        self.gu = self.gu.float()
        self.down = self.down.float()

    def quantize_hidden(self):
        q, s = bench.quantize_rows(self.hidden)
        self.a_q.copy_(q)
        self.a_s.copy_(s)

    def silu_mul_quantize(self):
        inter = self.gu.shape[1] // 2
        act = (torch.nn.functional.silu(self.gu[:, :inter]) *
               self.gu[:, inter:])
        q, s = bench.quantize_rows(act)
        self.act_q.copy_(q)
        self.act_s.copy_(s)


class Bf16Step(F32Step):
    """F32Step rounding gate/up and SiLU-and-mul to bf16 with torch's
    round-to-nearest-even casts, as vLLM's step does on the GPU."""

    def silu_mul_quantize(self):
        inter = self.gu.shape[1] // 2
        g = self.gu.bfloat16().float()
        act = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
        q, s = bench.quantize_rows(act.bfloat16())
        self.act_q.copy_(q)
        self.act_s.copy_(s)


def align_reference(ids, experts, bm, max_padded):
    flat = ids.reshape(-1).tolist()
    numel = len(flat)
    sorted_ids, blocks = [], []
    for e in range(experts):
        mine = [i for i, v in enumerate(flat) if v == e]
        padded = -(-len(mine) // bm) * bm
        sorted_ids += mine + [numel] * (padded - len(mine))
        blocks += [e] * (padded // bm)
    total = len(sorted_ids)
    sorted_ids += [numel] * (max_padded - total)
    blocks += [-1] * (max_padded // bm - len(blocks))
    return sorted_ids, blocks, total


def check_align(layer, problem, cname):
    hidden, weights, ids = problem
    out = torch.empty_like(hidden)
    step = anchor.VllmStyleStep(hidden, layer["w1"], layer["w1_scale"],
                                layer["w2"], layer["w2_scale"], weights, ids,
                                out, anchor.STEP_CONFIGS[cname])
    step.sorted_ids.fill_(-7)
    step.block_expert.fill_(-7)
    step.align()
    want = align_reference(ids, SHAPE["experts"], step.bm, step.max_padded)
    got = (step.sorted_ids.tolist(), step.block_expert.tolist(),
           int(step.num_post))
    expect(got == want, f"align T={hidden.shape[0]} {cname}: total {got[2]} "
           f"(want {want[2]}), {step.max_padded} slots")


def references(layer, problem):
    hidden, weights, ids = problem
    return {r: bench.reference_step(
        hidden, layer["w1"], layer["w1_scale"], layer["w2"],
        layer["w2_scale"], weights, ids, bf16_intermediates=r == "bf16")
        for r in ("f32", "bf16")}


def check_step(layer, problem, cname, shift=0):
    hidden, weights, ids = problem
    ref = references(layer, problem)["f32"]
    out = torch.full(hidden.shape, float("nan"))
    routed = (ids + shift) % SHAPE["experts"]
    F32Step(hidden, layer["w1"], layer["w1_scale"], layer["w2"],
            layer["w2_scale"], weights, routed, out,
            anchor.STEP_CONFIGS[cname])()
    err, bad = bench.rel_err(out, ref)
    passes = bad == 0 and err < (GATE if shift else F32_GATE)
    what = f"step T={hidden.shape[0]} {cname}: rel {err:.2e}, nonfinite {bad}"
    if shift:
        expect(not passes, what + " with ids shifted: the gate rejects it")
    else:
        expect(passes, what)


def check_bf16_rounding(layer, problem):
    """The bench's gate on vLLM's rounding: Bf16Step passes against
    ref_bf16 and would not against ref_f32."""
    hidden, weights, ids = problem
    out = torch.full(hidden.shape, float("nan"))
    Bf16Step(hidden, layer["w1"], layer["w1_scale"], layer["w2"],
             layer["w2_scale"], weights, ids, out,
             anchor.STEP_CONFIGS["m16n128"])()
    row = {}
    err, bad = bench.judge(out.bfloat16(), references(layer, problem), row, "x")
    expect(bad == 0 and err < GATE <= row["x_rel_f32"],
           f"bf16 step T={hidden.shape[0]}: rel {row['x_rel_bf16']:.2e} to "
           f"ref_bf16, {row['x_rel_f32']:.2e} to ref_f32")


def check_hidden_scales(layer, problem):
    """The Triton quantization of hidden: its scales bit for bit (its e4m3
    bytes only on the GPU, see the banner)."""
    hidden, weights, ids = problem
    step = anchor.VllmStyleStep(hidden, layer["w1"], layer["w1_scale"],
                                layer["w2"], layer["w2_scale"], weights, ids,
                                torch.empty_like(hidden),
                                anchor.STEP_CONFIGS["m16n128"])
    step.quantize_hidden()
    _, want = bench.quantize_rows(hidden)
    expect(torch.equal(step.a_s, want),
           f"hidden scales T={hidden.shape[0]}: bit-exact to the reference")


def check_reference(layer, problem):
    """reference_step against one (token, slot) at a time."""
    hidden, weights, ids = problem
    got = bench.reference_step(hidden, layer["w1"], layer["w1_scale"],
                               layer["w2"], layer["w2_scale"], weights, ids)
    inter = SHAPE["inter"]
    x = bench.dequant_rows(*bench.quantize_rows(hidden))
    want = torch.zeros_like(got)
    for t in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gu = bench.dequant_weight(layer["w1"][e], layer["w1_scale"][e]) @ x[t]
            act = torch.nn.functional.silu(gu[:inter]) * gu[inter:]
            act = bench.dequant_rows(*bench.quantize_rows(act.float()[None]))[0]
            want[t] += weights[t, j].double() * (bench.dequant_weight(
                layer["w2"][e], layer["w2_scale"][e]) @ act)
    err = float((got - want).norm() / want.norm())
    expect(err < 1e-12, f"reference T={ids.shape[0]}: rel {err:.1e} to the loop")


def check_tailor(layer, problem):
    import tailor.torch_ops  # noqa: F401  (registers the ops)
    hidden, weights, ids = problem
    out = bench.tailor_step(layer, hidden, weights, ids)()
    row = {}
    err, bad = bench.judge(out, references(layer, problem), row, "x")
    expect(bad == 0 and err < GATE,
           f"tailor (CPU) T={hidden.shape[0]}: rel {row['x_rel_f32']:.2e} "
           f"(to ref_bf16 {row['x_rel_bf16']:.2e}), nonfinite {bad}")


def check_bench_flow(layer, tokens):
    """moe_fp8_step_bench's per-T flow (gate, poisoned replay, timing, row,
    table) on the CPU: a graph replay is a call copying into the captured
    output, timing is a call, the anchor is Bf16Step."""
    import argparse
    import json

    def capture(fn):
        out = fn()
        return (lambda: out.copy_(fn())), out

    def triton_step(layer, hidden, weights, ids, config):
        out = torch.full(hidden.shape, float("nan"))
        step = Bf16Step(hidden, layer["w1"], layer["w1_scale"], layer["w2"],
                        layer["w2_scale"], weights, ids, out, config)
        return (lambda: (step(), out)[1]), step

    saved = (bench.capture, bench.median_ms, bench.triton_step, bench.SHAPE,
             torch.cuda.synchronize)
    bench.capture, bench.triton_step, bench.SHAPE = capture, triton_step, SHAPE
    bench.median_ms = lambda fn, iters: (fn(), 1e-3)[1]
    torch.cuda.synchronize = lambda: None
    args = argparse.Namespace(quick=False, iters=1, max_rel=GATE,
                              configs=["m16n128", "m32n128"])
    gens = (torch.Generator().manual_seed(5), torch.Generator().manual_seed(6))
    try:
        if os.environ.get("TAILOR_LIBRARY"):
            import tailor.torch_ops  # noqa: F401  (registers the ops)
        row = bench.one_tokens(layer, tokens, gens, args)
        bench.print_table([row], args.configs)
        json.dumps(row)
    finally:
        (bench.capture, bench.median_ms, bench.triton_step, bench.SHAPE,
         torch.cuda.synchronize) = saved
    want = {"triton_m16n128_status": "ok", "triton_m32n128_status": "ok",
            "triton_graph_us": 1.0, "triton_m16n128_quant_mismatch": (0, 0)}
    if os.environ.get("TAILOR_LIBRARY"):
        want.update(tailor_status="ok", tailor_graph_us=1.0)
    got = {k: row.get(k) for k in want}
    expect(got == want, f"bench flow T={tokens}: {got}")


def compile_sm90(jit_fn, types, constants, warps=4, stages=3):
    """jit_fn compiled ahead of time for sm_90 (Triton's ptxas, no device)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = jit_fn.arg_names
    signature = {n: "constexpr" if n in constants else types[n] for n in names}
    constexprs = {(names.index(n),): v for n, v in constants.items()}
    return triton.compile(ASTSource(jit_fn, signature, constexprs),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": stages})


def check_compiles():
    """Every kernel of the step, as the bench launches it, compiles for
    sm_90, in a process without the interpreter (under it @triton.jit
    gives functions Triton's compiler does not take)."""
    import subprocess
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, __file__, "--compile-only"],
                          env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines() or ["no output"]
    expect(done.returncode == 0, lines[-1][:400])
    if done.returncode:
        print(done.stderr[-2000:])


def compile_all():
    ptrs = dict.fromkeys(("ids_ptr", "sorted_ptr", "block_expert_ptr",
                          "num_post_ptr"), "*i32")
    ints = dict.fromkeys(("numel", "num_experts", "max_padded", "K", "inter",
                          "num_valid", "num_pid_m", "N"), "i32")
    quant = dict(x_ptr="*bf16", gu_ptr="*bf16", q_ptr="*fp8e4nv",
                 s_ptr="*fp32")
    gemm = dict(a_ptr="*fp8e4nv", a_scale_ptr="*fp32", w_ptr="*fp8e4nv",
                w_scale_ptr="*fp32", c_ptr="*bf16", topk_w_ptr="*fp32")
    types = {**ptrs, **ints, **quant, **gemm}
    try:
        compile_sm90(anchor._moe_align, types,
                     dict(BM=16, BINS=512, CHUNK=256))
        compile_sm90(anchor._group_quant_fp8, types, dict(G=anchor.GROUP))
        compile_sm90(anchor._silu_mul_quant_fp8, types, dict(G=anchor.GROUP))
        for bm, bn, group_m, warps, stages in anchor.STEP_CONFIGS.values():
            for top_k in (8, 1):
                compile_sm90(anchor._fused_moe_fp8, types, dict(
                    TOP_K=top_k, MUL_WEIGHT=top_k == 1, BM=bm, BN=bn,
                    BK=anchor.GROUP, GROUP_M=group_m), warps, stages)
    except Exception as e:
        print(f"sm_90 compile: {type(e).__name__}: {e}".replace("\n", " "))
        return 1
    print("sm_90 compile: align, both quantizations, the GEMM in every config")
    return 0


def main():
    check_compiles()
    layer = bench.make_layer(SHAPE, 99)
    gen, gen_dev = torch.Generator().manual_seed(3), torch.Generator().manual_seed(4)
    bench.SHAPE = SHAPE  # make_problem takes it explicitly; this is for clarity
    for tokens in (1, 5, 17):
        problem = bench.make_problem(tokens, SHAPE, gen, gen_dev, "cpu")
        for cname in anchor.STEP_CONFIGS:
            check_align(layer, problem, cname)
        for cname in anchor.STEP_CONFIGS:
            check_step(layer, problem, cname)
        check_hidden_scales(layer, problem)
        if tokens == 5:
            check_step(layer, problem, "m16n128", shift=1)
            check_bf16_rounding(layer, problem)
            check_reference(layer, problem)
        if os.environ.get("TAILOR_LIBRARY"):
            check_tailor(layer, problem)
    check_bench_flow(layer, 9)
    print(f"selftest: {len(problems)} problem(s)" if problems
          else "selftest: ALL PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(compile_all() if sys.argv[1:] == ["--compile-only"] else main())
