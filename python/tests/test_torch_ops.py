"""torch.ops.tailor.* on the CPU backend: numerics against plain torch,
opcheck (schema, fake implementation, dispatch), torch.compile(fullgraph),
the vLLM calling conventions. Skipped when torch is not installed."""

import pytest

torch = pytest.importorskip("torch")
import tailor  # noqa: E402
import tailor.torch_ops as ops  # noqa: E402  registers torch.ops.tailor.*


def make(T=9, H=64, I=32, E=8, k=2, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    w1 = (torch.randn(E, 2 * I, H, generator=g) * 0.1).to(dtype)
    w2 = (torch.randn(E, H, I, generator=g) * 0.1).to(dtype)
    scores = torch.randn(T, E, generator=g).softmax(-1)
    topk_weights, topk_ids = torch.topk(scores, k)  # int64 ids, as torch gives
    return x, w1, w2, topk_weights, topk_ids


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5),
                                       (torch.bfloat16, 2e-2)])
def test_fused_experts_matches_torch(dtype, tol):
    x, w1, w2, tw, ids = make(dtype=dtype)
    y = torch.ops.tailor.fused_experts(x, w1, w2, tw, ids)
    assert y.dtype == dtype and y.shape == x.shape
    assert rel_err(y, ops.fused_experts_reference(x, w1, w2, tw, ids)) < tol


def test_int32_ids_and_expert_map():
    x, w1, w2, tw, ids = make(E=4)
    ids = (ids % 4) * 2  # global ids in [0, 8): even ones are local
    expert_map = torch.tensor([0, -1, 1, -1, 2, -1, 3, -1], dtype=torch.int32)
    y = torch.ops.tailor.fused_experts(x, w1, w2, tw, ids.to(torch.int32),
                                       False, "silu", 8, expert_map)
    ref = ops.fused_experts_reference(x, w1, w2, tw, ids, expert_map)
    assert rel_err(y, ref) < 1e-5


def test_inplace_variants():
    x, w1, w2, tw, ids = make()
    expected = torch.ops.tailor.fused_experts(x, w1, w2, tw, ids)
    h = x.clone()
    assert ops.fused_experts(h, w1, w2, tw, ids, inplace=True) is h
    assert torch.equal(h, expected)
    h = x.clone()
    torch.ops.tailor.inplace_fused_experts(h, w1, w2, tw, ids)
    assert torch.equal(h, expected)
    with pytest.raises(ValueError, match="inplace=True: a torch op cannot"):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, ids, True)


def test_errors():
    x, w1, w2, tw, ids = make()
    with pytest.raises(NotImplementedError, match="only 'silu'"):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, ids, False, "gelu")
    with pytest.raises(ValueError, match="global_num_experts: must be -1"):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, ids, False, "silu", 64)
    bad = ids.clone()
    bad[2, 0] = 8
    with pytest.raises(ValueError, match=r"topk_ids\[2,0\]: expert id 8 is "
                                         r"outside \[0, 8\)"):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, bad)


def test_errors_are_tailor_types_naming_this_ops_arguments():
    x, w1, w2, tw, ids = make()
    with pytest.raises(tailor.InvalidArgumentError) as error:
        torch.ops.tailor.fused_experts(x, w1[:, :, :32], w2, tw, ids)
    assert error.value.message.startswith("w1"), error.value.message
    assert "w13" not in error.value.message
    with pytest.raises(tailor.UnimplementedError,
                       match=r"^UNIMPLEMENTED: activation: 'gelu': only"):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, ids, False, "gelu")
    with pytest.raises(tailor.UnimplementedError,
                       match=r"^UNIMPLEMENTED: hidden_states: dtype "
                             r"torch.float16"):
        torch.ops.tailor.fused_experts(x.half(), w1.half(), w2.half(), tw,
                                       ids)
    with pytest.raises(tailor.InvalidArgumentError,
                       match="^INVALID_ARGUMENT: global_num_experts: "):
        torch.ops.tailor.fused_experts(x, w1, w2, tw, ids, False, "silu", 64)
    with pytest.raises(tailor.UnimplementedError,
                       match=r"^UNIMPLEMENTED: dtype: torch.float32: paged "
                             r"decode takes bf16 and float16 only"):
        ops.plan_paged_decode(torch.tensor([3]), num_qo_heads=4,
                              num_kv_heads=2, head_dim=64, page_size=16,
                              dtype=torch.float32)


def test_opcheck():
    x, w1, w2, tw, ids = make()
    torch.library.opcheck(torch.ops.tailor.fused_experts.default,
                          (x, w1, w2, tw, ids))
    torch.library.opcheck(torch.ops.tailor.inplace_fused_experts.default,
                          (x.clone(), w1, w2, tw, ids))


def test_torch_compile_fullgraph():
    x, w1, w2, tw, ids = make(dtype=torch.bfloat16)

    def layer(h, w1, w2, tw, ids):  # residual + MoE, as in a decoder layer
        return h + torch.ops.tailor.fused_experts(h, w1, w2, tw, ids)

    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for T in (9, 3, 17):  # ragged steps through one graph
        x, _, _, tw, ids = make(T=T, dtype=torch.bfloat16, seed=T)
        assert torch.equal(compiled(x, w1, w2, tw, ids),
                           layer(x, w1, w2, tw, ids))


def test_workspace_grows_outside_capture():
    ops.reserve("cpu", max_tokens=4, topk=2, num_experts=8, hidden=64,
                intermediate=32, dtype=torch.float32)
    x, w1, w2, tw, ids = make(T=40)
    y = torch.ops.tailor.fused_experts(x, w1, w2, tw, ids)
    assert rel_err(y, ops.fused_experts_reference(x, w1, w2, tw, ids)) < 1e-5


def make_decode(B=3, HQ=8, HKV=2, D=64, PAGE=16, PAGES=24, seed=0,
                dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, D, generator=g).to(dtype)
    k = torch.randn(PAGES, PAGE, HKV, D, generator=g).to(dtype)
    v = torch.randn(PAGES, PAGE, HKV, D, generator=g).to(dtype)
    lens = torch.tensor([37, 0, 100][:B], dtype=torch.int32)
    table = torch.randperm(PAGES, generator=g)[:B * 7].reshape(B, 7)
    return q, k, v, table.to(torch.int32), lens


def test_paged_decode_matches_torch_and_compiles():
    q, k, v, table, lens = make_decode()
    ops.plan_paged_decode(lens, num_qo_heads=8, num_kv_heads=2, head_dim=64,
                          page_size=16, dtype=torch.bfloat16)
    out = torch.ops.tailor.paged_decode(q, k, v, table, lens)
    ref = ops.paged_decode_reference(q, k, v, table, lens)
    assert rel_err(out, ref) < 2e-2
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # length 0
    torch.library.opcheck(torch.ops.tailor.paged_decode.default,
                          (q, k, v, table, lens))
    compiled = torch.compile(
        lambda *a: torch.ops.tailor.paged_decode(*a) * 2, fullgraph=True)
    assert torch.equal(compiled(q, k, v, table, lens), out * 2)


def test_paged_decode_needs_a_plan():
    import threading
    q, k, v, table, lens = make_decode()
    errors = []

    def run():  # a fresh thread has no plan
        try:
            torch.ops.tailor.paged_decode(q, k, v, table, lens)
        except tailor.FailedPreconditionError as e:
            errors.append(str(e))
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors and errors[0].startswith(
        "FAILED_PRECONDITION: ws: no decode plan for cpu on this thread; "
        "call tailor.torch_ops.plan_paged_decode")
