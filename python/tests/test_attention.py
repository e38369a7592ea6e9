"""tailor.attention (paged decode) from numpy on the CPU backend: plan + run
against a float64 reference, lse, the plan summary, errors."""

import numpy as np
import pytest

import tailor

B, HQ, HKV, D, PAGE, PAGES = 3, 4, 2, 64, 4, 8


def reference(q, k, v, table, lens):
    out = np.zeros(q.shape, np.float64)
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(q.shape[0]):
        n = lens[b]
        if n == 0:
            continue
        rows = [(table[b, t // PAGE], t % PAGE) for t in range(n)]
        keys = np.stack([k[p, s] for p, s in rows]).astype(np.float64)
        vals = np.stack([v[p, s] for p, s in rows]).astype(np.float64)
        for h in range(HQ):
            g = h // (HQ // HKV)
            s = keys[:, g] @ q[b, h].astype(np.float64) / np.sqrt(D)
            p = np.exp(s - s.max())
            out[b, h] = p @ vals[:, g] / p.sum()
            lse[b, h] = np.log(p.sum()) + s.max()
    return out, lse


@pytest.fixture
def decode_inputs(rng):
    q = rng.standard_normal((B, HQ, D)).astype(np.float16)
    k = rng.standard_normal((PAGES, PAGE, HKV, D)).astype(np.float16)
    v = rng.standard_normal((PAGES, PAGE, HKV, D)).astype(np.float16)
    table = np.array([[6, 1, 0], [0, 0, 0], [2, 7, 3]], np.int32)
    lens = np.array([5, 0, 9], np.int32)
    return q, k, v, table, lens


def test_plan_and_run_match_reference(runtime, decode_inputs):
    q, k, v, table, lens = decode_inputs
    ws = tailor.attention.DecodeWorkspace()
    tailor.attention.reserve_decode_workspace(
        runtime, ws, max_batch=4, num_qo_heads=HQ, num_kv_heads=HKV,
        head_dim=D, page_size=PAGE, dtype="f16")
    tailor.attention.plan_decode(runtime, lens, ws, page_size=PAGE,
                                 num_qo_heads=HQ, num_kv_heads=HKV,
                                 head_dim=D, dtype="f16")
    info = ws.info()
    assert info["planned"] and info["batch"] == B
    assert info["tokens"] == lens.sum() * HKV
    out = np.full_like(q, np.nan)
    lse = np.empty((B, HQ), np.float32)
    tailor.attention.run_decode(runtime, q, k, v, table, lens, out, ws,
                                lse=lse)
    ref, ref_lse = reference(q, k, v, table, lens)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=5e-3)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4)
    ws.take_errors(runtime)


def test_errors(runtime, decode_inputs):
    q, k, v, table, lens = decode_inputs
    ws = tailor.attention.DecodeWorkspace()
    with pytest.raises(tailor.FailedPreconditionError,
                       match="ws: not planned; call attention::PlanDecode"):
        tailor.attention.run_decode(runtime, q, k, v, table, lens,
                                    np.empty_like(q), ws)
    with pytest.raises(ValueError, match="dtype: one of"):
        tailor.attention.plan_decode(runtime, lens, ws, page_size=PAGE,
                                     num_qo_heads=HQ, num_kv_heads=HKV,
                                     head_dim=D, dtype="f32")
    bad = table.copy()
    bad[2, 1] = 99
    tailor.attention.plan_decode(runtime, lens, ws, page_size=PAGE,
                                 num_qo_heads=HQ, num_kv_heads=HKV,
                                 head_dim=D, dtype="f16")
    with pytest.raises(tailor.InvalidArgumentError, match="block_table"):
        tailor.attention.run_decode(runtime, q, k, v, bad, lens,
                                    np.empty_like(q), ws)


SHAPE = dict(page_size=PAGE, num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
             dtype="f16")


def test_old_argument_order_still_works_with_a_warning(runtime,
                                                       decode_inputs):
    q, k, v, table, lens = decode_inputs
    new_ws, old_ws = (tailor.attention.DecodeWorkspace() for _ in range(2))
    new_out, old_out = np.full_like(q, np.nan), np.full_like(q, np.nan)
    tailor.attention.plan_decode(runtime, lens, new_ws, **SHAPE)
    tailor.attention.run_decode(runtime, q, k, v, table, lens, new_out,
                                new_ws)
    with pytest.warns(DeprecationWarning,
                      match=r"^tailor: plan_decode\(runtime, ws, ...\) is "
                            r"deprecated: the workspace is now the last "
                            r"positional argument$"):
        tailor.attention.plan_decode(runtime, old_ws, lens, **SHAPE)
    with pytest.warns(DeprecationWarning, match=r"^tailor: run_decode\("):
        tailor.attention.run_decode(runtime, old_ws, q, k, v, table, lens,
                                    old_out)
    assert old_ws.info() == new_ws.info()
    np.testing.assert_array_equal(old_out, new_out)


def test_a_call_without_a_workspace_names_ws(runtime, decode_inputs):
    q, k, v, table, lens = decode_inputs
    with pytest.raises(TypeError) as e:
        tailor.attention.plan_decode(runtime, lens, lens, **SHAPE)
    assert isinstance(e.value, tailor.InvalidArgumentError)
    assert str(e.value) == ("INVALID_ARGUMENT: plan_decode: ws: expected a "
                            "tailor.attention.DecodeWorkspace, got ndarray")
    with pytest.raises(TypeError,
                       match=r"^INVALID_ARGUMENT: run_decode: ws: expected a "
                             r"tailor\.attention"
                             r"\.DecodeWorkspace, got Workspace$"):
        tailor.attention.run_decode(runtime, q, k, v, table, lens,
                                    np.empty_like(q), tailor.moe.Workspace())


def test_decode_workspace_entries_on_the_host(runtime):
    ws = tailor.attention.DecodeWorkspace()
    limits = dict(max_batch=4, num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
                  page_size=PAGE)
    assert tailor.attention.decode_workspace_bytes(runtime, **limits) == 0
    with pytest.raises(tailor.UnimplementedError) as e:
        tailor.attention.bind_decode_workspace(
            runtime, np.zeros(256, np.uint8), ws, **limits)
    assert str(e.value) == (
        "UNIMPLEMENTED: attention.bind_decode: the cpu backend keeps decode "
        "workspaces in host memory; use attention::ReserveDecodeWorkspace")
    ws.take_errors(runtime)  # host runs report their errors themselves


@pytest.mark.parametrize("argument", ["out", "lse"])
def test_read_only_out_and_lse_are_refused_and_not_written(runtime,
                                                           decode_inputs,
                                                           argument):
    q, k, v, table, lens = decode_inputs
    ws = tailor.attention.DecodeWorkspace()
    tailor.attention.plan_decode(runtime, lens, ws, page_size=PAGE,
                                 num_qo_heads=HQ, num_kv_heads=HKV,
                                 head_dim=D, dtype="f16")
    outputs = {"out": np.full_like(q, 7.0),
               "lse": np.full((B, HQ), 5.0, np.float32)}
    frozen = outputs[argument].copy()
    frozen.flags.writeable = False
    backed = np.frombuffer(frozen.tobytes(), frozen.dtype).reshape(
        frozen.shape)
    for read_only in (frozen, backed):
        given = dict(outputs, **{argument: read_only})
        with pytest.raises(tailor.InvalidArgumentError) as error:
            tailor.attention.run_decode(runtime, q, k, v, table, lens,
                                        given["out"], ws, lse=given["lse"])
        assert str(error.value) == (
            f"INVALID_ARGUMENT: {argument}: is read-only (an output must be "
            f"writable: not a view of bytes or of an array with "
            f"writeable=False)")
        np.testing.assert_array_equal(read_only, outputs[argument])
