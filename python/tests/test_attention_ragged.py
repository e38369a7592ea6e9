"""tailor.attention ragged attention from numpy on the CPU backend: a mixed
step (a prefill chunk over a cached prefix, a new prompt, decode rows,
speculative rows, an empty sequence) in vLLM's and FlashInfer's metadata
against a float64 reference, every mask, poisoned outputs, the plan summary,
the workspace calls and the errors with their exact messages."""

import numpy as np
import pytest

import tailor

HQ, HKV, D, PAGE = 8, 2, 64, 5
Q_LENS = [40, 1, 1, 4, 0, 17, 1]
KV_LENS = [120, 57, 1, 9, 3, 17, 33]
SHAPE = dict(page_size=PAGE, num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
             dtype="f16")
PAD = 2  # rows past Σq that must stay untouched


class Step:
    """Host data of one ragged step: pages scattered at random, every slot
    no sequence owns NaN, block-table entries past a sequence's pages
    garbage."""

    def __init__(self, rng, q_lens=Q_LENS, kv_lens=KV_LENS):
        self.q_lens = np.array(q_lens, np.int32)
        self.kv_lens = np.array(kv_lens, np.int32)
        batch = len(q_lens)
        pages = [(n + PAGE - 1) // PAGE for n in kv_lens]
        num_pages = sum(pages) + 3
        order = rng.permutation(num_pages).astype(np.int32)
        self.block_table = np.full((batch, max(pages) + 1), 1 << 30, np.int32)
        self.kv_indices, self.kv_indptr, used = [], [0], 0
        for b, n in enumerate(pages):
            self.block_table[b, :n] = order[used:used + n]
            self.kv_indices += list(order[used:used + n])
            self.kv_indptr.append(len(self.kv_indices))
            used += n
        self.kv_indices = np.array(self.kv_indices, np.int32)
        self.kv_indptr = np.array(self.kv_indptr, np.int32)
        self.last_page_len = np.array(
            [n - (p - 1) * PAGE if p else 0 for n, p in zip(kv_lens, pages)],
            np.int32)
        self.q_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(
            np.int32)
        rows = int(self.q_indptr[-1]) + PAD
        self.q = rng.standard_normal((rows, HQ, D)).astype(np.float16)
        self.k = np.full((num_pages, PAGE, HKV, D), np.nan, np.float16)
        self.v = np.full((num_pages, PAGE, HKV, D), np.nan, np.float16)
        for b, n in enumerate(kv_lens):
            for t in range(n):
                page = self.block_table[b, t // PAGE]
                self.k[page, t % PAGE] = rng.standard_normal((HKV, D))
                self.v[page, t % PAGE] = rng.standard_normal((HKV, D))

    def outputs(self):
        out = np.full_like(self.q, 7.0)
        lse = np.full(self.q.shape[:2], 12345.0, np.float32)
        return out, lse

    def reference(self, causal=True, window_left=-1, soft_cap=0.0):
        total = int(self.q_indptr[-1])
        out = np.zeros((total, HQ, D))
        lse = np.full((total, HQ), -np.inf)
        for b, (ql, kl) in enumerate(zip(self.q_lens, self.kv_lens)):
            t = np.arange(kl)
            pages = self.block_table[b, t // PAGE]
            keys = self.k[pages, t % PAGE].astype(np.float64)  # [n, Hkv, D]
            vals = self.v[pages, t % PAGE].astype(np.float64)
            for i in range(ql):
                row, pos = self.q_indptr[b] + i, kl - ql + i
                allowed = (t <= pos) if causal else np.ones(kl, bool)
                if window_left >= 0:
                    allowed &= t >= pos - window_left
                if not allowed.any():
                    continue
                for h in range(HQ):
                    g = h // (HQ // HKV)
                    s = keys[allowed, g] @ self.q[row, h].astype(np.float64)
                    s /= np.sqrt(D)
                    if soft_cap:
                        s = soft_cap * np.tanh(s / soft_cap)
                    p = np.exp(s - s.max())
                    out[row, h] = p @ vals[allowed, g] / p.sum()
                    lse[row, h] = np.log(p.sum()) + s.max()
        return out, lse

    def check(self, out, lse, **mask):
        total = int(self.q_indptr[-1])
        ref, ref_lse = self.reference(**mask)
        got = out[:total].astype(np.float64)
        assert not np.isnan(got).any()
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 1e-2, err
        np.testing.assert_allclose(lse[:total], ref_lse, rtol=1e-4, atol=1e-4)
        assert (out[total:] == 7.0).all() and (lse[total:] == 12345.0).all()


@pytest.fixture
def step(rng):
    return Step(rng)


def test_vllm_metadata_matches_reference(runtime, step):
    ws = tailor.attention.RaggedWorkspace()
    tailor.attention.reserve_ragged_workspace(runtime, ws, max_batch=8,
                                              max_tokens=128, **SHAPE)
    tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens, ws,
                                 **SHAPE)
    info = ws.info()
    assert info["planned"] and info["batch"] == 7
    assert info["total_q"] == sum(Q_LENS) and info["head_pack"] == 4
    # The CPU runs q_len 1 rows as query tiles, none on a decode kernel.
    assert 1 in Q_LENS
    assert info["decode_seqs"] == 0 and info["decode_items"] == 0
    out, lse = step.outputs()
    tailor.attention.run_ragged(runtime, step.q, step.k, step.v,
                                step.block_table, out, ws,
                                kv_lens=step.kv_lens, lse=lse)
    step.check(out, lse)
    ws.take_errors(runtime)


@pytest.mark.parametrize("mask", [dict(causal=True, window_left=6),
                                  dict(causal=False),
                                  dict(causal=True, soft_cap=4.0)])
def test_flashinfer_metadata_every_mask(runtime, step, mask):
    ws = tailor.attention.RaggedWorkspace()
    soft_cap = mask.pop("soft_cap", 0.0)
    tailor.attention.plan_ragged_flashinfer(
        runtime, step.q_indptr, step.kv_indptr, step.last_page_len, ws,
        **SHAPE, **mask)
    out, lse = step.outputs()
    tailor.attention.run_ragged(runtime, step.q, step.k, step.v,
                                step.kv_indices, out, ws,
                                page_indptr=step.kv_indptr, lse=lse,
                                logits_soft_cap=soft_cap)
    step.check(out, lse, soft_cap=soft_cap, **mask)


def test_hnd_cache_through_strides(runtime, step):
    """FlashInfer's HND cache [pages, Hkv, page, D] as a strided view."""
    hnd_k = np.ascontiguousarray(step.k.transpose(0, 2, 1, 3))
    hnd_v = np.ascontiguousarray(step.v.transpose(0, 2, 1, 3))
    ws = tailor.attention.RaggedWorkspace()
    tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens, ws,
                                 **SHAPE)
    out, lse = step.outputs()
    tailor.attention.run_ragged(runtime, step.q, hnd_k.transpose(0, 2, 1, 3),
                                hnd_v.transpose(0, 2, 1, 3), step.block_table,
                                out, ws, lse=lse)
    step.check(out, lse)


def test_workspace_calls_on_the_host(runtime):
    limits = dict(max_batch=4, max_tokens=64, **SHAPE)
    assert tailor.attention.ragged_workspace_bytes(runtime, **limits) == 0
    ws = tailor.attention.RaggedWorkspace()
    with pytest.raises(tailor.UnimplementedError) as e:
        tailor.attention.bind_ragged_workspace(
            runtime, np.zeros(256, np.uint8), ws, **limits)
    assert e.value.message == (
        "attention.bind_ragged: the cpu backend keeps ragged workspaces in "
        "host memory; use attention::ReserveRaggedWorkspace")
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.reserve_ragged_workspace(
            runtime, ws, **dict(limits, max_tokens=-1))
    assert e.value.message == ("limits.max_tokens: must be in "
                               "[0, 1073741824], got -1")


def test_errors(runtime, step):
    ws = tailor.attention.RaggedWorkspace()
    out, lse = step.outputs()
    with pytest.raises(tailor.FailedPreconditionError) as e:
        tailor.attention.run_ragged(runtime, step.q, step.k, step.v,
                                    step.block_table, out, ws)
    assert e.value.message == ("ws: not planned; call attention::PlanRagged "
                               "first")
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.plan_ragged(runtime, step.q_indptr,
                                     step.kv_lens[:3], ws, **SHAPE)
    assert e.value.message == ("kv_lens: dims[0] must equal the batch "
                               "(q_indptr.dims[0] - 1) (7), got 3")
    bad_lens = step.kv_lens.copy()
    bad_lens[0] = 30  # fewer than its 40 queries
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.plan_ragged(runtime, step.q_indptr, bad_lens, ws,
                                     **SHAPE)
    assert e.value.message == ("q_lens[0]: 40 exceeds kv_lens[0] = 30; "
                               "causal queries are the last q_len of their "
                               "KV")
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens,
                                     ws, **dict(SHAPE, head_dim=96))
    assert e.value.message == "head_dim: must be 64, 128 or 256, got 96"
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens,
                                     ws, causal=False, window_left=4, **SHAPE)
    assert e.value.message == "window_left: a sliding window needs causal=True"
    with pytest.raises(ValueError, match="dtype: one of"):
        tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens,
                                     ws, **dict(SHAPE, dtype="f32"))
    with pytest.raises(TypeError) as e:
        tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens,
                                     tailor.attention.DecodeWorkspace(),
                                     **SHAPE)
    assert str(e.value) == ("plan_ragged: ws: expected a "
                            "tailor.attention.RaggedWorkspace, got "
                            "DecodeWorkspace")
    tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens, ws,
                                 **SHAPE)
    bad = step.block_table.copy()
    bad[0, 2] = 999
    with pytest.raises(tailor.InvalidArgumentError) as e:
        tailor.attention.run_ragged(runtime, step.q, step.k, step.v, bad,
                                    out, ws)
    assert e.value.message == (f"block_table[0,2]: page id 999 is outside "
                               f"[0, {step.k.shape[0]})")
    assert (out == 7.0).all()  # a rejected run wrote nothing


def read_only_copies(array):
    """`array`'s contents made read-only, and over immutable bytes."""
    frozen = array.copy()
    frozen.flags.writeable = False
    backed = np.frombuffer(array.tobytes(), array.dtype).reshape(array.shape)
    return [("writeable=False", frozen), ("bytes", backed)]


@pytest.mark.parametrize("argument", ["out", "lse"])
def test_read_only_out_and_lse_are_refused_and_not_written(runtime, step,
                                                           argument):
    ws = tailor.attention.RaggedWorkspace()
    tailor.attention.plan_ragged(runtime, step.q_indptr, step.kv_lens, ws,
                                 **SHAPE)
    out, lse = step.outputs()
    for kind, frozen in read_only_copies(out if argument == "out" else lse):
        given = {"out": out, "lse": lse, argument: frozen}
        before = frozen.copy()
        with pytest.raises(tailor.InvalidArgumentError) as error:
            tailor.attention.run_ragged(
                runtime, step.q, step.k, step.v, step.block_table,
                given["out"], ws, kv_lens=step.kv_lens, lse=given["lse"])
        assert str(error.value) == (
            f"INVALID_ARGUMENT: {argument}: is read-only (an output must be "
            f"writable: not a view of bytes or of an array with "
            f"writeable=False)"), kind
        np.testing.assert_array_equal(frozen, before)
