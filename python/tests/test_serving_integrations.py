"""tailor.integrations.vllm / .sglang: the fused-MoE drop-ins with vLLM's
and SGLang's signatures, with torch alone. What tailor serves matches the
reference; everything else reaches the framework's own kernel with the
caller's arguments unchanged."""

import collections
import dataclasses
from typing import Optional

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
import tailor.torch_ops  # noqa: E402
from tailor.integrations import sglang as tailor_sglang  # noqa: E402
from tailor.integrations import vllm as tailor_vllm  # noqa: E402


def make(T=17, H=64, I=32, E=8, k=2, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(T, H, generator=g).to(dtype)
    w1 = (torch.randn(E, 2 * I, H, generator=g) * 0.1).to(dtype)
    w2 = (torch.randn(E, H, I, generator=g) * 0.1).to(dtype)
    weights, ids = torch.randn(T, E, generator=g).softmax(-1).topk(k)
    return x, w1, w2, weights, ids.to(torch.int32)


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


class Recorder:
    """Stands in for the framework's kernel: records each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "framework"


def test_vllm_drop_in_serves_unquantized_silu():
    x, w1, w2, tw, ids = make()
    fallback = Recorder()
    fused_experts = tailor_vllm.make_fused_experts(fallback)
    out = fused_experts(x, w1, w2, tw, ids, inplace=False, activation="silu",
                        apply_router_weight_on_input=False,
                        global_num_experts=8, expert_map=None,
                        use_fp8_w8a8=False, w1_scale=None)
    ref = tailor.torch_ops.fused_experts_reference(x, w1, w2, tw, ids)
    assert fallback.calls == [] and rel_err(out, ref) < 2e-2
    h = x.clone()
    assert fused_experts(h, w1, w2, tw, ids, inplace=True) is h


@pytest.mark.parametrize("change", [
    {"activation": "gelu"}, {"apply_router_weight_on_input": True},
    {"use_fp8_w8a8": True}, {"dtype": torch.float16}])
def test_vllm_drop_in_hands_the_rest_to_vllm(change):
    x, w1, w2, tw, ids = make(dtype=change.pop("dtype", torch.bfloat16))
    fallback = Recorder()
    fused_experts = tailor_vllm.make_fused_experts(fallback)
    assert fused_experts(x, w1, w2, tw, ids, **change) == "framework"
    (args, kwargs), = fallback.calls
    assert args[0] is x and args[1] is w1 and args[4] is ids
    for name, value in change.items():
        assert kwargs[name] == value


TopK = collections.namedtuple("StandardTopKOutput",
                              "topk_weights topk_ids router_logits")


@dataclasses.dataclass
class RunnerConfig:  # the fields of SGLang's MoeRunnerConfig used
    activation: str = "silu"
    inplace: bool = False
    no_combine: bool = False
    routed_scaling_factor: Optional[float] = None
    apply_router_weight_on_input: bool = False


def test_sglang_drop_in_serves_unquantized_silu():
    x, w1, w2, tw, ids = make()
    fallback = Recorder()
    fused_experts = tailor_sglang.make_fused_experts(fallback)
    topk = TopK(tw, ids, None)
    ref = tailor.torch_ops.fused_experts_reference(x, w1, w2, tw, ids)
    out = fused_experts(x, w1, w2, topk, RunnerConfig(), use_fp8_w8a8=False,
                        block_shape=None)
    assert fallback.calls == [] and rel_err(out, ref) < 2e-2
    scaled = fused_experts(x, w1, w2, topk,
                           RunnerConfig(routed_scaling_factor=2.0))
    assert rel_err(scaled, 2 * ref.float()) < 2e-2
    h = x.clone()
    assert fused_experts(h, w1, w2, topk, RunnerConfig(inplace=True)) is h


@pytest.mark.parametrize("config,extra", [
    (RunnerConfig(activation="gelu"), {}),
    (RunnerConfig(no_combine=True), {}),
    (RunnerConfig(), {"b1": "bias"}),
    (RunnerConfig(), {"use_int8_w8a16": True}),
])
def test_sglang_drop_in_hands_the_rest_to_sglang(config, extra):
    x, w1, w2, tw, ids = make()
    fallback = Recorder()
    fused_experts = tailor_sglang.make_fused_experts(fallback)
    topk = TopK(tw, ids, None)
    assert fused_experts(x, w1, w2, topk, config, **extra) == "framework"
    (args, kwargs), = fallback.calls
    assert args[3] is topk and args[4] is config
    if "b1" in extra:
        assert args[5] == "bias"
    for name, value in extra.items():
        if name != "b1":
            assert kwargs[name] == value
