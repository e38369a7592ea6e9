"""ctypes binding of the ragged-attention development library (dev_api.h).

TailorAttention plans a step on the host (the tailor planner), copies the work
list to the device, prepares the kernel's tensor maps once and launches on the
current torch stream. It owns its device buffers (work list, partials, error
word); the caller owns q, the caches, the block table and out.
"""
import ctypes
import os

import torch

_LIB = None


class PlanArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "num_qo_heads", "num_kv_heads", "head_dim", "pack", "causal", "window_left",
        "num_workers", "max_pieces", "min_piece_blocks")]


class PlanInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "items", "workers", "merge_groups", "partials", "tiles", "tail_tiles",
        "masked_tiles", "split_tiles", "busy_workers", "kv_block", "tile_rows",
        "item_bytes", "merge_bytes")] + [(n, ctypes.c_longlong) for n in (
            "total_q", "blocks", "masked_blocks", "useful_rows", "executed_rows",
            "max_worker_cost")] + [("mean_worker_cost", ctypes.c_double)]


_LL = ctypes.c_longlong
_P = ctypes.c_void_p


class RunArgs(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int), ("head_dim", ctypes.c_int), ("pack", ctypes.c_int),
        ("page_size", ctypes.c_int), ("num_qo_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("q", _P), ("q_tokens", _LL), ("q_stride_token", _LL), ("q_stride_head", _LL),
        ("k_cache", _P), ("v_cache", _P), ("num_pages", _LL),
        ("k_stride_page", _LL), ("k_stride_token", _LL), ("k_stride_head", _LL),
        ("v_stride_page", _LL), ("v_stride_token", _LL), ("v_stride_head", _LL),
        ("block_table", _P), ("block_table_stride", _LL), ("max_pages", ctypes.c_int),
        ("out", _P), ("out_stride_token", _LL), ("out_stride_head", _LL),
        ("lse", _P), ("lse_stride_token", _LL),
        ("items", _P), ("worker_begin", _P), ("num_workers", ctypes.c_int),
        ("merge_groups", _P), ("merge_count", _P), ("merge_grid", ctypes.c_int),
        ("partial_out", _P), ("partial_lse", _P), ("errors", _P),
        ("sm_scale", ctypes.c_float), ("soft_cap", ctypes.c_float),
        ("causal", ctypes.c_int), ("window_left", ctypes.c_int),
        ("design", ctypes.c_int),
    ]


class DecodePlanArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "num_qo_heads", "num_kv_heads", "head_dim", "page_size", "workers_per_sm",
        "head_group")]


class DecodePlanInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "items", "workers", "partials", "stages", "head_group", "launch_flags",
        "busy_workers", "split_pairs", "item_bytes")] + [
            ("max_worker_cost", ctypes.c_longlong), ("mean_worker_cost", ctypes.c_double)]


class DecodeRunArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "dtype", "head_dim", "group", "page_size", "num_kv_heads", "stages",
        "head_groups")] + [
        ("q", _P), ("q_stride_b", _LL), ("q_stride_h", _LL),
        ("k_cache", _P), ("v_cache", _P), ("num_pages", _LL),
        ("k_stride_page", _LL), ("k_stride_token", _LL), ("k_stride_head", _LL),
        ("v_stride_page", _LL), ("v_stride_token", _LL), ("v_stride_head", _LL),
        ("block_table", _P), ("block_table_stride", _LL), ("max_pages", ctypes.c_int),
        ("seq_lens", _P), ("out", _P), ("out_stride_b", _LL), ("out_stride_h", _LL),
        ("lse", _P), ("lse_stride_b", _LL),
        ("items", _P), ("first_items", _P), ("worker_begin", _P),
        ("num_workers", ctypes.c_int), ("partial_out", _P), ("partial_lse", _P),
        ("scratch", _P), ("partials", ctypes.c_int), ("sm_scale", ctypes.c_float),
    ]


def load(path=None):
    """Loads the library: `path`, $TAILOR_ATTENTION_DEV_LIB, or build-attn-dev/lib."""
    global _LIB
    if _LIB is not None and path is None:
        return _LIB
    if path is None:
        path = os.environ.get("TAILOR_ATTENTION_DEV_LIB") or os.path.join(
            os.path.dirname(__file__), "..", "..", "build-attn-dev", "lib",
            "libtailor_attention_dev.so")
    lib = ctypes.CDLL(os.path.abspath(path))
    err = ctypes.c_char_p
    lib.tad_plan_build.argtypes = [_P, _P, ctypes.c_int, ctypes.POINTER(PlanArgs),
                                   ctypes.POINTER(_P), err, ctypes.c_int]
    lib.tad_plan_info.argtypes = [_P, ctypes.POINTER(PlanInfo)]
    lib.tad_plan_copy.argtypes = [_P, _P, _P, _P]
    lib.tad_plan_free.argtypes = [_P]
    lib.tad_prepare.argtypes = [ctypes.POINTER(RunArgs), ctypes.POINTER(_P), err,
                                ctypes.c_int]
    lib.tad_launch.argtypes = [_P, _P, err, ctypes.c_int]
    lib.tad_prepared_free.argtypes = [_P]
    lib.tad_variants.restype = ctypes.c_char_p
    lib.tad_decode_plan_build.argtypes = [_P, ctypes.c_int, ctypes.POINTER(DecodePlanArgs),
                                          ctypes.POINTER(_P), err, ctypes.c_int]
    lib.tad_decode_plan_info.argtypes = [_P, ctypes.POINTER(DecodePlanInfo)]
    lib.tad_decode_plan_copy.argtypes = [_P, _P, _P, _P]
    lib.tad_decode_plan_free.argtypes = [_P]
    lib.tad_decode_prepare.argtypes = [ctypes.POINTER(DecodeRunArgs), ctypes.POINTER(_P),
                                       err, ctypes.c_int]
    lib.tad_decode_launch.argtypes = [_P, _P, err, ctypes.c_int]
    lib.tad_decode_prepared_free.argtypes = [_P]
    lib.tad_decode_scratch_bytes.restype = ctypes.c_longlong
    lib.tad_decode_scratch_bytes.argtypes = [ctypes.c_int]
    lib.tad_decode_error_offset.restype = ctypes.c_longlong
    lib.tad_decode_error_offset.argtypes = [ctypes.c_int]
    _LIB = lib
    return lib


def variants():
    return load().tad_variants().decode().split("\n")


def _check(rc, buf, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {buf.value.decode(errors='replace')}")


def _i32(values):
    arr = (ctypes.c_int * len(values))(*values)
    return arr


class TailorAttention:
    """One planned step on fixed tensors: plan(...) once, then run() many times."""

    def __init__(self, *, num_qo_heads, num_kv_heads, head_dim, pack, page_size,
                 causal=True, window_left=-1, soft_cap=0.0, sm_scale=None,
                 num_workers=0, max_pieces=0, min_piece_blocks=0, design=0):
        self.lib = load()
        self.design = design
        self.hq, self.hkv, self.d = num_qo_heads, num_kv_heads, head_dim
        self.pack, self.page = pack, page_size
        self.causal, self.window = causal, window_left
        self.soft_cap = soft_cap
        self.sm_scale = sm_scale if sm_scale is not None else head_dim ** -0.5
        self.plan_args = PlanArgs(num_qo_heads, num_kv_heads, head_dim, pack,
                                  int(causal), window_left, num_workers, max_pieces,
                                  min_piece_blocks)
        self.prepared = None
        self.info = None

    def plan(self, q_lens, kv_lens, device="cuda"):
        """Plans on the host; copies the work list to the device."""
        buf = ctypes.create_string_buffer(1024)
        handle = _P()
        q, kv = _i32(list(q_lens)), _i32(list(kv_lens))
        rc = self.lib.tad_plan_build(ctypes.cast(q, _P), ctypes.cast(kv, _P),
                                     len(q_lens), ctypes.byref(self.plan_args),
                                     ctypes.byref(handle), buf, len(buf))
        _check(rc, buf, "plan")
        try:
            info = PlanInfo()
            self.lib.tad_plan_info(handle, ctypes.byref(info))
            items = torch.empty(max(1, info.items) * info.item_bytes, dtype=torch.uint8)
            begin = torch.empty(info.workers + 1, dtype=torch.int32)
            merges = torch.empty(max(1, info.merge_groups) * info.merge_bytes,
                                 dtype=torch.uint8)
            self.lib.tad_plan_copy(handle, _P(items.data_ptr()), _P(begin.data_ptr()),
                                   _P(merges.data_ptr()))
        finally:
            self.lib.tad_plan_free(handle)
        self.info = info
        self.items_host = items.view(torch.int32).view(-1, 16)[:info.items].clone()
        self.d_items = items.to(device)
        self.d_begin = begin.to(device)
        self.d_merges = merges.to(device)
        self.d_merge_count = torch.tensor([info.merge_groups], dtype=torch.int32,
                                          device=device)
        parts = max(1, info.partials)
        self.d_partial_out = torch.empty(parts * 128 * self.d, dtype=torch.float32,
                                         device=device)
        self.d_partial_lse = torch.empty(parts * 128, dtype=torch.float32, device=device)
        self.d_errors = torch.full((1,), -1, dtype=torch.int64, device=device)
        self.prepared = None
        return info

    def prepare(self, q, k_cache, v_cache, block_table, out, lse=None):
        """q/out [tokens, Hq, D]; caches [pages, page, Hkv, D] (any strides, last 1)."""
        assert self.info is not None, "plan first"
        for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out)):
            if t.stride(-1) != 1:
                raise ValueError(f"{name}: last dim must be contiguous")
        dtype = {torch.bfloat16: 0, torch.float16: 1}[q.dtype]
        info = self.info
        merge_grid = min(info.merge_groups, 264) if info.merge_groups > 0 else 0
        a = RunArgs(
            dtype=dtype, head_dim=self.d, pack=self.pack, page_size=self.page,
            num_qo_heads=self.hq, num_kv_heads=self.hkv,
            q=q.data_ptr(), q_tokens=q.shape[0], q_stride_token=q.stride(0),
            q_stride_head=q.stride(1),
            k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(),
            num_pages=k_cache.shape[0],
            k_stride_page=k_cache.stride(0), k_stride_token=k_cache.stride(1),
            k_stride_head=k_cache.stride(2),
            v_stride_page=v_cache.stride(0), v_stride_token=v_cache.stride(1),
            v_stride_head=v_cache.stride(2),
            block_table=block_table.data_ptr(), block_table_stride=block_table.stride(0),
            max_pages=block_table.shape[1],
            out=out.data_ptr(), out_stride_token=out.stride(0), out_stride_head=out.stride(1),
            lse=lse.data_ptr() if lse is not None else None,
            lse_stride_token=lse.stride(0) if lse is not None else 0,
            items=self.d_items.data_ptr(), worker_begin=self.d_begin.data_ptr(),
            num_workers=info.workers, merge_groups=self.d_merges.data_ptr(),
            merge_count=self.d_merge_count.data_ptr(), merge_grid=merge_grid,
            partial_out=self.d_partial_out.data_ptr(),
            partial_lse=self.d_partial_lse.data_ptr(), errors=self.d_errors.data_ptr(),
            sm_scale=self.sm_scale, soft_cap=self.soft_cap, causal=int(self.causal),
            window_left=self.window, design=self.design)
        buf = ctypes.create_string_buffer(1024)
        handle = _P()
        rc = self.lib.tad_prepare(ctypes.byref(a), ctypes.byref(handle), buf, len(buf))
        _check(rc, buf, "prepare")
        if self.prepared is not None:
            self.lib.tad_prepared_free(self.prepared)
        self.prepared = handle
        self._keep = (q, k_cache, v_cache, block_table, out, lse)

    def run(self):
        buf = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.tad_launch(self.prepared, _P(stream), buf, len(buf))
        _check(rc, buf, "launch")

    def errors(self):
        """(position, value) of the first bad page id, or None."""
        word = int(self.d_errors.item()) & 0xFFFFFFFFFFFFFFFF
        if word == 0xFFFFFFFFFFFFFFFF:
            return None
        value = word & 0xFFFFFFFF
        return word >> 32, value - (1 << 32) if value >= 1 << 31 else value

    def reset_errors(self):
        self.d_errors.fill_(-1)

    def __del__(self):
        if getattr(self, "prepared", None) is not None:
            self.lib.tad_prepared_free(self.prepared)
            self.prepared = None


class TailorDecode:
    """Rows of q_len 1 on tailor's decode kernel: plan(seq_lens), prepare(...), run().

    q / out [B, Hq, D] (rows b = sequences), caches as for TailorAttention,
    block_table [B, max_pages]; bf16, D 128, pages of 16, groups 4 and 8."""

    def __init__(self, *, num_qo_heads, num_kv_heads, head_dim, page_size, sm_scale=None,
                 workers_per_sm=0, head_group=0):
        self.lib = load()
        self.hq, self.hkv, self.d, self.page = num_qo_heads, num_kv_heads, head_dim, page_size
        self.group = num_qo_heads // num_kv_heads
        self.sm_scale = sm_scale if sm_scale is not None else head_dim ** -0.5
        self.plan_args = DecodePlanArgs(num_qo_heads, num_kv_heads, head_dim, page_size,
                                        workers_per_sm, head_group)
        self.prepared = None
        self.info = None

    def plan(self, seq_lens, device="cuda"):
        buf = ctypes.create_string_buffer(1024)
        handle = _P()
        lens = _i32(list(seq_lens))
        rc = self.lib.tad_decode_plan_build(ctypes.cast(lens, _P), len(seq_lens),
                                            ctypes.byref(self.plan_args),
                                            ctypes.byref(handle), buf, len(buf))
        _check(rc, buf, "decode plan")
        try:
            info = DecodePlanInfo()
            self.lib.tad_decode_plan_info(handle, ctypes.byref(info))
            items = torch.empty(max(1, info.items) * info.item_bytes, dtype=torch.uint8)
            first = torch.empty(max(1, info.workers) * info.item_bytes, dtype=torch.uint8)
            begin = torch.empty(info.workers + 2, dtype=torch.int32)
            self.lib.tad_decode_plan_copy(handle, _P(items.data_ptr()), _P(first.data_ptr()),
                                          _P(begin.data_ptr()))
        finally:
            self.lib.tad_decode_plan_free(handle)
        self.info = info
        self.d_items, self.d_first, self.d_begin = items.to(device), first.to(device), \
            begin.to(device)
        self.d_seq_lens = torch.tensor(list(seq_lens), dtype=torch.int32, device=device)
        parts = max(1, info.partials)
        self.d_partial_out = torch.empty(parts * self.group * self.d, dtype=torch.float32,
                                         device=device)
        self.d_partial_lse = torch.empty(parts * self.group, dtype=torch.float32,
                                         device=device)
        scratch = self.lib.tad_decode_scratch_bytes(info.partials)
        self.d_scratch = torch.zeros(scratch, dtype=torch.uint8, device=device)
        self.error_offset = self.lib.tad_decode_error_offset(info.partials)
        self.d_scratch[self.error_offset:].fill_(0xFF)
        self.prepared = None
        return info

    def prepare(self, q, k_cache, v_cache, block_table, out, lse=None):
        info = self.info
        a = DecodeRunArgs(
            dtype={torch.bfloat16: 0, torch.float16: 1}[q.dtype], head_dim=self.d,
            group=self.group, page_size=self.page, num_kv_heads=self.hkv,
            stages=info.stages, head_groups=int(info.head_group > 1),
            q=q.data_ptr(), q_stride_b=q.stride(0), q_stride_h=q.stride(1),
            k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(),
            num_pages=k_cache.shape[0],
            k_stride_page=k_cache.stride(0), k_stride_token=k_cache.stride(1),
            k_stride_head=k_cache.stride(2),
            v_stride_page=v_cache.stride(0), v_stride_token=v_cache.stride(1),
            v_stride_head=v_cache.stride(2),
            block_table=block_table.data_ptr(), block_table_stride=block_table.stride(0),
            max_pages=block_table.shape[1], seq_lens=self.d_seq_lens.data_ptr(),
            out=out.data_ptr(), out_stride_b=out.stride(0), out_stride_h=out.stride(1),
            lse=lse.data_ptr() if lse is not None else None,
            lse_stride_b=lse.stride(0) if lse is not None else 0,
            items=self.d_items.data_ptr(), first_items=self.d_first.data_ptr(),
            worker_begin=self.d_begin.data_ptr(), num_workers=info.workers,
            partial_out=self.d_partial_out.data_ptr(),
            partial_lse=self.d_partial_lse.data_ptr(), scratch=self.d_scratch.data_ptr(),
            partials=info.partials, sm_scale=self.sm_scale)
        buf = ctypes.create_string_buffer(1024)
        handle = _P()
        rc = self.lib.tad_decode_prepare(ctypes.byref(a), ctypes.byref(handle), buf, len(buf))
        _check(rc, buf, "decode prepare")
        if self.prepared is not None:
            self.lib.tad_decode_prepared_free(self.prepared)
        self.prepared = handle
        self._keep = (q, k_cache, v_cache, block_table, out, lse)

    def run(self):
        buf = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.tad_decode_launch(self.prepared, _P(stream), buf, len(buf))
        _check(rc, buf, "decode launch")

    def errors(self):
        """The error words (bad page, bad seq len, too many pages): None where clear."""
        words = self.d_scratch[self.error_offset:self.error_offset + 24].view(torch.int64)
        out = []
        for w in words.tolist():
            w &= 0xFFFFFFFFFFFFFFFF
            out.append(None if w == 0xFFFFFFFFFFFFFFFF else (w >> 32, w & 0xFFFFFFFF))
        return out

    def summary(self):
        i = self.info
        return (f"items={i.items} workers={i.workers} busy={i.busy_workers} "
                f"split={i.split_pairs} stages={i.stages} head_group={i.head_group} "
                f"flags={i.launch_flags} cost max/mean={i.max_worker_cost}/"
                f"{i.mean_worker_cost:.0f}")

    def __del__(self):
        if getattr(self, "prepared", None) is not None:
            self.lib.tad_decode_prepared_free(self.prepared)
            self.prepared = None
