"""tailor.integrations.vllm's and .sglang's attention backend shapes on the
CPU backend, with torch alone: the metadata each framework hands its
backend is mimicked here field by field, and every step is checked
against torch's scaled_dot_product_attention over the same paged cache
(new keys written by the backend, unowned slots NaN, outputs poisoned).
Skipped when torch is not installed."""

import types

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tailor  # noqa: E402
import tailor.torch_ops as ops  # noqa: E402
from tailor.integrations import sglang as tailor_sglang  # noqa: E402
from tailor.integrations import vllm as tailor_vllm  # noqa: E402

HQ, HKV, D, PAGE = 8, 2, 64, 16
# (cached prefix, new query tokens): prefill, decode at T-1 / T / T+1,
# an empty query, a long chunk (577 KV), speculative tokens, a first token.
STEP = [(0, 37), (39, 1), (14, 1), (15, 1), (16, 1), (10, 0), (560, 17),
        (3, 4), (0, 1)]
PADDING = 3  # query rows past the step's tokens, as a CUDA graph pads


def make_step(seed=0, step=STEP, page=PAGE, dtype=torch.bfloat16):
    """A paged cache holding each sequence's prefix (page 0 and unowned
    slots NaN), the step's new keys / values / queries, and the truth."""
    g = torch.Generator().manual_seed(seed)
    kv_lens = [p + q for p, q in step]
    pages = [max(1, (n + page - 1) // page) for n in kv_lens]
    order = (torch.randperm(sum(pages) + 2, generator=g) + 1).to(torch.int32)
    k_cache = torch.full((sum(pages) + 3, page, HKV, D), float("nan"),
                         dtype=dtype)
    v_cache = k_cache.clone()
    table = torch.zeros((len(step), max(pages) + 1), dtype=torch.int32)
    truth_k, truth_v, slots, used = [], [], [], 0
    for b, ((prefix, q_len), n) in enumerate(zip(step, kv_lens)):
        table[b, :pages[b]] = order[used:used + pages[b]]
        used += pages[b]
        keys = torch.randn(n, HKV, D, generator=g).to(dtype)
        values = torch.randn(n, HKV, D, generator=g).to(dtype)
        t = torch.arange(n)
        flat = table[b, t // page].long() * page + t % page
        k_cache.view(-1, HKV, D)[flat[:prefix]] = keys[:prefix]
        v_cache.view(-1, HKV, D)[flat[:prefix]] = values[:prefix]
        truth_k.append(keys)
        truth_v.append(values)
        slots.append(flat[prefix:])
    q_lens = [q for _, q in step]
    total = sum(q_lens)
    rows = total + PADDING
    query = torch.randn(rows, HQ, D, generator=g).to(dtype)
    new_k = torch.cat([k[p:] for k, (p, _) in zip(truth_k, step)] +
                      [torch.randn(PADDING, HKV, D, generator=g).to(dtype)])
    new_v = torch.cat([v[p:] for v, (p, _) in zip(truth_v, step)] +
                      [torch.randn(PADDING, HKV, D, generator=g).to(dtype)])
    slot_mapping = torch.cat(slots + [torch.full((PADDING,), -1)])
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)),
                        dtype=torch.int32)
    return types.SimpleNamespace(
        step=step, k_cache=k_cache, v_cache=v_cache, table=table,
        query=query, new_k=new_k, new_v=new_v, slot_mapping=slot_mapping,
        cu_q=cu_q, kv_lens=torch.tensor(kv_lens, dtype=torch.int32),
        truth_k=truth_k, truth_v=truth_v, total=total, page=page)


def sdpa_reference(s, scale=None, window=None, softcap=0.0):
    """torch SDPA per sequence (float32 on the true keys): the last q_len
    positions of each sequence's KV, causal, optional window / cap."""
    out = torch.zeros(s.total, HQ, D)
    scale = scale or D ** -0.5
    for b, (prefix, q_len) in enumerate(s.step):
        if q_len == 0:
            continue
        lo = int(s.cu_q[b])
        q = s.query[lo:lo + q_len].float().transpose(0, 1)
        k = s.truth_k[b].float().repeat_interleave(HQ // HKV, 1)
        v = s.truth_v[b].float().repeat_interleave(HQ // HKV, 1)
        n = k.shape[0]
        pos = torch.arange(n - q_len, n)[:, None]
        key = torch.arange(n)[None, :]
        keep = key <= pos
        if window:
            keep &= key > pos - window
        if softcap:  # SDPA has no cap: the capped logits as an additive mask
            logits = torch.einsum("hqd,khd->hqk", q, k) * scale
            capped = softcap * torch.tanh(logits / softcap)
            bias = (capped - logits).masked_fill(~keep, float("-inf"))
            o = F.scaled_dot_product_attention(q, k.transpose(0, 1),
                                               v.transpose(0, 1),
                                               attn_mask=bias, scale=scale)
        else:
            o = F.scaled_dot_product_attention(q, k.transpose(0, 1),
                                               v.transpose(0, 1),
                                               attn_mask=keep, scale=scale)
        out[lo:lo + q_len] = o.transpose(0, 1)
    return out


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def assert_cache_holds_truth(s, k_cache, v_cache):
    for b, (prefix, q_len) in enumerate(s.step):
        t = torch.arange(prefix + q_len)
        pages = s.table[b, t // s.page].long()
        assert torch.equal(k_cache[pages, t % s.page], s.truth_k[b])
        assert torch.equal(v_cache[pages, t % s.page], s.truth_v[b])
    assert torch.isnan(k_cache[0]).all()  # the null page: never written


# ---- vLLM ------------------------------------------------------------------


def vllm_config(max_num_seqs=16, max_tokens=1024, capture=(1, 2, 4, 8)):
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            get_num_attention_heads=lambda parallel_config: HQ),
        parallel_config=None,
        scheduler_config=types.SimpleNamespace(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_tokens),
        compilation_config=types.SimpleNamespace(
            cudagraph_capture_sizes=list(capture)))


def kv_cache_spec(window=None, page=PAGE):
    return types.SimpleNamespace(block_size=page, num_kv_heads=HKV,
                                 head_size=D, dtype=torch.bfloat16,
                                 sliding_window=window)


def common_metadata(s):
    """vLLM's CommonAttentionMetadata fields, as the model runner fills
    them (device and host copies; padded slot_mapping)."""
    return types.SimpleNamespace(
        query_start_loc=s.cu_q.clone(), query_start_loc_cpu=s.cu_q.clone(),
        seq_lens=s.kv_lens.clone(), seq_lens_cpu=s.kv_lens.clone(),
        num_computed_tokens_cpu=torch.tensor([p for p, _ in s.step]),
        num_reqs=len(s.step), num_actual_tokens=s.total,
        max_query_len=max(q for _, q in s.step),
        max_seq_len=int(s.kv_lens.max()), block_table_tensor=s.table,
        slot_mapping=s.slot_mapping, causal=True)


def vllm_layer(window=None, softcap=None, scale=None):
    backend = tailor_vllm.TailorAttentionBackend
    return backend.get_impl_cls()(
        num_heads=HQ, head_size=D, scale=scale or D ** -0.5,
        num_kv_heads=HKV, alibi_slopes=None, sliding_window=window,
        kv_cache_dtype="auto", logits_soft_cap=softcap)


def vllm_kv_cache(s):
    shape = tailor_vllm.TailorAttentionBackend.get_kv_cache_shape(
        s.k_cache.shape[0], PAGE, HKV, D)
    kv = torch.stack([s.k_cache, s.v_cache])
    assert kv.shape == shape
    return kv


def vllm_forward(s, impl, metadata, kv):
    output = torch.full_like(s.query, float("nan"))
    result = impl.forward(None, s.query, s.new_k, s.new_v, kv, metadata,
                          output=output)
    assert result is output
    return output


@pytest.mark.parametrize("window,softcap", [(None, None), (24, 30.0)])
def test_vllm_backend_step_matches_sdpa(window, softcap):
    s = make_step(seed=1)
    builder = tailor_vllm.TailorAttentionBackend.get_builder_cls()(
        kv_cache_spec(window), ["layers.0.attn"], vllm_config(), "cpu")
    metadata = builder.build(0, common_metadata(s))
    kv = vllm_kv_cache(s)
    out = vllm_forward(s, vllm_layer(window, softcap), metadata, kv)
    ref = sdpa_reference(s, window=window, softcap=softcap or 0.0)
    assert not torch.isnan(out[:s.total]).any()
    assert rel_err(out[:s.total], ref) < 1e-2
    assert torch.isnan(out[s.total:]).all()  # padding rows untouched
    assert_cache_holds_truth(s, kv[0], kv[1])


def test_vllm_one_plan_serves_every_layer_of_the_step():
    s = make_step(seed=2)
    builder = tailor_vllm.TailorAttentionMetadataBuilder(
        kv_cache_spec(), ["layers.0.attn", "layers.1.attn"], vllm_config(),
        "cpu")
    plans = ops.ragged_plans_made()
    metadata = builder.build(0, common_metadata(s))
    assert ops.ragged_plans_made() == plans + 1
    layer, ref = vllm_layer(), sdpa_reference(s)
    for _ in range(2):  # two layers, their own caches, one plan
        out = vllm_forward(s, layer, metadata, vllm_kv_cache(s))
        assert rel_err(out[:s.total], ref) < 1e-2
    assert ops.ragged_plans_made() == plans + 1


def test_vllm_replans_when_another_group_planned_in_between():
    s, other = make_step(seed=3), make_step(seed=4, step=[(5, 3), (0, 9)])
    full = tailor_vllm.TailorAttentionMetadataBuilder(
        kv_cache_spec(), ["full"], vllm_config(), "cpu")
    windowed = tailor_vllm.TailorAttentionMetadataBuilder(
        kv_cache_spec(window=8), ["windowed"], vllm_config(), "cpu")
    metadata = full.build(0, common_metadata(s))
    windowed.build(0, common_metadata(other))  # replaces the plan
    out = vllm_forward(s, vllm_layer(), metadata, vllm_kv_cache(s))
    assert rel_err(out[:s.total], sdpa_reference(s)) < 1e-2


def test_vllm_graph_sized_workspace_and_smaller_steps():
    # Capture-sized metadata first (vLLM's build_for_cudagraph_capture),
    # then a smaller real step into the same padded buffers.
    builder = tailor_vllm.TailorAttentionMetadataBuilder(
        kv_cache_spec(), ["l"], vllm_config(max_num_seqs=4, capture=(1, 8)),
        "cpu")
    assert builder.max_batch == 8 and builder.max_tokens == 1024
    assert builder.cudagraph_support == tailor_vllm.CudaGraphSupport.ALWAYS
    big = make_step(seed=5, step=[(20, 1)] * 8)
    builder.build_for_cudagraph_capture(common_metadata(big))
    small = make_step(seed=6, step=[(40, 1), (3, 1), (16, 1)])
    metadata = builder.build(0, common_metadata(small))
    out = vllm_forward(small, vllm_layer(), metadata, vllm_kv_cache(small))
    assert rel_err(out[:small.total], sdpa_reference(small)) < 1e-2


def test_vllm_profiling_run_and_refusals():
    s = make_step(seed=7)
    out = torch.full_like(s.query, float("nan"))
    assert vllm_layer().forward(None, s.query, s.new_k, s.new_v,
                                vllm_kv_cache(s), None, output=out) is out
    assert (out == 0).all()
    with pytest.raises(tailor.InvalidArgumentError) as error:
        vllm_layer().forward(None, s.query, s.new_k, s.new_v,
                             vllm_kv_cache(s), None)
    assert error.value.message == ("output: required (the backend accepts "
                                   "vLLM's output buffer)")
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        tailor_vllm.TailorAttentionImpl(HQ, D, 0.1, HKV, [1.0] * HQ, None,
                                        "auto")
    with pytest.raises(NotImplementedError, match="kv_cache_dtype 'fp8'"):
        tailor_vllm.TailorAttentionImpl(HQ, D, 0.1, HKV, None, None, "fp8")
    backend = tailor_vllm.TailorAttentionBackend
    assert backend.get_name() == "TAILOR" and backend.accept_output_buffer
    assert backend.get_kv_cache_shape(10, 16, 2, 64) == (2, 10, 16, 2, 64)


# ---- SGLang ----------------------------------------------------------------


class ForwardMode:
    """SGLang's ForwardMode predicates for one mode name."""

    def __init__(self, name):
        self.name = name

    def is_decode(self):
        return self.name == "DECODE"

    def is_idle(self):
        return self.name == "IDLE"

    def is_decode_or_idle(self):
        return self.name in ("DECODE", "IDLE")

    def is_extend(self):
        return self.name in ("EXTEND", "TARGET_VERIFY", "DRAFT_EXTEND")

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"

    def is_draft_extend(self):
        return self.name == "DRAFT_EXTEND"

    def __repr__(self):
        return f"ForwardMode.{self.name}"


class TokenPool:
    """SGLang's MHATokenToKVPool: per layer, token-indexed buffers [slots,
    Hkv, D]; slot 0 (its first page) is the padding slot."""

    def __init__(self, s):
        self.k = [s.k_cache.view(-1, HKV, D)]
        self.v = [s.v_cache.view(-1, HKV, D)]

    def get_key_buffer(self, layer_id):
        return self.k[layer_id]

    def get_value_buffer(self, layer_id):
        return self.v[layer_id]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        self.k[layer.layer_id][loc] = cache_k
        self.v[layer.layer_id][loc] = cache_v


def sglang_runner(s, page=PAGE):
    """ModelRunner's fields the backend reads; req_to_token rows are the
    sequences' token slots in a shuffled request order (row 0: padding)."""
    reqs = torch.randperm(len(s.step), generator=torch.Generator()
                          .manual_seed(9)) + 1
    req_to_token = torch.zeros((len(s.step) + 1, 640), dtype=torch.int32)
    for b, n in enumerate(s.kv_lens.tolist()):
        t = torch.arange(n)
        req_to_token[reqs[b], :n] = (s.table[b, t // page] * page + t % page
                                     ).to(torch.int32)
    config = types.SimpleNamespace(num_attention_heads=2 * HQ, head_dim=D,
                                   get_num_kv_heads=lambda tp: HKV)
    return types.SimpleNamespace(
        model_config=config, tp_size=2, dtype=torch.bfloat16, page_size=page,
        device="cpu", sliding_window_size=None,
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token,
                                                size=len(s.step) + 1),
        server_args=types.SimpleNamespace(chunked_prefill_size=512,
                                          max_prefill_tokens=1024)), reqs


def radix_layer(scale=None, cap=0.0):
    return types.SimpleNamespace(
        layer_id=0, tp_q_head_num=HQ, tp_k_head_num=HKV, tp_v_head_num=HKV,
        head_dim=D, qk_head_dim=D, v_head_dim=D, scaling=scale or D ** -0.5,
        logit_cap=cap, sliding_window_size=-1, is_cross_attention=False)


def forward_batch(s, mode, reqs):
    q_lens = [q for _, q in s.step]
    return types.SimpleNamespace(
        forward_mode=ForwardMode(mode), batch_size=len(s.step),
        req_pool_indices=reqs.clone(), seq_lens=s.kv_lens.long(),
        seq_lens_cpu=s.kv_lens.long(), seq_lens_sum=int(s.kv_lens.sum()),
        out_cache_loc=s.slot_mapping[:s.total], extend_seq_lens_cpu=q_lens,
        extend_seq_lens=torch.tensor(q_lens),
        extend_prefix_lens_cpu=[p for p, _ in s.step],
        token_to_kv_pool=TokenPool(s))


def sglang_call(backend, s, batch, layer, rows=None):
    rows = rows or s.total
    q = s.query[:rows].reshape(rows, HQ * D)  # SGLang passes q flattened
    out = backend.forward(q, s.new_k[:rows], s.new_v[:rows], layer, batch)
    assert out.shape == (rows, HQ * D)
    return out.view(rows, HQ, D)


@pytest.mark.parametrize("cap", [0.0, 30.0])
def test_sglang_extend_matches_sdpa(cap):
    s = make_step(seed=11)
    runner, reqs = sglang_runner(s)
    backend = tailor_sglang.TailorAttnBackend(runner)
    batch = forward_batch(s, "EXTEND", reqs)
    backend.init_forward_metadata(batch)
    out = sglang_call(backend, s, batch, radix_layer(cap=cap))
    assert rel_err(out, sdpa_reference(s, softcap=cap)) < 1e-2
    assert_cache_holds_truth(s, s.k_cache, s.v_cache)


DECODE = [(39, 1), (14, 1), (15, 1), (16, 1), (0, 1), (560, 1)]


def test_sglang_decode_matches_sdpa():
    s = make_step(seed=12, step=DECODE)
    runner, reqs = sglang_runner(s)
    backend = tailor_sglang.TailorAttnBackend(runner)
    batch = forward_batch(s, "DECODE", reqs)
    backend.init_forward_metadata(batch)
    out = sglang_call(backend, s, batch, radix_layer())
    assert rel_err(out, sdpa_reference(s)) < 1e-2


def test_sglang_cuda_graph_capture_then_replay_of_a_smaller_batch():
    # Capture at bs 8 with SGLang's fill value (length 1, request row 0,
    # padding slot 0), then replay a real batch of 6 padded to 8: the
    # forward reads only the persistent buffers that replay refilled.
    s = make_step(seed=13, step=DECODE)
    runner, reqs = sglang_runner(s)
    backend = tailor_sglang.TailorAttnBackend(runner)
    backend.init_cuda_graph_state(max_bs=8, max_num_tokens=8)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    decode = ForwardMode("DECODE")
    backend.init_forward_metadata_capture_cuda_graph(
        8, 8, torch.zeros(8, dtype=torch.int64),
        torch.full((8,), fill, dtype=torch.int64), None, decode, None)
    captured = backend.forward_metadata
    padded_reqs = torch.cat([reqs, torch.zeros(2, dtype=reqs.dtype)])
    lens = torch.cat([s.kv_lens.long(), torch.full((2,), fill)])
    backend.init_forward_metadata_replay_cuda_graph(
        8, padded_reqs, lens, int(lens.sum()), None, decode, None, lens)
    assert backend.forward_metadata.page_table.data_ptr() == \
        captured.page_table.data_ptr()
    batch = forward_batch(s, "DECODE", padded_reqs)
    batch.out_cache_loc = torch.cat([s.slot_mapping[:s.total],
                                     torch.zeros(2, dtype=torch.int64)])
    s.query = torch.cat([s.query[:s.total], s.query[:2]])
    s.new_k, s.new_v = s.new_k[:s.total + 2], s.new_v[:s.total + 2]
    out = sglang_call(backend, s, batch, radix_layer(), rows=s.total + 2)
    assert rel_err(out[:s.total], sdpa_reference(s)) < 1e-2


def test_sglang_refusals():
    s = make_step(seed=14, step=DECODE)
    runner, reqs = sglang_runner(s)
    backend = tailor_sglang.TailorAttnBackend(runner)
    batch = forward_batch(s, "TARGET_VERIFY", reqs)
    with pytest.raises(NotImplementedError,
                       match="forward mode ForwardMode.TARGET_VERIFY"):
        backend.init_forward_metadata(batch)
    batch = forward_batch(s, "DECODE", reqs)
    backend.init_forward_metadata(batch)
    layer = radix_layer()
    layer.is_cross_attention = True
    with pytest.raises(NotImplementedError, match="cross attention"):
        sglang_call(backend, s, batch, layer)
    idle = forward_batch(s, "IDLE", reqs)
    backend.init_forward_metadata(idle)
    assert backend.forward(s.query[:0].reshape(0, HQ * D), None, None,
                           radix_layer(), idle).shape == (0, HQ * D)
