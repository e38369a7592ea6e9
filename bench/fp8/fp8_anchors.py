"""bench/fp8/fp8_anchors.py — what a serving engineer would run instead of
tailor's FP8 grouped GEMM, on the same data:

  scaled_mm_loop   a per-expert loop of torch._scaled_mm with the 1 x 128 /
                   128 x 128 recipe (cuBLASLt blockwise; operands laid out as
                   it requires outside the timed call, rows padded to a
                   multiple of 4 where it insists)
  grouped_rowwise  torch._scaled_grouped_mm with row-wise scales (its best mode
                   on sm_90): A per row, W per output channel, quantized from
                   the same dequantized values
  triton_padded    an FP8 pad-to-block Triton kernel with block scales,
                   vLLM's fused-MoE algorithm (every expert padded to BLOCK_M,
                   one expert per block, padded rows masked), best of a small
                   config sweep
  deepgemm         DeepGEMM's m_grouped_fp8_gemm_nt_contiguous (the
                   sgl-deep-gemm wheel carried in the build folder, unpacked
                   at run time): every expert padded to 128 rows

Each builder returns (callable, output) or raises; probe() tries one call on
a small case and checks it against fp64 before a method enters the grid.
"""
import os

import torch
import triton
import triton.language as tl

from fp8_lib import BLOCK, E4M3, dev


# ---- Triton pad-to-block with block scales -------------------------------------
# num_rows and scale_rows change with every step: compiled once, not per
# divisibility class of each.
@triton.jit(do_not_specialize=["num_rows", "scale_rows"])
def _fp8_padded_gemm(A, As, W, Ws, C, row_ids, block_expert, num_rows, N, K,
                     scale_rows, k_blocks, n_blocks,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(block_expert + pid_m)
    if e < 0:
        return
    offs_m = pid_m * BM + tl.arange(0, BM)
    rows = tl.load(row_ids + offs_m)
    valid = rows < num_rows
    rows = tl.where(valid, rows, 0).to(tl.int64)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    e64 = e.to(tl.int64)
    a_ptr = A + rows[:, None] * K + offs_k[None, :]
    w_ptr = W + e64 * N * K + offs_n[None, :].to(tl.int64) * K + offs_k[:, None]
    ws_ptr = Ws + (e64 * n_blocks + (pid_n * BN) // 128) * k_blocks
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, k_blocks):
        a = tl.load(a_ptr, mask=valid[:, None], other=0.0)
        w = tl.load(w_ptr)
        a_s = tl.load(As + kb * scale_rows + rows, mask=valid, other=0.0)
        w_s = tl.load(ws_ptr + kb)
        acc += tl.dot(a, w) * a_s[:, None] * w_s
        a_ptr += BK
        w_ptr += BK
    c_ptr = C + rows[:, None] * N + offs_n[None, :]
    tl.store(c_ptr, acc.to(tl.bfloat16), mask=valid[:, None])


TRITON_CONFIGS = [(16, 128, 4, 3), (32, 128, 4, 3), (64, 128, 4, 3),
                  (64, 64, 4, 4), (128, 128, 8, 3)]


def _padded_rows(counts, bm):
    ids, experts, start = [], [], 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        nb = (c + bm - 1) // bm
        ids += list(range(start, start + c)) + [1 << 30] * (nb * bm - c)
        experts += [e] * nb
        start += c
    if not experts:
        ids, experts = [1 << 30] * bm, [-1]
    return (torch.tensor(ids, dtype=torch.int32, device=dev),
            torch.tensor(experts, dtype=torch.int32, device=dev))


def triton_padded(a_q, a_s, w_q, w_s, counts, config):
    bm, bn, warps, stages = config
    rows, k = a_q.shape
    experts, n, _ = w_q.shape
    if n % bn or 128 % bn:
        raise ValueError("N tile")
    c = torch.empty(rows, n, dtype=torch.bfloat16, device=dev)
    ids, ex = _padded_rows(counts, bm)
    grid = (ex.numel(), n // bn)

    def run():
        _fp8_padded_gemm[grid](a_q, a_s, w_q, w_s, c, ids, ex, rows, n, k,
                               a_s.shape[1], k // BLOCK, n // BLOCK, BM=bm,
                               BN=bn, BK=BLOCK, num_warps=warps,
                               num_stages=stages)
    return run, c


# ---- torch._scaled_mm per expert, blockwise -------------------------------------------
def scaled_mm_loop(a_q, a_s, w_q, w_s, counts, pad_rows=4):
    """Per expert: a_e [M, K] with scales [M, K/128] outer-dim-major, b =
    w[e]ᵀ with scales w_s[e]ᵀ. M is padded to pad_rows (zero rows)."""
    n = w_q.shape[1]
    k_blocks = w_q.shape[2] // BLOCK
    calls, outs, start = [], [], 0
    for e, m in enumerate(counts):
        if m == 0:
            continue
        mp = (m + pad_rows - 1) // pad_rows * pad_rows
        a_e = torch.zeros(mp, a_q.shape[1], dtype=E4M3, device=dev)
        a_e[:m] = a_q[start:start + m]
        s_e = torch.ones(k_blocks, mp, device=dev)
        s_e[:, :m] = a_s[:, start:start + m]
        calls.append((e, a_e, s_e.t(), m, start))
        start += m
    c = torch.empty(sum(counts), n, dtype=torch.bfloat16, device=dev)
    ws_t = [w_s[e].t() for e in range(w_q.shape[0])]

    def run():
        for e, a_e, s_e, m, s0 in calls:
            y = torch._scaled_mm(a_e, w_q[e].t(), s_e, ws_t[e],
                                 out_dtype=torch.bfloat16)
            outs.append(y)
        outs.clear()

    def run_store():
        for e, a_e, s_e, m, s0 in calls:
            c[s0:s0 + m] = torch._scaled_mm(a_e, w_q[e].t(), s_e, ws_t[e],
                                            out_dtype=torch.bfloat16)[:m]
    return run, c, run_store


# ---- torch._scaled_grouped_mm, row-wise ------------------------------------------------
def grouped_rowwise(aq, sa, wq, ws, counts):
    offs = torch.cumsum(torch.tensor(counts, device=dev), 0).to(torch.int32)
    wt = wq.transpose(1, 2)

    def run():
        return torch._scaled_grouped_mm(aq, wt, sa, ws, offs=offs,
                                        out_dtype=torch.bfloat16)
    return run


# ---- DeepGEMM (sgl-deep-gemm), contiguous layout ------------------------------
def load_deepgemm(folder, scratch):
    """deep_gemm imported from the wheel in folder/wheels (unzipped into
    scratch), or raises."""
    import glob
    import sys
    import zipfile
    wheels = sorted(glob.glob(os.path.join(folder, "wheels",
                                           "sgl_deep_gemm-*.whl")))
    if not wheels:
        raise RuntimeError("no sgl-deep-gemm wheel in the build folder")
    target = os.path.join(scratch, "deep_gemm_pkg")
    if not os.path.isdir(os.path.join(target, "deep_gemm")):
        zipfile.ZipFile(wheels[-1]).extractall(target)
    sys.path.insert(0, target)
    import deep_gemm
    return deep_gemm


def deepgemm_contiguous(dg, a_q, a_s, w_q, w_s, counts):
    """(run, c): every expert's rows padded to DeepGEMM's M alignment, row
    scales [M, K / 128]; c [R, N] gathered back outside the timed call."""
    align = dg.get_mk_alignment_for_contiguous_layout()
    k = a_q.shape[1]
    n = w_q.shape[1]
    src, layout, start = [], [], 0
    for e, m in enumerate(counts):
        if m == 0:
            continue
        mp = (m + align - 1) // align * align
        src += list(range(start, start + m)) + [-1] * (mp - m)
        layout += [e] * m + [-1] * (mp - m)
        start += m
    idx = torch.tensor(src, dtype=torch.long, device=dev)
    valid = idx >= 0
    a_p = torch.zeros(len(src), k, dtype=E4M3, device=dev)
    a_p[valid] = a_q[idx[valid]]
    s_p = torch.ones(len(src), k // BLOCK, device=dev)
    s_p[valid] = a_s[:, idx[valid]].t()
    m_indices = torch.tensor(layout, dtype=torch.int32, device=dev)
    d = torch.empty(len(src), n, dtype=torch.bfloat16, device=dev)

    def run():
        dg.m_grouped_fp8_gemm_nt_contiguous((a_p, s_p), (w_q, w_s), d,
                                            m_indices)
    return run, d, valid
