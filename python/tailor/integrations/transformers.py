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
import weakref

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


# ---- FP8 experts (transformers' finegrained FP8) -----------------------------
#
# A model loaded with FineGrainedFP8Config swaps its experts for FP8Experts
# (transformers.integrations.finegrained_fp8), dispatched through a second
# interface, ALL_FP8_EXPERTS_FUNCTIONS, by the same experts_implementation
# name; "tailor" is registered there too. tailor runs the block-wise case
# (weight_block_size [128, 128], float32 scale_inv, dynamic activation
# quantization per token in 1 x 128 groups: vLLM's use_fp8_w8a8 with
# block_shape), gate_up_proj [E, 2I, H] e4m3 being w1 and down_proj w2.
# Other FP8 layouts (static activation scales, UE8M0 scales, FP4 experts,
# per-tensor weights), custom gates and the rest of the bf16 path's
# exclusions run transformers' own: "grouped_mm" on CUDA, the module's eager
# loop elsewhere, with a one-time warning naming the reason; so does a
# runtime whose backend has no FP8 experts yet (tailor's Unimplemented).

_FP8_BLOCK = (128, 128)
_fp8_unimplemented = set()  # devices whose runtime refused FP8 experts


def _fp8_unsupported(module, hidden_states):
    """Why tailor cannot run this FP8 call ("" when it can)."""
    block = getattr(module, "block_size", None)
    checks = (
        (getattr(module, "has_gate", True), "experts without a gate"),
        (not getattr(module, "has_bias", False), "expert biases"),
        (not getattr(module, "_is_expert_parallel", False),
         "expert parallelism"),
        (getattr(module, "activation_scheme", "") == "dynamic",
         f"activation_scheme {getattr(module, 'activation_scheme', None)!r}"
         f" (dynamic only)"),
        (block is not None and tuple(block) == _FP8_BLOCK,
         f"weight_block_size {block} ([128, 128] only)"),
        (module.gate_up_proj.dtype == torch.float8_e4m3fn,
         f"expert weights of dtype {module.gate_up_proj.dtype}"),
        (module.gate_up_proj_scale_inv.dtype == torch.float32,
         "scales other than float32"),
        (all(getattr(module, name, None) is None for name in (
            "gate_softcap", "swiglu_alpha", "limit")) and _is_silu(module),
         "a custom gate or an activation other than SiLU"),
        (hidden_states.dtype == torch.bfloat16,
         f"dtype {hidden_states.dtype} (bf16 only)"),
        (not torch.is_grad_enabled() or not hidden_states.requires_grad,
         "autograd (inference only)"),
        (hidden_states.device not in _fp8_unimplemented,
         f"FP8 experts on {hidden_states.device} (not in this build)"),
    )
    for ok, reason in checks:
        if not ok:
            return reason
    return ""


def _fp8_fallback(module, hidden_states, top_k_index, top_k_weights, reason):
    from transformers.integrations import finegrained_fp8 as fp8
    if hidden_states.is_cuda:
        _warn_once(module, reason, "grouped_mm")
        return fp8.ALL_FP8_EXPERTS_FUNCTIONS["grouped_mm"](
            module, hidden_states, top_k_index, top_k_weights)
    _warn_once(module, reason, "eager")
    eager = type(module).forward.__wrapped__  # the module's own loop
    return eager(module, hidden_states, top_k_index, top_k_weights)


def tailor_fp8_experts_forward(module, hidden_states, top_k_index,
                               top_k_weights):
    """The FP8 ExpertsInterface forward (see above): [T, H] bf16 ->
    [T, H] bf16."""
    reason = _fp8_unsupported(module, hidden_states)
    if reason:
        return _fp8_fallback(module, hidden_states, top_k_index,
                             top_k_weights, reason)
    try:
        return tailor.torch_ops.fused_experts(
            hidden_states.contiguous(), module.gate_up_proj,
            module.down_proj, top_k_weights, top_k_index, use_fp8_w8a8=True,
            w1_scale=module.gate_up_proj_scale_inv,
            w2_scale=module.down_proj_scale_inv,
            block_shape=list(_FP8_BLOCK))
    except (tailor.UnimplementedError, NotImplementedError) as error:
        _fp8_unimplemented.add(hidden_states.device)
        return _fp8_fallback(module, hidden_states, top_k_index,
                             top_k_weights, f"FP8 experts ({error})")


def register_fp8():
    """Registers "tailor" in transformers' FP8 experts interface when the
    installed transformers has one (done on import)."""
    try:
        from transformers.integrations import finegrained_fp8 as fp8
        interface = fp8.ALL_FP8_EXPERTS_FUNCTIONS
    except (ImportError, AttributeError):
        return False
    interface.register(NAME, tailor_fp8_experts_forward)
    return True


register_fp8()


# ---- paged attention for continuous batching ---------------------------------
#
# transformers' continuous batching (model.generate_batch, its
# ContinuousBatchingManager and PagedAttentionCache) writes each step's keys
# and values into its paged cache, reads back every sequence's KV packed
# [1, Hkv, Σk, D], and calls the model's attention function with
# cu_seq_lens_q / cu_seq_lens_k (causal, no mask for implementations that are
# neither "sdpa" nor "paged|eager"). "tailor_paged" is that function on
# tailor's ragged attention: the packed KV is laid out in pages of
# PAGED_PAGE_SIZE tokens per sequence (one copy; the index is built once per
# step) and attended with one ragged plan per step, reused by every layer
# whose cu_seq_lens tensors are unchanged.
#
#     import tailor.integrations.transformers  # registers "tailor_paged"
#     model.set_attn_implementation("tailor_paged")
#     outputs = model.generate_batch(prompts, generation_config=...)
#
# transformers 5.x admits only "sdpa", "paged|eager" and flash-named
# implementations in continuous batching (ContinuousBatchingManager.
# switch_to_cb_friendly_attn raises for any other name, and a name with
# "flash" in it is looked up as a flash kernel); importing this module
# wraps that method so that a model set to "tailor_paged" keeps it, and
# changes nothing for any other implementation. bf16 / float16 models;
# dropout, attention sinks (s_aux) and output_attentions are refused.

PAGED_NAME = "tailor_paged"
PAGED_PAGE_SIZE = 16  # tailor's CUDA kernels take pages of 8..256 tokens

from tailor.integrations import flash_attn as _flash  # noqa: E402

_paged_local = threading.local()


def _page_layout(cu_seq_lens_k, device):
    """(gathered row -> paged slot index, block table [B, pages] int32,
    KV lengths [B] int32) of the packed KV, cached for this step's
    cu_seq_lens_k tensor."""
    cached = getattr(_paged_local, "layout", None)
    if (cached is not None and cached[0]() is cu_seq_lens_k and
            cached[1] == cu_seq_lens_k._version):
        return cached[2]
    cu = cu_seq_lens_k.to("cpu", torch.int64)
    lens = cu[1:] - cu[:-1]
    pages = (lens + PAGED_PAGE_SIZE - 1) // PAGED_PAGE_SIZE
    first_page = torch.cumsum(pages, 0) - pages
    rows = torch.arange(int(cu[-1]))
    seq = torch.searchsorted(cu[1:], rows, right=True)
    slots = first_page[seq] * PAGED_PAGE_SIZE + (rows - cu[seq])
    width = max(int(pages.max()) if len(pages) else 0, 1)
    table = first_page[:, None] + torch.arange(width)[None, :]
    layout = (slots.to(device), table.to(device, torch.int32),
              lens.to(device, torch.int32), int(pages.sum()))
    _paged_local.layout = (weakref.ref(cu_seq_lens_k),
                           cu_seq_lens_k._version, layout)
    return layout


def tailor_paged_attention_forward(module, query, key, value, attention_mask,
                                   dropout=0.0, scaling=None,
                                   sliding_window=None, softcap=None,
                                   is_causal=None, s_aux=None, **kwargs):
    """transformers' attention function signature for continuous batching:
    query [1, Hq, Σq, D], key / value [1, Hkv, Σk, D] (every sequence's KV,
    packed), cu_seq_lens_q / cu_seq_lens_k in kwargs -> ([1, Σq, Hq, D],
    None)."""
    if dropout or s_aux is not None or kwargs.get("output_attentions"):
        raise NotImplementedError(
            "tailor: tailor_paged attention: dropout, attention sinks (s_aux) "
            "and output_attentions are not supported")
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None or cu_k is None or query.shape[0] != 1:
        raise NotImplementedError(
            "tailor: tailor_paged attention runs under continuous batching "
            "(model.generate_batch: packed sequences with cu_seq_lens_q and "
            "cu_seq_lens_k); use it there, or another implementation")
    slots, table, lens, num_pages = _page_layout(cu_k, key.device)
    heads_kv, dim = key.shape[1], key.shape[3]
    paged = (num_pages * PAGED_PAGE_SIZE, heads_kv, dim)
    k_pages = key.new_zeros(paged).index_copy_(0, slots, key[0].transpose(0, 1))
    v_pages = value.new_zeros(paged).index_copy_(0, slots,
                                                 value[0].transpose(0, 1))
    pages = (num_pages, PAGED_PAGE_SIZE, heads_kv, dim)
    out = _flash.flash_attn_varlen_func(
        query[0].transpose(0, 1), k_pages.view(pages), v_pages.view(pages),
        kwargs.get("max_length_q"), cu_q.to(torch.int32), None,
        seqused_k=lens, block_table=table, softmax_scale=scaling,
        causal=True if is_causal is None else bool(is_causal),
        window_size=(sliding_window - 1, 0) if sliding_window else None,
        softcap=softcap or 0.0)
    return out.unsqueeze(0), None


def _keep_tailor_paged(switch):
    """ContinuousBatchingManager.switch_to_cb_friendly_attn, leaving a model
    set to "tailor_paged" as it is."""
    def switch_to_cb_friendly_attn(self, model, *args, **kwargs):
        if model.config._attn_implementation == PAGED_NAME:
            return None
        return switch(self, model, *args, **kwargs)
    switch_to_cb_friendly_attn._tailor_wrapped = True
    return switch_to_cb_friendly_attn


def register_paged_attention():
    """Registers "tailor_paged" in transformers' AttentionInterface and
    lets continuous batching keep it (done on import; calling it again is
    harmless)."""
    from transformers import AttentionInterface
    AttentionInterface.register(PAGED_NAME, tailor_paged_attention_forward)
    try:
        from transformers.generation.continuous_batching import \
            continuous_api as _cb
    except ImportError:
        return
    manager = _cb.ContinuousBatchingManager
    switch = manager.switch_to_cb_friendly_attn
    if not getattr(switch, "_tailor_wrapped", False):
        manager.switch_to_cb_friendly_attn = _keep_tailor_paged(switch)


register_paged_attention()
