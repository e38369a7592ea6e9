"""Accuracy of a transformers MoE model's logits that top-k routing flips
do not hide (shared by test_transformers_integration.py and
gpu/check_transformers_cuda.py).

A bf16 model's top-k expert choice is discontinuous: two experts whose
router probabilities are within a rounding step of each other swap when
any earlier op rounds differently, and that token's MLP output then
changes by the whole difference between two experts. Comparing two bf16
implementations' logits therefore measures how often they flip a near
tie, not how exact either is. Here each run is compared against a float32
copy of the model that is forced to take the SAME experts the run took at
every layer (its weights still come from the float32 router's softmax,
renormalized as the model does): the remaining error is the run's
arithmetic alone. flips() counts the tokens whose expert sets differ
between two runs.
"""

import contextlib
import copy

import torch


def routers(model):
    """The model's top-k routers (modules whose forward returns
    (router_logits, router_scores, router_indices)), in layer order."""
    return [m for m in model.modules() if type(m).__name__.endswith(
        ("TopKRouter", "TopkRouter"))]


@contextlib.contextmanager
def recorded_routing(model):
    """Yields a list that collects each router call's expert ids [T, k]."""
    seen = []
    hooks = [r.register_forward_hook(
        lambda mod, args, out: seen.append(out[2].detach().clone()))
        for r in routers(model)]
    try:
        yield seen
    finally:
        for h in hooks:
            h.remove()


def _renormalizes(config):
    # Mixtral always renormalizes its top-k; Qwen3-MoE when norm_topk_prob.
    return getattr(config, "norm_topk_prob", True)


@contextlib.contextmanager
def pinned_routing(model, routing):
    """Within the block, the routers of `model` return the expert ids of
    `routing` (one [T, k] entry per router call, in call order) with
    weights from their own softmax, renormalized as the config says."""
    calls = iter(list(routing))
    renorm = _renormalizes(model.config)

    def pin(mod, args, out):
        logits, scores, _ = out
        ids = next(calls).to(logits.device)
        probs = torch.softmax(logits.float(), dim=-1).gather(-1, ids)
        if renorm:
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return logits, probs.to(scores.dtype), ids

    hooks = [r.register_forward_hook(pin) for r in routers(model)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def float32_copy(model):
    """A float32 "eager" copy of `model` (same weights, upcast)."""
    ref = copy.deepcopy(model).float()
    ref.set_experts_implementation("eager")
    return ref


def run_recorded(model, **inputs):
    """(float32 logits, the routing this run took)."""
    with torch.no_grad(), recorded_routing(model) as routing:
        logits = model(**inputs).logits.float()
    return logits, routing


def pinned_reference(ref_model, routing, **inputs):
    """float32 logits of `ref_model` taking `routing`'s experts."""
    with torch.no_grad(), pinned_routing(ref_model, routing):
        return ref_model(**inputs).logits.float()


def flips(routing_a, routing_b):
    """Tokens (router calls summed) whose expert sets differ."""
    return sum(int((a.sort(-1).values != b.sort(-1).values).any(-1).sum())
               for a, b in zip(routing_a, routing_b))
