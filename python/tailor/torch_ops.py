"""torch custom ops over tailor (import tailor.torch_ops to register them).

MoE (below), paged decode (torch.ops.tailor.paged_decode with
plan_paged_decode) and ragged attention (torch.ops.tailor.ragged_attention
with plan_ragged_attention), at the end of this file.

  torch.ops.tailor.fused_experts(hidden_states, w1, w2, topk_weights,
      topk_ids, inplace=False, activation="silu", global_num_experts=-1,
      expert_map=None) -> Tensor
      vLLM's fused_experts arguments; out of place (a torch op cannot return
      its input: inplace=True raises, use the next op or fused_experts()).
  torch.ops.tailor.inplace_fused_experts(hidden_states, w1, w2,
      topk_weights, topk_ids, activation="silu", global_num_experts=-1,
      expert_map=None) -> None
      The same, written into hidden_states (vLLM's inplace_fused_experts).
  fused_experts(...)  the Python function with vLLM's exact semantics:
      inplace=True writes hidden_states and returns it.

FP8 weights (vLLM's use_fp8_w8a8=True; both ops and fused_experts take the
keywords use_fp8_w8a8, w1_scale, w2_scale, a1_scale, a2_scale, block_shape
after expert_map): w1 and w2 float8_e4m3fn with float32 scales, the mode
read from them as vLLM does: block_shape [128, 128] -> block scales
(w1_scale [E, 2I/128, H/128], w2_scale [E, H/128, I/128], activations
quantized per token in 1 x 128 groups); one scale per expert -> per tensor
(a1_scale and a2_scale, the static activation scales, required); else per
channel (w1_scale [E, 2I] or [E, 2I, 1], activations per token). CPU
runtimes and CUDA runtimes (sm_80 and newer) run every mode; per channel
on CUDA needs H > 2 * I (its bf16 intermediate shares the workspace's
hidden rows), else raises tailor.FailedPreconditionError naming the rule.

Shapes (vLLM's): hidden_states [T, H] bf16 | f32, w1 [E, 2I, H] (gate rows,
then up), w2 [E, H, I], topk_weights [T, k] (any float dtype: f32 is used),
topk_ids [T, k] int32 | int64, expert_map [E_global] int32 (global id ->
local id, -1 elsewhere) with global_num_experts = E_global.

Both ops have fake (meta) implementations, so torch.compile(fullgraph=True)
traces them, and they are safe to capture in a CUDA graph: each (thread,
device) keeps one tailor Workspace, reserved outside capture and grown only
outside capture (a step larger than the reservation during capture raises:
call reserve() first, e.g. with the server's max_num_batched_tokens), and
every launch goes on torch's current stream.
"""

import threading
from typing import Optional

import torch

import tailor
from tailor import moe
from tailor._errors import invalid_argument, renamed

_local = threading.local()
_LIMIT_FIELDS = ("max_tokens", "topk", "num_experts", "hidden",
                 "intermediate")


def _runtime(device):
    return tailor.runtime_for(device)


def _dtype_name(dtype):
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float32:
        return "f32"
    raise tailor.UnimplementedError(
        12, f"hidden_states: dtype {dtype}: bf16 and float32 only")


def _workspace(device, limits, dtype):
    """The (thread, device) Workspace, grown to `limits` when needed."""
    cache = getattr(_local, "workspaces", None)
    if cache is None:
        cache = _local.workspaces = {}
    key = (str(device), dtype)
    entry = cache.get(key)
    if entry is not None and all(entry[1][f] >= limits[f]
                                 for f in _LIMIT_FIELDS):
        return entry[0]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        held = entry[1] if entry else None
        raise tailor.FailedPreconditionError(
            9, f"ws: the {device} workspace ({held}) is too small for this "
            f"step ({limits}) and cannot grow during CUDA graph capture; call "
            f"tailor.torch_ops.reserve(...) before capturing")
    grown = dict(limits)
    if entry is not None:
        for f in _LIMIT_FIELDS:
            grown[f] = max(grown[f], entry[1][f])
    ws = entry[0] if entry is not None else moe.Workspace()
    moe.reserve_workspace(_runtime(device), ws, dtype=dtype, **grown)
    cache[key] = (ws, grown)
    return ws


def reserve(device, *, max_tokens, topk, num_experts, hidden, intermediate,
            dtype=torch.bfloat16):
    """Reserves this thread's workspace on `device` for steps up to these
    limits now (before CUDA graph capture)."""
    _workspace(torch.device(device),
               {"max_tokens": max_tokens, "topk": topk,
                "num_experts": num_experts, "hidden": hidden,
                "intermediate": intermediate}, _dtype_name(dtype))


def _check_experts(w1, expert_map, global_num_experts):
    if expert_map is None:
        if global_num_experts not in (-1, w1.shape[0]):
            raise invalid_argument(
                f"global_num_experts: must be -1 or w1.shape[0] "
                f"({w1.shape[0]}) without expert_map, got "
                f"{global_num_experts}")
    elif global_num_experts not in (-1, expert_map.shape[0]):
        raise invalid_argument(
            f"global_num_experts: must equal expert_map.shape[0] "
            f"({expert_map.shape[0]}), got {global_num_experts}")


def _fp8_kwargs(w1, use_fp8_w8a8, w1_scale, w2_scale, a1_scale, a2_scale,
                block_shape):
    """moe.experts' FP8 keywords from vLLM's, or {} without use_fp8_w8a8."""
    given = {"w1_scale": w1_scale, "w2_scale": w2_scale,
             "a1_scale": a1_scale, "a2_scale": a2_scale,
             "block_shape": block_shape}
    if not use_fp8_w8a8:
        for name, value in given.items():
            if value is not None:
                raise invalid_argument(f"{name}: given without use_fp8_w8a8=True")
        return {}
    if w1_scale is None or w2_scale is None:
        raise invalid_argument("use_fp8_w8a8=True: w1_scale and w2_scale are "
                         "required")

    def f32(t, *shape):
        if t is None:
            return None
        t = t.to(torch.float32).contiguous()
        return t.reshape(*shape) if shape else t

    experts = w1.shape[0]
    if block_shape is not None:
        mode, s1, s2 = "block", f32(w1_scale), f32(w2_scale)
    elif w1_scale.numel() == experts:
        mode = "per_tensor"
        s1, s2 = f32(w1_scale, experts), f32(w2_scale, experts)
    else:
        mode = "per_channel"
        s1, s2 = f32(w1_scale, experts, -1), f32(w2_scale, experts, -1)
    static = mode == "per_tensor"
    return {"scale_mode": mode, "w13_scale": s1, "w2_scale": s2,
            "a1_scale": f32(a1_scale, 1) if static else f32(a1_scale),
            "a2_scale": f32(a2_scale, 1) if static else f32(a2_scale),
            "block_shape": None if block_shape is None else list(block_shape)}


def _run(hidden_states, w1, w2, topk_weights, topk_ids, out, activation,
         global_num_experts, expert_map, fp8=None):
    if activation != "silu":
        raise tailor.UnimplementedError(
            12, f"activation: {activation!r}: only 'silu' is supported")
    _check_experts(w1, expert_map, global_num_experts)
    device = hidden_states.device
    tokens, hidden = hidden_states.shape
    topk = topk_ids.shape[1]
    ws = _workspace(device,
                    {"max_tokens": tokens, "topk": topk,
                     "num_experts": w1.shape[0], "hidden": hidden,
                     "intermediate": w2.shape[2]},
                    _dtype_name(hidden_states.dtype))
    if topk_ids.dtype != torch.int32:
        topk_ids = topk_ids.to(torch.int32)
    if topk_weights.dtype != torch.float32:
        topk_weights = topk_weights.float()
    if expert_map is not None and expert_map.dtype != torch.int32:
        expert_map = expert_map.to(torch.int32)
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else None)
    try:
        moe.experts(_runtime(device), hidden_states.contiguous(), w1, w2,
                    topk_weights.contiguous(), topk_ids.contiguous(), out,
                    ws, expert_map=expert_map, stream=stream,
                    **(fp8 or {}))
    except tailor.Error as error:  # the C API's w13 is this op's w1
        raise renamed(error, {"w13": "w1"}) from None


def _fused_experts_impl(hidden_states, w1, w2, topk_weights, topk_ids,
                        inplace=False, activation="silu",
                        global_num_experts=-1, expert_map=None,
                        use_fp8_w8a8=False, w1_scale=None, w2_scale=None,
                        a1_scale=None, a2_scale=None, block_shape=None):
    if inplace:
        raise invalid_argument(
            "inplace=True: a torch op cannot return its input; call "
            "torch.ops.tailor.inplace_fused_experts, or "
            "tailor.torch_ops.fused_experts(..., inplace=True)")
    out = torch.empty_like(hidden_states)
    fp8 = _fp8_kwargs(w1, use_fp8_w8a8, w1_scale, w2_scale, a1_scale,
                      a2_scale, block_shape)
    _run(hidden_states, w1, w2, topk_weights, topk_ids, out, activation,
         global_num_experts, expert_map, fp8)
    return out


def _fused_experts_fake(hidden_states, w1, w2, topk_weights, topk_ids,
                        inplace=False, activation="silu",
                        global_num_experts=-1, expert_map=None,
                        use_fp8_w8a8=False, w1_scale=None, w2_scale=None,
                        a1_scale=None, a2_scale=None, block_shape=None):
    return torch.empty_like(hidden_states)


def _inplace_fused_experts_impl(hidden_states, w1, w2, topk_weights,
                                topk_ids, activation="silu",
                                global_num_experts=-1, expert_map=None,
                                use_fp8_w8a8=False, w1_scale=None,
                                w2_scale=None, a1_scale=None, a2_scale=None,
                                block_shape=None):
    fp8 = _fp8_kwargs(w1, use_fp8_w8a8, w1_scale, w2_scale, a1_scale,
                      a2_scale, block_shape)
    _run(hidden_states, w1, w2, topk_weights, topk_ids, hidden_states,
         activation, global_num_experts, expert_map, fp8)


def _inplace_fused_experts_fake(hidden_states, w1, w2, topk_weights,
                                topk_ids, activation="silu",
                                global_num_experts=-1, expert_map=None,
                                use_fp8_w8a8=False, w1_scale=None,
                                w2_scale=None, a1_scale=None, a2_scale=None,
                                block_shape=None):
    return None


# Registered directly (define + impl per device + fake), as vLLM's
# direct_register_custom_op does: torch.library.custom_op's eager wrapper
# costs ~80 us a call here, this ~10 us.
_ARGS = ("Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
         "{inplace}str activation='silu', int global_num_experts=-1, "
         "Tensor? expert_map=None, bool use_fp8_w8a8=False, "
         "Tensor? w1_scale=None, Tensor? w2_scale=None, "
         "Tensor? a1_scale=None, Tensor? a2_scale=None, "
         "int[]? block_shape=None")
_library = torch.library.Library("tailor", "DEF")
_library.define("fused_experts(Tensor hidden_states, " +
                _ARGS.format(inplace="bool inplace=False, ") + ") -> Tensor")
_library.define("inplace_fused_experts(Tensor(a!) hidden_states, " +
                _ARGS.format(inplace="") + ") -> ()")
for _key in ("CPU", "CUDA"):
    _library.impl("fused_experts", _fused_experts_impl, _key)
    _library.impl("inplace_fused_experts", _inplace_fused_experts_impl, _key)
torch.library.register_fake("tailor::fused_experts", _fused_experts_fake,
                            lib=_library)
torch.library.register_fake("tailor::inplace_fused_experts",
                            _inplace_fused_experts_fake, lib=_library)


def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids,
                  inplace=False, activation="silu", global_num_experts=-1,
                  expert_map=None, use_fp8_w8a8=False, w1_scale=None,
                  w2_scale=None, a1_scale=None, a2_scale=None,
                  block_shape=None):
    """vLLM's fused_experts(...) contract: the output, which is
    hidden_states itself when inplace=True."""
    fp8 = (use_fp8_w8a8, w1_scale, w2_scale, a1_scale, a2_scale, block_shape)
    if inplace:
        torch.ops.tailor.inplace_fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids, activation,
            global_num_experts, expert_map, *fp8)
        return hidden_states
    return torch.ops.tailor.fused_experts(
        hidden_states, w1, w2, topk_weights, topk_ids, False, activation,
        global_num_experts, expert_map, *fp8)


def fused_experts_reference(hidden_states, w1, w2, topk_weights, topk_ids,
                            expert_map=None):
    """Plain torch (float32 math) vLLM fused_experts, for tests."""
    x = hidden_states.float()
    out = torch.zeros_like(x)
    inter = w2.shape[2]
    ids = topk_ids.long()
    if expert_map is not None:
        ids = expert_map.long()[ids]
    for j in range(ids.shape[1]):
        for e in range(w1.shape[0]):
            rows = (ids[:, j] == e).nonzero().flatten()
            if rows.numel() == 0:
                continue
            h = x[rows] @ w1[e].float().t()
            a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
            out[rows] += (topk_weights[rows, j].float()[:, None] *
                          (a @ w2[e].float().t()))
    return out.to(hidden_states.dtype)


# ---- paged decode ----------------------------------------------------------
#
#   plan_paged_decode(seq_lens, num_qo_heads=, num_kv_heads=, head_dim=,
#                     page_size=, dtype=, device=)     outside any graph
#   torch.ops.tailor.paged_decode(q, k_cache, v_cache, block_table, seq_lens,
#                                 sm_scale=0.0, logits_soft_cap=0.0) -> out
#
# As in FlashInfer's wrappers, planning is host work on the step's lengths
# (vLLM: the attention metadata builder) and the op, which runs the plan of
# this thread and device, is what torch.compile traces and CUDA graphs
# capture: replay after each step's plan, with the new lengths and block
# table in the captured buffers. sm_scale 0: 1 / sqrt(head_dim).

from tailor import attention as _attention  # noqa: E402

_DECODE_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def _decode_workspace(device, batch, shape, dtype):
    cache = getattr(_local, "decode", None)
    if cache is None:
        cache = _local.decode = {}
    key = str(device)
    entry = cache.get(key)
    if entry is not None and entry[1] == shape + (dtype,) and entry[2] >= batch:
        return entry[0]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise tailor.FailedPreconditionError(
            9, "ws: plan_paged_decode cannot grow the decode workspace "
            "during CUDA graph capture; plan the largest batch first (or "
            "pass max_batch) before capturing")
    ws = _attention.DecodeWorkspace()
    max_batch = max(batch, entry[2] if entry is not None else 0)
    heads_q, heads_kv, head_dim, page_size = shape
    _attention.reserve_decode_workspace(
        _runtime(device), ws, max_batch=max_batch, num_qo_heads=heads_q,
        num_kv_heads=heads_kv, head_dim=head_dim, page_size=page_size,
        dtype=dtype)
    cache[key] = (ws, shape + (dtype,), max_batch)
    return ws


def plan_paged_decode(seq_lens, *, num_qo_heads, num_kv_heads, head_dim,
                      page_size, dtype=torch.bfloat16, device=None,
                      max_batch=None):
    """Plans the next decode step of this thread on `device` (default: the
    device of seq_lens) for the lengths `seq_lens` ([B] int; a device tensor
    is copied to the host: a sync). Reserves the workspace for max_batch
    (default B) the first time, outside any graph."""
    device = torch.device(device) if device is not None else seq_lens.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    host_lens = seq_lens.to("cpu", torch.int32).contiguous()
    dtype_name = _DECODE_DTYPES.get(dtype)
    if dtype_name is None:
        raise tailor.UnimplementedError(
            12, f"dtype: {dtype}: paged decode takes bf16 and float16 only")
    shape = (num_qo_heads, num_kv_heads, head_dim, page_size)
    ws = _decode_workspace(device, max(max_batch or 0, host_lens.shape[0]),
                           shape, dtype_name)
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else None)
    _attention.plan_decode(_runtime(device), host_lens, ws,
                           page_size=page_size, num_qo_heads=num_qo_heads,
                           num_kv_heads=num_kv_heads, head_dim=head_dim,
                           dtype=dtype_name, stream=stream)


def _paged_decode_impl(q, k_cache, v_cache, block_table, seq_lens,
                       sm_scale=0.0, logits_soft_cap=0.0):
    device = q.device
    entry = getattr(_local, "decode", {}).get(str(device))
    if entry is None:
        raise tailor.FailedPreconditionError(
            9, f"ws: no decode plan for {device} on this thread; call "
            f"tailor.torch_ops.plan_paged_decode before "
            f"torch.ops.tailor.paged_decode")
    out = torch.empty_like(q)
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else None)
    _attention.run_decode(_runtime(device), q, k_cache, v_cache, block_table,
                          seq_lens, out, entry[0],
                          sm_scale=sm_scale or None,
                          logits_soft_cap=logits_soft_cap, stream=stream)
    return out


def _paged_decode_fake(q, k_cache, v_cache, block_table, seq_lens,
                       sm_scale=0.0, logits_soft_cap=0.0):
    return torch.empty_like(q)


_library.define("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, "
                "Tensor block_table, Tensor seq_lens, float sm_scale=0.0, "
                "float logits_soft_cap=0.0) -> Tensor")
for _key in ("CPU", "CUDA"):
    _library.impl("paged_decode", _paged_decode_impl, _key)
torch.library.register_fake("tailor::paged_decode", _paged_decode_fake,
                            lib=_library)


def paged_decode_reference(q, k_cache, v_cache, block_table, seq_lens,
                           sm_scale=None):
    """Plain torch paged decode (float32 math), for tests."""
    batch, heads_q, head_dim = q.shape
    page_size, heads_kv = k_cache.shape[1], k_cache.shape[2]
    scale = sm_scale or head_dim ** -0.5
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b in range(batch):
        n = int(seq_lens[b])
        if n == 0:
            continue
        t = torch.arange(n, device=q.device)
        pages = block_table[b, t // page_size].long()
        keys = k_cache[pages, t % page_size].float()  # [n, Hkv, D]
        vals = v_cache[pages, t % page_size].float()
        group = heads_q // heads_kv
        keys = keys.repeat_interleave(group, dim=1)  # [n, Hq, D]
        vals = vals.repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), keys) * scale
        out[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), vals)
    return out.to(q.dtype)


# ---- ragged attention -------------------------------------------------------
#
#   plan_ragged_attention(q_indptr, kv_lens, num_qo_heads=, num_kv_heads=,
#       head_dim=, page_size=, dtype=, causal=True, window_left=-1,
#       device=)                                        outside any graph
#   plan_ragged_attention_flashinfer(qo_indptr, kv_indptr, kv_last_page_len,
#       ...)                                            the same, FlashInfer's
#   torch.ops.tailor.ragged_attention(q, k_cache, v_cache, block_table,
#       page_indptr=None, kv_lens=None, sm_scale=0.0, logits_soft_cap=0.0,
#       return_lse=False) -> (out, lse)
#
# A plan/run pair, as paged decode: planning reads host metadata (vLLM's
# query_start_loc and seq_lens, or FlashInfer's indptrs) and is host work
# once per step; the op runs the plan of this thread and device, so a CUDA
# graph captures the run only and replays after each step's plan with new
# lengths and block tables in the captured buffers (the plan's Σq and batch
# at most those captured). out [Σq', Hq, D] (rows past the plan's Σq are
# unspecified); lse [Σq', Hq] float32 when return_lse, else an empty
# tensor. sm_scale 0: 1 / sqrt(head_dim).

from tailor import _errors  # noqa: E402


def _ragged_workspace(device, batch, tokens, shape):
    """This thread's ragged workspace on `device`, reserved for at least
    (batch, tokens) of the layer `shape` (outside any graph)."""
    cache = getattr(_local, "ragged", None)
    if cache is None:
        cache = _local.ragged = {}
    key = str(device)
    entry = cache.get(key)
    if (entry is not None and entry[1] == shape and entry[2] >= batch and
            entry[3] >= tokens):
        return entry[0]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("tailor: plan_ragged_attention cannot grow the "
                           "ragged workspace during CUDA graph capture")
    same = entry is not None and entry[1] == shape
    max_batch = max(batch, entry[2] if same else 0)
    max_tokens = max(tokens, entry[3] if same else 0)
    ws = _attention.RaggedWorkspace()
    _attention.reserve_ragged_workspace(
        _runtime(device), ws, max_batch=max_batch, max_tokens=max_tokens,
        **shape)
    cache[key] = (ws, shape, max_batch, max_tokens)
    return ws


def _ragged_shape(num_qo_heads, num_kv_heads, head_dim, page_size, dtype,
                  causal, window_left):
    """The layer keywords of tailor.attention's ragged calls."""
    dtype_name = _DECODE_DTYPES.get(dtype)
    if dtype_name is None:
        raise NotImplementedError(f"tailor: ragged attention dtype {dtype}: "
                                  f"bf16 and float16 only")
    return dict(num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads,
                head_dim=head_dim, page_size=page_size, dtype=dtype_name,
                causal=causal, window_left=window_left)


def ragged_plans_made():
    """How many ragged plans this thread has started (callers that cache a
    plan, as the flash_attn shim, see whether another plan replaced it)."""
    return getattr(_local, "ragged_plans", 0)


def _ragged_plan_setup(first, device, shape, batch, tokens, max_batch,
                       max_tokens):
    """(runtime, workspace, stream) of a plan on `device` (default: the
    device of `first`); counts the plan (ragged_plans_made)."""
    _local.ragged_plans = ragged_plans_made() + 1
    device = torch.device(device) if device is not None else first.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    ws = _ragged_workspace(device, max(max_batch or 0, batch),
                           max(max_tokens or 0, tokens), shape)
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else None)
    return _runtime(device), ws, stream


def _host_i32(x):
    """x as a contiguous int32 CPU tensor (a device tensor is copied: a
    sync)."""
    return x.to("cpu", torch.int32).contiguous()


def _last(indptr):
    return int(indptr[-1]) if indptr.numel() else 0


def plan_ragged_attention(q_indptr, kv_lens, *, num_qo_heads, num_kv_heads,
                          head_dim, page_size, dtype=torch.bfloat16,
                          causal=True, window_left=-1, device=None,
                          max_batch=None, max_tokens=None):
    """Plans the next ragged step of this thread on `device` (default: the
    device of q_indptr) from vLLM's metadata: q_indptr [B + 1]
    (query_start_loc) and kv_lens [B] (seq_lens). Reserves the workspace
    for max_batch / max_tokens (default: this step's) when it must grow,
    outside any graph."""
    host_indptr, host_lens = _host_i32(q_indptr), _host_i32(kv_lens)
    shape = _ragged_shape(num_qo_heads, num_kv_heads, head_dim, page_size,
                          dtype, causal, window_left)
    runtime, ws, stream = _ragged_plan_setup(
        q_indptr, device, shape, host_lens.shape[0], _last(host_indptr),
        max_batch, max_tokens)
    _attention.plan_ragged(runtime, host_indptr, host_lens, ws, stream=stream,
                           **shape)


def plan_ragged_attention_flashinfer(qo_indptr, kv_indptr, kv_last_page_len,
                                     *, num_qo_heads, num_kv_heads, head_dim,
                                     page_size, dtype=torch.bfloat16,
                                     causal=True, window_left=-1,
                                     device=None, max_batch=None,
                                     max_tokens=None):
    """plan_ragged_attention from FlashInfer's paged metadata; run with
    block_table = kv_indices and page_indptr = kv_indptr."""
    host_qo, host_kv = _host_i32(qo_indptr), _host_i32(kv_indptr)
    host_last = _host_i32(kv_last_page_len)
    shape = _ragged_shape(num_qo_heads, num_kv_heads, head_dim, page_size,
                          dtype, causal, window_left)
    runtime, ws, stream = _ragged_plan_setup(
        qo_indptr, device, shape, host_last.shape[0], _last(host_qo),
        max_batch, max_tokens)
    _attention.plan_ragged_flashinfer(runtime, host_qo, host_kv, host_last,
                                      ws, stream=stream, **shape)


def run_ragged_attention(q, k_cache, v_cache, block_table, out, *,
                         page_indptr=None, kv_lens=None, lse=None,
                         sm_scale=None, logits_soft_cap=0.0,
                         caller="torch.ops.tailor.ragged_attention"):
    """Runs this thread's ragged plan on q's device into the caller's `out`
    (and `lse` when given), on torch's current stream: what an attention
    backend that is handed its output buffer calls (vLLM's, SGLang's).
    Not a torch op: call it where torch.compile does not trace (inside the
    framework's own attention custom op)."""
    device = q.device
    entry = getattr(_local, "ragged", {}).get(str(device))
    if entry is None:
        raise _errors.FailedPreconditionError(
            9, f"ws: no ragged plan on this thread and device; call "
               f"tailor.torch_ops.plan_ragged_attention before {caller}")
    stream = (torch.cuda.current_stream(device).cuda_stream
              if device.type == "cuda" else None)
    _attention.run_ragged(_runtime(device), q, k_cache, v_cache, block_table,
                          out, entry[0], page_indptr=page_indptr,
                          kv_lens=kv_lens, lse=lse, sm_scale=sm_scale or None,
                          logits_soft_cap=logits_soft_cap, stream=stream)


def _ragged_attention_impl(q, k_cache, v_cache, block_table, page_indptr=None,
                           kv_lens=None, sm_scale=0.0, logits_soft_cap=0.0,
                           return_lse=False):
    out = torch.empty_like(q)
    lse = (q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)
           if return_lse else q.new_empty((0,), dtype=torch.float32))
    run_ragged_attention(q, k_cache, v_cache, block_table, out,
                         page_indptr=page_indptr, kv_lens=kv_lens,
                         lse=lse if return_lse else None, sm_scale=sm_scale,
                         logits_soft_cap=logits_soft_cap)
    return out, lse


def _ragged_attention_fake(q, k_cache, v_cache, block_table, page_indptr=None,
                           kv_lens=None, sm_scale=0.0, logits_soft_cap=0.0,
                           return_lse=False):
    lse_shape = (q.shape[0], q.shape[1]) if return_lse else (0,)
    return torch.empty_like(q), q.new_empty(lse_shape, dtype=torch.float32)


_library.define("ragged_attention(Tensor q, Tensor k_cache, Tensor v_cache, "
                "Tensor block_table, Tensor? page_indptr=None, "
                "Tensor? kv_lens=None, float sm_scale=0.0, "
                "float logits_soft_cap=0.0, bool return_lse=False) -> "
                "(Tensor, Tensor)")
for _key in ("CPU", "CUDA"):
    _library.impl("ragged_attention", _ragged_attention_impl, _key)
torch.library.register_fake("tailor::ragged_attention",
                            _ragged_attention_fake, lib=_library)


def ragged_attention_reference(q, k_cache, v_cache, q_indptr, kv_lens,
                               pages_of, causal=True, window_left=-1,
                               sm_scale=None, logits_soft_cap=0.0):
    """Plain torch ragged attention (float64 math), for tests: (out [Σq, Hq,
    D] in q's dtype, lse [Σq, Hq] float32). pages_of(b) -> the page ids of
    sequence b (a LongTensor)."""
    heads_q, head_dim = q.shape[1], q.shape[2]
    page_size, heads_kv = k_cache.shape[1], k_cache.shape[2]
    scale = sm_scale or head_dim ** -0.5
    total = int(q_indptr[-1])
    out = torch.zeros((total, heads_q, head_dim), dtype=torch.float64)
    lse = torch.full((total, heads_q), float("-inf"), dtype=torch.float64)
    for b in range(len(kv_lens)):
        begin, end, n = int(q_indptr[b]), int(q_indptr[b + 1]), int(kv_lens[b])
        if end == begin or n == 0:
            continue
        t = torch.arange(n)
        pages = pages_of(b)[t // page_size]
        group = heads_q // heads_kv
        keys = k_cache[pages, t % page_size].double().repeat_interleave(
            group, dim=1)  # [n, Hq, D]
        vals = v_cache[pages, t % page_size].double().repeat_interleave(
            group, dim=1)
        s = torch.einsum("qhd,nhd->hqn", q[begin:end].double(), keys) * scale
        if logits_soft_cap:
            s = logits_soft_cap * torch.tanh(s / logits_soft_cap)
        pos = (n - (end - begin) + torch.arange(end - begin))[:, None]
        allowed = torch.ones((end - begin, n), dtype=torch.bool)
        if causal:
            allowed &= t[None, :] <= pos
        if window_left >= 0:
            allowed &= t[None, :] >= pos - window_left
        s = s.masked_fill(~allowed, float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1)  # [Hq, q]
        p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)
        out[begin:end] = torch.einsum("hqn,nhd->qhd", p, vals)
        lse[begin:end] = row_lse.t()
    return out.to(q.dtype), lse.float()
