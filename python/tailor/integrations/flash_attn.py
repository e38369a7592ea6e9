"""FlashAttention's flash_attn_varlen_func over tailor's ragged attention.

    from tailor.integrations.flash_attn import flash_attn_varlen_func

takes the arguments vLLM passes to FlashAttention 3 on Hopper, so a server
can swap it in:

  paged     q [Σq, Hq, D], k / v the KV caches [num_blocks, page_size, Hkv,
            D] (NHD, or HND through strides), block_table [B, max_blocks]
            int32, seqused_k [B] int32 (KV lengths, new tokens included),
            cu_seqlens_q [B + 1] int32
  varlen    k / v [Σk, Hkv, D] with cu_seqlens_k [B + 1]: run as pages of
            one token in FlashInfer's form (kv_indices = arange(Σk),
            page_indptr = cu_seqlens_k), which the CPU backend takes (the
            CUDA backend takes block tables only and says so)

causal queries are the last q_len of their KV (vLLM's and FlashAttention's
bottom-right alignment); window_size (left, right) with right 0 (or -1 under
causal) is a causal sliding window of `left`; softcap > 0 caps the logits;
softmax_scale None is 1 / sqrt(D). return_softmax_lse or return_attn_probs
return (out, lse) with lse [Hq, Σq] float32, FlashAttention's varlen layout
(FlashAttention's attention probabilities are never materialized here).
max_seqlen_q / max_seqlen_k, fa_version, num_splits, scheduler_metadata and
deterministic are accepted and not needed. Features tailor does not have
(dropout, ALiBi, q_v, FP8 descales, attention sinks) raise
NotImplementedError naming the argument.

A call plans from the host copy of its metadata (a device-to-host copy on
a GPU) unless this thread's last plan came from the same metadata tensors,
unmodified since (the same live tensor objects at the same torch version
counter, and no other plan in between), as when every layer of a step calls
it with the step's tensors. Writes that bypass torch's version counter
(another library writing the buffer in place) are not seen: plan
explicitly then. A server that captures CUDA graphs plans once per step
outside the graph (tailor.torch_ops.plan_ragged_attention, with the same
layer) and calls this function inside: during capture it runs the current
plan without planning.
"""

import threading
import weakref

import torch

import tailor.torch_ops as _ops
from tailor import _errors

__all__ = ["flash_attn_varlen_func"]


def _unsupported(dropout_p, **tensors):
    """NotImplementedError naming the first feature asked for: dropout, or
    a tensor argument that is set."""
    if dropout_p:
        raise NotImplementedError(
            f"tailor: flash_attn_varlen_func: dropout_p is not supported "
            f"(got {dropout_p!r})")
    for name, value in tensors.items():
        if value is not None:
            raise NotImplementedError(
                f"tailor: flash_attn_varlen_func: {name} is not supported")


def _window(window_size, causal):
    """(causal, window_left) of FlashAttention's window_size."""
    if window_size is None:
        return causal, -1
    left, right = (int(x) for x in window_size)
    if left < 0 and right < 0:
        return causal, -1
    if right == 0 or (causal and right < 0):
        return True, max(left, -1)  # causal, with a window when left >= 0
    raise NotImplementedError(
        f"tailor: flash_attn_varlen_func: window_size ({left}, {right}): "
        f"only causal windows (right = 0) are supported")


_local = threading.local()


def _needs_plan(q, metadata, key):
    """Whether this call must plan: not during capture, nor when this
    thread's last plan (the torch ops' plan counter unchanged) was made
    from the same live `metadata` tensors at their current versions, for
    the same `key` (form and layer)."""
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    last = getattr(_local, "last", None)
    if (last is None or last["key"] != key or
            last["plans"] != _ops.ragged_plans_made() or
            len(last["tensors"]) != len(metadata)):
        return True
    return any(ref() is not t or version != t._version
               for (ref, version), t in zip(last["tensors"], metadata))


def _planned(metadata, key):
    """Records the plan just made from `metadata` for `key`."""
    _local.last = {"key": key, "plans": _ops.ragged_plans_made(),
                   "tensors": [(weakref.ref(t), t._version)
                               for t in metadata]}


def _paged_inputs(q, k, v, cu_seqlens_q, seqused_k, block_table, layer):
    if seqused_k is None:
        raise _errors.InvalidArgumentError(
            3, "seqused_k: required with block_table (the KV length of each "
               "sequence)")
    metadata = (cu_seqlens_q, seqused_k)
    key = ("paged", k.shape[1], q.device, tuple(sorted(layer.items())))
    if _needs_plan(q, metadata, key):
        _ops.plan_ragged_attention(cu_seqlens_q, seqused_k,
                                   page_size=k.shape[1], device=q.device,
                                   **layer)
        _planned(metadata, key)
    return k, v, block_table.to(torch.int32), None, seqused_k.to(torch.int32)


def _varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, layer):
    if cu_seqlens_k is None:
        raise _errors.InvalidArgumentError(
            3, "cu_seqlens_k: required without block_table (k and v are "
               "[Σk, Hkv, D])")
    if seqused_k is not None:
        raise NotImplementedError(
            "tailor: flash_attn_varlen_func: seqused_k without block_table "
            "is not supported (pass the lengths through cu_seqlens_k)")
    page_indptr = cu_seqlens_k.to(torch.int32)
    metadata = (cu_seqlens_q, cu_seqlens_k)
    key = ("varlen", q.device, tuple(sorted(layer.items())))
    if _needs_plan(q, metadata, key):
        kv_lens = page_indptr[1:] - page_indptr[:-1]
        last = (kv_lens > 0).to(torch.int32)  # pages of one token
        _ops.plan_ragged_attention_flashinfer(
            cu_seqlens_q, page_indptr, last, page_size=1, device=q.device,
            **layer)
        _planned(metadata, key)
    kv_indices = torch.arange(k.shape[0], dtype=torch.int32, device=k.device)
    return k.unsqueeze(1), v.unsqueeze(1), kv_indices, page_indptr, None


def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k,
                           cu_seqlens_k=None, seqused_k=None, q_v=None,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=None, softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False,
                           block_table=None, return_softmax_lse=False,
                           out=None, scheduler_metadata=None, q_descale=None,
                           k_descale=None, v_descale=None, num_splits=0,
                           fa_version=3, s_aux=None):
    """FlashAttention's varlen attention over tailor (see the module
    docstring): out [Σq, Hq, D], or (out, lse [Hq, Σq] float32)."""
    _unsupported(q_v=q_v, dropout_p=dropout_p, alibi_slopes=alibi_slopes,
                 q_descale=q_descale, k_descale=k_descale,
                 v_descale=v_descale, s_aux=s_aux)
    causal, window_left = _window(window_size, causal)
    layer = dict(num_qo_heads=q.shape[1], num_kv_heads=k.shape[-2],
                 head_dim=q.shape[2], dtype=q.dtype, causal=causal,
                 window_left=window_left)
    if block_table is not None:
        k_cache, v_cache, table, page_indptr, kv_lens = _paged_inputs(
            q, k, v, cu_seqlens_q, seqused_k, block_table, layer)
    else:
        k_cache, v_cache, table, page_indptr, kv_lens = _varlen_inputs(
            q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, layer)
    want_lse = bool(return_softmax_lse or return_attn_probs)
    result, lse = torch.ops.tailor.ragged_attention(
        q, k_cache, v_cache, table, page_indptr, kv_lens,
        float(softmax_scale or 0.0), float(softcap or 0.0), want_lse)
    if out is not None:
        out.copy_(result)
        result = out
    return (result, lse.t().contiguous()) if want_lse else result
