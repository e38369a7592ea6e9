"""tailor's fused experts as a Hugging Face transformers experts
implementation (transformers 5.x, transformers.integrations.moe).

transformers 5 routes every MoE experts module decorated with
@use_experts_implementation (Mixtral, Qwen2/3-MoE, DeepSeek-V3, OLMoE, ...)
through its ExpertsInterface, keyed by config._experts_implementation
("eager", "grouped_mm", "batched_mm", ...). Importing this module registers
"tailor" there:

    import tailor.integrations.transformers  # registers "tailor"
    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=torch.bfloat16, experts_implementation="tailor")
    # or, on a loaded model:
    model.set_experts_implementation("tailor")

The forward is torch.ops.tailor.fused_experts (tailor.torch_ops) on the
module's own weights, no copy: gate_up_proj [E, 2I, H] (gate rows, then
up) is tailor's w13, down_proj [E, H, I] its w2. It serves the experts
tailor computes (SiLU gate, [gate; up] concatenated, nn.Linear layout, no
bias, no post-expert norm, bf16 or float32, all experts local, no autograd);
any other module, or a call that needs gradients, runs transformers' own
"grouped_mm" (CUDA) or "batched_mm" (elsewhere) instead, with a one-time
warning that names the reason.
"""

import threading

import torch
import transformers
from torch import nn

try:
    from transformers.integrations import moe as _hf_moe
    _hf_moe.ExpertsInterface.register  # noqa: B018  the 5.x interface
except (ImportError, AttributeError) as error:
    raise ImportError(
        f"tailor.integrations.transformers needs transformers 5.x (its "
        f"ExpertsInterface); this is transformers "
        f"{transformers.__version__}") from error

import tailor.torch_ops

NAME = "tailor"
_SILU_NAMES = ("silu", "swish")
_warned = set()
_warned_lock = threading.Lock()


def _unsupported(module, hidden_states):
    """Why tailor cannot run this call ("" when it can)."""
    checks = (
        (getattr(module, "has_gate", True), "experts without a gate"),
        (not getattr(module, "has_bias", False), "expert biases"),
        (getattr(module, "is_concatenated", True),
         "interleaved gate/up weights"),
        (not getattr(module, "is_transposed", False),
         "transposed expert weights"),
        (not getattr(module, "has_post_expert_norm", False),
         "a post-expert norm"),
        (not getattr(module, "_is_expert_parallel", False),
         "expert parallelism"),
        (type(module)._apply_gate is _hf_moe._default_apply_gate,
         "a custom gate function"),
        (_is_silu(module), "an activation other than SiLU"),
        (hidden_states.dtype in (torch.bfloat16, torch.float32),
         f"dtype {hidden_states.dtype} (bf16 and float32 only)"),
        (module.gate_up_proj.dtype == hidden_states.dtype
         and module.down_proj.dtype == hidden_states.dtype,
         "weights of another dtype than the activations"),
        (not (torch.is_grad_enabled()
              and (hidden_states.requires_grad
                   or module.gate_up_proj.requires_grad)),
         "autograd (tailor's experts are inference only; run under "
         "torch.no_grad() or torch.inference_mode())"),
    )
    for ok, reason in checks:
        if not ok:
            return reason
    return ""


def _is_silu(module):
    act = getattr(module, "act_fn", None)
    if isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation":
        return True
    config = getattr(module, "config", None)
    return getattr(config, "hidden_act", None) in _SILU_NAMES


def tailor_experts_forward(module, hidden_states, top_k_index,
                           top_k_weights):
    """The ExpertsInterface forward: hidden_states [T, H], top_k_index
    [T, k] (int64 ids in [0, E)), top_k_weights [T, k] -> [T, H] in the
    dtype of hidden_states."""
    reason = _unsupported(module, hidden_states)
    if reason:
        name = "grouped_mm" if hidden_states.is_cuda else "batched_mm"
        _warn_once(module, reason, name)
        return _hf_moe.ALL_EXPERTS_FUNCTIONS[name](
            module, hidden_states, top_k_index, top_k_weights)
    return tailor.torch_ops.fused_experts(
        hidden_states.contiguous(), module.gate_up_proj, module.down_proj,
        top_k_weights, top_k_index)


def _warn_once(module, reason, name):
    key = (type(module).__name__, reason)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    _hf_moe.logger.warning(
        f"experts_implementation=\"{NAME}\": {type(module).__name__} uses "
        f"{reason}; running transformers' \"{name}\" for it")


def register():
    """Registers "tailor" in transformers' ExpertsInterface (done on import;
    calling it again is harmless)."""
    _hf_moe.ExpertsInterface.register(NAME, tailor_experts_forward)


register()
