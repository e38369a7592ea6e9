"""Shared fixtures: one CPU runtime per test session, its disk cache in
$TAILOR_CACHE_DIR (the ctest driver points it into the build tree)."""

import numpy as np
import pytest

import tailor


@pytest.fixture(scope="session")
def runtime():
    return tailor.runtime_for("cpu")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def moe_inputs(rng, T=9, H=64, I=32, E=8, k=2, dtype=np.float32):
    x = rng.standard_normal((T, H), dtype=np.float32).astype(dtype)
    w13 = (rng.standard_normal((E, 2 * I, H), dtype=np.float32) * 0.1).astype(dtype)
    w2 = (rng.standard_normal((E, H, I), dtype=np.float32) * 0.1).astype(dtype)
    ids = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int32)
    tw = rng.random((T, k), dtype=np.float32)
    return x, w13, w2, tw, ids


def moe_reference(x, w13, w2, tw, ids, expert_map=None):
    I = w2.shape[2]
    y = np.zeros(x.shape, np.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = ids[t, j] if expert_map is None else expert_map[ids[t, j]]
            if e < 0:
                continue
            h = w13[e].astype(np.float64) @ x[t].astype(np.float64)
            a = h[:I] / (1 + np.exp(-h[:I])) * h[I:]
            y[t] += tw[t, j] * (w2[e].astype(np.float64) @ a)
    return y
