"""Data, reference and timing of the ragged-attention GPU run (run.py).

Paged KV as FlashInfer's kit lays it ([pages, 2, page, Hkv, D], K and V
interleaved, so its precompiled modules apply); tailor reads kv[:, 0] and
kv[:, 1] with their strides. Correctness cases may use separate K and V, HND
strides, NaN in every slot no sequence owns, shared prefix pages and bad ids.
"""
import math

import numpy as np
import torch

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def make_step(case, gen, device="cuda"):
    """Tensors of one case: q, k/v views, block table, FlashInfer indptrs."""
    B = len(case["q_lens"])
    page, hq, hkv, d = case["page"], case["hq"], case["hkv"], case["d"]
    dt = DTYPES[case["dtype"]]
    q_lens, kv_lens = case["q_lens"], case["kv_lens"]
    npg = [(l + page - 1) // page for l in kv_lens]
    if case["shared_prefix"]:  # sequences 1.. reuse sequence 0's first pages
        shared = min(npg) - 1
    else:
        shared = 0
    owned = [n - (shared if b > 0 else 0) for b, n in enumerate(npg)]
    total = max(1, sum(owned))
    spare = 3  # pages nobody owns (NaN when poisoned)
    perm = torch.randperm(total + spare, generator=gen, device="cpu").to(torch.int32)
    table = torch.zeros(B, max(1, max(npg)), dtype=torch.int32)
    pos = 0
    first_pages = None
    for b in range(B):
        if b > 0 and shared > 0:
            table[b, :shared] = first_pages[:shared]
            table[b, shared:npg[b]] = perm[pos:pos + owned[b]]
        else:
            table[b, :npg[b]] = perm[pos:pos + owned[b]]
        if b == 0:
            first_pages = table[0].clone()
        pos += owned[b]
    num_pages = total + spare
    bad = []
    for i in range(case["bad_pages"]):  # out-of-range ids in sequence i's table
        b = i % B
        if npg[b] > 1:
            j = (npg[b] // 2 + i) % (npg[b] - 1)
            table[b, j] = num_pages + 7 * i + 1 if i % 2 == 0 else -1 - i
            bad.append((b, j))
    table = table.to(device)
    if case["layout"] == "HND":
        k = torch.randn(num_pages, hkv, page, d, dtype=dt, device=device, generator=gen2(gen))
        v = torch.randn(num_pages, hkv, page, d, dtype=dt, device=device, generator=gen2(gen))
        k_view, v_view = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        kv = None
    else:
        kv = torch.randn(num_pages, 2, page, hkv, d, dtype=dt, device=device,
                         generator=gen2(gen))
        k_view, v_view = kv[:, 0], kv[:, 1]
    if case["poison"]:  # every slot past each sequence's length: NaN
        owned_slots = torch.zeros(num_pages, page, dtype=torch.bool)
        host_table = table.cpu()
        for b in range(B):
            for j in range(npg[b]):
                p = int(host_table[b, j])
                if 0 <= p < num_pages:
                    owned_slots[p, :min(page, kv_lens[b] - j * page)] = True
        owned_slots = owned_slots.to(device)
        nan = float("nan")
        k_view.masked_fill_(~owned_slots[:, :, None, None], nan)
        v_view.masked_fill_(~owned_slots[:, :, None, None], nan)
    nq = sum(q_lens)
    if case["strided_q"]:  # q sliced from a fused qkv projection
        qkv = torch.randn(max(1, nq), hq + 2 * hkv, d, dtype=dt, device=device,
                          generator=gen2(gen))
        q = qkv[:, :hq]
    else:
        q = torch.randn(max(1, nq), hq, d, dtype=dt, device=device, generator=gen2(gen))
    q_begin = [0] + list(np.cumsum(q_lens))
    return {"q": q, "k": k_view, "v": v_view, "kv": kv, "table": table, "npg": npg,
            "q_begin": [int(x) for x in q_begin], "num_pages": num_pages, "bad": bad}


def gen2(gen):
    """A CUDA generator seeded from the CPU one (randn on the device)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=gen)))
    return g


def flashinfer_indices(step, case, device="cuda"):
    """qo_indptr, kv_indptr, kv_indices, last_page_len for FlashInfer."""
    page = case["page"]
    idx, indptr, last = [], [0], []
    for b, n in enumerate(step["npg"]):
        idx.append(step["table"][b, :n].cpu())
        indptr.append(indptr[-1] + n)
        l = case["kv_lens"][b]
        last.append(l - (n - 1) * page if n > 0 else 0)
    t = lambda x: torch.tensor(x, dtype=torch.int32, device=device)
    return (t(step["q_begin"]), t(indptr), torch.cat(idx).to(device).to(torch.int32), t(last))


def check_tokens(case, b, rng):
    q = case["q_lens"][b]
    if case["check"] == "all" or q <= 256:
        return np.arange(q)
    sel = set(range(64)) | set(range(q - 64, q)) | set(rng.integers(0, q, 64).tolist())
    return np.array(sorted(sel))


def check_seqs(case):
    B = len(case["q_lens"])
    if case["check"] == "all":
        return list(range(B))
    return sorted({0, B // 2, B - 1})


def reference(case, step, seqs, rng):
    """fp32 reference rows: {b: (tokens, out [T, Hq, D], lse [T, Hq])}."""
    hq, hkv, d, page = case["hq"], case["hkv"], case["d"], case["page"]
    g = hq // hkv
    scale = d ** -0.5
    bad = set(step["bad"])
    refs = {}
    for b in seqs:
        Q, L = case["q_lens"][b], case["kv_lens"][b]
        toks = check_tokens(case, b, rng)
        if Q == 0:
            continue
        n = step["npg"][b]
        pages = step["table"][b, :n].long()
        ok = torch.ones(max(1, n * page), dtype=torch.bool, device=q_dev(step))
        for (bb, j) in bad:
            if bb == b:
                ok[j * page:(j + 1) * page] = False
        pages = pages.clamp(0, step["num_pages"] - 1)
        k = step["k"][pages].reshape(-1, hkv, d)[:L].float()
        v = step["v"][pages].reshape(-1, hkv, d)[:L].float()
        ok = ok[:L]
        k = torch.where(ok[:, None, None], k, torch.zeros_like(k))
        v = torch.where(ok[:, None, None], v, torch.zeros_like(v))
        outs, lses = [], []
        chunk = max(1, (1 << 26) // max(1, hq * max(L, 1)))
        for c0 in range(0, len(toks), chunk):
            t = torch.as_tensor(toks[c0:c0 + chunk], device=q_dev(step))
            qf = step["q"][step["q_begin"][b] + t].float().view(-1, hkv, g, d)
            s = torch.einsum("tkgd,lkd->kgtl", qf, k) * scale
            if case["cap"] > 0:
                s = case["cap"] * torch.tanh(s / case["cap"])
            posq = (L - Q + t)[:, None]
            j = torch.arange(L, device=s.device)[None, :]
            allowed = ok[None, :].expand(len(t), L)
            if case["causal"]:
                allowed = allowed & (j <= posq)
                if case["window"] >= 0:
                    allowed = allowed & (j >= posq - case["window"])
            s = s.masked_fill(~allowed[None, None], float("-inf"))
            lse = torch.logsumexp(s, dim=-1) if L > 0 else torch.full(
                s.shape[:-1], float("-inf"), device=s.device)
            p = torch.exp(s - lse[..., None]).nan_to_num(0.0) if L > 0 else s
            o = torch.einsum("kgtl,lkd->tkgd", p, v) if L > 0 else torch.zeros(
                len(t), hkv, g, d, device=s.device)
            outs.append(o.reshape(len(t), hq, d))
            lses.append(lse.permute(2, 0, 1).reshape(len(t), hq))
        refs[b] = (toks, torch.cat(outs), torch.cat(lses))
    return refs


def q_dev(step):
    return step["q"].device


def compare(case, step, out, lse, refs):
    """Relative error of the checked rows, lse error, NaN anywhere written."""
    nq = sum(case["q_lens"])
    nan_rows = int(torch.isnan(out[:nq].float()).any(dim=(1, 2)).sum()) if nq else 0
    num = den = 0.0
    lse_err = 0.0
    for b, (toks, o_ref, l_ref) in refs.items():
        rows = step["q_begin"][b] + torch.as_tensor(toks, device=out.device)
        o = out[rows].float()
        num += float((o - o_ref).nan_to_num(1e30).pow(2).sum())
        den += float(o_ref.pow(2).sum())
        if lse is not None:
            l = lse[rows]
            both_inf = torch.isinf(l) & torch.isinf(l_ref)
            diff = torch.where(both_inf, torch.zeros_like(l), (l - l_ref).abs())
            lse_err = max(lse_err, float(diff.nan_to_num(1e30).max()))
    rel = math.sqrt(num) / max(math.sqrt(den), 1e-30) if den > 0 else math.sqrt(num)
    return {"rel_err": rel, "nan_rows": nan_rows, "lse_err": lse_err}


def causal_pairs(case):
    total = 0
    for q, kv in zip(case["q_lens"], case["kv_lens"]):
        if not case["causal"]:
            total += q * kv
        elif case["window"] < 0:
            total += q * (kv - q) + q * (q + 1) // 2
        else:
            total += sum(min(kv - q + t + 1, case["window"] + 1) for t in range(q))
    return total


def flops(case):
    return 4 * causal_pairs(case) * case["d"] * case["hq"]


def kv_bytes(case):
    return sum(case["kv_lens"]) * case["hkv"] * case["d"] * 2 * 2


class Timer:
    """Median of reps; each rep flushes L2 (256 MiB write), then a short sleep so
    the host has queued fn's kernels before the start event (GPU time only)."""

    def __init__(self, warmup=3, reps=15):
        self.warmup, self.reps = warmup, reps
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def interleaved(self, fns):
        """name -> median us of each fn, timed rep by rep with the methods
        interleaved, rep i starting at method i mod n: under the power limit a
        method timed in a block of its own runs at the clocks of its moment
        (the same kernel timed second read 3-8 % slower), here every method
        sees the same ones."""
        names = list(fns)
        for _ in range(self.warmup):
            for n in names:
                fns[n]()
        torch.cuda.synchronize()
        ev = {n: [(torch.cuda.Event(enable_timing=True),
                   torch.cuda.Event(enable_timing=True))
                  for _ in range(self.reps)] for n in names}
        for i in range(self.reps):
            k = i % len(names) if names else 0
            for n in names[k:] + names[:k]:
                self.flush.fill_(i & 0xFF)
                torch.cuda._sleep(400000)
                ev[n][i][0].record()
                fns[n]()
                ev[n][i][1].record()
        torch.cuda.synchronize()
        return {n: float(np.median([s.elapsed_time(e) * 1e3 for s, e in ev[n]]))
                for n in names}

    def us(self, fn):
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        st = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        en = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for i in range(self.reps):
            self.flush.fill_(i & 0xFF)
            torch.cuda._sleep(400000)
            st[i].record()
            fn()
            en[i].record()
        torch.cuda.synchronize()
        t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(st, en))
        return float(np.median(t))


def gemm_rate(reps=10):
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return 2 * 8192 ** 3 / float(np.median(ts))


def copy_bandwidth(reps=10):
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return 2 * (1 << 30) / float(np.median(ts))
