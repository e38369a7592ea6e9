"""GPU check of ragged attention's Python and torch surfaces on CUDA tensors
(the lead runs it on the GPU machine; CI has no GPU). Each step runs in
its own process under a timeout, so a hang costs only its own line; a table
of step results is printed last and the exit code is nonzero on any failure.

  bind         ragged_workspace_bytes / bind_ragged_workspace into a torch
               tensor, plan_ragged (its q_len 1 rows counted on the decode
               kernel by info()) + run_ragged (tailor.attention), a short
               binding refused with its message
  op           plan_ragged_attention + torch.ops.tailor.ragged_attention
               (Llama-3-8B heads, page 16, a mixed step) with lse, and the
               flash_attn_varlen_func shim's paged form
  graph        the op captured once in a CUDA graph, replayed after new
               plans with other lengths in the same buffers
  page_indptr  FlashInfer's kv_indices + page_indptr (a tile and a
               decode row) against the reference
  timing       eager op vs graph replay of one mixed step

Run from the repository root after scripts/gpu-bundle (which puts
libtailor_c.so.3 and its shared libraries in build-gpu/lib):
  LD_LIBRARY_PATH=$PWD/build-gpu/lib TAILOR_LIBRARY=$PWD/build-gpu/lib/libtailor_c.so.3 \\
    PYTHONPATH=$PWD/python python3 python/tests/gpu/check_ragged_torch_cuda.py
"""

import os
import subprocess
import sys
import time


HQ, HKV, D, PAGE = 32, 8, 128, 16
TOL = 2e-2
# A prefill chunk over a prefix, a new prompt, decode rows, speculative rows.
Q_LENS = [512, 300, 1, 1, 4, 4, 0, 1]
KV_LENS = [2048, 300, 1000, 17, 260, 4, 9, 4096]


def step_data(torch, q_lens, kv_lens, seed=0, pages_total=None):
    """q, caches, block table, metadata (device) for one step."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = [(n + PAGE - 1) // PAGE for n in kv_lens]
    num_pages = pages_total or sum(pages) + 8
    order = torch.randperm(num_pages, generator=g, device="cuda")
    table = torch.zeros(len(kv_lens), max(pages) + 1, dtype=torch.int32,
                        device="cuda")
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used:used + n].to(torch.int32)
        used += n
    k = torch.randn(num_pages, PAGE, HKV, D, generator=g,
                    device="cuda").bfloat16()
    v = torch.randn(num_pages, PAGE, HKV, D, generator=g,
                    device="cuda").bfloat16()
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)),
                        dtype=torch.int32, device="cuda")
    q = torch.randn(int(cu_q[-1]), HQ, D, generator=g,
                    device="cuda").bfloat16()
    lens = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    return q, k, v, table, cu_q, lens


def reference(ops, q, k, v, table, cu_q, lens):
    out, lse = ops.ragged_attention_reference(
        q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), lens.cpu(),
        lambda b: table[b].long().cpu())
    return out.float(), lse


def rel_err(a, b):
    return ((a.float().cpu() - b.float()).norm() / b.float().norm()).item()


def expect(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        raise SystemExit(1)


def run_bind(torch, tailor, ops):
    rt = tailor.runtime_for("cuda")
    limits = dict(max_batch=16, max_tokens=1024, num_qo_heads=HQ,
                  num_kv_heads=HKV, head_dim=D, page_size=PAGE)
    nbytes = tailor.attention.ragged_workspace_bytes(rt, **limits)
    expect("bytes", nbytes > 0, f"{nbytes} B")
    memory = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    ws = tailor.attention.RaggedWorkspace()
    tailor.attention.bind_ragged_workspace(rt, memory, ws, **limits)
    q, k, v, table, cu_q, lens = step_data(torch, Q_LENS, KV_LENS, seed=1)
    shape = dict(page_size=PAGE, num_qo_heads=HQ, num_kv_heads=HKV,
                 head_dim=D)
    tailor.attention.plan_ragged(rt, cu_q.cpu().numpy(), lens.cpu().numpy(),
                                 ws, **shape)
    info = ws.info()
    decode_rows = Q_LENS.count(1)
    expect("q_len 1 rows on the decode kernel",
           info["decode_seqs"] == decode_rows
           and info["decode_items"] >= decode_rows,
           f"{info['decode_seqs']} seqs, {info['decode_items']} items")
    out = torch.full_like(q, float("nan"))
    tailor.attention.run_ragged(rt, q, k, v, table, out, ws, kv_lens=lens)
    torch.cuda.synchronize()
    ws.take_errors(rt)
    err = rel_err(out, reference(ops, q, k, v, table, cu_q, lens)[0])
    expect("bound workspace run", err < TOL, f"rel err {err:.2e}")
    short = torch.empty(256, dtype=torch.uint8, device="cuda")
    try:
        tailor.attention.bind_ragged_workspace(rt, short, ws, **limits)
        expect("short binding refused", False)
    except tailor.InvalidArgumentError as e:
        expect("short binding refused", e.message.startswith(
            f"bytes: must be >= RaggedWorkspaceBytes(limits) = {nbytes}"),
            e.message)


def run_op(torch, tailor, ops):
    from tailor.integrations.flash_attn import flash_attn_varlen_func
    q, k, v, table, cu_q, lens = step_data(torch, Q_LENS, KV_LENS, seed=2)
    ops.plan_ragged_attention(cu_q, lens, num_qo_heads=HQ, num_kv_heads=HKV,
                              head_dim=D, page_size=PAGE)
    out, lse = torch.ops.tailor.ragged_attention(q, k, v, table, None, lens,
                                                 0.0, 0.0, True)
    ref, ref_lse = reference(ops, q, k, v, table, cu_q, lens)
    err = rel_err(out, ref)
    expect("op out", err < TOL, f"rel err {err:.2e}")
    lse_err = (lse.cpu() - ref_lse).abs().max().item()
    expect("op lse", lse_err < 1e-2, f"max abs err {lse_err:.2e}")
    shim = flash_attn_varlen_func(q, k, v, max(Q_LENS), cu_q, max(KV_LENS),
                                  seqused_k=lens, causal=True,
                                  block_table=table)
    expect("flash_attn_varlen_func paged", rel_err(shim, ref) < TOL,
           f"rel err {rel_err(shim, ref):.2e}")


def run_graph(torch, tailor, ops):
    rows, batch = 1024, 16
    q, k, v, table, _, _ = step_data(torch, [rows] + [0] * (batch - 1),
                                     [rows] * batch, seed=3,
                                     pages_total=4096)
    layer = dict(num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
                 page_size=PAGE, max_batch=batch, max_tokens=rows,
                 device="cuda")
    lens = torch.zeros(batch, dtype=torch.int32, device="cuda")
    cu_q = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    ops.plan_ragged_attention(cu_q, lens, **layer)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm the kernels outside capture
        torch.ops.tailor.ragged_attention(q, k, v, table, None, lens)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _ = torch.ops.tailor.ragged_attention(q, k, v, table, None, lens)
    for i, q_lens in enumerate([[300, 1, 1, 4], [1] * 16,
                                [700, 200, 4, 4, 1, 1, 1]]):
        kv_lens = [n + 50 * (j + 1) for j, n in enumerate(q_lens)]
        new = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
        lens.zero_()
        lens[:len(kv_lens)] = new
        indptr = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)),
                              dtype=torch.int32)
        ops.plan_ragged_attention(indptr, new.cpu(), **layer)
        graph.replay()
        torch.cuda.synchronize()
        total = int(indptr[-1])
        ref, _ = reference(ops, q[:total], k, v, table[:len(kv_lens)],
                           indptr, new)
        err = rel_err(out[:total], ref)
        expect(f"graph replay {i}", err < TOL, f"rel err {err:.2e}")


def run_page_indptr(torch, tailor, ops):
    q, k, v, table, cu_q, lens = step_data(torch, [4, 1], [40, 17], seed=4)
    pages = [(n + PAGE - 1) // PAGE for n in lens.tolist()]
    indices = torch.cat([table[b, :p] for b, p in enumerate(pages)])
    kv_indptr = torch.tensor([0, pages[0], sum(pages)], dtype=torch.int32)
    last = torch.tensor([n - (p - 1) * PAGE for n, p in
                         zip(lens.tolist(), pages)], dtype=torch.int32)
    ops.plan_ragged_attention_flashinfer(
        cu_q, kv_indptr, last, num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
        page_size=PAGE)
    out, _ = torch.ops.tailor.ragged_attention(q, k, v, indices,
                                               kv_indptr.cuda(), None)
    ref, _ = reference(ops, q, k, v, table, cu_q, lens)
    err = rel_err(out, ref)
    expect("page_indptr on cuda", err < TOL, f"rel err {err:.2e}")


def run_timing(torch, tailor, ops):
    q, k, v, table, cu_q, lens = step_data(torch, Q_LENS, KV_LENS, seed=5)
    ops.plan_ragged_attention(cu_q, lens, num_qo_heads=HQ, num_kv_heads=HKV,
                              head_dim=D, page_size=PAGE)

    def call():
        return torch.ops.tailor.ragged_attention(q, k, v, table, None, lens)

    def timed(fn, n=50):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / n * 1e6

    eager = timed(call)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    replay = timed(graph.replay)
    print(f"ok   timing mixed step (Σq={int(cu_q[-1])}): eager {eager:.1f} "
          f"us/call, graph replay {replay:.1f} us")


STEPS = {"bind": run_bind, "op": run_op, "graph": run_graph,
         "page_indptr": run_page_indptr, "timing": run_timing}


def main():
    if len(sys.argv) == 2:  # one step, in this process
        import torch
        import tailor
        import tailor.torch_ops as ops
        STEPS[sys.argv[1]](torch, tailor, ops)
        return 0
    rows, failed = [], 0
    for name in STEPS:
        start = time.time()
        try:
            done = subprocess.run([sys.executable, __file__, name],
                                  capture_output=True, text=True, timeout=180)
            verdict = ("ok" if done.returncode == 0 else
                       f"FAIL({done.returncode})")
            text = (done.stdout + done.stderr).strip().splitlines()
        except subprocess.TimeoutExpired:
            verdict, text = "TIMEOUT", []
        failed += verdict != "ok"
        print(f"== {name}\n" + "\n".join(text[-12:]))
        rows.append(f"{name:<12} {verdict:<9} {time.time() - start:6.1f}s  "
                    f"{text[-1] if text else ''}")
    print("== summary")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
