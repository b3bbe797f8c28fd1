"""Shared helpers of the package's tests: the conformance suite's float64 NumPy oracle, the
tolerances, and the markers that split the tests into the ctest groups (run_pytest.py)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "conformance"))
import reference_numpy  # noqa: E402

import flashport  # noqa: E402

# relative L2 error and max absolute error of O, by dtype (those of tests/tools/run_features.py)
TOLERANCE = {"float32": (1e-5, 1e-4), "float16": (2e-3, 5e-3), "bfloat16": (1e-2, 3e-2)}
LSE_TOLERANCE = 1e-5


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs PyTorch (CPU tensors)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (torch CUDA or CuPy)")


def available(name):
    return any(b.name == name and b.available for b in flashport.backends())


def cpu_backends():
    """The host backends, each skipped with the reason when it is not available here."""
    params = []
    for b in flashport.backends():
        if b.name in ("reference", "cpu_simd"):
            marks = [] if b.available else [pytest.mark.skip(reason="%s unavailable: %s"
                                                          % (b.name, b.reason))]
            params.append(pytest.param(b.name, marks=marks, id=b.name))
    return params


def reference(q, k, v, layout="bnhd", packed_q=False, packed_kv=False, **kw):
    """O and LSE in float64 from the conformance oracle, for arrays in flashport.attention's
    shapes (packed arrays gain the oracle's leading dimension of 1)."""
    def f64(x):
        return np.asarray(x, dtype=np.float64)
    q, k, v = f64(q), f64(k), f64(v)
    if packed_q:
        q = q[None]
    if packed_kv:
        k, v = k[None], v[None]
    o, lse = reference_numpy.attention_v2(q, k, v, layout=layout, **kw)
    return (o[0] if packed_q else o), lse


def assert_close(got, want, dtype="float32", factor=1.0, what="O"):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    rel_l2, max_abs = (t * factor for t in TOLERANCE[dtype])
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    worst = np.abs(got - want).max() if got.size else 0.0
    assert err <= rel_l2 and worst <= max_abs, \
        "%s: relative L2 %.3g (limit %.3g), max abs %.3g (limit %.3g)" % (
            what, err, rel_l2, worst, max_abs)


def assert_lse_close(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite)
    scale = np.maximum(1.0, np.abs(want[finite]))
    assert (np.abs(got[finite] - want[finite]) <= LSE_TOLERANCE * scale).all()


def random(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)
