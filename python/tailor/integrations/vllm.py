"""tailor in place of vLLM's unquantized fused MoE (torch only to import).

vLLM's unquantized MoE layer (UnquantizedFusedMoEMethod) ends in
vllm.model_executor.layers.fused_moe.fused_moe.fused_experts:

    fused_experts(hidden_states, w1, w2, topk_weights, topk_ids,
                  inplace=False, activation="silu",
                  apply_router_weight_on_input=False,
                  global_num_experts=-1, expert_map=None, **quant_args)

with w1 = layer.w13_weight [E, 2I, H] (gate rows, then up), w2 =
layer.w2_weight [E, H, I], topk_* from FusedMoE.select_experts [T, k], and
expert_map [E_global] (global -> local id, -1 elsewhere) under expert
parallelism. make_fused_experts(vllm's) returns a function of that
signature that runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor.fused_experts and hands everything else (fp8, int8,
other activations, router weights on the input) to vLLM's own. Install it
in every module that imported the name, e.g. from a plugin
(vllm.general_plugins entry point):

    import vllm.model_executor.layers.fused_moe.fused_moe as vllm_fused_moe
    from tailor.integrations import vllm as tailor_vllm
    vllm_fused_moe.fused_experts = tailor_vllm.make_fused_experts(
        vllm_fused_moe.fused_experts)

tailor's ops are torch custom ops with fake implementations, so they run
inside vLLM's torch.compile graphs and its captured CUDA graphs; call
tailor.torch_ops.reserve(...) with max_num_batched_tokens at model load so
the workspace never grows during capture. examples/python/
vllm_fused_experts.py runs it end to end.
"""

import torch

import tailor.torch_ops

_DTYPES = (torch.bfloat16, torch.float32)


def make_fused_experts(vllm_fused_experts):
    """vLLM's fused_experts signature on tailor; `vllm_fused_experts` runs
    the calls tailor does not serve."""

    def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids,
                      inplace=False, activation="silu",
                      apply_router_weight_on_input=False,
                      global_num_experts=-1, expert_map=None, **quant_args):
        supported = (activation == "silu" and not apply_router_weight_on_input
                     and not any(quant_args.values())
                     and hidden_states.dtype in _DTYPES)
        if not supported:
            return vllm_fused_experts(
                hidden_states, w1, w2, topk_weights, topk_ids,
                inplace=inplace, activation=activation,
                apply_router_weight_on_input=apply_router_weight_on_input,
                global_num_experts=global_num_experts, expert_map=expert_map,
                **quant_args)
        return tailor.torch_ops.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids, inplace=inplace,
            activation=activation, global_num_experts=global_num_experts,
            expert_map=expert_map)

    return fused_experts
