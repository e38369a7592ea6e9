"""GPU check of tailor.integrations.vllm's and .sglang's attention backend
shapes on CUDA tensors against torch SDPA over the same paged cache (the
CPU tests' helpers, python/tests/test_serving_attention.py, at Llama-3-8B
heads: 32 query / 8 KV heads of 128, pages of 16, bf16):

  vllm_eager     a mixed step (prefill, decode at page boundaries, an
                 empty query, a 577-token chunk, speculative rows, padding
                 rows) through builder.build + impl.forward
  vllm_graph     impl.forward captured once in a CUDA graph at batch 8
                 (build_for_cudagraph_capture), replayed for a real batch
                 of 6 decode rows padded to 8 after build() planned it
  sglang_extend  init_forward_metadata + forward_extend, the mixed step
  sglang_decode  init_forward_metadata + forward_decode
  sglang_graph   init_cuda_graph_state, capture at bs 8, replay of 6
                 padded to 8 (SGLang's fill value and padding slot 0)
  hf_paged       transformers' "tailor_paged" attention function on packed
                 sequences (skipped when transformers is not importable)

Each prints ok / FAIL with the rel err; a table is printed last and the
exit code is nonzero on any failure. Run from the repository root after
scripts/gpu-bundle (libtailor_c.so.3 in build-gpu/lib):
  LD_LIBRARY_PATH=$PWD/build-gpu/lib TAILOR_LIBRARY=$PWD/build-gpu/lib/libtailor_c.so.3 \\
    PYTHONPATH=$PWD/python python3 python/tests/gpu/check_serving_attention_cuda.py
"""

import os
import sys
import time
import traceback
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import test_serving_attention as t  # noqa: E402

t.HQ, t.HKV, t.D = 32, 8, 128  # the helpers read these at call time
TOL = 2e-2
# TAILOR_CHECK_DEVICE=cpu dry-runs the script's own logic on the CPU
# backend (no graph: "replay" calls the step again on the current plan).
CUDA = torch.device(os.environ.get("TAILOR_CHECK_DEVICE", "cuda"))
results = []


def captured(step, metadata=None):
    """Warms `step` up on a side stream, captures it in a CUDA graph and
    returns the graph's replay."""
    if CUDA.type != "cuda":
        step()

        def rerun():
            if metadata is not None:  # a graph replays without re-planning
                metadata.plan_id = t.ops.ragged_plans_made()
            step()
        return rerun
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def synchronize():
    if CUDA.type == "cuda":
        torch.cuda.synchronize()


def on_cuda(s):
    """The step `s` with its tensors on the GPU (truth and lengths' host
    copies stay for the reference and the plans)."""
    g = types.SimpleNamespace(**vars(s))
    for name in ("k_cache", "v_cache", "table", "query", "new_k", "new_v",
                 "slot_mapping"):
        setattr(g, name, getattr(s, name).to(CUDA))
    g.cu_q_cpu, g.kv_lens_cpu = s.cu_q, s.kv_lens
    g.cu_q, g.kv_lens = s.cu_q.to(CUDA), s.kv_lens.to(CUDA)
    return g


def vllm_common(g):
    m = t.common_metadata(g)
    m.query_start_loc_cpu, m.seq_lens_cpu = g.cu_q_cpu, g.kv_lens_cpu
    return m


def check(name, fn):
    start = time.perf_counter()
    try:
        err = fn()
        ok = err < TOL
        detail = f"rel err {err:.1e}"
    except Exception as error:  # noqa: BLE001  a failed check, reported
        traceback.print_exc()
        ok, detail = False, f"{type(error).__name__}: {error}"[:120]
    results.append((name, ok, time.perf_counter() - start, detail))
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def vllm_builder(capture=(1, 2, 4, 8)):
    return t.tailor_vllm.TailorAttentionMetadataBuilder(
        t.kv_cache_spec(), ["l"], t.vllm_config(capture=capture), CUDA)


def vllm_eager():
    s = t.make_step(seed=21)
    g = on_cuda(s)
    metadata = vllm_builder().build(0, vllm_common(g))
    kv = torch.stack([g.k_cache, g.v_cache])
    out = t.vllm_forward(g, t.vllm_layer(), metadata, kv).cpu()
    assert torch.isnan(out[s.total:]).all(), "padding rows written"
    t.assert_cache_holds_truth(s, kv[0].cpu(), kv[1].cpu())
    return t.rel_err(out[:s.total], t.sdpa_reference(s))


def vllm_graph():
    builder = vllm_builder(capture=(8,))
    real = t.make_step(seed=22, step=t.DECODE)  # 6 rows
    real.query = torch.cat([real.query[:6], real.query[:2]])  # 8 rows
    g = on_cuda(real)
    kv = torch.stack([g.k_cache, g.v_cache])
    bufs = types.SimpleNamespace(  # vLLM's persistent graph inputs
        query=torch.zeros_like(g.query), key=g.new_k[:8].clone(),
        value=g.new_v[:8].clone(), output=torch.zeros_like(g.query),
        slots=torch.full((8,), -1, dtype=torch.int64, device=CUDA),
        table=torch.zeros((8, g.table.shape[1]), dtype=torch.int32,
                          device=CUDA),
        lens=torch.ones(8, dtype=torch.int32, device=CUDA),
        cu_q=torch.arange(9, dtype=torch.int32, device=CUDA))
    dummy = types.SimpleNamespace(
        query_start_loc=bufs.cu_q, query_start_loc_cpu=bufs.cu_q.cpu(),
        seq_lens=bufs.lens, seq_lens_cpu=bufs.lens.cpu(), num_reqs=8,
        num_actual_tokens=8, max_query_len=1, max_seq_len=1,
        block_table_tensor=bufs.table, slot_mapping=bufs.slots, causal=True)
    metadata = builder.build_for_cudagraph_capture(dummy)
    impl = t.vllm_layer()

    def step():
        impl.forward(None, bufs.query, bufs.key, bufs.value, kv, metadata,
                     output=bufs.output)

    replay = captured(step, metadata)
    # The real batch of 6 padded to 8 (q_len 0, length 0, slot -1).
    cu_q = torch.tensor([0, 1, 2, 3, 4, 5, 6, 6, 6], dtype=torch.int32)
    lens = torch.cat([real.kv_lens, torch.zeros(2, dtype=torch.int32)])
    bufs.query.copy_(g.query)
    bufs.key[:6].copy_(g.new_k[:6])
    bufs.value[:6].copy_(g.new_v[:6])
    bufs.slots.fill_(-1)
    bufs.slots[:6].copy_(g.slot_mapping[:6])
    bufs.table.zero_()
    bufs.table[:6].copy_(g.table)
    bufs.lens.copy_(lens.to(CUDA))
    bufs.cu_q.copy_(cu_q.to(CUDA))
    builder.build(0, types.SimpleNamespace(**{
        **vars(dummy), "query_start_loc_cpu": cu_q, "seq_lens_cpu": lens,
        "num_actual_tokens": 6}))
    replay()
    synchronize()
    t.assert_cache_holds_truth(real, kv[0].cpu(), kv[1].cpu())
    return t.rel_err(bufs.output[:6].cpu(), t.sdpa_reference(real))


def sglang_setup(s):
    g = on_cuda(s)
    runner, reqs = t.sglang_runner(s)
    runner.device = CUDA
    pool = runner.req_to_token_pool
    pool.req_to_token = pool.req_to_token.to(CUDA)
    backend = t.tailor_sglang.TailorAttnBackend(runner)
    return g, backend, reqs.to(CUDA)


def sglang_batch(g, mode, reqs):
    batch = t.forward_batch(g, mode, reqs)
    batch.seq_lens_cpu = g.kv_lens_cpu.long()
    return batch


def sglang_eager(step, mode, seed):
    s = t.make_step(seed=seed, step=step)
    g, backend, reqs = sglang_setup(s)
    batch = sglang_batch(g, mode, reqs)
    backend.init_forward_metadata(batch)
    out = t.sglang_call(backend, g, batch, t.radix_layer()).cpu()
    t.assert_cache_holds_truth(s, g.k_cache.cpu(), g.v_cache.cpu())
    return t.rel_err(out, t.sdpa_reference(s))


def sglang_graph():
    s = t.make_step(seed=23, step=t.DECODE)
    g, backend, reqs = sglang_setup(s)
    backend.init_cuda_graph_state(max_bs=8, max_num_tokens=8)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    decode = t.ForwardMode("DECODE")
    req_buf = torch.zeros(8, dtype=torch.int64, device=CUDA)
    lens_buf = torch.full((8,), fill, dtype=torch.int64, device=CUDA)
    loc_buf = torch.zeros(8, dtype=torch.int64, device=CUDA)
    q_buf = torch.zeros(8, t.HQ * t.D, dtype=g.query.dtype, device=CUDA)
    k_buf, v_buf = g.new_k[:8].clone(), g.new_v[:8].clone()
    backend.init_forward_metadata_capture_cuda_graph(
        8, 8, req_buf, lens_buf, None, decode, None)
    batch = sglang_batch(g, "DECODE", req_buf)
    batch.out_cache_loc = loc_buf
    layer = t.radix_layer()
    out = {}

    def step():
        out["o"] = backend.forward(q_buf, k_buf, v_buf, layer, batch)

    replay = captured(step)
    req_buf[:6].copy_(reqs)
    lens = torch.cat([s.kv_lens.long(), torch.full((2,), fill)])
    lens_buf.copy_(lens.to(CUDA))
    loc_buf[:6].copy_(g.slot_mapping[:6])
    q_buf[:6].copy_(g.query[:6].reshape(6, -1))
    k_buf[:6].copy_(g.new_k[:6])
    v_buf[:6].copy_(g.new_v[:6])
    backend.init_forward_metadata_replay_cuda_graph(
        8, req_buf, lens_buf, int(lens.sum()), None, decode, None, lens)
    replay()
    synchronize()
    result = out["o"].view(8, t.HQ, t.D)[:6].cpu()
    return t.rel_err(result, t.sdpa_reference(s))


def hf_paged():
    import test_transformers_integration as hf  # needs transformers 5.x
    q_lens, kv_lens = [512, 1, 1, 0, 17, 577], [512, 16, 1000, 4, 300, 577]
    q, k, v, cu_q, cu_k = hf.packed_step(q_lens, kv_lens, heads=t.HQ,
                                         heads_kv=t.HKV, dim=t.D)
    out, _ = hf.hf_tailor.tailor_paged_attention_forward(
        torch.nn.Module(), q.to(CUDA), k.to(CUDA), v.to(CUDA), None,
        scaling=t.D ** -0.5, cu_seq_lens_q=cu_q.to(CUDA),
        cu_seq_lens_k=cu_k.to(CUDA), max_length_q=577, max_length_k=1000)
    ref = hf.packed_reference(q, k, v, cu_q, cu_k, t.D ** -0.5)
    return t.rel_err(out[0].cpu(), ref)


def main():
    name = torch.cuda.get_device_name() if CUDA.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}")
    check("vllm_eager", vllm_eager)
    check("vllm_graph", vllm_graph)
    check("sglang_extend", lambda: sglang_eager(t.STEP, "EXTEND", 24))
    check("sglang_decode", lambda: sglang_eager(t.DECODE, "DECODE", 25))
    check("sglang_graph", sglang_graph)
    try:
        import transformers  # noqa: F401
        check("hf_paged", hf_paged)
    except ImportError:
        print("skip hf_paged: transformers is not importable")
    print(f"\n{'check':16} {'result':6} {'s':>6}  detail")
    for name, ok, seconds, detail in results:
        print(f"{name:16} {'ok' if ok else 'FAIL':6} {seconds:6.1f}  {detail}")
    failed = [r for r in results if not r[1]]
    print(f"\n{len(failed)} failed" if failed else "\nall passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
