"""bench/fp8/fp8_fake.py — a CPU stand-in for libfp8dev.so (FP8_FAKE=1), so
the harness's driver, judges and tables run here without a GPU
(fp8_selftest.py). It computes what the kernels are specified to compute:
Pack by the reference quantizer, each GEMM item from the dequantized inputs
with f32 outputs rounded as each epilogue rounds them.

FP8_FAKE_FAULT="KERNEL:MODE,..." (KERNEL as tile_epilogue, e.g. 64_quant)
makes that kernel misbehave the way a broken GPU kernel does: crash (the
process dies), hang, raise (a CUDA error), wrong (outputs off by 2 %).
"""
import os
import time

import torch

from fp8_lib import (BLOCK, EPS, FP8_MAX, TILES, f32_div, quantize_groups,
                     sm90_ctas, sm90_schedule, to_e4m3)


def _faults():
    faults = {}
    for item in os.environ.get("FP8_FAKE_FAULT", "").split(","):
        if ":" in item:
            kernel, mode = item.split(":")
            faults[kernel] = mode
    return faults


class FakeGemm:
    def __init__(self, kernel, tile, epilogue, a, a_s, w, w_s, c, plan, c_s,
                 split_k):
        self.kernel, self.epilogue = kernel, epilogue
        self.a, self.a_s, self.w, self.w_s = a, a_s, w, w_s
        self.c, self.c_s, self.plan = c, c_s, plan
        self._w = {}
        experts, n, k = w.shape
        gated = epilogue != "plain"
        n_tiles = ((n // 2 if gated else n) + (128 if gated else 256) - 1) // (
            128 if gated else 256)
        swap = bool(TILES[tile][2])
        self.grid = sm90_ctas(max(1, len(plan.items)) * n_tiles, k, 132,
                              split_k, swap)
        self.schedule = sm90_schedule(len(plan.items) * n_tiles, self.grid,
                                      k // BLOCK, split_k, swap)

    def launch(self):
        mode = _faults().get(self.kernel)
        if mode == "crash":
            os._exit(1)
        if mode == "hang":
            time.sleep(1e6)
        if mode == "raise":
            raise RuntimeError("CUDA error: an illegal instruction was "
                               "encountered (fake)")
        for row_begin, rows, expert, _ in self.plan.items:
            self._item(row_begin, rows, expert, mode == "wrong")

    def _weight(self, expert):
        """W[expert] dequantized, f64 (once per launch object)."""
        if expert not in self._w:
            self._w[expert] = (self.w[expert].double() * self.w_s[
                expert].double().repeat_interleave(BLOCK, 0).repeat_interleave(
                    BLOCK, 1))
        return self._w[expert]

    def _item(self, r0, rows, expert, wrong):
        a = self.a[r0:r0 + rows].float() * self.a_s[:, r0:r0 + rows].t(
        ).repeat_interleave(BLOCK, dim=1)
        y = (a.double() @ self._weight(expert).t()).float()  # f32 accumulators
        if wrong:
            y = y * 1.02
        if self.epilogue == "plain":
            self.c[r0:r0 + rows] = y.to(torch.bfloat16)
            return
        half = y.shape[1] // 2
        out = torch.nn.functional.silu(y[:, :half]) * y[:, half:]
        if self.epilogue == "silu":
            self.c[r0:r0 + rows] = out.to(torch.bfloat16)
            return
        groups = out.view(rows, -1, BLOCK)
        scale = f32_div(groups.abs().amax(-1).clamp(min=EPS), FP8_MAX)
        q = to_e4m3(f32_div(groups, scale.unsqueeze(-1))).view(rows, -1)
        self.c[r0:r0 + rows] = q.view(torch.uint8)
        self.c_s[:, r0:r0 + rows] = scale.t()

    def free(self):
        pass


class FakeLib:
    sms = 132

    def __init__(self):
        self.partials = torch.empty(1)
        self.arrivals = torch.zeros(2 * self.sms + 64, dtype=torch.int32)

    def pack(self, hidden, permutation, a, a_scales, topk):
        rows = permutation.numel()
        if rows == 0:
            return
        tokens = hidden.shape[0]
        valid = (permutation >= 0) & (permutation < tokens * topk)
        src = hidden[(permutation.long().clamp(min=0) // topk)]
        q, s = quantize_groups(src, a_scales.shape[1])
        idx = valid.nonzero().flatten()
        a[idx] = q.view(torch.uint8)[idx]
        a_scales[:, idx] = s[:, idx]

    def gemm(self, tile, epilogue, a, a_s, w, w_s, c, plan, c_s=None,
             split_k=True, dynamic=True, expert_groups=0):
        return FakeGemm(f"{tile}_{epilogue}", tile, epilogue, a, a_s, w, w_s,
                        c, plan, c_s, split_k)
