"""What the vLLM and SGLang attention backends share: writing a step's new
keys and values into a paged cache, and running this thread's ragged
plan into the caller's output after checking it is the plan the caller
made (another builder may have planned in between)."""

import torch

import tailor.torch_ops as _ops
from tailor import _errors


def capturing(device):
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def write_kv(key_cache, value_cache, slots, key, value):
    """key_cache / value_cache [pages, page_size, Hkv, D] (pages and slots
    contiguous); key / value [N, Hkv, D]; slots [N] flat positions (page *
    page_size + offset), negative for padding rows, which are skipped.
    During CUDA graph capture (no data-dependent shapes) every row is
    written at max(slot, 0), a padding row writing back slot 0's own
    contents: both vLLM (its null block 0) and SGLang (its padding slot 0)
    keep slot 0 out of every sequence."""
    flat_k = key_cache.view(-1, *key_cache.shape[2:])
    flat_v = value_cache.view(-1, *value_cache.shape[2:])
    slots = slots.to(torch.int64)
    if capturing(key.device):
        valid = (slots >= 0)[:, None, None]
        target = slots.clamp(min=0)
        flat_k.index_copy_(0, target, torch.where(valid, key, flat_k[target]))
        flat_v.index_copy_(0, target,
                           torch.where(valid, value, flat_v[target]))
        return
    keep = slots >= 0
    flat_k[slots[keep]] = key[keep].to(flat_k.dtype)
    flat_v[slots[keep]] = value[keep].to(flat_v.dtype)


def plan(query_start_loc, seq_lens, layer, device, max_batch, max_tokens):
    """Plans the step (host metadata) for `layer`'s plan keywords; the
    returned id tells run() whether the plan is still this thread's."""
    _ops.plan_ragged_attention(query_start_loc, seq_lens, device=device,
                               max_batch=max_batch, max_tokens=max_tokens,
                               **layer)
    return _ops.ragged_plans_made()


def run(q, key_cache, value_cache, block_table, seq_lens, out, *, plan_id,
        replan, sm_scale, logits_soft_cap, caller):
    """Runs the plan `plan_id` into out; when another plan replaced it,
    calls replan() (outside CUDA graph capture) for a new id first."""
    if _ops.ragged_plans_made() != plan_id:
        if capturing(q.device):
            raise _errors.FailedPreconditionError(
                9, f"{caller}: this step's attention plan was replaced "
                   f"(another layer shape planned since) and cannot be "
                   f"re-planned during CUDA graph capture")
        replan()
    _ops.run_ragged_attention(q, key_cache, value_cache, block_table, out,
                              kv_lens=seq_lens, sm_scale=sm_scale,
                              logits_soft_cap=logits_soft_cap or 0.0,
                              caller=caller)
