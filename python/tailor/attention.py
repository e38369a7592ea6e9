"""tailor.attention: paged decode and ragged attention (tailor/ops/attention.h;
see its contracts). Ragged attention (RaggedWorkspace, plan_ragged,
run_ragged, ...) is at the end of this file.

Plan once per step from the host sequence lengths, run every layer:

    ws = tailor.attention.DecodeWorkspace()
    tailor.attention.reserve_decode_workspace(rt, ws, max_batch=256,
        num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16)
    tailor.attention.plan_decode(rt, seq_lens_host, ws, page_size=16,
        num_qo_heads=32, num_kv_heads=8, head_dim=128)
    tailor.attention.run_decode(rt, q, k_cache, v_cache, block_table,
        seq_lens, out, ws)

q [B, Hq, D] bf16 | f16, caches [pages, page_size, Hkv, D], block_table
[B, max_pages] i32, seq_lens [B] i32 (plan: host memory; run: the
runtime's device), out like q, optional lse [B, Hq] f32.

The workspace `ws` is the last positional argument of every call that
takes one (keyword-only options follow), as in every tailor family; calls
in the old order (runtime, ws, ...) still work, with a DeprecationWarning.
"""

import ctypes

from tailor import _capi, _tensors
from tailor._capi import lib
from tailor._errors import InvalidArgumentError, check
from tailor._workspaces import workspace_last

_DTYPES = {"bf16": _capi.DTYPE_BF16, "bfloat16": _capi.DTYPE_BF16,
           "f16": _capi.DTYPE_F16, "float16": _capi.DTYPE_F16}


def _dtype(dtype):
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


class DecodeWorkspace:
    """tailor::attention::DecodeWorkspace: the plan of the last plan_decode
    and, on a GPU, its device memory. One per thread or stream."""

    def __init__(self):
        handle = ctypes.c_void_p()
        check(lib.tailor_attention_decode_workspace_create(
            ctypes.byref(handle)))
        self._handle = handle.value
        self._runtime = None
        self._memory = None

    def info(self):
        """planned, batch, capacity_bytes and the plan summary, as a dict."""
        info = _capi.DecodeWorkspaceInfo()
        check(lib.tailor_attention_decode_workspace_get_info(
            self._handle, ctypes.byref(info)))
        out = {name: getattr(info, name) for name, _ in info._fields_}
        out["planned"] = bool(out["planned"])
        return out

    def take_errors(self, runtime, stream=None):
        """Raises the bad device data run_decode dropped since the last call
        (waits for `stream`)."""
        check(lib.tailor_attention_decode_workspace_take_errors(
            runtime._handle, self._handle, _tensors.stream_handle(stream)))

    def close(self):
        if getattr(self, "_handle", None):
            lib.tailor_attention_decode_workspace_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


def _limits(max_batch, num_qo_heads, num_kv_heads, head_dim, page_size,
            dtype):
    return _capi.DecodeLimits(max_batch=max_batch, num_qo_heads=num_qo_heads,
                              num_kv_heads=num_kv_heads, head_dim=head_dim,
                              page_size=page_size, dtype=_dtype(dtype))


def reserve_decode_workspace(runtime, ws, *, max_batch, num_qo_heads,
                             num_kv_heads, head_dim, page_size, dtype="bf16"):
    """Sizes `ws` for plans of up to max_batch sequences (on a GPU: its
    device memory, allocated now, outside any graph)."""
    limits = _limits(max_batch, num_qo_heads, num_kv_heads, head_dim,
                     page_size, dtype)
    check(lib.tailor_attention_decode_workspace_reserve(
        runtime._handle, ctypes.byref(limits), ws._handle))
    ws._runtime = runtime


def decode_workspace_bytes(runtime, *, max_batch, num_qo_heads, num_kv_heads,
                           head_dim, page_size, dtype="bf16"):
    """Device bytes a bound decode workspace needs (0 on the host)."""
    limits = _limits(max_batch, num_qo_heads, num_kv_heads, head_dim,
                     page_size, dtype)
    out = ctypes.c_int64()
    check(lib.tailor_attention_decode_workspace_bytes(
        runtime._handle, ctypes.byref(limits), ctypes.byref(out)))
    return out.value


def bind_decode_workspace(runtime, memory, ws, *, max_batch, num_qo_heads,
                          num_kv_heads, head_dim, page_size, dtype="bf16",
                          stream=None):
    """tailor::attention::BindDecodeWorkspace into `memory`, a device tensor
    of at least decode_workspace_bytes(...) bytes; `ws` keeps it alive."""
    memory, ws = workspace_last("bind_decode_workspace", DecodeWorkspace,
                                (memory, ws))
    limits = _limits(max_batch, num_qo_heads, num_kv_heads, head_dim,
                     page_size, dtype)
    t, keep = _tensors.view(memory, "memory", output=True)
    check(lib.tailor_attention_decode_workspace_bind(
        runtime._handle, ctypes.byref(limits), t.data, _tensors.nbytes(t),
        ws._handle, (_tensors.cuda_stream_of(memory) if stream is None
                     else _tensors.stream_handle(stream))))
    ws._runtime = runtime
    ws._memory = (memory, keep)


def plan_decode(runtime, seq_lens, ws, *, page_size, num_qo_heads,
                num_kv_heads, head_dim, dtype="bf16", stream=None):
    """Plans a decode step for `seq_lens` ([B] int32 in host memory); on a
    GPU the work list is copied into `ws` on `stream`."""
    seq_lens, ws = workspace_last("plan_decode", DecodeWorkspace,
                                  (seq_lens, ws))
    args = _capi.PlanDecodeArgs(page_size=page_size,
                                num_qo_heads=num_qo_heads,
                                num_kv_heads=num_kv_heads, head_dim=head_dim,
                                dtype=_dtype(dtype),
                                stream=_tensors.stream_handle(stream))
    keep = _tensors.fill(args.seq_lens, seq_lens, "seq_lens")
    check(lib.tailor_attention_decode_plan(runtime._handle,
                                           ctypes.byref(args), ws._handle))
    ws._runtime = runtime
    del keep


def run_decode(runtime, q, k_cache, v_cache, block_table, seq_lens, out, ws,
               *, lse=None, sm_scale=None, logits_soft_cap=0.0, stream=None):
    """out = softmax(sm_scale * q.k) . v over each planned sequence's pages
    (sm_scale None: 1 / sqrt(D)). stream None: torch's current stream for
    torch CUDA tensors."""
    q, k_cache, v_cache, block_table, seq_lens, out, ws = workspace_last(
        "run_decode", DecodeWorkspace,
        (q, k_cache, v_cache, block_table, seq_lens, out, ws))
    args = _capi.RunDecodeArgs()
    fill = _tensors.fill
    keep = [fill(args.q, q, "q"), fill(args.k_cache, k_cache, "k_cache"),
            fill(args.v_cache, v_cache, "v_cache"),
            fill(args.block_table, block_table, "block_table"),
            fill(args.seq_lens, seq_lens, "seq_lens"),
            fill(args.out, out, "out", output=True)]
    args.lse = _optional_view(lse, keep, "lse", output=True)
    args.sm_scale = 0.0 if sm_scale is None else sm_scale
    args.logits_soft_cap = logits_soft_cap
    args.stream = (_tensors.cuda_stream_of(q) if stream is None
                   else _tensors.stream_handle(stream))
    check(lib.tailor_attention_decode_run(runtime._handle, ctypes.byref(args),
                                          ws._handle))
    del keep


# ---- ragged attention -------------------------------------------------------
#
# Every row kind of a serving step in one plan (tailor/ops/attention.h,
# "Ragged attention"): prefill, chunked prefill over cached prefixes,
# speculative and decode rows. Plan once per step from host metadata, run
# every layer:
#
#     ws = tailor.attention.RaggedWorkspace()
#     tailor.attention.reserve_ragged_workspace(rt, ws, max_batch=256,
#         max_tokens=8192, num_qo_heads=32, num_kv_heads=8, head_dim=128,
#         page_size=16)
#     tailor.attention.plan_ragged(rt, query_start_loc, seq_lens, ws,
#         page_size=16, num_qo_heads=32, num_kv_heads=8, head_dim=128)
#     tailor.attention.run_ragged(rt, q, k_cache, v_cache, block_table,
#         out, ws)
#
# q and out [sum q_len, Hq, D]; sequence b's queries are rows
# q_indptr[b]..q_indptr[b + 1] and the LAST q_len of its kv_len positions.
# FlashInfer's metadata: plan_ragged_flashinfer(qo_indptr, kv_indptr,
# kv_last_page_len) and run_ragged(..., block_table=kv_indices,
# page_indptr=kv_indptr).


class RaggedWorkspace:
    """tailor::attention::RaggedWorkspace: the plan of the last plan_ragged
    and, on a GPU, its device memory. One per thread or stream."""

    def __init__(self):
        handle = ctypes.c_void_p()
        check(lib.tailor_attention_ragged_workspace_create(
            ctypes.byref(handle)))
        self._handle = handle.value
        self._runtime = None
        self._memory = None

    def info(self):
        """planned, batch, total_q, capacity_bytes and the plan summary
        (tiles, items, splits, workers, ..., decode_seqs and decode_items:
        the q_len 1 rows run on the decode kernel, CUDA only), as a dict."""
        info = _capi.RaggedWorkspaceInfo()
        check(lib.tailor_attention_ragged_workspace_get_info(
            self._handle, ctypes.byref(info)))
        out = {name: getattr(info, name) for name, _ in info._fields_
               if name != "reserved"}
        out["planned"] = bool(out["planned"])
        decode = _capi.RaggedDecodeInfo()
        check(lib.tailor_attention_ragged_workspace_get_decode_info(
            self._handle, ctypes.byref(decode)))
        out["decode_seqs"] = decode.seqs
        out["decode_items"] = decode.items
        return out

    def take_errors(self, runtime, stream=None):
        """Raises the bad page ids run_ragged dropped on the device since
        the last call (waits for `stream`); nothing on the host."""
        check(lib.tailor_attention_ragged_workspace_take_errors(
            runtime._handle, self._handle, _tensors.stream_handle(stream)))

    def close(self):
        if getattr(self, "_handle", None):
            lib.tailor_attention_ragged_workspace_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


def _ragged_ws(function, ws):
    if not isinstance(ws, RaggedWorkspace):
        raise TypeError(f"{function}: ws: expected a "
                        f"tailor.attention.RaggedWorkspace, got "
                        f"{type(ws).__name__}")
    return ws


def _mask(causal, window_left):
    """(tailor_attention_mask, window_left) of Python's causal and
    window_left (-1: none, as FlashInfer's)."""
    if window_left == -1:
        return (_capi.MASK_CAUSAL if causal else _capi.MASK_NONE), 0
    if window_left < -1:
        raise InvalidArgumentError(
            3, f"window_left: must be -1 (none) or >= 0, got {window_left}")
    if not causal:
        raise InvalidArgumentError(
            3, "window_left: a sliding window needs causal=True")
    return _capi.MASK_WINDOW, window_left


def _ragged_limits(max_batch, max_tokens, num_qo_heads, num_kv_heads,
                   head_dim, page_size, dtype, causal, window_left):
    mask, window = _mask(causal, window_left)
    return _capi.RaggedLimits(
        max_batch=max_batch, max_tokens=max_tokens,
        num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim, page_size=page_size, dtype=_dtype(dtype),
        mask=mask, window_left=window)


def reserve_ragged_workspace(runtime, ws, *, max_batch, max_tokens,
                             num_qo_heads, num_kv_heads, head_dim, page_size,
                             dtype="bf16", causal=True, window_left=-1):
    """Sizes `ws` for plans of up to max_batch sequences and max_tokens query
    tokens (on a GPU: its device memory, allocated now, outside any
    graph)."""
    limits = _ragged_limits(max_batch, max_tokens, num_qo_heads,
                            num_kv_heads, head_dim, page_size, dtype, causal,
                            window_left)
    check(lib.tailor_attention_ragged_workspace_reserve(
        runtime._handle, ctypes.byref(limits),
        _ragged_ws("reserve_ragged_workspace", ws)._handle))
    ws._runtime = runtime


def ragged_workspace_bytes(runtime, *, max_batch, max_tokens, num_qo_heads,
                           num_kv_heads, head_dim, page_size, dtype="bf16",
                           causal=True, window_left=-1):
    """Device bytes a bound ragged workspace needs (0 on the host)."""
    limits = _ragged_limits(max_batch, max_tokens, num_qo_heads,
                            num_kv_heads, head_dim, page_size, dtype, causal,
                            window_left)
    out = ctypes.c_int64()
    check(lib.tailor_attention_ragged_workspace_bytes(
        runtime._handle, ctypes.byref(limits), ctypes.byref(out)))
    return out.value


def bind_ragged_workspace(runtime, memory, ws, *, max_batch, max_tokens,
                          num_qo_heads, num_kv_heads, head_dim, page_size,
                          dtype="bf16", causal=True, window_left=-1,
                          stream=None):
    """tailor::attention::BindRaggedWorkspace into `memory`, a device tensor
    of at least ragged_workspace_bytes(...) bytes; `ws` keeps it alive."""
    _ragged_ws("bind_ragged_workspace", ws)
    limits = _ragged_limits(max_batch, max_tokens, num_qo_heads,
                            num_kv_heads, head_dim, page_size, dtype, causal,
                            window_left)
    t, keep = _tensors.view(memory, "memory", output=True)
    check(lib.tailor_attention_ragged_workspace_bind(
        runtime._handle, ctypes.byref(limits), t.data, _tensors.nbytes(t),
        ws._handle, (_tensors.cuda_stream_of(memory) if stream is None
                     else _tensors.stream_handle(stream))))
    ws._runtime = runtime
    ws._memory = (memory, keep)


def _fill_layer(args, page_size, num_qo_heads, num_kv_heads, head_dim, dtype,
                causal, window_left, stream):
    args.page_size = page_size
    args.num_qo_heads = num_qo_heads
    args.num_kv_heads = num_kv_heads
    args.head_dim = head_dim
    args.dtype = _dtype(dtype)
    args.mask, args.window_left = _mask(causal, window_left)
    args.stream = _tensors.stream_handle(stream)


def plan_ragged(runtime, q_indptr, kv_lens, ws, *, page_size, num_qo_heads,
                num_kv_heads, head_dim, dtype="bf16", causal=True,
                window_left=-1, stream=None):
    """Plans a ragged step from vLLM's metadata: q_indptr [B + 1]
    (query_start_loc) and kv_lens [B] (seq_lens), int32 in host memory. On a
    GPU the plan is copied into `ws` on `stream`."""
    _ragged_ws("plan_ragged", ws)
    args = _capi.PlanRaggedArgs()
    _fill_layer(args, page_size, num_qo_heads, num_kv_heads, head_dim, dtype,
                causal, window_left, stream)
    keep = [_tensors.fill(args.q_indptr, q_indptr, "q_indptr"),
            _tensors.fill(args.kv_lens, kv_lens, "kv_lens")]
    check(lib.tailor_attention_ragged_plan(runtime._handle,
                                           ctypes.byref(args), ws._handle))
    ws._runtime = runtime
    del keep


def plan_ragged_flashinfer(runtime, qo_indptr, kv_indptr, kv_last_page_len,
                           ws, *, page_size, num_qo_heads, num_kv_heads,
                           head_dim, dtype="bf16", causal=True,
                           window_left=-1, stream=None):
    """Plans a ragged step from FlashInfer's paged metadata (int32, host):
    qo_indptr [B + 1], kv_indptr [B + 1] (pages of each sequence) and
    kv_last_page_len [B]."""
    _ragged_ws("plan_ragged_flashinfer", ws)
    args = _capi.PlanRaggedFlashInferArgs()
    _fill_layer(args, page_size, num_qo_heads, num_kv_heads, head_dim, dtype,
                causal, window_left, stream)
    keep = [_tensors.fill(args.qo_indptr, qo_indptr, "qo_indptr"),
            _tensors.fill(args.kv_indptr, kv_indptr, "kv_indptr"),
            _tensors.fill(args.kv_last_page_len, kv_last_page_len,
                          "kv_last_page_len")]
    check(lib.tailor_attention_ragged_plan_flashinfer(
        runtime._handle, ctypes.byref(args), ws._handle))
    ws._runtime = runtime
    del keep


def _optional_view(x, keep, name, output=False):
    if x is None:
        return None
    view, k = _tensors.view(x, name, output)
    keep.append((view, k))
    return ctypes.pointer(view)


def run_ragged(runtime, q, k_cache, v_cache, block_table, out, ws, *,
               page_indptr=None, kv_lens=None, lse=None, sm_scale=None,
               logits_soft_cap=0.0, stream=None):
    """out = softmax(sm_scale * q.k) . v over the positions each planned
    query row attends (sm_scale None: 1 / sqrt(D)). block_table: [B',
    max_pages] int32, or FlashInfer's kv_indices [nnz] with page_indptr
    [B' + 1]. kv_lens [B'] (optional): the planned lengths on the runtime's
    device. lse [sum q', Hq] float32 (optional). stream None: torch's current
    stream for torch CUDA tensors."""
    _ragged_ws("run_ragged", ws)
    args = _capi.RunRaggedArgs()
    fill = _tensors.fill
    keep = [fill(args.q, q, "q"), fill(args.k_cache, k_cache, "k_cache"),
            fill(args.v_cache, v_cache, "v_cache"),
            fill(args.block_table, block_table, "block_table"),
            fill(args.out, out, "out", output=True)]
    args.page_indptr = _optional_view(page_indptr, keep, "page_indptr")
    args.kv_lens = _optional_view(kv_lens, keep, "kv_lens")
    args.lse = _optional_view(lse, keep, "lse", output=True)
    args.sm_scale = 0.0 if sm_scale is None else sm_scale
    args.logits_soft_cap = logits_soft_cap
    args.stream = (_tensors.cuda_stream_of(q) if stream is None
                   else _tensors.stream_handle(stream))
    check(lib.tailor_attention_ragged_run(runtime._handle, ctypes.byref(args),
                                          ws._handle))
    del keep
