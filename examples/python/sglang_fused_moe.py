"""tailor in place of SGLang's fused MoE path — runnable with torch alone.

tailor.integrations.sglang.make_fused_experts(SGLang's fused_experts) has
SGLang's signature (hidden_states, w1, w2, topk_output, moe_runner_config,
b1, b2, quantization arguments), runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor and everything else on SGLang's own kernel (its docstring
says how to install it). StandardTopKOutput and MoeRunnerConfig below stand
in for SGLang's own objects (the fields used), so this file runs without
SGLang.
"""

import dataclasses
from typing import NamedTuple, Optional

import torch

import tailor.torch_ops
from tailor.integrations.sglang import make_fused_experts


class StandardTopKOutput(NamedTuple):  # sglang.srt.layers.moe.topk
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    router_logits: torch.Tensor


@dataclasses.dataclass
class MoeRunnerConfig:  # sglang.srt.layers.moe.moe_runner (fields used here)
    activation: str = "silu"
    inplace: bool = True
    no_combine: bool = False
    routed_scaling_factor: Optional[float] = None
    apply_router_weight_on_input: bool = False
    num_experts: Optional[int] = None
    num_local_experts: Optional[int] = None


def sglang_select_experts(hidden_states, router_logits, top_k):
    """SGLang's fused_topk with renormalize=True."""
    weights, ids = torch.topk(router_logits.softmax(-1, dtype=torch.float32),
                              top_k)
    weights = weights / weights.sum(-1, keepdim=True)
    return StandardTopKOutput(weights, ids.to(torch.int32), router_logits)


def main():
    torch.manual_seed(1)
    T, H, I, E, k = 29, 256, 64, 32, 8  # E and k of Qwen3-30B-A3B, small dims
    dtype = torch.bfloat16
    w13_weight = (torch.randn(E, 2 * I, H) * 0.05).to(dtype)
    w2_weight = (torch.randn(E, H, I) * 0.05).to(dtype)
    x = torch.randn(T, H).to(dtype)
    topk_output = sglang_select_experts(x, torch.randn(T, E), k)

    def sglang_kernel(*args, **kwargs):
        raise NotImplementedError("this demo only takes the tailor path")

    fused_experts = make_fused_experts(sglang_kernel)
    ref = tailor.torch_ops.fused_experts_reference(
        x, w13_weight, w2_weight, topk_output.topk_weights,
        topk_output.topk_ids)

    # 1. SGLang's default: inplace into hidden_states
    h = x.clone()
    out = fused_experts(h, w13_weight, w2_weight, topk_output,
                        MoeRunnerConfig(inplace=True))
    assert out is h
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"1. fused_experts (inplace) T={T} E={E} k={k}: rel err {err:.1e}")
    assert err < 2e-2

    # 2. routed_scaling_factor (DeepSeek-style) scales the combined output
    scaled = fused_experts(x, w13_weight, w2_weight, topk_output,
                           MoeRunnerConfig(inplace=False,
                                           routed_scaling_factor=2.5))
    err = ((scaled.float() - 2.5 * ref.float()).norm() /
           (2.5 * ref.float()).norm()).item()
    print(f"2. routed_scaling_factor=2.5: rel err {err:.1e}")
    assert err < 2e-2

    # 3. compiled, as SGLang's torch.compile path runs it
    @torch.compile(fullgraph=True)
    def moe_block(h, logits):
        weights, ids = torch.topk(logits.softmax(-1), k)
        weights = weights / weights.sum(-1, keepdim=True)
        return torch.ops.tailor.fused_experts(h, w13_weight, w2_weight,
                                              weights, ids.to(torch.int32))

    logits = torch.randn(T, E)
    compiled = moe_block(x, logits)
    eager_out = fused_experts(x, w13_weight, w2_weight,
                              sglang_select_experts(x, logits, k),
                              MoeRunnerConfig(inplace=False))
    err = ((compiled.float() - eager_out.float()).norm() /
           eager_out.float().norm()).item()
    print(f"3. torch.compile(fullgraph=True): rel err vs eager {err:.1e}")
    assert err < 1e-2
    print("stats:", tailor.stats()["cpu"]["launches_per_op"])


if __name__ == "__main__":
    main()
