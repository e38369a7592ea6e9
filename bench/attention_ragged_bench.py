"""Ragged paged attention through tailor's public torch op against
FlashInfer's paged prefill (fa3, fa2) and decode wrappers, in one process on
the same data (one K/V cache tensor, one page table), on the GPU machine.

Per case: tailor's plan_ragged_attention (host, untimed) then
torch.ops.tailor.ragged_attention timed; FlashInfer's wrappers planned once
and their run() timed; for a mixed step also FlashInfer's split (the prefill
wrapper over the prefill sequences plus the decode wrapper over the decode
rows, timed together). Each rep flushes L2 (a 256 MiB write), lets the host
queue the kernel behind a short device sleep, and times the run alone
between CUDA events; the median of --reps after --warmup. Floors measured
in the same process: the dense bf16 GEMM rate (torch.matmul 8192^3) and the
device copy rate (1 GiB); floor time = max(FLOPs / GEMM rate, bytes / copy
rate), FLOPs = 4 x attended (q, k) pairs x D x Hq, bytes = K and V read once
+ q and out. Agreement: tailor's output against fa3's (or fa2's), outputs
NaN-filled before the first run.

  LD_LIBRARY_PATH=build-gpu/lib TAILOR_LIBRARY=build-gpu/lib/libtailor_c.so.3 \
  PYTHONPATH=python:<flashinfer site> python3 bench/attention_ragged_bench.py

Prints one line per case and a table last; --json writes the records.
"""

import argparse
import json
import random
import statistics
import sys

import torch

PAGE = 16
MODELS = {"llama3-8b": (32, 8, 128), "qwen3-30b": (32, 4, 128)}


def cases():
    """(name, model, q_lens, kv_lens): the issue's prefill, chunked-prefill,
    ragged, mixed and decode shapes."""
    rng = random.Random(7)
    ragged = [rng.randint(64, 4096) for _ in range(32)]
    decode_kv = [rng.randint(512, 8192) for _ in range(127)]
    return [
        ("B=1 q=kv=4096", "llama3-8b", [4096], [4096]),
        ("B=1 q=kv=8192", "llama3-8b", [8192], [8192]),
        ("B=16 q=512 over 1536", "llama3-8b", [512] * 16, [2048] * 16),
        ("32 ragged q=kv", "llama3-8b", ragged, ragged),
        ("qwen3 B=8 q=kv=2048", "qwen3-30b", [2048] * 8, [2048] * 8),
        ("mixed 2048 chunk/30k + 127 decode", "llama3-8b",
         [2048] + [1] * 127, [30000] + decode_kv),
        # The mixed step's two parts alone (its target: within 1.1x of their
        # sum).
        ("mixed part: 2048 chunk/30k", "llama3-8b", [2048], [30000]),
        ("mixed part: 127 decode", "llama3-8b", [1] * 127, decode_kv),
        ("decode B=32 L=1024", "llama3-8b", [1] * 32, [1024] * 32),
        ("decode B=128 L=4096", "llama3-8b", [1] * 128, [4096] * 128),
    ]


def step(model, q_lens, kv_lens, seed=0):
    hq, hkv, d = MODELS[model]
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = [(n + PAGE - 1) // PAGE for n in kv_lens]
    total = sum(pages)
    # Sequence b's pages: order[indptr[b]:indptr[b + 1]] (so `order` is also
    # FlashInfer's kv_indices), a random permutation of the cache.
    order = torch.randperm(total, generator=g, device="cuda").to(torch.int32)
    kv = torch.randn(total, 2, PAGE, hkv, d, generator=g, device="cuda",
                     dtype=torch.bfloat16)
    table = torch.zeros(len(kv_lens), max(pages), dtype=torch.int32,
                        device="cuda")
    indptr = [0]
    for b, n in enumerate(pages):
        table[b, :n] = order[indptr[-1]:indptr[-1] + n]
        indptr.append(indptr[-1] + n)
    qo = [0]
    for n in q_lens:
        qo.append(qo[-1] + n)
    q = torch.randn(qo[-1], hq, d, generator=g, device="cuda",
                    dtype=torch.bfloat16)
    i32 = dict(dtype=torch.int32, device="cuda")
    return dict(q=q, kv=kv, table=table, order=order,
                qo=torch.tensor(qo, **i32), kv_indptr=torch.tensor(indptr, **i32),
                last=torch.tensor([(n - 1) % PAGE + 1 for n in kv_lens], **i32),
                kv_lens=torch.tensor(kv_lens, **i32), hq=hq, hkv=hkv, d=d)


def work(s, q_lens, kv_lens):
    pairs = sum(q * (kv - q) + q * (q + 1) // 2 for q, kv in zip(q_lens, kv_lens))
    flops = 4.0 * pairs * s["d"] * s["hq"]
    nbytes = (2 * sum(kv_lens) * s["hkv"] * s["d"] * 2 +
              2 * s["q"].numel() * 2)
    return flops, nbytes


class Timer:
    def __init__(self, reps, warmup, interleave=True):
        self.reps, self.warmup, self.interleave = reps, warmup, interleave
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn):
        for _ in range(self.warmup):
            fn()
        return statistics.median(self.rep(fn) for _ in range(self.reps))

    def rep(self, fn):
        """One timed rep: the L2 fill, 200 us of GPU sleep that hides the
        host's launch work, then `fn` between CUDA events; its us."""
        self.flush.fill_(1)
        torch.cuda._sleep(200_000)
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e3

    def interleaved(self, fns):
        """name -> median us of each fn, the fns timed rep by rep in a
        rotating order (rep i starts at fn i mod n), so that every method of a
        case sees the same clocks: timed in blocks, one after the other, a
        later block ran at other clocks under the power limit (the attention
        dev harness's Timer.interleaved, bench/results/attention_prefill_h200.txt
        "Timing protocol")."""
        names = list(fns)
        for _ in range(self.warmup):
            for name in names:
                fns[name]()
        times = {name: [] for name in names}
        for i in range(self.reps):
            k = i % len(names) if names else 0
            for name in names[k:] + names[:k]:
                times[name].append(self.rep(fns[name]))
        return {name: statistics.median(t) for name, t in times.items()}


def rates(timer):
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm = 2 * 8192 ** 3 / (timer(lambda: m @ m) * 1e-6)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / (timer(lambda: dst.copy_(src)) * 1e-6)
    return gemm, copy


def run_tailor(s, q_lens, kv_lens):
    import tailor.torch_ops as ops
    ops.plan_ragged_attention(
        s["qo"], s["kv_lens"], num_qo_heads=s["hq"], num_kv_heads=s["hkv"],
        head_dim=s["d"], page_size=PAGE, dtype=torch.bfloat16, causal=True)
    k, v = s["kv"][:, 0], s["kv"][:, 1]
    return lambda: torch.ops.tailor.ragged_attention(q=s["q"], k_cache=k,
                                                     v_cache=v,
                                                     block_table=s["table"])[0]


def tailor_plan():
    """The summary of this thread's ragged plan on the current device."""
    import tailor.torch_ops as ops
    device = torch.device("cuda", torch.cuda.current_device())
    return ops._local.ragged[str(device)][0].info()


def run_fi(fi, s, backend, decode):
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    out = torch.full_like(s["q"], float("nan"))
    if decode:
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
        w.plan(s["kv_indptr"], s["order"], s["last"], s["hq"], s["hkv"], s["d"],
               PAGE, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    else:
        w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
        w.plan(s["qo"], s["kv_indptr"], s["order"], s["last"], s["hq"], s["hkv"],
               s["d"], PAGE, causal=True, q_data_type=torch.bfloat16,
               kv_data_type=torch.bfloat16)
    return out, (lambda: w.run(s["q"], s["kv"], out=out))


def fi_split(fi, s, q_lens, kv_lens):
    """A mixed step as FlashInfer serves it best: the prefill wrapper (fa3)
    over the sequences with q > 1 and the decode wrapper over the q = 1
    rows, two launches as one function to time; None unless the step has
    both."""
    pre = [b for b, q in enumerate(q_lens) if q > 1]
    dec = [b for b, q in enumerate(q_lens) if q == 1]
    if not pre or not dec:
        return None
    parts = []
    for seqs in (pre, dec):
        sub = step_subset(s, q_lens, kv_lens, seqs)
        parts.append(run_fi(fi, sub, "fa3", seqs is dec)[1])
    return lambda: [f() for f in parts]


def step_subset(s, q_lens, kv_lens, seqs):
    """The step `s` restricted to sequences `seqs` (same cache, same pages)."""
    i32 = dict(dtype=torch.int32, device="cuda")
    qo, kv, idx, rows = [0], [0], [], []
    host_qo, host_kv = s["qo"].tolist(), s["kv_indptr"].tolist()
    for b in seqs:
        rows.extend(range(host_qo[b], host_qo[b + 1]))
        qo.append(qo[-1] + q_lens[b])
        idx.append(s["order"][host_kv[b]:host_kv[b + 1]])
        kv.append(kv[-1] + host_kv[b + 1] - host_kv[b])
    sub = dict(s)
    sub.update(q=s["q"][torch.tensor(rows, device="cuda")].contiguous(),
               qo=torch.tensor(qo, **i32), kv_indptr=torch.tensor(kv, **i32),
               order=torch.cat(idx), last=s["last"][torch.tensor(seqs, device="cuda")])
    return sub


def rel(a, b):
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def one_case(name, model, q_lens, kv_lens, fi, timer, gemm, copy):
    s = step(model, q_lens, kv_lens)
    flops, nbytes = work(s, q_lens, kv_lens)
    floor_us = max(flops / gemm, nbytes / copy) * 1e6
    rec = dict(case=name, model=model, floor_us=floor_us,
               tflops_attended=flops / 1e12)
    fn = run_tailor(s, q_lens, kv_lens)
    out = fn()
    torch.cuda.synchronize()
    timed = {"tailor": fn}  # every method, timed interleaved below
    if fi is not None:
        is_decode = max(q_lens) == 1
        for label, backend, dec in (("fa3", "fa3", False), ("fa2", "fa2", False),
                                    ("fi_decode", None, True)):
            if dec and not is_decode:
                continue
            try:
                ref, f = run_fi(fi, s, backend, dec)
                f()
                torch.cuda.synchronize()
                timed[label] = f
                rec.setdefault("rel_vs_" + label, rel(out, ref))
            except Exception as e:  # an anchor that cannot run this case
                rec[label + "_error"] = f"{type(e).__name__}: {e}"[:200]
    split = fi_split(fi, s, q_lens, kv_lens) if fi is not None else None
    if split is not None:
        split()
        torch.cuda.synchronize()
        timed["fi_split"] = split
    times = (timer.interleaved(timed) if timer.interleave else
             {name: timer(f) for name, f in timed.items()})
    rec["tailor_us"] = times.pop("tailor")
    rec["tailor_plan"] = tailor_plan()
    anchors = times
    rec.update({k + "_us": v for k, v in anchors.items()})
    if anchors:
        best = min(anchors, key=anchors.get)
        rec["best_anchor"] = best
        rec["speedup_vs_best"] = anchors[best] / rec["tailor_us"]
    rec["tailor_floor_frac"] = floor_us / rec["tailor_us"]
    print(json.dumps(rec), flush=True)
    return rec


def table(recs, gemm, copy):
    lines = [f"GEMM rate {gemm / 1e12:.0f} TFLOP/s, copy {copy / 1e12:.2f} TB/s "
             "(measured in this process)",
             "| case | tailor us | fa3 us | fa2 us | fi decode us | fi split us "
             "| best/tailor | tailor floor frac | rel vs anchor |",
             "|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else (f"{v:.1f}" if v >= 10 else f"{v:.3f}")
    for r in recs:
        relv = next((r[k] for k in r if k.startswith("rel_vs_")), None)
        lines.append(
            f"| {r['case']} | {f(r['tailor_us'])} | {f(r.get('fa3_us'))} | "
            f"{f(r.get('fa2_us'))} | {f(r.get('fi_decode_us'))} | "
            f"{f(r.get('fi_split_us'))} | "
            f"{f(r.get('speedup_vs_best'))} | {r['tailor_floor_frac']:.2f} | "
            f"{'-' if relv is None else f'{relv:.1e}'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--only", help="substrings of the case names to run, "
                    "'|' between alternatives")
    ap.add_argument("--timing", choices=["interleaved", "blocks"],
                    default="interleaved",
                    help="interleaved: a case's methods rep by rep in a "
                         "rotating order; blocks: each method's reps in a "
                         "block of its own (the former protocol)")
    args = ap.parse_args()
    try:
        import flashinfer as fi
    except Exception as e:
        print(f"flashinfer unavailable ({type(e).__name__}: {e}): tailor only",
              file=sys.stderr)
        fi = None
    timer = Timer(args.reps, args.warmup, args.timing == "interleaved")
    gemm, copy = rates(timer)
    recs = []
    for name, model, q_lens, kv_lens in cases():
        if args.only and not any(o in name for o in args.only.split("|")):
            continue
        try:
            recs.append(one_case(name, model, q_lens, kv_lens, fi, timer,
                                 gemm, copy))
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(gemm=gemm, copy=copy, records=recs), fh, indent=1)
    print(table(recs, gemm, copy))


if __name__ == "__main__":
    main()
