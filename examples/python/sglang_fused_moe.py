"""tailor in place of SGLang's fused MoE path — runnable with torch alone.

SGLang's Triton MoE runner calls
sglang.srt.layers.moe.fused_moe_triton.fused_moe.fused_experts:

    fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config,
                  b1=None, b2=None, use_fp8_w8a8=False, use_int8_w8a8=False,
                  use_int8_w8a16=False, use_int4_w4a16=False,
                  per_channel_quant=False, w1_scale=None, w2_scale=None,
                  w1_zp=None, w2_zp=None, a1_scale=None, a2_scale=None,
                  block_shape=None)

where topk_output is a StandardTopKOutput(topk_weights, topk_ids,
router_logits) and moe_runner_config a MoeRunnerConfig (activation,
inplace, no_combine, routed_scaling_factor, apply_router_weight_on_input,
...). The two stand-ins below carry those fields so this file runs without
SGLang; with SGLang installed, pass its own objects. tailor_fused_experts
has the signature above, runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor and returns everything else to SGLang's kernel. Install it
where SGLang looks the name up, e.g.

    import sglang.srt.layers.moe.fused_moe_triton.fused_moe as sgl_fused_moe
    sgl_fused_moe.fused_experts = make_tailor_fused_experts(
        sgl_fused_moe.fused_experts)

SGLang captures CUDA graphs for decode batch sizes: call
tailor.torch_ops.reserve(...) for the largest one (and for chunked prefill's
token budget) before capture.
"""

import dataclasses
from typing import NamedTuple, Optional

import torch

import tailor.torch_ops


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


def make_tailor_fused_experts(sglang_fused_experts):
    def tailor_fused_experts(hidden_states, w1, w2, topk_output,
                             moe_runner_config, b1=None, b2=None,
                             **quant_args):
        cfg = moe_runner_config
        supported = (cfg.activation == "silu" and not cfg.no_combine
                     and not cfg.apply_router_weight_on_input
                     and b1 is None and b2 is None
                     and not any(v is not None and v is not False
                                 for v in quant_args.values())
                     and hidden_states.dtype in (torch.bfloat16,
                                                 torch.float32))
        if not supported:
            return sglang_fused_experts(hidden_states, w1, w2, topk_output,
                                        moe_runner_config, b1, b2,
                                        **quant_args)
        topk_weights, topk_ids, _ = topk_output
        if cfg.routed_scaling_factor not in (None, 1.0):
            topk_weights = topk_weights * cfg.routed_scaling_factor
        return tailor.torch_ops.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids,
            inplace=cfg.inplace, activation="silu")
    return tailor_fused_experts


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

    fused_experts = make_tailor_fused_experts(sglang_kernel)
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
