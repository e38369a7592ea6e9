"""ctypes declarations of tailor/c_api.h and the loading of libtailor_c.so.

The library is looked up, in order:
  1. $TAILOR_LIBRARY (a path to libtailor_c.so)
  2. tailor/_lib/ inside this package (pip install bundles the library it
     finds at build time: $TAILOR_LIBRARY, else ../build/src/capi/)
  3. the dynamic loader's search path (e.g. after `cmake --install` and
     ldconfig): libtailor_c.so.3
Every struct here mirrors c_api.h field by field; TAILOR_C_API_VERSION is
checked at load, so a library with another layout is refused.
"""

import ctypes
import os
import pathlib

C_API_VERSION = 3
MAX_RANK = 6

# tailor_dtype
DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_I32, DTYPE_I64, DTYPE_U8, DTYPE_F64 = (
    1, 2, 3, 4, 5, 6, 7)
DTYPE_F8E4M3 = 8  # FP8 e4m3 (torch.float8_e4m3fn): FP8 MoE operands only
# tailor_device_type
DEVICE_CPU, DEVICE_CUDA, DEVICE_HIP = 0, 1, 2
# tailor_backend
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2, "hip": 3}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
# tailor_jit_mode (None: TAILOR_JIT_MODE_DEFAULT, 0)
JIT_MODES = {"blocking": 1, "background": 2}
JIT_MODE_NAMES = {v: k for k, v in JIT_MODES.items()}
# tailor_stats_format
STATS_JSON, STATS_PROMETHEUS = 0, 1
# tailor_moe_tail_policy
TAIL_POLICIES = {"next_power_of_two": 0, "exact": 1, "full_tile": 2}
# tailor_moe_epilogue
EPILOGUES = {"none": 0, "silu_and_mul": 1}
# tailor_moe_activation
ACTIVATIONS = {"silu": 0}
# tailor_moe_scale_mode
SCALE_MODES = {"none": 0, "per_tensor": 1, "per_channel": 2, "block": 3}

_i32, _i64, _vp, _cp = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_char_p


class Tensor(ctypes.Structure):
    _fields_ = [("data", _vp), ("dtype", _i32), ("rank", _i32),
                ("dims", _i64 * MAX_RANK), ("strides", _i64 * MAX_RANK),
                ("device_type", _i32), ("device_index", _i32)]


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("backend", _i32), ("device_index", _i32), ("cache_dir", _cp),
                ("disable_disk_cache", _i32), ("disable_jit", _i32),
                ("memory_cache_capacity", _i64), ("compile_threads", _i32),
                ("cpu_threads", _i32), ("log_level", _cp),
                ("stats_addr", _cp), ("jit_mode", _i32)]


class RuntimeInfo(ctypes.Structure):
    _fields_ = [("backend", _i32), ("device_type", _i32),
                ("device_index", _i32), ("arch", _cp), ("cache_dir", _cp),
                ("stats_address", _cp), ("jit_mode", _i32)]


class RoutingPolicy(ctypes.Structure):
    _fields_ = [("tile_rows", _i32), ("tail", _i32)]


class WorkspaceLimits(ctypes.Structure):
    _fields_ = [("max_tokens", _i64), ("topk", _i64), ("num_experts", _i64),
                ("hidden", _i64), ("intermediate", _i64), ("dtype", _i32),
                ("policy", RoutingPolicy)]


class WorkspaceInfo(ctypes.Structure):
    _fields_ = [("routed", _i32), ("num_tokens", _i64), ("topk", _i64),
                ("num_experts", _i64), ("num_rows", _i64),
                ("capacity_bytes", _i64), ("counts", Tensor),
                ("offsets", Tensor), ("permutation", Tensor),
                ("inverse", Tensor), ("tile_rows", _i32),
                ("core_tiles", _i32), ("tail_pieces", _i32),
                ("variants", _i32), ("useful_rows", _i64),
                ("executed_rows", _i64)]


GEMM_KERNEL_SIZE = 64  # TAILOR_MOE_GEMM_KERNEL_SIZE
GEMM_FEATURES_SIZE = 256  # TAILOR_MOE_GEMM_FEATURES_SIZE


class GemmChoice(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char * GEMM_KERNEL_SIZE), ("n", _i64),
                ("k", _i64), ("cta_rows", _i32), ("cta_cols", _i32),
                ("k_tile", _i32), ("stages", _i32), ("ctas", _i32),
                ("features_cut", _i32),
                ("features", ctypes.c_char * GEMM_FEATURES_SIZE)]


_TensorP = ctypes.POINTER(Tensor)


class RouteArgs(ctypes.Structure):
    _fields_ = [("topk_ids", Tensor), ("num_experts", _i64),
                ("expert_map", _TensorP), ("valid_tokens", _TensorP),
                ("policy", RoutingPolicy), ("stream", _vp)]


class PackArgs(ctypes.Structure):
    _fields_ = [("hidden", Tensor), ("permutation", Tensor), ("topk", _i64),
                ("a", Tensor), ("stream", _vp)]


class GroupedGemmArgs(ctypes.Structure):
    _fields_ = [("a", Tensor), ("w", Tensor), ("c", Tensor),
                ("epilogue", _i32), ("stream", _vp)]


class CombineArgs(ctypes.Structure):
    _fields_ = [("c", Tensor), ("topk_weights", Tensor), ("inverse", Tensor),
                ("out", Tensor), ("stream", _vp)]


class ExpertsArgs(ctypes.Structure):
    _fields_ = [("hidden", Tensor), ("w13", Tensor), ("w2", Tensor),
                ("topk_weights", Tensor), ("topk_ids", Tensor),
                ("expert_map", _TensorP), ("valid_tokens", _TensorP),
                ("activation", _i32), ("policy", RoutingPolicy),
                ("out", Tensor), ("stream", _vp)]


class ExpertsQuantization(ctypes.Structure):
    _fields_ = [("mode", _i32), ("w13_scale", Tensor), ("w2_scale", Tensor),
                ("a1_scale", _TensorP), ("a2_scale", _TensorP),
                ("block_shape", _i64 * 2)]


class GemmQuantization(ctypes.Structure):
    _fields_ = [("mode", _i32), ("a_scale", Tensor), ("w_scale", Tensor),
                ("c_scale", Tensor), ("block_shape", _i64 * 2)]


class DecodeLimits(ctypes.Structure):
    _fields_ = [("max_batch", _i64), ("num_qo_heads", _i64),
                ("num_kv_heads", _i64), ("head_dim", _i64),
                ("page_size", _i64), ("dtype", _i32)]


class DecodeWorkspaceInfo(ctypes.Structure):
    _fields_ = [("planned", _i32), ("workers", _i32), ("batch", _i64),
                ("capacity_bytes", _i64), ("busy_workers", _i32),
                ("items", _i32), ("split_pairs", _i32), ("partials", _i32),
                ("tokens", _i64), ("max_worker_cost", _i64),
                ("mean_worker_cost", ctypes.c_double)]


class PlanDecodeArgs(ctypes.Structure):
    _fields_ = [("seq_lens", Tensor), ("page_size", _i64),
                ("num_qo_heads", _i64), ("num_kv_heads", _i64),
                ("head_dim", _i64), ("dtype", _i32), ("stream", _vp)]


class RunDecodeArgs(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k_cache", Tensor), ("v_cache", Tensor),
                ("block_table", Tensor), ("seq_lens", Tensor), ("out", Tensor),
                ("lse", _TensorP), ("sm_scale", ctypes.c_float),
                ("logits_soft_cap", ctypes.c_float), ("stream", _vp)]


# tailor_attention_mask
MASK_CAUSAL, MASK_NONE, MASK_WINDOW = 0, 1, 2


class RaggedLimits(ctypes.Structure):
    _fields_ = [("max_batch", _i64), ("max_tokens", _i64),
                ("num_qo_heads", _i64), ("num_kv_heads", _i64),
                ("head_dim", _i64), ("page_size", _i64), ("dtype", _i32),
                ("mask", _i32), ("window_left", _i64)]


class RaggedWorkspaceInfo(ctypes.Structure):
    _fields_ = [("planned", _i32), ("workers", _i32), ("batch", _i64),
                ("total_q", _i64), ("capacity_bytes", _i64),
                ("tiles", _i32), ("items", _i32), ("tail_tiles", _i32),
                ("masked_tiles", _i32), ("split_tiles", _i32),
                ("partials", _i32), ("busy_workers", _i32),
                ("tile_rows", _i32), ("head_pack", _i32), ("reserved", _i32),
                ("max_worker_cost", _i64),
                ("mean_worker_cost", ctypes.c_double)]


class RaggedDecodeInfo(ctypes.Structure):
    _fields_ = [("seqs", _i32), ("items", _i32)]


_RAGGED_LAYER = [("page_size", _i64), ("num_qo_heads", _i64),
                 ("num_kv_heads", _i64), ("head_dim", _i64), ("dtype", _i32),
                 ("mask", _i32), ("window_left", _i64)]


class PlanRaggedArgs(ctypes.Structure):
    _fields_ = [("q_indptr", Tensor), ("kv_lens", Tensor)] + _RAGGED_LAYER + [
        ("stream", _vp)]


class PlanRaggedFlashInferArgs(ctypes.Structure):
    _fields_ = [("qo_indptr", Tensor), ("kv_indptr", Tensor),
                ("kv_last_page_len", Tensor)] + _RAGGED_LAYER + [
        ("stream", _vp)]


class RunRaggedArgs(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k_cache", Tensor), ("v_cache", Tensor),
                ("block_table", Tensor), ("page_indptr", _TensorP),
                ("kv_lens", _TensorP), ("out", Tensor), ("lse", _TensorP),
                ("sm_scale", ctypes.c_float),
                ("logits_soft_cap", ctypes.c_float), ("stream", _vp)]


_P = ctypes.POINTER
_SIGNATURES = {
    # name: (restype, argtypes)
    "tailor_last_error": (_cp, []),
    "tailor_status_name": (_cp, [ctypes.c_int]),
    "tailor_c_api_version": (ctypes.c_uint32, []),
    "tailor_version": (_cp, []),
    "tailor_runtime_create": (ctypes.c_int, [_P(RuntimeOptions), _P(_vp)]),
    "tailor_runtime_destroy": (None, [_vp]),
    "tailor_runtime_get_info": (ctypes.c_int, [_vp, _P(RuntimeInfo)]),
    "tailor_runtime_stats": (ctypes.c_int, [_vp, _i32, _P(_vp)]),
    "tailor_string_free": (None, [_vp]),
    "tailor_moe_workspace_create": (ctypes.c_int, [_P(_vp)]),
    "tailor_moe_workspace_destroy": (None, [_vp]),
    "tailor_moe_workspace_reserve": (ctypes.c_int,
                                     [_vp, _P(WorkspaceLimits), _vp]),
    "tailor_moe_workspace_bytes": (ctypes.c_int,
                                   [_vp, _P(WorkspaceLimits), _P(_i64)]),
    "tailor_moe_workspace_bind": (ctypes.c_int, [
        _vp, _P(WorkspaceLimits), _vp, _i64, _vp, _vp]),
    "tailor_moe_workspace_take_errors": (ctypes.c_int, [_vp, _vp, _vp]),
    "tailor_moe_workspace_get_info": (ctypes.c_int, [_vp, _P(WorkspaceInfo)]),
    "tailor_moe_workspace_gemm_count": (ctypes.c_int, [_vp, _P(_i32)]),
    "tailor_moe_workspace_get_gemm": (ctypes.c_int,
                                      [_vp, _i32, _P(GemmChoice)]),
    "tailor_moe_route": (ctypes.c_int, [_vp, _P(RouteArgs), _vp]),
    "tailor_moe_pack": (ctypes.c_int, [_vp, _P(PackArgs)]),
    "tailor_moe_grouped_gemm": (ctypes.c_int, [_vp, _P(GroupedGemmArgs), _vp]),
    "tailor_moe_combine": (ctypes.c_int, [_vp, _P(CombineArgs)]),
    "tailor_moe_experts": (ctypes.c_int, [_vp, _P(ExpertsArgs), _vp]),
    "tailor_moe_experts_quantized": (
        ctypes.c_int, [_vp, _P(ExpertsArgs), _P(ExpertsQuantization), _vp]),
    "tailor_moe_grouped_gemm_quantized": (
        ctypes.c_int, [_vp, _P(GroupedGemmArgs), _P(GemmQuantization), _vp]),
    "tailor_attention_decode_workspace_create": (ctypes.c_int, [_P(_vp)]),
    "tailor_attention_decode_workspace_destroy": (None, [_vp]),
    "tailor_attention_decode_workspace_reserve": (
        ctypes.c_int, [_vp, _P(DecodeLimits), _vp]),
    "tailor_attention_decode_workspace_bytes": (
        ctypes.c_int, [_vp, _P(DecodeLimits), _P(_i64)]),
    "tailor_attention_decode_workspace_bind": (
        ctypes.c_int, [_vp, _P(DecodeLimits), _vp, _i64, _vp, _vp]),
    "tailor_attention_decode_workspace_take_errors": (
        ctypes.c_int, [_vp, _vp, _vp]),
    "tailor_attention_decode_workspace_get_info": (
        ctypes.c_int, [_vp, _P(DecodeWorkspaceInfo)]),
    "tailor_attention_decode_plan": (ctypes.c_int,
                                     [_vp, _P(PlanDecodeArgs), _vp]),
    "tailor_attention_decode_run": (ctypes.c_int,
                                    [_vp, _P(RunDecodeArgs), _vp]),
    "tailor_attention_ragged_workspace_create": (ctypes.c_int, [_P(_vp)]),
    "tailor_attention_ragged_workspace_destroy": (None, [_vp]),
    "tailor_attention_ragged_workspace_reserve": (
        ctypes.c_int, [_vp, _P(RaggedLimits), _vp]),
    "tailor_attention_ragged_workspace_bytes": (
        ctypes.c_int, [_vp, _P(RaggedLimits), _P(_i64)]),
    "tailor_attention_ragged_workspace_bind": (
        ctypes.c_int, [_vp, _P(RaggedLimits), _vp, _i64, _vp, _vp]),
    "tailor_attention_ragged_workspace_take_errors": (
        ctypes.c_int, [_vp, _vp, _vp]),
    "tailor_attention_ragged_workspace_get_info": (
        ctypes.c_int, [_vp, _P(RaggedWorkspaceInfo)]),
    "tailor_attention_ragged_workspace_get_decode_info": (
        ctypes.c_int, [_vp, _P(RaggedDecodeInfo)]),
    "tailor_attention_ragged_plan": (ctypes.c_int,
                                     [_vp, _P(PlanRaggedArgs), _vp]),
    "tailor_attention_ragged_plan_flashinfer": (
        ctypes.c_int, [_vp, _P(PlanRaggedFlashInferArgs), _vp]),
    "tailor_attention_ragged_run": (ctypes.c_int,
                                    [_vp, _P(RunRaggedArgs), _vp]),
}


def _candidates():
    env = os.environ.get("TAILOR_LIBRARY")
    if env:
        return [env]
    here = pathlib.Path(__file__).resolve().parent
    # The library of this package's ABI first (another one is refused with
    # its version in the error).
    soname = f"libtailor_c.so.{C_API_VERSION}"
    bundled = sorted((here / "_lib").glob("libtailor_c.so*"),
                     key=lambda p: (p.name != soname, p.name))
    return [str(p) for p in bundled] + [soname, "libtailor_c.so"]


def load_library():
    """Loads libtailor_c.so and declares every entry; raises OSError."""
    errors = []
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
            break
        except OSError as e:
            errors.append(f"{candidate}: {e}")
    else:
        raise OSError("tailor: cannot load libtailor_c.so (set TAILOR_LIBRARY "
                      "to its path, or build it first):\n  " +
                      "\n  ".join(errors))
    declare(lib, candidate)
    lib.path = candidate
    return lib


def declare(lib, path):
    """Checks that `lib` (loaded from `path`) speaks this package's C ABI and
    has every entry, and declares them; raises OSError naming what is off
    (a library built before an entry was added lacks it)."""
    version = lib.tailor_c_api_version()
    if version != C_API_VERSION:
        raise OSError(f"tailor: {path} speaks C ABI {version}, this "
                      f"package {C_API_VERSION}")
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise OSError(f"tailor: {path} lacks {', '.join(missing)}: it is "
                      "older than this package; rebuild it (or set "
                      "TAILOR_LIBRARY to a current build)")
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


lib = load_library()
