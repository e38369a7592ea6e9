"""bench/fp8/fp8_lib.py — the GPU harness's side of the FP8 MoE kernels:
ctypes over libfp8dev.so (moe_fp8_host.cc), the reference quantizer in
torch, the work list a device Route would write, and fp64 references.

The reference quantizer is the rule of runtime/cuda/fp8.cuh written with
torch ops (f32 values, IEEE f32 division, NaN propagating through the amax):
  scale = max(amax(|x|) over 1 x 128, 1e-10) / 448,  q = e4m3(clamp(x / scale))
Both divisions run in fp64 and round to f32, which is exactly the f32 IEEE
quotient (53 >= 2 * 24 + 2 bits: double rounding is innocuous); torch's own
`tensor / python_float` on CUDA multiplies by the reciprocal, one ulp off.
"""
import ctypes
import os

import torch

E4M3 = torch.float8_e4m3fn
BLOCK = 128
EPS = 1e-10
FP8_MAX = 448.0
# FP8_FAKE=1: fp8_fake.FakeLib on the CPU stands in for the GPU (the
# harness's own self-test, bench/fp8/fp8_selftest.py).
FAKE = os.environ.get("FP8_FAKE") == "1"
dev = torch.device("cpu" if FAKE else "cuda")


def sync():
    if not FAKE:
        torch.cuda.synchronize()

# Tile shapes of the kernels in moe_fp8_kernels.cu: name -> (plan tile rows,
# A box rows, swap-AB).
TILES = {"128": (128, 128, 0), "64": (64, 64, 0), "s32": (32, 32, 1),
         "128t": (128, 128, 0), "64u": (64, 64, 0),
         "s16": (16, 16, 1), "s8": (8, 8, 1)}
EPILOGUES = ("plain", "silu", "quant")


def scale_rows(rows):
    return max(4, (rows + 3) // 4 * 4)


def f32_div(a, b):
    """a / b rounded once to f32 (IEEE division), for f32 tensors or scalars."""
    if not torch.is_tensor(b):
        b = torch.tensor(b, dtype=torch.float64, device=a.device)
    return (a.double() / b.double()).float()


def to_e4m3(y):
    """f32 -> e4m3, round to nearest even, saturated to +-448 (NaN stays)."""
    return y.clamp(-FP8_MAX, FP8_MAX).to(E4M3)


def e4m3_half_step(y):
    """Half the spacing of e4m3 values around |y| (the rounding bound), for
    |y| <= 448: 2^(e - 4) in binade [2^e, 2^(e+1)), 2^-10 below 2^-6."""
    a = y.abs().clamp(min=2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(a)) - 4)


# ---- reference quantization ---------------------------------------------------
def quantize_groups(x, rows_alloc=None):
    """x [R, K] -> (q e4m3 [R, K], scales f32 [K / 128, scale_rows(R)])."""
    r, k = x.shape
    xf = x.float().view(r, k // BLOCK, BLOCK)
    amax = xf.abs().amax(dim=-1)  # NaN propagates
    scale = f32_div(torch.clamp(amax, min=EPS), FP8_MAX)
    q = to_e4m3(f32_div(xf, scale.unsqueeze(-1))).view(r, k)
    s = torch.zeros(k // BLOCK, scale_rows(rows_alloc or r), device=x.device)
    s[:, :r] = scale.t()
    return q, s


def quantize_weights(w):
    """w [N, K] -> (q e4m3 [N, K], scales [N / 128, K / 128]): 128 x 128."""
    n, k = w.shape
    wb = w.float().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    amax = wb.abs().amax(dim=(1, 3))
    scale = f32_div(torch.clamp(amax, min=EPS), FP8_MAX)
    q = to_e4m3(f32_div(wb, scale[:, None, :, None]))
    return q.view(n, k), scale


def dequant_rows(q, s, rows):
    """f64 rows `rows` of A = q * s."""
    sr = s[:, rows].t().double().repeat_interleave(BLOCK, dim=1)
    return q[rows].double() * sr


def dequant_weight(q, s):
    return q.double() * s.double().repeat_interleave(BLOCK, 0).repeat_interleave(
        BLOCK, 1)


def make_weights(experts, n, k, gen_seed, std=0.02):
    """Block-quantized random weights, one expert at a time (no bf16 copy of
    the whole tensor): (w e4m3 [E, N, K], scales [E, N/128, K/128])."""
    g = torch.Generator(device=dev).manual_seed(gen_seed)
    w = torch.empty(experts, n, k, dtype=E4M3, device=dev)
    s = torch.empty(experts, n // BLOCK, k // BLOCK, device=dev)
    for e in range(experts):
        x = torch.randn(n, k, generator=g, device=dev, dtype=torch.bfloat16) * std
        w[e], s[e] = quantize_weights(x)
    return w, s


# ---- the plan a device Route writes -----------------------------------------------
def work_list(counts, tile_rows):
    """Expert-major work items (row_begin, rows, expert, tail_class)."""
    items, start = [], 0
    for e, c in enumerate(counts):
        full, tail = divmod(c, tile_rows)
        for i in range(full):
            items.append((start + i * tile_rows, tile_rows, e, 0))
        if tail:
            items.append((start + full * tile_rows, tail, e, tile_rows))
        start += c
    return items


class Plan:
    """Work list and route header on the device for one step and tile."""

    def __init__(self, counts, tile_rows):
        self.items = work_list(counts, tile_rows)
        n = max(1, len(self.items))
        flat = [v for it in self.items for v in it] or [0, 0, 0, 0]
        self.work = torch.tensor(flat, dtype=torch.int32, device=dev)
        self.header = torch.zeros(64, dtype=torch.int32, device=dev)
        self.header[4] = len(self.items)
        self.header[5] = sum(counts)
        self.max_work = n


# ---- ctypes ------------------------------------------------------------------------
# ---- the Hopper schedule (templates/cuda/moe/params.h), for the log ---------------
def sm90_ctas(max_tiles, k, sms, split_k, swap):
    """MoeSm90Ctas: the host's grid (it counts 64-K blocks)."""
    k_blocks = (k + 63) // 64
    splits = k_blocks // (4 if swap else 8) if split_k else 1
    if swap and max_tiles >= 40:
        splits = 1
    splits = max(1, min(splits, 8))
    return max(1, min(max_tiles * splits, sms))


def sm90_schedule(tiles, grid, k_blocks, split_k, swap):
    """MoeSm90ScheduleOf with the FP8 kernel's 128-K blocks: (whole, splits,
    units)."""
    rest = tiles % grid if grid > 0 else 0
    few = 2 * rest <= grid and (not swap or rest < 40)
    splits = 1
    if split_k and rest > 0 and few:
        splits = min(grid // rest, 8, k_blocks // (4 if swap else 8))
    if splits <= 1:
        return tiles, 1, tiles
    return tiles - rest, splits, tiles - rest + rest * splits


def open_lib(folder, cubin="moe_fp8.cubin"):
    """The kernels' launcher: libfp8dev.so, or the CPU stand-in (FP8_FAKE)."""
    if FAKE:
        import fp8_fake
        return fp8_fake.FakeLib()
    return Lib(folder, cubin)


class Lib:
    def __init__(self, folder, cubin="moe_fp8.cubin"):
        self.so = ctypes.CDLL(os.path.join(folder, "libfp8dev.so"))
        so = self.so
        so.fp8dev_error.restype = ctypes.c_char_p
        so.fp8dev_init.argtypes = [ctypes.c_char_p]
        p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        so.fp8dev_pack.argtypes = [p, p, p, p, i, i, i, i, i, p]
        so.fp8dev_gemm_prepare.restype = p
        so.fp8dev_gemm_prepare.argtypes = [
            ctypes.c_char_p, p, p, ll, ll, p, p, i, i, i, p, p, i, p, p, i, i,
            i, i, p, p, i, i]
        so.fp8dev_gemm_launch.argtypes = [p, p]
        so.fp8dev_gemm_grid.argtypes = [p]
        so.fp8dev_gemm_free.argtypes = [p]
        torch.cuda.init()
        torch.empty(1, device=dev)
        if so.fp8dev_init(os.path.join(folder, cubin).encode()):
            raise RuntimeError(so.fp8dev_error().decode())
        self.sms = so.fp8dev_sm_count()
        # Split-K scratch: one partial slot (2 x 128 x 128 floats) per SM.
        self.partials = torch.empty(self.sms * 2 * 128 * 128, device=dev)
        self.arrivals = torch.zeros(2 * self.sms + 64, dtype=torch.int32,
                                    device=dev)

    def error(self):
        return self.so.fp8dev_error().decode()

    @staticmethod
    def stream():
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def pack(self, hidden, permutation, a, a_scales, topk):
        rows = permutation.numel()
        rc = self.so.fp8dev_pack(hidden.data_ptr(), permutation.data_ptr(),
                                 a.data_ptr(), a_scales.data_ptr(), rows,
                                 hidden.shape[0], topk, hidden.shape[1],
                                 a_scales.shape[1], self.stream())
        if rc:
            raise RuntimeError(self.error())

    def gemm(self, tile, epilogue, a, a_s, w, w_s, c, plan, c_s=None,
             split_k=True, dynamic=True, expert_groups=0):
        """A prepared GEMM: call .launch() (and .free() when done)."""
        tile_rows, box, swap = TILES[tile]
        experts, n, k = w.shape
        gated = epilogue != "plain"
        n_tiles = (((n // 2) if gated else n) + (128 if gated else 256) - 1) // (
            128 if gated else 256)
        handle = self.so.fp8dev_gemm_prepare(
            f"tailor_fp8_gemm_{tile}_{epilogue}".encode(), a.data_ptr(),
            a_s.data_ptr(), max(1, a.shape[0]), a_s.shape[1], w.data_ptr(),
            w_s.data_ptr(), experts, n, k, c.data_ptr(),
            c_s.data_ptr() if c_s is not None else None,
            c_s.shape[1] if c_s is not None else 0, plan.work.data_ptr(),
            plan.header.data_ptr(), plan.max_work, plan.max_work * n_tiles,
            box, swap, self.partials.data_ptr() if split_k else None,
            self.arrivals.data_ptr() if split_k else None, int(dynamic),
            expert_groups)
        if not handle:
            raise RuntimeError(self.error())
        prepared = Prepared(self, handle)
        prepared.schedule = sm90_schedule(len(plan.items) * n_tiles,
                                          prepared.grid, k // BLOCK, split_k,
                                          bool(swap))
        return prepared


class Prepared:
    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle
        self.grid = lib.so.fp8dev_gemm_grid(handle)
        self.schedule = None  # (whole, splits, units), set by Lib.gemm

    def launch(self):
        if self.lib.so.fp8dev_gemm_launch(self.handle, Lib.stream()):
            raise RuntimeError(self.lib.error())

    def free(self):
        if self.handle:
            self.lib.so.fp8dev_gemm_free(self.handle)
            self.handle = None


# ---- references ------------------------------------------------------------------
def reference_rows(a_q, a_s, w_q, w_s, counts, rows, gated):
    """f64 outputs of `rows` (sorted global rows): A_deq · W_deq[e]ᵀ, gated
    silu(gate) * up."""
    offsets = [0]
    for c in counts:
        offsets.append(offsets[-1] + c)
    n = w_q.shape[1]
    out = torch.empty(len(rows), n // 2 if gated else n, dtype=torch.float64,
                      device=dev)
    rows_t = torch.tensor(rows, dtype=torch.long, device=dev)
    expert_of = torch.bucketize(rows_t, torch.tensor(offsets[1:], device=dev),
                                right=True)
    for e in torch.unique(expert_of).tolist():
        sel = (expert_of == e).nonzero().flatten()
        a = dequant_rows(a_q, a_s, rows_t[sel])
        y = a @ dequant_weight(w_q[e], w_s[e]).t()
        if gated:
            g, u = y[:, : n // 2], y[:, n // 2:]
            y = g * torch.sigmoid(g) * u
        out[sel] = y
    return out


def sample_rows(counts, per_expert=4, cap=2048):
    """Global rows to check: each expert's first, last and a few between."""
    rows, start = [], 0
    for c in counts:
        if c:
            pick = {start, start + c - 1}
            for j in range(1, per_expert - 1):
                pick.add(start + j * c // per_expert)
            rows.extend(sorted(pick))
        start += c
    if len(rows) > cap:
        step = len(rows) / cap
        rows = [rows[int(i * step)] for i in range(cap)]
    return rows


def rel_err(x, ref):
    x = x.double()
    if torch.isnan(x).any():
        return float("nan")
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))
