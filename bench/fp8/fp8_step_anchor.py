"""bench/fp8/fp8_step_anchor.py — vLLM's block-FP8 fused-MoE step
(use_fp8_w8a8=True, block_shape=[128, 128]) written in Triton for the bench,
the anchor of bench/fp8/moe_fp8_step_bench.py. One step, six launches:

  1. moe_align_block_size   one Triton kernel (vLLM's is one CUDA kernel):
                            each expert's flat (token, slot) ids in token
                            order, padded with the sentinel T*k to a multiple
                            of BLOCK_M; the expert of every BLOCK_M block; the
                            padded total
  2. per-token-group quant  vLLM's per_token_group_quant_fp8 on hidden:
                            scale = max(amax(|x|) over 1 x 128, 1e-10) / 448,
                            q = e4m3(clamp(x / scale)) (RNE; IEEE divisions,
                            so it is bit-comparable with the reference)
  3. GEMM1                  vLLM's fused_moe_kernel, block-FP8 branch: A rows
                            gathered by sorted id // top_k, one expert per
                            block, padded rows masked, the 1 x 128 and
                            128 x 128 scales applied per 128-K block
  4. silu_and_mul + quant   vLLM's silu_and_mul (bf16 out) and its next
                            quantization fused into one kernel (vLLM runs
                            two: this favours the anchor)
  5. GEMM2                  the same kernel, rows by sorted id, the routing
                            weight applied (MUL_ROUTED_WEIGHT)
  6. the top-k sum          torch.sum over [T, k, H] (vLLM's moe_sum)

The GEMM is fp8_anchors._fp8_padded_gemm's mainloop (vLLM's algorithm) with
what the whole step needs beside it: the gather by id // top_k, per-column
weight scales (BLOCK_N need not divide 128), the routing weight, vLLM's
grouped program order and its early exit past the padded total. Buffers are
allocated once per (T, config), so a step is capturable in a CUDA graph.
"""
import torch
import triton
import triton.language as tl

E4M3 = torch.float8_e4m3fn
GROUP = 128  # the 1 x 128 / 128 x 128 quantization block
FP8_MAX = 448.0

# (BLOCK_M, BLOCK_N, GROUP_SIZE_M, num_warps, num_stages); BLOCK_K = 128 (the
# scale block, as vLLM requires). vLLM's default block-FP8 config when no
# tuned file matches (64, 128, 32, 4, 3), and small-M shapes of the kind its
# tuned files pick at decode sizes (BLOCK_M 16 / 32; chosen here, not copied
# from a file). The bench checks and times each and keeps the fastest.
STEP_CONFIGS = {"m16n128": (16, 128, 1, 4, 3), "m16n64": (16, 64, 1, 4, 4),
                "m32n128": (32, 128, 1, 4, 3), "m64n128_default": (64, 128, 32, 4, 3)}


# ---- 1. moe_align_block_size ------------------------------------------------------
@triton.jit(do_not_specialize=["numel", "max_padded"])
def _moe_align(ids_ptr, sorted_ptr, block_expert_ptr, num_post_ptr, numel,
               num_experts, max_padded, BM: tl.constexpr, BINS: tl.constexpr,
               CHUNK: tl.constexpr):
    """Program e places expert e's ids; every program histograms all ids
    (at most a few thousand) to find where expert e's padded run starts."""
    e = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    hist = tl.zeros((BINS,), dtype=tl.int32)
    for start in range(0, numel, CHUNK):
        m = start + offs < numel
        ids = tl.load(ids_ptr + start + offs, mask=m, other=0)
        hist += tl.histogram(tl.where(m, ids, num_experts), BINS)
    bins = tl.arange(0, BINS)
    padded = tl.where(bins < num_experts, (hist + BM - 1) // BM * BM, 0)
    begin = tl.sum(tl.where(bins < e, padded, 0))
    count = tl.sum(tl.where(bins == e, hist, 0))
    total = tl.sum(padded)
    placed = 0
    for start in range(0, numel, CHUNK):
        m = start + offs < numel
        ids = tl.load(ids_ptr + start + offs, mask=m, other=-1)
        mine = (ids == e).to(tl.int32)
        rank = placed + tl.cumsum(mine, 0) - 1
        tl.store(sorted_ptr + begin + rank, start + offs, mask=mine > 0)
        placed += tl.sum(mine)
    # Expert e's padding rows and block experts.
    pad_end = begin + (count + BM - 1) // BM * BM
    for p in range(begin + count, pad_end, CHUNK):
        tl.store(sorted_ptr + p + offs, numel, mask=p + offs < pad_end)
    for b in range(begin // BM, pad_end // BM, CHUNK):
        tl.store(block_expert_ptr + b + offs, e, mask=b + offs < pad_end // BM)
    if e == 0:  # the rest: sentinel rows, blocks of no expert
        tl.store(num_post_ptr, total)
        for p in range(total, max_padded, CHUNK):
            tl.store(sorted_ptr + p + offs, numel, mask=p + offs < max_padded)
        for b in range(total // BM, max_padded // BM, CHUNK):
            tl.store(block_expert_ptr + b + offs, -1,
                     mask=b + offs < max_padded // BM)


# ---- 2 and 4. quantization -----------------------------------------------------------
@triton.jit
def _quantize_group(y):
    """vLLM's per-token-group rule on one 1 x 128 group of f32 values."""
    amax = tl.maximum(tl.max(tl.abs(y), 0), 1e-10)
    scale = tl.math.div_rn(amax, 448.0)
    # div_rn: IEEE division (Triton's f32 `/` is div.full, 2 ulp).
    q = tl.clamp(tl.math.div_rn(y, tl.zeros_like(y) + scale), -448.0, 448.0)
    return q.to(tl.float8e4nv), scale


@triton.jit
def _group_quant_fp8(x_ptr, q_ptr, s_ptr, K, G: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    offs = g * G + tl.arange(0, G)
    y = tl.load(x_ptr + row * K + offs).to(tl.float32)
    q, scale = _quantize_group(y)
    tl.store(q_ptr + row * K + offs, q)
    tl.store(s_ptr + row * (K // G) + g, scale)


@triton.jit
def _silu_mul_quant_fp8(gu_ptr, q_ptr, s_ptr, inter, G: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    offs = g * G + tl.arange(0, G)
    gate = tl.load(gu_ptr + row * 2 * inter + offs).to(tl.float32)
    up = tl.load(gu_ptr + row * 2 * inter + inter + offs).to(tl.float32)
    act = gate / (1.0 + tl.exp(-gate)) * up
    # vLLM's silu_and_mul writes bf16 and quantizes that.
    q, scale = _quantize_group(act.to(tl.bfloat16).to(tl.float32))
    tl.store(q_ptr + row * inter + offs, q)
    tl.store(s_ptr + row * (inter // G) + g, scale)


# ---- 3 and 5. the grouped GEMM -----------------------------------------------------
# Row and block counts change with T: compiled once, not per divisibility.
@triton.jit(do_not_specialize=["num_valid", "num_pid_m"])
def _fused_moe_fp8(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, c_ptr, sorted_ptr,
                   block_expert_ptr, num_post_ptr, topk_w_ptr, num_valid,
                   num_pid_m, N, K, TOP_K: tl.constexpr,
                   MUL_WEIGHT: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """C[id] = A[id // TOP_K] W[e]^T (x routing weight[id]) over the sorted
    ids of each BM block; A [*, K] e4m3 with scales [*, K/128] row-major, W
    [E, N, K] e4m3 with scales [E, N/128, K/128]; BK == 128."""
    pid = tl.program_id(0)
    num_pid_n = N // BN
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    if pid_m * BM >= tl.load(num_post_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if e < 0:
        return
    ids = tl.load(sorted_ptr + pid_m * BM + tl.arange(0, BM))
    valid = ids < num_valid
    a_rows = tl.where(valid, ids // TOP_K, 0).to(tl.int64)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    k_blocks = K // BK
    a_ptrs = a_ptr + a_rows[:, None] * K + offs_k[None, :]
    w_ptrs = w_ptr + e * N * K + offs_n[None, :].to(tl.int64) * K + offs_k[:, None]
    a_scales = a_scale_ptr + a_rows * k_blocks
    w_scales = w_scale_ptr + (e * (N // 128) + offs_n // 128) * k_blocks
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, k_blocks):
        a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
        w = tl.load(w_ptrs)
        sa = tl.load(a_scales + kb, mask=valid, other=0.0)
        sw = tl.load(w_scales + kb)
        acc += tl.dot(a, w) * sa[:, None] * sw[None, :]
        a_ptrs += BK
        w_ptrs += BK
    if MUL_WEIGHT:
        acc *= tl.load(topk_w_ptr + ids, mask=valid, other=0.0)[:, None]
    c_rows = tl.where(valid, ids, 0).to(tl.int64)
    tl.store(c_ptr + c_rows[:, None] * N + offs_n[None, :],
             acc.to(c_ptr.dtype.element_ty), mask=valid[:, None])


def max_padded_rows(numel, experts, bm):
    """vLLM's sorted_token_ids length: every expert may add bm - 1 pad rows;
    no more than numel blocks when fewer ids than experts."""
    rows = numel + experts * (bm - 1)
    if numel < experts:
        rows = min(rows, numel * bm)
    return (rows + bm - 1) // bm * bm


class VllmStyleStep:
    """One FP8 MoE step at fixed (T, k, config): __call__() reads hidden,
    topk_ids, topk_weights and writes out, all given here, with no host
    work, so it can be captured in a CUDA graph."""

    def __init__(self, hidden, w1, w1_scale, w2, w2_scale, topk_weights,
                 topk_ids, out, config):
        self.bm, self.bn, self.group_m, self.warps, self.stages = config
        tokens, h = hidden.shape
        experts, two_i, _ = w1.shape
        k = topk_ids.shape[1]
        if h % GROUP or two_i % (2 * GROUP) or two_i % self.bn or h % self.bn:
            raise ValueError(f"H {h} and 2I {two_i}: multiples of 128 and "
                             f"of BLOCK_N {self.bn}")
        dev = hidden.device
        self.numel = tokens * k
        self.bins = triton.next_power_of_2(experts + 1)
        self.max_padded = max_padded_rows(self.numel, experts, self.bm)
        i32 = dict(dtype=torch.int32, device=dev)
        self.sorted_ids = torch.empty(self.max_padded, **i32)
        self.block_expert = torch.empty(self.max_padded // self.bm, **i32)
        self.num_post = torch.empty(1, **i32)
        self.a_q = torch.empty(tokens, h, dtype=E4M3, device=dev)
        self.a_s = torch.empty(tokens, h // GROUP, device=dev)
        self.gu = torch.empty(self.numel, two_i, dtype=torch.bfloat16,
                              device=dev)
        self.act_q = torch.empty(self.numel, two_i // 2, dtype=E4M3, device=dev)
        self.act_s = torch.empty(self.numel, two_i // 2 // GROUP, device=dev)
        self.down = torch.empty(self.numel, h, dtype=torch.bfloat16, device=dev)
        self.hidden, self.out = hidden, out
        self.w1, self.w1_scale, self.w2, self.w2_scale = w1, w1_scale, w2, w2_scale
        self.ids_flat = topk_ids.reshape(-1)
        self.weights_flat = topk_weights.reshape(-1)
        self.k, self.experts = k, experts

    def align(self):
        _moe_align[(self.experts,)](
            self.ids_flat, self.sorted_ids, self.block_expert, self.num_post,
            self.numel, self.experts, self.max_padded, BM=self.bm,
            BINS=self.bins, CHUNK=256)

    def quantize_hidden(self):
        t, h = self.hidden.shape
        _group_quant_fp8[(t, h // GROUP)](self.hidden, self.a_q, self.a_s, h,
                                          G=GROUP)

    def silu_mul_quantize(self):
        inter = self.gu.shape[1] // 2
        _silu_mul_quant_fp8[(self.numel, inter // GROUP)](
            self.gu, self.act_q, self.act_s, inter, G=GROUP)

    def gemm(self, a_q, a_s, w, w_s, c, top_k, mul_weight):
        n, k = w.shape[1], w.shape[2]
        pid_m = self.max_padded // self.bm
        _fused_moe_fp8[(pid_m * (n // self.bn),)](
            a_q, a_s, w, w_s, c, self.sorted_ids, self.block_expert,
            self.num_post, self.weights_flat, self.numel, pid_m, n, k,
            TOP_K=top_k, MUL_WEIGHT=mul_weight, BM=self.bm, BN=self.bn,
            BK=GROUP, GROUP_M=self.group_m, num_warps=self.warps,
            num_stages=self.stages)

    def __call__(self):
        self.align()
        self.quantize_hidden()
        self.gemm(self.a_q, self.a_s, self.w1, self.w1_scale, self.gu,
                  self.k, False)
        self.silu_mul_quantize()
        self.gemm(self.act_q, self.act_s, self.w2, self.w2_scale, self.down,
                  1, True)
        t, h = self.hidden.shape
        torch.sum(self.down.view(t, self.k, h), dim=1, out=self.out)
