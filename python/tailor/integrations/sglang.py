"""tailor in place of SGLang's unquantized fused MoE (torch only to import).

SGLang's Triton MoE runner calls
sglang.srt.layers.moe.fused_moe_triton.fused_moe.fused_experts:

    fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config,
                  b1=None, b2=None, use_fp8_w8a8=False, ..., block_shape=None)

where topk_output is a StandardTopKOutput (topk_weights, topk_ids,
router_logits) and moe_runner_config a MoeRunnerConfig (activation,
inplace, no_combine, routed_scaling_factor, apply_router_weight_on_input,
...). make_fused_experts(sglang's) returns a function of that signature
that runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor.fused_experts and hands everything else (quantized
weights, biases, no_combine, router weights on the input) to SGLang's own.
Install it where SGLang looks the name up:

    import sglang.srt.layers.moe.fused_moe_triton.fused_moe as sgl_fused_moe
    from tailor.integrations import sglang as tailor_sglang
    sgl_fused_moe.fused_experts = tailor_sglang.make_fused_experts(
        sgl_fused_moe.fused_experts)

SGLang captures CUDA graphs for decode batch sizes: call
tailor.torch_ops.reserve(...) for the largest one (and for chunked
prefill's token budget) before capture. examples/python/sglang_fused_moe.py
runs it end to end.
"""

import torch

import tailor.torch_ops

_DTYPES = (torch.bfloat16, torch.float32)


def _quantized(quant_args):
    return any(v is not None and v is not False for v in quant_args.values())


def make_fused_experts(sglang_fused_experts):
    """SGLang's fused_experts signature on tailor; `sglang_fused_experts`
    runs the calls tailor does not serve."""

    def fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config,
                      b1=None, b2=None, **quant_args):
        cfg = moe_runner_config
        supported = (cfg.activation == "silu" and not cfg.no_combine
                     and not cfg.apply_router_weight_on_input
                     and b1 is None and b2 is None
                     and not _quantized(quant_args)
                     and hidden_states.dtype in _DTYPES)
        if not supported:
            return sglang_fused_experts(hidden_states, w1, w2, topk_output,
                                        moe_runner_config, b1, b2,
                                        **quant_args)
        topk_weights, topk_ids = topk_output[0], topk_output[1]
        if cfg.routed_scaling_factor not in (None, 1.0):
            topk_weights = topk_weights * cfg.routed_scaling_factor
        return tailor.torch_ops.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids,
            inplace=cfg.inplace, activation="silu")

    return fused_experts
