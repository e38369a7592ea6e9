"""FP8 (e4m3) MoE through torch.ops.tailor.fused_experts on the CPU backend
with vLLM's keywords (use_fp8_w8a8, w1_scale, w2_scale, a1_scale, a2_scale,
block_shape): numerics against plain torch on the dequantized weights with
the activations quantized by tailor's rule, the mode read from the scales,
and the argument errors. Skipped when torch is not installed."""

import pytest

torch = pytest.importorskip("torch")
import tailor.torch_ops as ops  # noqa: E402  registers torch.ops.tailor.*

E4M3 = torch.float8_e4m3fn


def quantize(x, group):
    """tailor's rule on rows of x [R, C] in groups of `group` columns:
    scale = max(amax, 1e-10) / 448, q = e4m3(x / scale) (round to nearest
    even). Returns the dequantized rows (float32)."""
    r, c = x.shape
    g = x.float().reshape(r, c // group, group)
    scale = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448
    return ((g / scale).to(E4M3).float() * scale).reshape(r, c)


def quantize_static(x, scale):
    return (x.float() / scale).to(E4M3).float() * scale


def make_weights(E, N, K, mode, g):
    w = torch.randn(E, N, K, generator=g) * 0.1
    if mode == "block":
        blocks = w.reshape(E, N // 128, 128, K // 128, 128)
        scale = blocks.abs().amax((2, 4)) / 448  # [E, N/128, K/128]
        q = (blocks / scale[:, :, None, :, None]).to(E4M3).reshape(E, N, K)
        deq = (q.float().reshape(blocks.shape) *
               scale[:, :, None, :, None]).reshape(E, N, K)
    elif mode == "per_channel":
        scale = w.abs().amax(-1, keepdim=True) / 448  # [E, N, 1] as vLLM
        q = (w / scale).to(E4M3)
        deq = q.float() * scale
    else:
        scale = w.abs().amax((1, 2)) / 448  # [E]
        q = (w / scale[:, None, None]).to(E4M3)
        deq = q.float() * scale[:, None, None]
    return q, scale, deq


def reference(x, w1d, w2d, tw, ids, quant_a1, quant_a2):
    out = torch.zeros(x.shape, dtype=torch.float64)
    inter = w2d.shape[2]
    xq = quant_a1(x.float()).double()
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w1d[e].double() @ xq[t]
            a = (torch.nn.functional.silu(h[:inter]) * h[inter:]).float()
            aq = quant_a2(a[None])[0].double()
            out[t] += float(tw[t, j]) * (w2d[e].double() @ aq)
    return out


def make(mode, T=33, H=256, I=128, E=8, k=2, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, H, generator=g).to(dtype)
    w1, s1, w1d = make_weights(E, 2 * I, H, mode, g)
    w2, s2, w2d = make_weights(E, H, I, mode, g)
    scores = torch.randn(T, E, generator=g).softmax(-1)
    tw, ids = torch.topk(scores, k)
    return x, (w1, s1, w1d), (w2, s2, w2d), tw, ids


def rel_err(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("mode", ["block", "per_channel", "per_tensor"])
def test_fp8_fused_experts_matches_torch(mode):
    x, (w1, s1, w1d), (w2, s2, w2d), tw, ids = make(mode)
    kwargs = {"use_fp8_w8a8": True, "w1_scale": s1, "w2_scale": s2}
    if mode == "block":
        kwargs["block_shape"] = [128, 128]
        qa1 = qa2 = lambda v: quantize(v, 128)
    elif mode == "per_channel":
        # Per token; the intermediate in the activation dtype first, as
        # vLLM's intermediate_cache2 and tailor's per-channel step.
        qa1 = lambda v: quantize(v, v.shape[1])  # noqa: E731
        qa2 = lambda v: quantize(v.to(x.dtype), v.shape[1])  # noqa: E731
    else:
        a1, a2 = torch.tensor(0.01), torch.tensor(0.05)
        kwargs.update(a1_scale=a1, a2_scale=a2)
        qa1 = lambda v: quantize_static(v, 0.01)  # noqa: E731
        qa2 = lambda v: quantize_static(v, 0.05)  # noqa: E731
    y = ops.fused_experts(x, w1, w2, tw, ids, **kwargs)
    assert y.dtype == x.dtype and not y.isnan().any()
    assert rel_err(y, reference(x, w1d, w2d, tw, ids, qa1, qa2)) < 1e-2
    h = x.clone()  # the in-place op computes the same bits
    torch.ops.tailor.inplace_fused_experts(
        h, w1, w2, tw, ids, "silu", -1, None, True, s1, s2,
        kwargs.get("a1_scale"), kwargs.get("a2_scale"),
        kwargs.get("block_shape"))
    assert torch.equal(h, y)


def test_fp8_errors():
    x, (w1, s1, _), (w2, s2, _), tw, ids = make("block", T=3)
    with pytest.raises(ValueError, match="w1_scale: given without "
                                         "use_fp8_w8a8=True"):
        ops.fused_experts(x, w1, w2, tw, ids, w1_scale=s1)
    with pytest.raises(ValueError, match="w1_scale and w2_scale are required"):
        ops.fused_experts(x, w1, w2, tw, ids, use_fp8_w8a8=True, w1_scale=s1)
    with pytest.raises(ValueError, match=r"quant.block_shape: only \[128, "
                                         r"128\]"):
        ops.fused_experts(x, w1, w2, tw, ids, use_fp8_w8a8=True, w1_scale=s1,
                          w2_scale=s2, block_shape=[64, 128])
    _, (t1, ts1, _), (t2, ts2, _), _, _ = make("per_tensor", T=3)
    with pytest.raises(ValueError, match="quant.a1_scale: required in "
                                         "per-tensor mode"):
        ops.fused_experts(x, t1, t2, tw, ids, use_fp8_w8a8=True,
                          w1_scale=ts1, w2_scale=ts2)


def test_fp8_opcheck():
    x, (w1, s1, _), (w2, s2, _), tw, ids = make("block", T=5)
    torch.library.opcheck(
        torch.ops.tailor.fused_experts.default,
        (x, w1, w2, tw, ids.to(torch.int32)),
        {"use_fp8_w8a8": True, "w1_scale": s1, "w2_scale": s2,
         "block_shape": [128, 128]},
        test_utils=("test_faketensor",))  # test_schema multiplies e4m3
