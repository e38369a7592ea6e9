"""What a new user meets in the first hour with the package: bf16 arrays on
the default path, read-only outputs, stats of their own runtimes, the names
in the docstrings, error types and messages, duplicate expert ids."""

import importlib
import re

import numpy as np
import pytest

import tailor
from conftest import moe_inputs, moe_reference


def _relative_error(out, ref):
    out = np.asarray(out, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def test_ml_dtypes_bf16_arrays_run_on_the_default_path(runtime, rng):
    ml_dtypes = pytest.importorskip(
        "ml_dtypes", reason="ml_dtypes not installed (run_python_tests.sh "
        "installs it)")
    bf16 = ml_dtypes.bfloat16
    x, w13, w2, tw, ids = moe_inputs(rng, T=17)
    x, w13, w2 = x.astype(bf16), w13.astype(bf16), w2.astype(bf16)
    out = np.full(x.shape, np.nan, bf16)
    ws = tailor.moe.Workspace()
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, out, ws)  # no expert_map
    ref = moe_reference(x.astype(np.float32), w13.astype(np.float32),
                        w2.astype(np.float32), tw, ids)
    assert not np.isnan(out.astype(np.float32)).any()
    assert _relative_error(out.astype(np.float32), ref) < 1e-2


def _read_only_outputs(shape, dtype):
    """A numpy array made read-only, and one over immutable bytes."""
    frozen = np.zeros(shape, dtype)
    frozen.flags.writeable = False
    backed = np.frombuffer(bytes(frozen.nbytes), dtype).reshape(shape)
    return [("writeable=False", frozen), ("bytes", backed)]


@pytest.mark.parametrize("expert_map", [False, True])
def test_read_only_out_is_refused_and_not_written(runtime, rng, expert_map):
    x, w13, w2, tw, ids = moe_inputs(rng)
    kwargs = {"expert_map": np.arange(8, dtype=np.int32)} if expert_map else {}
    for kind, out in _read_only_outputs(x.shape, np.float32):
        with pytest.raises(tailor.InvalidArgumentError,
                           match=r"^INVALID_ARGUMENT: out: is read-only "):
            tailor.moe.experts(runtime, x, w13, w2, tw, ids, out,
                               tailor.moe.Workspace(), **kwargs)
        assert not out.any(), kind


def test_read_only_outputs_of_the_step_ops_are_refused(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    ws = tailor.moe.Workspace()
    tailor.moe.route(runtime, ids, 8, ws)
    routing = ws.routing()
    rows = ids.size
    for kind, a in _read_only_outputs((rows, x.shape[1]), np.float32):
        with pytest.raises(tailor.InvalidArgumentError, match=r"a: is read-"):
            tailor.moe.pack(runtime, x, routing["permutation"], 2, a)
    a = np.empty((rows, x.shape[1]), np.float32)
    tailor.moe.pack(runtime, x, routing["permutation"], 2, a)
    for kind, c in _read_only_outputs((rows, w13.shape[1]), np.float32):
        with pytest.raises(tailor.InvalidArgumentError, match=r"c: is read-"):
            tailor.moe.grouped_gemm(runtime, a, w13, c, ws)
    c = np.empty((rows, x.shape[1]), np.float32)
    for kind, out in _read_only_outputs(x.shape, np.float32):
        with pytest.raises(tailor.InvalidArgumentError,
                           match=r"out: is read-"):
            tailor.moe.combine(runtime, c, tw, routing["inverse"], out)


def test_stats_lists_user_created_runtimes():
    tailor.runtime_for("cpu")  # the shared one is listed first, as "cpu"
    before = set(tailor.stats())
    assert "cpu" in before
    mine = tailor.Runtime(backend="cpu", log_level="error")
    added = set(tailor.stats()) - before
    assert len(added) == 1
    name = added.pop()
    assert re.fullmatch(r"cpu#\d+", name)
    assert tailor.stats()[name].keys() == mine.stats().keys()
    mine.close()
    assert set(tailor.stats()) == before


def test_package_docstring_names_modules_that_exist():
    for module in re.findall(r"import (tailor[\w.]*)", tailor.__doc__):
        if module == "tailor.torch_ops":
            pytest.importorskip("torch", reason="torch not installed")
        importlib.import_module(module)
    assert "import tailor.torch_ops" in tailor.__doc__


def test_python_checks_raise_tailor_errors_naming_the_argument(runtime, rng):
    x, w13, w2, tw, ids = moe_inputs(rng)
    out, ws = np.empty_like(x), tailor.moe.Workspace()
    cases = [
        (lambda: tailor.moe.experts(runtime, x, [1.0], w2, tw, ids, out, ws),
         "w13: expected a numpy array, torch tensor or DLPack object, got "
         "list", TypeError),
        (lambda: tailor.moe.experts(runtime, x, w13, w2, tw,
                                    ids.astype(np.complex64), out, ws,
                                    expert_map=np.arange(8, dtype=np.int32)),
         "topk_ids: unsupported numpy dtype complex64", TypeError),
        (lambda: tailor.moe.experts(runtime, x, w13, w2, tw, ids, out, ws,
                                    activation="gelu"),
         "activation: only 'silu' is supported, got 'gelu'", ValueError),
        (lambda: tailor.moe.route(runtime, ids, 8, ws, tail="odd"),
         "tail: one of", ValueError),
        (lambda: tailor.moe.route(runtime, ids, 8, ws, stream="s"),
         "stream: expected None, an int CUstream or an object with "
         ".cuda_stream or .ptr, got 's'", TypeError),
        (lambda: tailor.Runtime(backend="tpu"), "backend: must be one of",
         ValueError),
        (lambda: tailor.runtime_for("tpu:0"),
         "device: must be 'cpu' or 'cuda[:N]', got 'tpu:0'", ValueError),
        (lambda: tailor.moe.pack(runtime, x.astype(np.int8),
                                 ids.reshape(-1), 2, x),
         "hidden: unsupported numpy dtype int8", TypeError),
    ]
    for call, message, builtin in cases:
        with pytest.raises(tailor.InvalidArgumentError) as error:
            call()
        assert isinstance(error.value, builtin), message
        assert error.value.message.startswith(message), error.value.message


def test_duplicate_expert_ids_in_a_token_count_once_per_slot(runtime, rng):
    """Documented in tailor.moe.experts: a token whose top-k names an
    expert twice gets that expert's output once per slot, each with its own
    weight (vLLM's fused_experts does the same)."""
    x, w13, w2, tw, ids = moe_inputs(rng, T=5)
    ids[0] = [3, 3]
    ids[4] = [0, 0]
    out = np.full_like(x, np.nan)
    tailor.moe.experts(runtime, x, w13, w2, tw, ids, out,
                       tailor.moe.Workspace())
    ref = moe_reference(x, w13, w2, tw, ids)
    assert _relative_error(out, ref) < 1e-5
    single = moe_reference(x[:1], w13, w2, tw[:1].sum(1, keepdims=True),
                           ids[:1, :1])
    np.testing.assert_allclose(out[0], single[0], rtol=1e-4, atol=1e-5)
