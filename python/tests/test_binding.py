"""The ctypes binding over libtailor_c.so, with numpy arrays: results,
errors as exceptions with the C++ status text, stats, views."""

import json

import numpy as np
import pytest

import tailor
from conftest import moe_inputs, moe_reference


def test_version_and_library():
    assert tailor.__version__ == "0.1.0"
    assert "libtailor_c.so" in tailor.library_path


class _OldLibrary:
    """A library of this C ABI version built before its newest entries."""

    def __init__(self, version):
        self.version = version

    def tailor_c_api_version(self):
        return self.version


def test_an_older_library_is_named_with_what_it_lacks():
    from tailor import _capi
    with pytest.raises(OSError) as error:
        _capi.declare(_OldLibrary(_capi.C_API_VERSION), "/old/libtailor_c.so.3")
    message = str(error.value)
    assert message.startswith("tailor: /old/libtailor_c.so.3 lacks ")
    assert "tailor_moe_workspace_get_gemm" in message
    assert message.endswith("it is older than this package; rebuild it (or "
                            "set TAILOR_LIBRARY to a current build)")
    with pytest.raises(OSError, match=r"^tailor: /x\.so speaks C ABI 2, "
                                      r"this package 3$"):
        _capi.declare(_OldLibrary(2), "/x.so")


def test_runtime_properties(runtime):
    assert runtime.backend == "cpu"
    assert runtime.device == "cpu"
    assert runtime.arch.startswith("x86_64")


def test_bad_backend_is_value_error():
    with pytest.raises(ValueError, match="backend: must be one of"):
        tailor.Runtime(backend="tpu")


def test_jit_mode_option(rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    ref = moe_reference(x, w13, w2, tw, ids)
    for mode in ("background", "blocking"):
        rt = tailor.Runtime(backend="cpu", disable_disk_cache=True,
                            log_level="error", jit_mode=mode)
        assert rt.jit_mode == mode
        out = np.full_like(x, np.nan)
        tailor.moe.experts(rt, x, w13, w2, tw, ids, out,
                           tailor.moe.Workspace())
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
        # Background: the cold call ran on the generic kernels.
        assert (rt.stats()["fallback_launches"] > 0) == (mode == "background")
        rt.close()


def test_jit_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("TAILOR_JIT_MODE", "background")
    rt = tailor.Runtime(backend="cpu", disable_disk_cache=True)
    assert rt.jit_mode == "background"
    assert tailor.Runtime(backend="cpu", disable_disk_cache=True,
                          jit_mode="blocking").jit_mode == "blocking"


@pytest.mark.parametrize("bad", ["eager", "BACKGROUND", "", 2, True])
def test_bad_jit_mode_is_invalid_argument(bad):
    with pytest.raises(tailor.InvalidArgumentError,
                       match=r"INVALID_ARGUMENT: jit_mode: must be "
                             r"'blocking', 'background' or None "
                             r"\(\$TAILOR_JIT_MODE, else blocking\), got ") as e:
        tailor.Runtime(backend="cpu", jit_mode=bad)
    assert e.value.code == 3
    assert isinstance(e.value, ValueError)


def test_experts_matches_reference(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    out = np.full_like(x, np.nan)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, out, ws)
    ref = moe_reference(x, w13, w2, tw, ids)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    info = ws.info()
    assert info["routed"] and info["num_rows"] == ids.size
    assert info["useful_rows"] == ids.size


def test_expert_map_drops_remote_experts(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng, E=4)
    ids = ids * 2  # global ids in [0, 8); even ones are local
    expert_map = np.array([0, -1, 1, -1, 2, -1, 3, -1], np.int32)
    out = np.empty_like(x)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, out, ws,
                       expert_map=expert_map)
    ref = moe_reference(x, w13, w2, tw, ids, expert_map)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_step_by_step_equals_experts(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    fused = np.empty_like(x)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, fused, ws)

    tailor.moe.route(runtime, ids, w13.shape[0], ws)
    routing = ws.routing()
    assert routing["counts"].sum() == ids.size
    assert list(routing["offsets"][[0, -1]]) == [0, ids.size]
    rows, H, I = ids.size, x.shape[1], w2.shape[2]
    a = np.empty((rows, H), np.float32)
    c1 = np.empty((rows, I), np.float32)
    c2 = np.empty((rows, H), np.float32)
    tailor.moe.pack(runtime, x, routing["permutation"], ids.shape[1], a)
    np.testing.assert_array_equal(a, x[routing["permutation"] // 2])
    tailor.moe.grouped_gemm(runtime, a, w13, c1, ws, epilogue="silu_and_mul")
    tailor.moe.grouped_gemm(runtime, c1, w2, c2, ws)
    out = np.empty_like(x)
    tailor.moe.combine(runtime, c2, tw, routing["inverse"], out)
    np.testing.assert_array_equal(out, fused)


def test_gemms_record_each_grouped_gemm(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    ws = tailor.moe.Workspace()
    assert ws.gemms() == []
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, np.empty_like(x), ws)
    gemms = ws.gemms()
    H, I = x.shape[1], w2.shape[2]
    # gate/up, then down
    assert [(g["kernel"], g["n"], g["k"]) for g in gemms] == [
        ("cpu", 2 * I, H), ("cpu", H, I)]
    for g in gemms:
        assert set(g) == {"kernel", "n", "k", "cta_rows", "cta_cols",
                          "k_tile", "stages", "ctas", "features"}
        assert g["cta_rows"] == ws.info()["tile_rows"] and g["cta_cols"] > 0
        assert (g["k_tile"], g["stages"], g["ctas"]) == (0, 0, 0)
        assert g["features"] == {}  # the cpu kernel has no options

    # A route starts the records over; each grouped_gemm adds one.
    tailor.moe.route(runtime, ids, w13.shape[0], ws)
    assert ws.gemms() == []
    a = np.zeros((ids.size, H), np.float32)
    c = np.empty((ids.size, I), np.float32)
    tailor.moe.grouped_gemm(runtime, a, w13, c, ws, epilogue="silu_and_mul")
    assert ws.gemms() == gemms[:1]


def test_gemms_of_a_closed_workspace_is_invalid_argument():
    ws = tailor.moe.Workspace()
    ws.close()
    with pytest.raises(tailor.InvalidArgumentError) as e:
        ws.gemms()
    assert str(e.value) == "INVALID_ARGUMENT: ws: must not be null"


def test_errors_carry_the_status_text(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    ids[3, 1] = 99
    out = np.empty_like(x)
    ws = tailor.moe.Workspace()
    with pytest.raises(tailor.InvalidArgumentError) as info:
        tailor.moe.experts(runtime, x, w13, w2, tw, ids, out, ws)
    assert str(info.value) == (
        "INVALID_ARGUMENT: topk_ids[3,1]: expert id 99 is outside [0, 8)")
    assert info.value.code == 3 and info.value.name == "INVALID_ARGUMENT"
    assert isinstance(info.value, ValueError)

    with pytest.raises(tailor.InvalidArgumentError,
                       match="topk_ids: expected dtype i32, got i64"):
        tailor.moe.experts(runtime, x, w13, w2, tw, ids.astype(np.int64),
                           out, ws)
    with pytest.raises(tailor.FailedPreconditionError,
                       match="ws: not routed"):
        tailor.moe.grouped_gemm(runtime, x, w13, out, tailor.moe.Workspace())
    with pytest.raises(tailor.UnimplementedError,
                       match="cpu backend keeps workspaces in host memory"):
        tailor.moe.bind_workspace(runtime, np.zeros(256, np.uint8), ws,
                                  max_tokens=4, topk=2, num_experts=8)
    with pytest.raises(TypeError, match="expected a numpy array"):
        tailor.moe.experts(runtime, [1.0], w13, w2, tw, ids, out, ws)
    with pytest.raises(TypeError, match="unsupported numpy dtype"):
        tailor.moe.experts(runtime, x.astype(np.complex64), w13, w2, tw, ids,
                           out, ws)


def test_non_contiguous_view_is_rejected_by_the_op(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    out = np.empty((x.shape[0], 2 * x.shape[1]), np.float32)[:, ::2]
    with pytest.raises(tailor.InvalidArgumentError,
                       match="out: must be contiguous"):
        tailor.moe.experts(runtime, x, w13, w2, tw, ids, out,
                           tailor.moe.Workspace())


def test_dlpack_objects_are_accepted(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)

    class OnlyDlpack:  # an object that offers nothing but __dlpack__
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

    out = np.empty_like(x)
    ref = np.empty_like(x)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, OnlyDlpack(x), OnlyDlpack(w13), w2, tw,
                       OnlyDlpack(ids), out, ws)
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, ref, ws)
    np.testing.assert_array_equal(out, ref)


def test_reserve_and_workspace_bytes(runtime):
    ws = tailor.moe.Workspace()
    tailor.moe.reserve_workspace(runtime, ws, max_tokens=64, topk=2,
                                 num_experts=8, hidden=64, intermediate=32,
                                 dtype="f32")
    assert ws.info()["capacity_bytes"] > 0
    assert tailor.moe.workspace_bytes(runtime, max_tokens=64, topk=2,
                                      num_experts=8) == 0
    with pytest.raises(ValueError, match="dtype: one of"):
        tailor.moe.reserve_workspace(runtime, ws, max_tokens=1, topk=1,
                                     num_experts=1, dtype="f16")


def test_stats_dict_and_prometheus(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, np.empty_like(x),
                       tailor.moe.Workspace())
    snapshot = tailor.stats(runtime)
    assert snapshot["launches"] >= 3
    assert snapshot["lookups"] == (snapshot["memory_hits"] +
                                   snapshot["disk_hits"] + snapshot["misses"])
    assert set(snapshot["launches_per_op"]) >= {"moe.pack", "moe.combine"}
    # The backend's own counters by name; the cpu backend has none (CUDA:
    # "cuda.descriptor_encodes", ...).
    assert snapshot["backend_counters"] == {}
    assert "descriptor_encodes" not in snapshot
    everything = tailor.stats()
    assert everything["cpu"]["launches"] >= snapshot["launches"]
    text = runtime.stats_prometheus()
    assert "# TYPE tailor_launches_total counter" in text
    json.dumps(snapshot)


def test_stats_endpoint_and_cli(tmp_path):
    import os
    import subprocess
    import sys
    import urllib.request

    runtime = tailor.Runtime(backend="cpu", stats_addr="127.0.0.1:0",
                             disable_disk_cache=True, log_level="error")
    base = f"http://{runtime.stats_address}"
    assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
    body = json.load(urllib.request.urlopen(base + "/stats"))
    assert list(body["runtimes"]) == ["cpu"]
    metrics = urllib.request.urlopen(base + "/metrics").read().decode()
    assert 'tailor_kernel_lookups_total{runtime="cpu"} 0' in metrics
    runtime.close()

    # python -m tailor.stats --serve: a process that only runs the endpoint
    server = subprocess.Popen(
        [sys.executable, "-m", "tailor.stats", "--serve", "--addr",
         "127.0.0.1:0", "--backend", "cpu"],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "TAILOR_CACHE_DIR": str(tmp_path)})
    try:
        line = server.stdout.readline()
        assert line.startswith("tailor stats endpoint: http://127.0.0.1:")
        url = line.split()[3]
        assert "# TYPE tailor_launches_total counter" in (
            urllib.request.urlopen(url).read().decode())
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_stats_module_keeps_the_function():
    import tailor.stats  # noqa: F401  the CLI module must not shadow it
    assert isinstance(tailor.stats(), dict)


def test_fast_path_is_built_and_agrees(runtime, rng):
    # pip install builds tailor._fastcall where Python's headers are present
    # (CI installs python3-dev); it must give the ctypes path's bits.
    assert tailor.moe._fastcall is not None
    x, w13, w2, tw, ids = moe_inputs(rng)
    fast, general = np.empty_like(x), np.empty_like(x)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, fast, ws)
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, general, ws,
                       tile_rows=16)  # a policy: the ctypes path
    np.testing.assert_array_equal(fast, general)


def test_workspace_renames_keep_the_old_forms(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    ws = tailor.moe.Workspace()
    limits = dict(max_tokens=4, topk=2, num_experts=8)
    unimplemented = ("UNIMPLEMENTED: moe.bind: the cpu backend keeps "
                     "workspaces in host memory; use moe::ReserveWorkspace")
    with pytest.raises(tailor.UnimplementedError) as new:
        tailor.moe.bind_workspace(runtime, np.zeros(256, np.uint8), ws,
                                  **limits)
    assert str(new.value) == unimplemented
    with pytest.warns(DeprecationWarning,
                      match=r"^tailor: bind_workspace\(runtime, ws, ...\) "
                            r"is deprecated"):
        with pytest.raises(tailor.UnimplementedError) as old:
            tailor.moe.bind_workspace(runtime, ws, np.zeros(256, np.uint8),
                                      **limits)
    assert str(old.value) == unimplemented
    with pytest.raises(TypeError) as e:
        tailor.moe.bind_workspace(runtime, np.zeros(256, np.uint8), None,
                                  **limits)
    assert isinstance(e.value, tailor.InvalidArgumentError)
    assert str(e.value) == ("INVALID_ARGUMENT: bind_workspace: ws: expected "
                            "a tailor.moe.Workspace, got NoneType")

    tailor.moe.experts(runtime, x, w13, w2, tw, ids, np.empty_like(x), ws)
    assert ws.take_errors(runtime) is None
    with pytest.warns(DeprecationWarning,
                      match="take_routing_errors is deprecated; use "
                            "take_errors"):
        assert ws.take_routing_errors(runtime) is None


def test_gemm_features_text_parses_into_a_dict():
    from tailor.moe import _features
    assert _features("") == {}
    assert _features("tma_store=1,split_k=0,cluster=2,expert_groups=back") == {
        "tma_store": 1, "split_k": 0, "cluster": 2, "expert_groups": "back"}
