"""torch.ops.tailor.ragged_attention and the flash_attn_varlen_func shim on
the CPU backend against plain torch math: vLLM's and FlashInfer's metadata,
GQA, masks, soft cap, lse, opcheck (schema, fake implementation), and the
errors. Skipped when torch is not installed."""

import pytest

torch = pytest.importorskip("torch")
import tailor  # noqa: E402
import tailor.torch_ops as ops  # noqa: E402  registers torch.ops.tailor.*
from tailor.integrations.flash_attn import flash_attn_varlen_func  # noqa: E402

HQ, HKV, D, PAGE = 8, 2, 64, 16
Q_LENS = [37, 1, 1, 4, 0, 17]
KV_LENS = [300, 40, 1, 9, 5, 17]  # a chunk over a prefix, decode, spec, ...


def paged_step(seed=0, q_lens=Q_LENS, kv_lens=KV_LENS, dtype=torch.bfloat16,
               page=PAGE):
    """q, caches with pages at random (unowned slots NaN), block table,
    FlashInfer's kv_indices / kv_indptr / last_page_len, the indptrs."""
    g = torch.Generator().manual_seed(seed)
    pages = [(n + page - 1) // page for n in kv_lens]
    order = torch.randperm(sum(pages) + 2, generator=g).to(torch.int32)
    k = torch.full((len(order), page, HKV, D), float("nan"), dtype=dtype)
    v = k.clone()
    table = torch.full((len(kv_lens), max(pages) + 1), -7, dtype=torch.int32)
    kv_indptr, used = [0], 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used:used + n]
        used += n
        kv_indptr.append(used)
        t = torch.arange(kv_lens[b])
        k[table[b, t // page].long(), t % page] = torch.randn(
            len(t), HKV, D, generator=g).to(dtype)
        v[table[b, t // page].long(), t % page] = torch.randn(
            len(t), HKV, D, generator=g).to(dtype)
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)),
                        dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), HQ, D, generator=g).to(dtype)
    last = torch.tensor([n - (p - 1) * page if p else 0
                         for n, p in zip(kv_lens, pages)], dtype=torch.int32)
    return dict(q=q, k=k, v=v, table=table, cu_q=cu_q,
                kv_lens=torch.tensor(kv_lens, dtype=torch.int32),
                kv_indices=order[:used].clone(),
                kv_indptr=torch.tensor(kv_indptr, dtype=torch.int32),
                last=last)


def reference(q, keys, values, cu_q, causal=True, window_left=-1,
              scale=None, softcap=0.0):
    """Plain torch attention per sequence: keys[b] / values[b] [n, Hkv, D];
    queries are the last q_len positions. (out float64, lse [Σq, Hq])."""
    scale = scale or D ** -0.5
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float64)
    for b in range(len(keys)):
        lo, hi = int(cu_q[b]), int(cu_q[b + 1])
        n = keys[b].shape[0]
        if hi == lo or n == 0:
            continue
        kk = keys[b].double().repeat_interleave(HQ // HKV, dim=1)
        vv = values[b].double().repeat_interleave(HQ // HKV, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[lo:hi].double(), kk) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(n - (hi - lo), n)[:, None]
        key = torch.arange(n)[None, :]
        keep = torch.ones(hi - lo, n, dtype=torch.bool)
        if causal:
            keep &= key <= pos
        if window_left >= 0:
            keep &= key >= pos - window_left
        s = s.masked_fill(~keep, float("-inf"))
        lse[lo:hi] = torch.logsumexp(s, -1).t()
        out[lo:hi] = torch.einsum("hqk,khd->qhd", s.softmax(-1), vv)
    return out, lse


def per_sequence(step):
    keys, values = [], []
    for b, n in enumerate(step["kv_lens"].tolist()):
        t = torch.arange(n)
        pages = step["table"][b, t // step["k"].shape[1]].long()
        keys.append(step["k"][pages, t % step["k"].shape[1]])
        values.append(step["v"][pages, t % step["k"].shape[1]])
    return keys, values


def rel_err(got, want):
    assert not torch.isnan(got).any()
    return ((got.double() - want).norm() / want.norm()).item()


LAYER = dict(num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D, page_size=PAGE)


def test_ragged_attention_op_vllm_metadata():
    s = paged_step()
    ops.plan_ragged_attention(s["cu_q"], s["kv_lens"], **LAYER)
    out, lse = torch.ops.tailor.ragged_attention(
        s["q"], s["k"], s["v"], s["table"], None, s["kv_lens"], 0.0, 0.0,
        True)
    ref, ref_lse = reference(s["q"], *per_sequence(s), s["cu_q"])
    assert out.dtype == torch.bfloat16 and out.shape == s["q"].shape
    assert rel_err(out, ref) < 1e-2
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)
    # the library's own reference agrees with this file's
    lib_out, lib_lse = ops.ragged_attention_reference(
        s["q"], s["k"], s["v"], s["cu_q"], s["kv_lens"],
        lambda b: s["table"][b].long())
    assert rel_err(lib_out, ref) < 1e-2
    torch.testing.assert_close(lib_lse.double(), ref_lse, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("window_left,softcap", [(-1, 0.0), (11, 0.0),
                                                 (-1, 3.0)])
def test_ragged_attention_op_flashinfer_metadata(window_left, softcap):
    s = paged_step(seed=3, dtype=torch.float16)
    ops.plan_ragged_attention_flashinfer(
        s["cu_q"], s["kv_indptr"], s["last"], dtype=torch.float16,
        window_left=window_left, **LAYER)
    out, lse = torch.ops.tailor.ragged_attention(
        s["q"], s["k"], s["v"], s["kv_indices"], s["kv_indptr"], None, 0.0,
        softcap, False)
    assert lse.shape == (0,)
    ref, _ = reference(s["q"], *per_sequence(s), s["cu_q"],
                       window_left=window_left, softcap=softcap)
    assert rel_err(out, ref) < 1e-2


def test_ragged_attention_opcheck():
    s = paged_step(seed=5)
    ops.plan_ragged_attention(s["cu_q"], s["kv_lens"], **LAYER)
    torch.library.opcheck(
        torch.ops.tailor.ragged_attention.default,
        (s["q"], s["k"], s["v"], s["table"], None, s["kv_lens"], 0.0, 0.0,
         True))


def test_ragged_attention_compiles_fullgraph():
    """torch.compile traces the op (fake implementation) in a layer; steps
    of other lengths run through the same compiled graph after their plan."""

    def layer(q, k, v, table, lens):
        out, lse = torch.ops.tailor.ragged_attention(q, k, v, table, None,
                                                     lens, 0.0, 0.0, True)
        return out.float() * 2, lse

    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for seed, q_lens in ((20, Q_LENS), (21, [3, 1, 1])):
        s = paged_step(seed=seed, q_lens=q_lens, kv_lens=KV_LENS[:len(q_lens)])
        ops.plan_ragged_attention(s["cu_q"], s["kv_lens"], **LAYER)
        args = (s["q"], s["k"], s["v"], s["table"], s["kv_lens"])
        got, got_lse = compiled(*args)
        want, want_lse = layer(*args)
        assert torch.equal(got, want) and torch.equal(got_lse, want_lse)


def test_ragged_attention_errors():
    s = paged_step(seed=7)
    bad = s["kv_lens"].clone()
    bad[0] = 10  # fewer positions than its 37 queries
    with pytest.raises(tailor.InvalidArgumentError) as e:
        ops.plan_ragged_attention(s["cu_q"], bad, **LAYER)
    assert e.value.message == ("q_lens[0]: 37 exceeds kv_lens[0] = 10; causal "
                               "queries are the last q_len of their KV")
    with pytest.raises(NotImplementedError, match="bf16 and float16 only"):
        ops.plan_ragged_attention(s["cu_q"], s["kv_lens"],
                                  dtype=torch.float32, **LAYER)
    ops.plan_ragged_attention(s["cu_q"], s["kv_lens"], **LAYER)
    table = s["table"].clone()
    table[0, 3] = 1000
    with pytest.raises(tailor.InvalidArgumentError) as e:
        torch.ops.tailor.ragged_attention(s["q"], s["k"], s["v"], table)
    assert e.value.message == (f"block_table[0,3]: page id 1000 is outside "
                               f"[0, {s['k'].shape[0]})")


def test_flash_attn_paged_form_matches_torch():
    s = paged_step(seed=11)
    out = flash_attn_varlen_func(
        s["q"], s["k"], s["v"], max_seqlen_q=37, cu_seqlens_q=s["cu_q"],
        max_seqlen_k=300, seqused_k=s["kv_lens"], causal=True,
        block_table=s["table"], softmax_scale=0.1, softcap=0.0,
        window_size=(-1, -1), fa_version=3)
    ref, _ = reference(s["q"], *per_sequence(s), s["cu_q"], scale=0.1)
    assert rel_err(out, ref) < 1e-2


def test_flash_attn_window_softcap_and_lse():
    s = paged_step(seed=12)
    out_buffer = torch.full_like(s["q"], float("nan"))
    out, lse = flash_attn_varlen_func(
        s["q"], s["k"], s["v"], 37, s["cu_q"], 300,
        seqused_k=s["kv_lens"], causal=True, window_size=[20, 0],
        softcap=2.5, block_table=s["table"], return_softmax_lse=True,
        out=out_buffer)
    assert out is out_buffer
    ref, ref_lse = reference(s["q"], *per_sequence(s), s["cu_q"],
                             window_left=20, softcap=2.5)
    assert rel_err(out, ref) < 1e-2
    assert lse.shape == (HQ, s["q"].shape[0])  # FlashAttention's varlen lse
    torch.testing.assert_close(lse.double(), ref_lse.t(), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_attn_contiguous_varlen_form(causal):
    """k / v [Σk, Hkv, D] with cu_seqlens_k: pages of one token in
    FlashInfer's form (page_indptr) on the CPU backend."""
    g = torch.Generator().manual_seed(13)
    q_lens, kv_lens = [5, 1, 0, 33], [9, 1, 4, 33]
    if not causal:
        q_lens[2] = 6  # more queries than keys: only without causal
    cu_q = torch.tensor([0, 5, 6, 6 + q_lens[2], 6 + q_lens[2] + 33],
                        dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 10, 14, 47], dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), HQ, D, generator=g).bfloat16()
    k = torch.randn(47, HKV, D, generator=g).bfloat16()
    v = torch.randn(47, HKV, D, generator=g).bfloat16()
    out, lse = flash_attn_varlen_func(
        q, k, v, max(q_lens), cu_q, max(kv_lens), cu_seqlens_k=cu_k,
        causal=causal, return_attn_probs=True)
    keys = [k[int(cu_k[b]):int(cu_k[b + 1])] for b in range(4)]
    values = [v[int(cu_k[b]):int(cu_k[b + 1])] for b in range(4)]
    ref, ref_lse = reference(q, keys, values, cu_q, causal=causal)
    assert rel_err(out, ref) < 1e-2
    torch.testing.assert_close(lse.double(), ref_lse.t(), rtol=1e-4,
                               atol=1e-4)


def test_flash_attn_plans_once_per_step(monkeypatch):
    """Layers of one step (the same metadata tensors) share one plan; an
    in-place update of the metadata, or another plan in between, replans."""
    s = paged_step(seed=15)
    plans = []
    real_plan = ops.plan_ragged_attention

    def counting_plan(*args, **kwargs):
        plans.append(1)
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(ops, "plan_ragged_attention", counting_plan)

    def call():
        return flash_attn_varlen_func(
            s["q"], s["k"], s["v"], 37, s["cu_q"], 300,
            seqused_k=s["kv_lens"], causal=True, block_table=s["table"])

    first = call()
    assert torch.equal(call(), first) and len(plans) == 1
    s["kv_lens"][0] -= 5  # the step's sequence 0 is 5 tokens shorter
    ref, _ = reference(s["q"], *per_sequence(s), s["cu_q"])
    assert rel_err(call(), ref) < 1e-2 and len(plans) == 2
    ops.plan_ragged_attention_flashinfer(s["cu_q"], s["kv_indptr"],
                                         s["last"], **LAYER)  # another plan
    call()
    assert len(plans) == 3


def test_flash_attn_errors():
    s = paged_step(seed=14)
    args = (s["q"], s["k"], s["v"], 37, s["cu_q"], 300)
    with pytest.raises(NotImplementedError, match=r"dropout_p is not "
                                                  r"supported \(got 0\.1\)"):
        flash_attn_varlen_func(*args, dropout_p=0.1, block_table=s["table"],
                               seqused_k=s["kv_lens"])
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        flash_attn_varlen_func(*args, alibi_slopes=torch.ones(HQ),
                               block_table=s["table"], seqused_k=s["kv_lens"])
    with pytest.raises(NotImplementedError,
                       match=r"window_size \(4, 4\): only causal windows"):
        flash_attn_varlen_func(*args, window_size=(4, 4),
                               block_table=s["table"], seqused_k=s["kv_lens"])
    with pytest.raises(tailor.InvalidArgumentError) as e:
        flash_attn_varlen_func(*args, causal=True, block_table=s["table"])
    assert e.value.message == ("seqused_k: required with block_table (the KV "
                               "length of each sequence)")
