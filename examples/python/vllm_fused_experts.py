"""tailor in place of vLLM's fused MoE path — runnable with torch alone.

tailor.integrations.vllm.make_fused_experts(vllm's fused_experts) has
vLLM's fused_experts signature, runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor and everything else on vLLM's own kernel (its docstring
says how to install it). This script checks it on CPU tensors against a
plain-torch reference, inside torch.compile(fullgraph=True), with expert
parallelism.
"""

import torch

import tailor.torch_ops
from tailor.integrations.vllm import make_fused_experts


def vllm_select_experts(router_logits, top_k, renormalize=True):
    """vLLM's fused_topk: softmax, top-k, renormalize; int32 ids."""
    weights, ids = torch.topk(router_logits.softmax(-1, dtype=torch.float32),
                              top_k)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights, ids.to(torch.int32)


def main():
    torch.manual_seed(0)
    T, H, I, E, k = 37, 256, 128, 16, 4  # a small Qwen3-MoE-like layer
    dtype = torch.bfloat16
    w13_weight = (torch.randn(E, 2 * I, H) * 0.05).to(dtype)
    w2_weight = (torch.randn(E, H, I) * 0.05).to(dtype)
    hidden_states = torch.randn(T, H).to(dtype)
    topk_weights, topk_ids = vllm_select_experts(torch.randn(T, E), k)

    def vllm_reference(*args, **kwargs):  # stands in for vLLM's kernel
        raise NotImplementedError("this demo only takes the tailor path")

    fused_experts = make_fused_experts(vllm_reference)
    ref = tailor.torch_ops.fused_experts_reference(
        hidden_states, w13_weight, w2_weight, topk_weights, topk_ids)

    # 1. the call UnquantizedFusedMoEMethod makes
    out = fused_experts(hidden_states=hidden_states, w1=w13_weight,
                        w2=w2_weight, topk_weights=topk_weights,
                        topk_ids=topk_ids, inplace=False, activation="silu",
                        apply_router_weight_on_input=False,
                        global_num_experts=E, expert_map=None)
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"1. fused_experts  T={T} E={E} k={k}: rel err {err:.1e}")
    assert err < 2e-2

    # 2. inplace=True (vLLM's default for unquantized layers)
    h = hidden_states.clone()
    assert fused_experts(h, w13_weight, w2_weight, topk_weights, topk_ids,
                         inplace=True) is h
    assert torch.equal(h, out)
    print("2. inplace=True writes hidden_states and returns it")

    # 3. expert parallelism: this rank holds the even global experts
    expert_map = torch.full((2 * E,), -1, dtype=torch.int32)
    expert_map[0::2] = torch.arange(E, dtype=torch.int32)
    global_ids = topk_ids * 2 + (torch.rand(topk_ids.shape) < 0.5)
    ep = fused_experts(hidden_states, w13_weight, w2_weight, topk_weights,
                       global_ids.to(torch.int32), global_num_experts=2 * E,
                       expert_map=expert_map)
    ep_ref = tailor.torch_ops.fused_experts_reference(
        hidden_states, w13_weight, w2_weight, topk_weights, global_ids,
        expert_map)
    err = ((ep.float() - ep_ref.float()).norm() / ep_ref.float().norm()).item()
    print(f"3. expert_map (local experts only): rel err {err:.1e}")
    assert err < 2e-2

    # 4. inside torch.compile, as vLLM compiles its model
    @torch.compile(fullgraph=True)
    def moe_block(x, router_logits):
        weights, ids = vllm_select_experts(router_logits, k)
        return x + torch.ops.tailor.fused_experts(x, w13_weight, w2_weight,
                                                  weights, ids)

    logits = torch.randn(T, E)
    compiled = moe_block(hidden_states, logits)
    w, i = vllm_select_experts(logits, k)
    eager = hidden_states + fused_experts(hidden_states, w13_weight,
                                          w2_weight, w, i)
    assert torch.equal(compiled, eager)
    print("4. torch.compile(fullgraph=True): same bits as eager")
    print("stats:", tailor.stats()["cpu"]["launches_per_op"])


if __name__ == "__main__":
    main()
