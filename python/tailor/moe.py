"""tailor.moe: the MoE ops of tailor/ops/moe.h (see that header for the
contracts: shapes, dtypes, errors, device semantics).

Every op takes the Runtime first and views its tensor arguments without
copying (numpy arrays, torch tensors, DLPack objects). `stream`: None uses
torch's current CUDA stream when an argument is a torch CUDA tensor (else
the legacy default stream); an int is a CUstream; a torch.cuda.Stream works
too. Host backends run synchronously and ignore it.

The workspace `ws` is the last positional argument of every call that
takes one (keyword-only options follow), as in every tailor family.
"""

import ctypes
import sys
import warnings

from tailor import _capi
from tailor._capi import lib
from tailor._errors import check, invalid_argument, raise_for
from tailor import _tensors
from tailor._workspaces import workspace_last

# The C fast path of experts() (tailor/_fastcall.c), when it was built.
try:
    from tailor import _fastcall
    _fastcall.init(ctypes.cast(lib.tailor_moe_experts, ctypes.c_void_p).value)
except ImportError:
    _fastcall = None
_fastcall_knows_torch = False


def _fastcall_learn_torch():
    """Hands torch's Tensor type and dtypes to the fast path, once torch is
    imported (this package never imports torch itself)."""
    global _fastcall_knows_torch
    torch = sys.modules.get("torch")
    if torch is None:
        return
    _fastcall.init_torch(torch.Tensor, torch.float32, torch.bfloat16,
                         torch.float16, torch.int32, torch.int64, torch.uint8,
                         torch.float64)
    _fastcall_knows_torch = True

_DTYPES = {"bf16": _capi.DTYPE_BF16, "bfloat16": _capi.DTYPE_BF16,
           "f32": _capi.DTYPE_F32, "float32": _capi.DTYPE_F32}
_TAILS = {"pow2": 0, **_capi.TAIL_POLICIES}


def _policy(tile_rows, tail):
    if tail not in _TAILS:
        raise invalid_argument(f"tail: one of {sorted(_TAILS)}, got {tail!r}")
    return _capi.RoutingPolicy(tile_rows=tile_rows, tail=_TAILS[tail])


def _stream(stream, *tensors):
    if stream is None:
        return _tensors.cuda_stream_of(*tensors)
    return _tensors.stream_handle(stream)


def _features(text):
    """{key: value} of a GemmChoice features text "k=v,k=v" (int values
    where they are numbers)."""
    out = {}
    for entry in filter(None, text.split(",")):
        key, _, value = entry.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


class Workspace:
    """The reusable state of one MoE layer call (tailor::moe::Workspace):
    the last routing and the Experts intermediates. Not thread-safe: one
    per thread or stream. Keeps the runtime it was used with alive."""

    def __init__(self):
        handle = ctypes.c_void_p()
        check(lib.tailor_moe_workspace_create(ctypes.byref(handle)))
        self._handle = handle.value
        self._as_parameter_ = self._handle
        self._runtime = None
        self._memory = None  # a bound caller buffer, kept alive

    def _use(self, runtime):
        self._runtime = runtime

    def info(self):
        """routed, num_tokens, topk, num_experts, num_rows, capacity_bytes
        and the plan summary (tile_rows, core_tiles, tail_pieces, variants,
        useful_rows, executed_rows) as a dict. The summary's GEMM records:
        gemms()."""
        info = _capi.WorkspaceInfo()
        check(lib.tailor_moe_workspace_get_info(self._handle,
                                                ctypes.byref(info)))
        names = ("num_tokens", "topk", "num_experts", "num_rows",
                 "capacity_bytes", "tile_rows", "core_tiles", "tail_pieces",
                 "variants", "useful_rows", "executed_rows")
        out = {name: getattr(info, name) for name in names}
        out["routed"] = bool(info.routed)
        return out

    def gemms(self):
        """The configuration of each GroupedGemm launch since the last
        Route, at most the last two, oldest first (experts(): gate/up, then
        down), as dicts: kernel ("cpu", "cuda.sm90_tma_wgmma", ...), n, k,
        cta_rows, cta_cols, k_tile, stages, ctas (ints; 0 where the kernel
        family has no such field) and features, the kernel family's own
        options as a dict in the backend's order (values int where they are
        numbers, e.g. {"tma_store": 1, "cluster": 2, "expert_groups":
        "fixed"}; {} for the cpu kernel; keys: GemmChoice in
        tailor/ops/moe.h). [] when not routed."""
        count = ctypes.c_int32()
        check(lib.tailor_moe_workspace_gemm_count(self._handle,
                                                  ctypes.byref(count)))
        out = []
        for index in range(count.value):
            g = _capi.GemmChoice()
            check(lib.tailor_moe_workspace_get_gemm(self._handle, index,
                                                    ctypes.byref(g)))
            record = {"kernel": g.kernel.decode("utf-8", "replace")}
            for name in ("n", "k", "cta_rows", "cta_cols", "k_tile", "stages",
                         "ctas"):
                record[name] = getattr(g, name)
            record["features"] = _features(g.features.decode("ascii"))
            out.append(record)
        return out

    def _views(self):
        info = _capi.WorkspaceInfo()
        check(lib.tailor_moe_workspace_get_info(self._handle,
                                                ctypes.byref(info)))
        return info

    def routing(self):
        """counts, offsets, permutation, inverse of the last Route as numpy
        int32 arrays (copies; host backends only)."""
        import numpy as np
        info = self._views()
        out = {}
        for name in ("counts", "offsets", "permutation", "inverse"):
            t = getattr(info, name)
            if t.device_type != _capi.DEVICE_CPU:
                raise invalid_argument(
                    "ws: routing() copies host routing; this workspace is "
                    "on a device (read it with torch, or take_errors())")
            shape = tuple(t.dims[:t.rank])
            count = 1
            for d in shape:
                count *= d
            if count == 0:
                out[name] = np.zeros(shape, np.int32)
                continue
            buffer = (ctypes.c_int32 * count).from_address(t.data)
            out[name] = np.frombuffer(buffer, np.int32).reshape(shape).copy()
        return out

    def take_errors(self, runtime, stream=None):
        """Raises the routing errors a device Route dropped since the last
        call (waits for `stream`); returns None when there were none."""
        check(lib.tailor_moe_workspace_take_errors(
            runtime, self._handle, _tensors.stream_handle(stream)))

    def take_routing_errors(self, runtime, stream=None):
        """Deprecated name of take_errors (removed in the next release)."""
        warnings.warn("tailor.moe.Workspace.take_routing_errors is "
                      "deprecated; use take_errors", DeprecationWarning,
                      stacklevel=2)
        self.take_errors(runtime, stream)

    def close(self):
        if getattr(self, "_handle", None):
            lib.tailor_moe_workspace_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


def _limits(max_tokens, topk, num_experts, hidden, intermediate, dtype,
            tile_rows, tail):
    if dtype not in _DTYPES:
        raise invalid_argument(f"dtype: one of {sorted(_DTYPES)}, got "
                               f"{dtype!r}")
    return _capi.WorkspaceLimits(
        max_tokens=max_tokens, topk=topk, num_experts=num_experts,
        hidden=hidden, intermediate=intermediate, dtype=_DTYPES[dtype],
        policy=_policy(tile_rows, tail))


def reserve_workspace(runtime, ws, *, max_tokens, topk, num_experts,
                      hidden=0, intermediate=0, dtype="bf16", tile_rows=0,
                      tail="pow2"):
    """tailor::moe::ReserveWorkspace: size `ws` for steps up to these
    limits (on a GPU: allocate its device memory now, outside any graph)."""
    limits = _limits(max_tokens, topk, num_experts, hidden, intermediate,
                     dtype, tile_rows, tail)
    check(lib.tailor_moe_workspace_reserve(runtime, ctypes.byref(limits),
                                           ws._handle))
    ws._use(runtime)


def workspace_bytes(runtime, *, max_tokens, topk, num_experts, hidden=0,
                    intermediate=0, dtype="bf16", tile_rows=0, tail="pow2"):
    """Device bytes bind_workspace needs for these limits (0 on the host)."""
    limits = _limits(max_tokens, topk, num_experts, hidden, intermediate,
                     dtype, tile_rows, tail)
    out = ctypes.c_int64()
    check(lib.tailor_moe_workspace_bytes(runtime, ctypes.byref(limits),
                                         ctypes.byref(out)))
    return out.value


def bind_workspace(runtime, memory, ws, *, max_tokens, topk, num_experts,
                   hidden=0, intermediate=0, dtype="bf16", tile_rows=0,
                   tail="pow2", stream=None):
    """tailor::moe::BindWorkspace into `memory`, a device tensor of at least
    workspace_bytes(...) bytes (e.g. torch.empty(n, dtype=torch.uint8,
    device="cuda")); `ws` keeps it alive. The old order (runtime, ws,
    memory) still works, with a DeprecationWarning."""
    memory, ws = workspace_last("bind_workspace", Workspace, (memory, ws))
    limits = _limits(max_tokens, topk, num_experts, hidden, intermediate,
                     dtype, tile_rows, tail)
    t, keep = _tensors.view(memory, "memory", output=True)
    check(lib.tailor_moe_workspace_bind(
        runtime, ctypes.byref(limits), t.data, _tensors.nbytes(t), ws._handle,
        _stream(stream, memory)))
    ws._use(runtime)
    ws._memory = (memory, keep)


def _optional(args, field, x, keep):
    if x is None:
        return
    t, k = _tensors.view(x, field)
    keep.append((t, k))
    setattr(args, field, ctypes.pointer(t))


def route(runtime, topk_ids, num_experts, ws, *, expert_map=None,
          valid_tokens=None, tile_rows=0, tail="pow2", stream=None):
    """tailor::moe::Route: counting-sort topk_ids [T, k] i32 into `ws`."""
    args = _capi.RouteArgs()
    keep = [_tensors.fill(args.topk_ids, topk_ids, "topk_ids")]
    args.num_experts = num_experts
    _optional(args, "expert_map", expert_map, keep)
    _optional(args, "valid_tokens", valid_tokens, keep)
    args.policy = _policy(tile_rows, tail)
    args.stream = _stream(stream, topk_ids)
    check(lib.tailor_moe_route(runtime, ctypes.byref(args), ws._handle))
    ws._use(runtime)


def pack(runtime, hidden, permutation, topk, a, *, stream=None):
    """tailor::moe::Pack: a[r] = hidden[permutation[r] // topk]."""
    args = _capi.PackArgs()
    keep = (_tensors.fill(args.hidden, hidden, "hidden"),
            _tensors.fill(args.permutation, permutation, "permutation"),
            _tensors.fill(args.a, a, "a", output=True))
    args.topk = topk
    args.stream = _stream(stream, hidden)
    check(lib.tailor_moe_pack(runtime, ctypes.byref(args)))
    del keep


def grouped_gemm(runtime, a, w, c, ws, *, epilogue="none", stream=None):
    """tailor::moe::GroupedGemm: c = epilogue(a · w[e]ᵀ) per expert of ws."""
    if epilogue not in _capi.EPILOGUES:
        raise invalid_argument(f"epilogue: one of "
                               f"{sorted(_capi.EPILOGUES)}, got {epilogue!r}")
    args = _capi.GroupedGemmArgs()
    keep = (_tensors.fill(args.a, a, "a"), _tensors.fill(args.w, w, "w"),
            _tensors.fill(args.c, c, "c", output=True))
    args.epilogue = _capi.EPILOGUES[epilogue]
    args.stream = _stream(stream, a)
    check(lib.tailor_moe_grouped_gemm(runtime, ctypes.byref(args),
                                      ws._handle))
    del keep


def combine(runtime, c, topk_weights, inverse, out, *, stream=None):
    """tailor::moe::Combine: out[t] = sum_j topk_weights[t,j] * c[inv[t,j]]."""
    args = _capi.CombineArgs()
    keep = (_tensors.fill(args.c, c, "c"),
            _tensors.fill(args.topk_weights, topk_weights, "topk_weights"),
            _tensors.fill(args.inverse, inverse, "inverse"),
            _tensors.fill(args.out, out, "out", output=True))
    args.stream = _stream(stream, c)
    check(lib.tailor_moe_combine(runtime, ctypes.byref(args)))
    del keep


class _ExpertsCall(ctypes.Structure):
    """ExpertsArgs plus the optional tensors it points to, in one struct."""
    _fields_ = [("args", _capi.ExpertsArgs), ("expert_map", _capi.Tensor),
                ("valid_tokens", _capi.Tensor)]


class _QuantCall(ctypes.Structure):
    """ExpertsQuantization plus the optional scales it points to."""
    _fields_ = [("quant", _capi.ExpertsQuantization),
                ("a1_scale", _capi.Tensor), ("a2_scale", _capi.Tensor)]


def _experts_quantization(scale_mode, w13_scale, w2_scale, a1_scale,
                          a2_scale, block_shape):
    """The FP8 args of experts(): (struct, objects to keep alive)."""
    if scale_mode not in _capi.SCALE_MODES or scale_mode == "none":
        modes = sorted(set(_capi.SCALE_MODES) - {"none"})
        raise invalid_argument(f"scale_mode: one of {modes}, got {scale_mode!r}")
    call = _QuantCall()
    quant = call.quant
    quant.mode = _capi.SCALE_MODES[scale_mode]
    fill = _tensors.fill
    keep = (call,)
    if w13_scale is not None:
        keep += (fill(quant.w13_scale, w13_scale),)
    if w2_scale is not None:
        keep += (fill(quant.w2_scale, w2_scale),)
    if a1_scale is not None:
        keep += (fill(call.a1_scale, a1_scale),)
        quant.a1_scale = ctypes.pointer(call.a1_scale)
    if a2_scale is not None:
        keep += (fill(call.a2_scale, a2_scale),)
        quant.a2_scale = ctypes.pointer(call.a2_scale)
    if block_shape is not None:
        quant.block_shape[:] = list(block_shape)
    return quant, keep


def _experts_quantized(runtime, hidden, w13, w2, topk_weights, topk_ids, out,
                       ws, expert_map, valid_tokens, tile_rows, tail, stream,
                       quant_kwargs):
    quant, keep_quant = _experts_quantization(**quant_kwargs)
    call = _ExpertsCall()
    args = call.args
    fill = _tensors.fill
    keep = (fill(args.hidden, hidden), fill(args.w13, w13), fill(args.w2, w2),
            fill(args.topk_weights, topk_weights),
            fill(args.topk_ids, topk_ids), fill(args.out, out))
    if expert_map is not None:
        keep += (fill(call.expert_map, expert_map),)
        args.expert_map = ctypes.pointer(call.expert_map)
    if valid_tokens is not None:
        keep += (fill(call.valid_tokens, valid_tokens),)
        args.valid_tokens = ctypes.pointer(call.valid_tokens)
    if tile_rows or tail != "pow2":
        args.policy = _policy(tile_rows, tail)
    args.stream = _stream(stream, hidden)
    check(lib.tailor_moe_experts_quantized(runtime, ctypes.byref(args),
                                           ctypes.byref(quant), ws._handle))
    ws._runtime = runtime
    del keep, keep_quant


def experts(runtime, hidden, w13, w2, topk_weights, topk_ids, out, ws, *,
            expert_map=None, valid_tokens=None, activation="silu",
            tile_rows=0, tail="pow2", stream=None, scale_mode=None,
            w13_scale=None, w2_scale=None, a1_scale=None, a2_scale=None,
            block_shape=None):
    """tailor::moe::Experts — vLLM's fused_experts into `out` [T, H] (which
    may be `hidden` itself): route, pack, gemm1 + silu_and_mul, gemm2,
    combine. w13 [E, 2I, H] (gate rows, then up), w2 [E, H, I].

    A token whose topk_ids row names an expert more than once gets that
    expert's output once per slot, each scaled by its slot's weight (as
    vLLM's fused_experts); nothing is merged or refused.

    FP8 weights (tailor::moe::ExpertsQuantization): scale_mode "block"
    (w13_scale [E, 2I/128, H/128], w2_scale [E, H/128, I/128], block_shape
    [128, 128]), "per_channel" ([E, 2I], [E, H]) or "per_tensor" ([E], [E],
    and the static activation scales a1_scale, a2_scale [1]); w13 and w2
    float8_e4m3fn, scales float32, hidden and out bf16 | f32."""
    if activation != "silu":
        raise invalid_argument(f"activation: only 'silu' is supported, got "
                               f"{activation!r}")
    if scale_mode is not None:
        return _experts_quantized(
            runtime, hidden, w13, w2, topk_weights, topk_ids, out, ws,
            expert_map, valid_tokens, tile_rows, tail, stream,
            dict(scale_mode=scale_mode, w13_scale=w13_scale,
                 w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale,
                 block_shape=block_shape))
    if (_fastcall is not None and expert_map is None and valid_tokens is None
            and not tile_rows and tail == "pow2"):
        if not _fastcall_knows_torch:
            _fastcall_learn_torch()
        stream = _stream(stream, hidden)
        # None: an argument the fast path does not view (a DLPack-only
        # object, an ml_dtypes bf16 array, a read-only out): the general
        # path below views it or names it in its error.
        code = _fastcall.experts(runtime._handle, ws._handle, hidden, w13,
                                 w2, topk_weights, topk_ids, out, stream)
        if code is not None:
            if code:
                raise_for(code)
            ws._runtime = runtime
            return
    call = _ExpertsCall()
    args = call.args
    fill = _tensors.fill
    keep = (fill(args.hidden, hidden, "hidden"), fill(args.w13, w13, "w13"),
            fill(args.w2, w2, "w2"),
            fill(args.topk_weights, topk_weights, "topk_weights"),
            fill(args.topk_ids, topk_ids, "topk_ids"),
            fill(args.out, out, "out", output=True))
    if expert_map is not None:
        keep += (fill(call.expert_map, expert_map, "expert_map"),)
        args.expert_map = ctypes.pointer(call.expert_map)
    if valid_tokens is not None:
        keep += (fill(call.valid_tokens, valid_tokens, "valid_tokens"),)
        args.valid_tokens = ctypes.pointer(call.valid_tokens)
    if tile_rows or tail != "pow2":
        args.policy = _policy(tile_rows, tail)
    args.stream = _stream(stream, hidden)
    check(lib.tailor_moe_experts(runtime, ctypes.byref(args), ws._handle))
    ws._runtime = runtime
    del keep
