#!/usr/bin/env python3
"""Ragged paged attention on the GPU: tailor's Hopper kernel checked against an
fp32 reference, then timed beside FlashInfer fa3 / fa2 (prefill), FlashInfer
decode (CUDA-core and tensor-core) and torch SDPA, in one process per phase on
the same tensors.

A supervisor runs each phase in a worker process and restarts it past a case
that hangs (per-case timeout) or kills the CUDA context, so one bad case never
loses the others. Results stream to $OUT/results.jsonl; the tables print last.

  python3 bench/attention_gpu/run.py --out DIR [--phases correctness,perf,decode]
      [--quick] [--checks] [--budget 520]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TIMEOUTS = {"correctness": 45, "perf": 150, "decode": 90, "sanitize": 400, "ncu": 400}
# A phase whose worker hangs or dies this many times in a row is given up:
# the kernel is broken for all its cases, and the budget is better spent on
# the next phase.
MAX_CONSECUTIVE_FAILURES = 2


# ---------------------------------------------------------------- worker side
def log(*a):
    print(*a, flush=True)


def import_flashinfer():
    try:
        import flashinfer  # noqa: F401
        return flashinfer
    except Exception as e:  # the kit is optional
        log(f"flashinfer unavailable: {type(e).__name__}: {e}")
        return None


def tailor_for(case, q_lens=None, kv_lens=None, **kw):
    from tailor_dev import TailorAttention
    t = TailorAttention(num_qo_heads=case["hq"], num_kv_heads=case["hkv"],
                        head_dim=case["d"], pack=case["pack"], page_size=case["page"],
                        causal=case["causal"], window_left=case["window"],
                        soft_cap=case["cap"], **kw)
    t.plan(q_lens or case["q_lens"], kv_lens or case["kv_lens"])
    return t


def nan_outputs(case, step, with_lse):
    import torch
    q = step["q"]
    out = torch.full((q.shape[0], case["hq"], case["d"]), float("nan"), dtype=q.dtype,
                     device=q.device)
    lse = torch.full((q.shape[0], case["hq"]), float("nan"), dtype=torch.float32,
                     device=q.device) if with_lse else None
    return out, lse


def run_tailor(case, step, with_lse=True, design=0):
    import torch
    t = tailor_for(case, design=design)
    out, lse = nan_outputs(case, step, with_lse)
    t.prepare(step["q"], step["k"], step["v"], step["table"], out, lse)
    t.run()
    torch.cuda.synchronize()
    return t, out, lse


# kernel_table.h's kDesign*: the previous design on the same data
DESIGNS = {"legacy": 1}
AB_DESIGNS = [n for n in DESIGNS if n != "legacy"]


def has_design(case, name):
    import tailor_dev
    return f"{case['dtype']} {case['d']} {case['pack']} {case['page']} {name}" in \
        tailor_dev.variants()


def decode_for(case, kv_lens):
    from tailor_dev import TailorDecode
    t = TailorDecode(num_qo_heads=case["hq"], num_kv_heads=case["hkv"], head_dim=case["d"],
                     page_size=case["page"])
    t.plan(kv_lens)
    return t


def split_route(case, step, out, lse=None):
    """One plan, two launches: sequence 0..k-1 with q_len > 1 on the prefill
    kernel, the trailing rows of q_len 1 on the decode kernel (their q / out
    rows and block-table rows are contiguous, as vLLM orders a batch)."""
    ql, kl = case["q_lens"], case["kv_lens"]
    k = len(ql)
    while k > 0 and ql[k - 1] == 1:
        k -= 1
    launches = []
    if k > 0:
        pre = tailor_for(case, ql[:k], kl[:k])
        pre.prepare(step["q"], step["k"], step["v"], step["table"], out, lse)
        launches.append(pre)
    if k < len(ql):
        first = sum(ql[:k])
        dec = decode_for(case, kl[k:])
        dec.prepare(step["q"][first:], step["k"], step["v"], step["table"][k:], out[first:],
                    lse[first:] if lse is not None else None)
        launches.append(dec)
    return launches, (lambda: [t.run() for t in launches])


def plan_summary(info):
    return (f"items={info.items} tiles={info.tiles} tail={info.tail_tiles} "
            f"masked={info.masked_tiles} split={info.split_tiles} "
            f"busy={info.busy_workers}/{info.workers} "
            f"cost max/mean={info.max_worker_cost}/{info.mean_worker_cost:.0f}")


def do_correctness(case):
    import numpy as np
    import torch
    from common import compare, make_step, reference
    gen = torch.Generator().manual_seed(zlib.crc32(case["id"].encode()))
    step = make_step(case, gen)
    launches = None
    if case.get("route") == "split":
        out, lse = nan_outputs(case, step, True)
        launches, fn = split_route(case, step, out, lse)
        fn()
        torch.cuda.synchronize()
        t = launches[0]
    else:
        t, out, lse = run_tailor(case, step)
    rng = np.random.default_rng(0)
    from common import check_seqs
    refs = reference(case, step, check_seqs(case), rng)
    res = compare(case, step, out, lse, refs)
    res["plan"] = " + ".join(plan_summary(x.info) if hasattr(x, "items_host") else x.summary()
                             for x in (launches or [t]))
    err = None
    for x in launches or [t]:  # the first error word any launch set
        e = x.errors()
        e = next((w for w in e if w), None) if isinstance(e, list) else e
        err = err or e
    res["device_error"] = err
    expect_err = case["bad_pages"] > 0
    tol = 1e-2
    res["ok"] = (res["rel_err"] < tol and res["nan_rows"] == 0 and res["lse_err"] < 5e-2
                 and (err is not None) == expect_err)
    return res


def fi_prefill(fi, ws, case, step, idx, backend):
    import torch
    qo, kv_indptr, kv_idx, last = idx
    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(qo, kv_indptr, kv_idx, last, case["hq"], case["hkv"], case["d"], case["page"],
           causal=case["causal"], q_data_type=step["q"].dtype, kv_data_type=step["q"].dtype)
    out = torch.empty_like(step["q"])
    return w, out, (lambda: w.run(step["q"], step["kv"], out=out))


def fi_decode(fi, ws, case, step, idx, tc, rows=None):
    import torch
    _, kv_indptr, kv_idx, last = idx
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
    w.plan(kv_indptr, kv_idx, last, case["hq"], case["hkv"], case["d"], case["page"],
           q_data_type=step["q"].dtype, kv_data_type=step["q"].dtype)
    q = step["q"] if rows is None else step["q"][rows]
    out = torch.empty_like(q)
    return w, out, (lambda: w.run(q, step["kv"], out=out))


def sdpa_fn(case, step):
    """torch SDPA on contiguous K/V, uniform batches only (an upper reference)."""
    import torch
    import torch.nn.functional as F
    ql, kl = case["q_lens"], case["kv_lens"]
    if len(set(ql)) != 1 or len(set(kl)) != 1 or not case["causal"]:
        return None
    B, Q, L = len(ql), ql[0], kl[0]
    hq, hkv, d = case["hq"], case["hkv"], case["d"]
    q = step["q"][:B * Q].view(B, Q, hq, d).transpose(1, 2).contiguous()
    k = torch.randn(B, hkv, L, d, dtype=q.dtype, device=q.device)
    v = torch.randn_like(k)
    if Q == L:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    from torch.nn.attention.bias import causal_lower_right
    bias = causal_lower_right(Q, L)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)


def do_timing(case, fi, timer, ctx):
    import numpy as np
    import torch
    from common import (check_seqs, compare, flops, kv_bytes,
                        make_step, reference)
    gen = torch.Generator().manual_seed(4321)
    step = make_step(case, gen)
    res = {"kind": case["kind"], "model": case.get("model"), "shape": case.get("shape")}
    t, out, lse = run_tailor(case, step, with_lse=False)
    refs = reference(case, step, check_seqs(case), np.random.default_rng(0))
    res.update(compare(case, step, out, None, refs))
    res["plan"] = plan_summary(t.info)
    timed = {"tailor_us": t.run}  # every method, timed interleaved at the end
    res["flops"] = flops(case)
    res["kv_bytes"] = kv_bytes(case)
    res["ok"] = res["rel_err"] < 1e-2 and res["nan_rows"] == 0
    for name, design in DESIGNS.items():  # the A/B designs on the same data
        if case["kind"] in ("prefill", "mixed") and has_design(case, name):
            lt, lout, _ = run_tailor(case, step, with_lse=False, design=design)
            res[f"{name}_rel_err"] = compare(case, step, lout, None, refs)["rel_err"]
            timed[f"tailor_{name}_us"] = lt.run
            res["ok"] = res["ok"] and res[f"{name}_rel_err"] < 1e-2
    if case["kind"] in ("mixed", "decode"):
        try:
            timed_split(case, step, refs, timed, res)
        except Exception as e:
            res["split_error"] = f"{type(e).__name__}: {e}"[:300]
    if case["kind"] == "mixed":  # tailor's prefill-only and decode-only parts
        chunk = tailor_for(case, case["q_lens"][:1], case["kv_lens"][:1])
        o1 = torch.empty_like(out)
        chunk.prepare(step["q"], step["k"], step["v"], step["table"], o1)
        dec = tailor_for(case, [1] * (len(case["q_lens"]) - 1), case["kv_lens"][1:])
        o2 = torch.empty_like(out)
        q2 = step["q"][case["q_lens"][0]:]
        dec.prepare(q2, step["k"], step["v"], step["table"][1:], o2[:q2.shape[0]])
        timed["tailor_prefill_part_us"] = chunk.run
        timed["tailor_decode_part_us"] = dec.run
    if fi is not None and case["d"] == 128 and case["dtype"] == "bf16":
        fi_times(case, step, fi, timed, ctx, res)
    try:
        fn = sdpa_fn(case, step) if case["kind"] == "prefill" else None
        if fn is not None:
            fn()
            timed["sdpa_us"] = fn
    except Exception as e:
        res["sdpa_error"] = f"{type(e).__name__}: {e}"[:200]
    res.update(timer.interleaved(timed))
    if os.environ.get("TAD_TIMING_CHECK") == "1":  # the protocols side by side
        res.update({f"block_{k}": timer.us(fn) for k, fn in timed.items()})
        res.update({f"again_{k}": v for k, v in timer.interleaved(timed).items()})
    if os.environ.get("TAD_TIMING_PAIRS") == "1" and "tailor_split_us" in timed:
        # The decode kernel interleaved with one other method at a time.
        dk = timed["tailor_split_us"]
        # Probes of what the other kernels disturb: a cuBLAS GEMM (large
        # shared memory, TMA, much code) and a softmax (little of each).
        a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(4096, 4096, device="cuda")
        probes = {"mm": lambda: torch.mm(a, a), "softmax": lambda: torch.softmax(x, -1)}
        try:  # and a kernel of ~100 KB of straight-line code, nothing else
            body = " ".join(f"x = x * {1 + i * 1e-7:.9f}f + {i * 1e-7:.9f}f; "
                            f"if (x > {1e30 + i:.1f}f) x = {i}.0f;" for i in range(2500))
            big = torch.cuda.jiterator._create_jit_fn(
                "template <typename T> T bigcode(T x) { " + body + " return x; }")
            y = torch.randn(132 * 2048, device="cuda")
            big(y)
            probes["bigcode"] = lambda: big(y)
        except Exception as e:
            res["bigcode_error"] = f"{type(e).__name__}: {e}"[:200]
        for other in [k for k in timed if k != "tailor_split_us"] + ["self"] + list(probes):
            fn = probes.get(other, timed.get(other, dk))
            pair = timer.interleaved({"dk": dk, "other": fn})
            res[f"pair_{other}"] = pair["dk"]
    return res


def timed_split(case, step, refs, timed, res):
    """Decode rows on the decode kernel (with the prefill rows, if any, on the
    prefill kernel): checked against the reference, then added to `timed`."""
    import torch
    from common import compare
    out, _ = nan_outputs(case, step, False)
    launches, fn = split_route(case, step, out)
    fn()
    torch.cuda.synchronize()
    res["split_rel_err"] = compare(case, step, out, None, refs)["rel_err"]
    res["split_nan_rows"] = compare(case, step, out, None, refs)["nan_rows"]
    res["split_plan"] = launches[-1].summary()
    res["split_errors"] = [e for e in launches[-1].errors() if e is not None]
    timed["tailor_split_us"] = fn
    if len(launches) == 2:
        timed["tailor_split_decode_us"] = launches[1].run


def fi_times(case, step, fi, timed, ctx, res):
    """FlashInfer's ways of running the same rows, run once and added to
    `timed`; errors recorded, not raised."""
    import torch
    from common import flashinfer_indices
    idx = flashinfer_indices(step, case)
    ws = ctx["fi_ws"]

    def attempt(key, make):
        try:
            _, o, fn = make()
            fn()
            torch.cuda.synchronize()
            timed[key] = fn
        except Exception as e:
            res[key + "_error"] = f"{type(e).__name__}: {e}"[:300]

    if case["kind"] in ("prefill", "mixed"):
        for backend in ("fa3", "fa2"):
            attempt(f"fi_{backend}_us", lambda b=backend: fi_prefill(fi, ws, case, step, idx, b))
    if case["kind"] == "decode":
        attempt("fi_decode_tc_us", lambda: fi_decode(fi, ws, case, step, idx, True))
        attempt("fi_decode_cc_us", lambda: fi_decode(fi, ws, case, step, idx, False))
    if case["kind"] == "mixed":  # prefill wrapper for the chunk + decode wrapper
        try:
            one = dict(case, q_lens=case["q_lens"][:1], kv_lens=case["kv_lens"][:1])
            sub = dict(step, npg=step["npg"][:1], q_begin=step["q_begin"][:2],
                       q=step["q"][:case["q_lens"][0]])
            _, _, pf = fi_prefill(fi, ws, one, sub, flashinfer_indices(sub, one), "fa3")
            dcase = dict(case, q_lens=case["q_lens"][1:], kv_lens=case["kv_lens"][1:])
            dstep = dict(step, npg=step["npg"][1:], table=step["table"][1:],
                         q_begin=list(range(len(case["q_lens"]))))
            rows = torch.arange(case["q_lens"][0], sum(case["q_lens"]), device="cuda")
            _, _, df = fi_decode(fi, ctx["fi_ws2"], dcase, dstep,
                                 flashinfer_indices(dstep, dcase), True, rows)
            timed["fi_split_us"] = lambda: (pf(), df())
        except Exception as e:
            res["fi_split_error"] = f"{type(e).__name__}: {e}"[:300]


def worker(args):
    import torch
    import cases as C
    from common import Timer, copy_bandwidth, gemm_rate
    import tailor_dev
    if args.checks:
        tailor_dev.load(os.path.join(HERE, "..", "..", "build-attn-dev", "lib",
                                     "libtailor_attention_dev_checks.so"))
    emit(args, {"id": f"_env_{args.worker}", "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__, "checks": tailor_dev.load().tad_pipeline_checks(),
                "variants": tailor_dev.variants()})
    phase = args.worker
    lists = {"correctness": C.correctness_cases, "perf": lambda: C.perf_cases(args.quick),
             "decode": lambda: C.decode_cases(args.quick), "sanitize": C.sanitize_cases,
             "ncu": lambda: [C.ncu_case(os.environ.get("TAILOR_NCU_SHAPE"))]}
    todo = [c for c in lists[phase]() if c["id"] not in set(args.skip or [])]
    if args.checks:
        have = set(tailor_dev.variants())
        todo = [c for c in todo if f"{c['dtype']} {c['d']} {c['pack']} {c['page']}" in have]
    ctx = {}
    timer = None
    fi = None
    if phase in ("perf", "decode"):
        fi = import_flashinfer()
        ctx["fi_ws"] = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
        ctx["fi_ws2"] = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
        timer = Timer() if phase != "ncu" else None
        emit(args, {"id": f"_rates_{phase}", "gemm_Bps": gemm_rate(),
                    "copy_Bps": copy_bandwidth()})
    for case in todo:
        emit(args, {"id": case["id"], "started": phase, "start": time.time()})
        t0 = time.time()
        try:
            if phase in ("correctness", "sanitize"):
                res = do_correctness(case)
            elif phase == "ncu" and case["kind"] == "decode":  # decode kernel, FI tc
                from common import flashinfer_indices, make_step
                step = make_step(case, torch.Generator())
                out, _ = nan_outputs(case, step, False)
                split_route(case, step, out)[1]()
                fi = import_flashinfer()
                if fi is not None:
                    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
                    fi_decode(fi, ws, case, step, flashinfer_indices(step, case), True)[2]()
                res = {"ok": True}
            elif phase == "ncu":  # one launch of each design, profiled in order
                step = __import__("common").make_step(case, torch.Generator())
                run_tailor(case, step, with_lse=False)
                for name, design in DESIGNS.items():
                    if has_design(case, name):
                        run_tailor(case, step, with_lse=False, design=design)
                fi = import_flashinfer()  # then FlashInfer's fa3, same data
                if fi is not None:
                    from common import flashinfer_indices
                    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
                    _, out, run = fi_prefill(fi, ws, case, step,
                                             flashinfer_indices(step, case), "fa3")
                    run()
                res = {"ok": True}
            else:
                res = do_timing(case, fi, timer, ctx)
            torch.cuda.synchronize()
        except Exception as e:
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:600],
                   "trace": traceback.format_exc()[-1500:]}
            emit(args, dict(res, id=case["id"], phase=phase, seconds=time.time() - t0))
            if "CUDA" in str(e) or "cuda" in str(e):
                sys.exit(3)  # the context may be gone: let the supervisor restart
            continue
        emit(args, dict(res, id=case["id"], phase=phase, seconds=time.time() - t0))
        log(f"[{phase}] {case['id']}: {short(res)}")


def short(res):
    keys = ("ok", "rel_err", "nan_rows", "lse_err", "tailor_us", "fi_fa3_us", "fi_fa2_us",
            "device_error", "error")
    return " ".join(f"{k}={_fmt(res[k])}" for k in keys if k in res)


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def emit(args, record):
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ------------------------------------------------------------ supervisor side
def read_records(out):
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def supervise(args, phase, deadline, prefix=()):
    """Runs `phase` in workers until every case has a result or time is up."""
    done, failed = set(), set()
    consecutive = 0
    while time.time() < deadline:
        if consecutive >= MAX_CONSECUTIVE_FAILURES:
            log(f"[{phase}] {consecutive} hangs / crashes in a row: phase given up")
            emit(args, {"id": f"_given_up_{phase}", "phase": phase, "ok": False,
                        "error": "phase given up after repeated hangs / crashes"})
            return
        cmd = list(prefix) + [sys.executable, os.path.abspath(__file__), "--worker", phase,
                              "--out", args.out] + (["--quick"] if args.quick else []) + \
            (["--checks"] if args.checks else [])
        skip = sorted(done | failed)
        if skip:
            cmd += ["--skip"] + skip
        logf = open(os.path.join(args.out, f"worker_{phase}.log"), "a")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        current, started, done_before, failure = None, time.time(), len(done), False
        while proc.poll() is None:
            time.sleep(0.5)
            for r in read_records(args.out):
                if r.get("started") == phase:
                    current, started = r["id"], r["start"]
                elif r.get("phase") == phase:
                    done.add(r["id"])
            limit = TIMEOUTS[phase]
            if current and current not in done and time.time() - started > limit:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                emit(args, {"id": current, "phase": phase, "ok": False,
                            "error": f"timeout after {limit}s (hang?)"})
                failed.add(current)
                failure = True
                log(f"[{phase}] {current}: TIMEOUT, worker killed")
            elif time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                log(f"[{phase}] budget exhausted")
                return
        for r in read_records(args.out):
            if r.get("phase") == phase:
                done.add(r["id"])
        if proc.returncode == 0 and not failure:
            return
        if current and current not in done and current not in failed:
            emit(args, {"id": current, "phase": phase, "ok": False,
                        "error": f"worker died (rc {proc.returncode}); see worker_{phase}.log"})
            failed.add(current)
            done.add(current)
        progress = len(done) - done_before > 1
        consecutive = 1 if progress else consecutive + 1
        log(f"[{phase}] worker exited rc={proc.returncode}; restarting past {current}")


def tables(args):
    recs = read_records(args.out)
    rates = {r["id"]: r for r in recs if r.get("id", "").startswith("_rates")}
    res = {}
    for r in recs:
        if "phase" in r:
            res[(r["phase"], r["id"])] = r
    lines = []
    corr = [r for (p, _), r in res.items() if p in ("correctness", "sanitize")]
    if corr:
        bad = [r for r in corr if not r.get("ok")]
        lines.append(f"## correctness: {len(corr) - len(bad)} passed, {len(bad)} failed")
        for r in corr:
            lines.append(f"{'ok  ' if r.get('ok') else 'FAIL'} {r['id']:<28} "
                         f"err={_fmt(r.get('rel_err', float('nan')))} "
                         f"lse={_fmt(r.get('lse_err', float('nan')))} "
                         f"nan_rows={r.get('nan_rows')} dev_err={r.get('device_error')} "
                         f"{r.get('error', '')[:160]}")
    for phase in ("perf", "decode"):
        rows = [r for (p, _), r in res.items() if p == phase]
        if not rows:
            continue
        rate = rates.get(f"_rates_{phase}", {})
        gemm, bw = rate.get("gemm_Bps", float("nan")), rate.get("copy_Bps", float("nan"))
        lines.append(f"## {phase}: dense bf16 GEMM {gemm / 1e12:.0f} TFLOP/s, copy "
                     f"{bw / 1e12:.2f} TB/s (same run); times in us, median, L2 flushed")
        if phase == "perf":
            lines.append("case | tailor | TF/s | xGEMM | legacy | legacy/tailor | "
                         + "".join(f"{n}/tailor | " for n in AB_DESIGNS)
                         + "fa3 | fa2 | FI best/tailor | sdpa | err | plan")
        else:
            lines.append("case | prefill kernel | decode kernel | x floor (dk) | FI tc | "
                         "FI cc | FI best/dk | err pk / dk | dk plan")
        for r in rows:
            lines.append(perf_line(r, phase, gemm, bw))
    text = "\n".join(lines)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(text + "\n")
    return text


def perf_line(r, phase, gemm, bw):
    g = lambda k: r.get(k)
    f = lambda v: "-" if v is None else f"{v:.1f}"
    if "tailor_us" not in r:
        return f"{r['id']} | FAILED {r.get('error', '')[:200]}"
    t = r["tailor_us"]
    if phase == "perf":
        tf = r["flops"] / (t * 1e-6) / 1e12
        fis = [v for v in (g("fi_fa3_us"), g("fi_fa2_us"), g("fi_split_us")) if v]
        best = min(fis) / t if fis else None
        legacy = g("tailor_legacy_us")
        ab = "".join(("-" if not g(f"tailor_{n}_us") else f"{g(f'tailor_{n}_us') / t:.2f}")
                     + " | " for n in AB_DESIGNS)
        extra = ""
        if g("tailor_prefill_part_us"):
            split = g("tailor_split_us")
            extra = (f" | parts {g('tailor_prefill_part_us'):.1f}+"
                     f"{g('tailor_decode_part_us'):.1f} fi_split {f(g('fi_split_us'))}"
                     f" | SPLIT (prefill kernel + decode kernel) {f(split)} us "
                     f"(decode kernel {f(g('tailor_split_decode_us'))}) "
                     f"err {g('split_rel_err') or float('nan'):.1e}"
                     f" FI best/split {min(fis) / split if fis and split else float('nan'):.2f}"
                     f" {g('split_plan') or g('split_error') or ''}")
        return (f"{r['id']} | {t:.1f} | {tf:.0f} | {tf * 1e12 / gemm:.2f} | {f(legacy)} | "
                f"{'-' if not legacy else f'{legacy / t:.2f}'} | {ab}"
                f"{f(g('fi_fa3_us'))} | {f(g('fi_fa2_us'))} | "
                f"{'-' if best is None else f'{best:.2f}'} | {f(g('sdpa_us'))} | "
                f"{r['rel_err']:.1e}{'' if r.get('ok') else ' BAD'} | {r['plan']}{extra}")
    floor = r["kv_bytes"] / bw * 1e6
    dk = g("tailor_split_us")
    fis = [v for v in (g("fi_decode_tc_us"), g("fi_decode_cc_us")) if v]
    best = min(fis) / dk if fis and dk else None
    return (f"{r['id']} | {t:.1f} | {f(dk)} | {floor / dk if dk else float('nan'):.2f} | "
            f"{f(g('fi_decode_tc_us'))} | {f(g('fi_decode_cc_us'))} | "
            f"{'-' if best is None else f'{best:.2f}'} | "
            f"{r['rel_err']:.1e} / {g('split_rel_err') or float('nan'):.1e}"
            f"{'' if r.get('ok') and (g('split_rel_err') or 0) < 1e-2 else ' BAD'} | "
            f"{g('split_plan') or g('split_error') or ''}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "attention_out"))
    ap.add_argument("--phases", default="correctness,perf,decode")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--checks", action="store_true",
                    help="the library built with the pipeline protocol checks")
    ap.add_argument("--budget", type=float, default=520, help="seconds for all phases")
    ap.add_argument("--tables-only", action="store_true", help="print the tables of --out")
    ap.add_argument("--worker")
    ap.add_argument("--skip", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.tables_only:
        print(tables(args))
        return
    if args.worker:
        worker(args)
        return
    deadline = time.time() + args.budget
    for phase in args.phases.split(","):
        t = time.time()
        supervise(args, phase, deadline)
        log(f"== phase {phase} took {time.time() - t:.0f}s")
        print(tables(args), flush=True)
    print("\n==== summary ====")
    print(tables(args))


if __name__ == "__main__":
    main()
