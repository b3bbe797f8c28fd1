"""Every failure raises the flashport.Error subclass of its status, with the library's message,
and writes nothing to out."""
import numpy as np
import pytest

import flashport
from conftest import available, random

STATUS = {"InvalidArgumentError": 1, "SizeOverflowError": 2, "UnsupportedError": 3,
          "UnknownBackendError": 4, "UnknownKernelError": 5, "BackendUnavailableError": 6,
          "NoDeviceError": 7, "OutOfMemoryError": 8, "DeviceError": 9, "MismatchError": 10,
          "InternalError": 11, "BadTableError": 12}


@pytest.fixture
def qkv():
    rng = np.random.default_rng(1)
    return tuple(random(rng, (1, 8, 2, 16)) for _ in range(3))


def test_one_class_per_status():
    for name, status in STATUS.items():
        cls = getattr(flashport, name)
        assert issubclass(cls, flashport.Error) and cls.status == status
    assert flashport.DtypeError.status == 3 and issubclass(flashport.DtypeError, TypeError)
    assert issubclass(flashport.LayoutError, flashport.InvalidArgumentError)
    assert issubclass(flashport.StrideError, flashport.InvalidArgumentError)
    assert issubclass(flashport.DeviceMismatchError, flashport.MismatchError)


def guarded_out(q):
    out = np.full_like(q, 123.0)
    return out, out.copy()


def raises_untouched(exc, match, q, k, v, **kw):
    out, before = guarded_out(q)
    with pytest.raises(exc, match=match):
        flashport.attention(q, k, v, out=out, **kw)
    assert np.array_equal(out, before), "out was written by a failed call"


def test_dtype(qkv):
    q, k, v = qkv
    with pytest.raises(flashport.DtypeError, match="q is int16"):
        flashport.attention(q.astype(np.int16), k, v, backend="reference")
    # float64 is the reference backend's alone: the others decline the feature by name
    with pytest.raises(flashport.UnsupportedError, match="float64 inputs"):
        flashport.attention(*(x.astype(np.float64) for x in (q, k, v)), backend="cpu_simd")
    with pytest.raises(flashport.DtypeError, match="bias is float16; it must be float32 or "
                       "float64 for float64 inputs"):
        flashport.attention(*(x.astype(np.float64) for x in (q, k, v)), backend="reference",
                            bias=np.zeros((1, 1, 1, k.shape[1]), np.float16))
    raises_untouched(flashport.DtypeError, "k is float16; it must be float32", q,
                     k.astype(np.float16), v, backend="reference")
    with pytest.raises(flashport.DtypeError, match="out is float16"):
        flashport.attention(q, k, v, out=np.empty(q.shape, np.float16), backend="reference")
    cu = np.array([0, 4, 8], np.int64)
    raises_untouched(flashport.DtypeError, "cu_seqlens_q is int64; it must be int32",
                     q[0], k[0], v[0], cu_seqlens_q=cu, cu_seqlens_kv=cu, backend="reference")


def test_layout(qkv):
    q, k, v = qkv
    raises_untouched(flashport.LayoutError, "layout must be", q, k, v, layout="nhd",
                     backend="reference")
    raises_untouched(flashport.LayoutError, "q has 3 dimensions", q[0], k, v,
                     backend="reference")
    raises_untouched(flashport.LayoutError, "v's shape differs from k's", q, k, v[:, :5],
                     backend="reference")
    raises_untouched(flashport.LayoutError, "k's head dimension is 8", q, k[..., :8],
                     v[..., :8], backend="reference")
    with pytest.raises(flashport.LayoutError, match="out has 4 entries in dimension 1"):
        flashport.attention(q, k, v, out=np.empty((1, 4, 2, 16), np.float32))
    raises_untouched(flashport.LayoutError, "bias has 3 entries in dimension 3", q, k, v,
                     bias=np.zeros((1, 2, 8, 3), np.float32), backend="reference")


def test_head_dim_not_contiguous(qkv):
    q, k, v = qkv
    wide = np.repeat(q, 2, axis=-1)
    raises_untouched(flashport.StrideError, "head dimension .* stride 2", wide[..., ::2], k, v,
                     backend="reference")
    with pytest.raises(flashport.StrideError, match="out: the head dimension"):
        flashport.attention(q, k, v, out=np.empty((1, 8, 2, 32), np.float32)[..., ::2])


def test_library_errors_keep_out(qkv):
    q, k, v = qkv
    raises_untouched(flashport.InvalidArgumentError, "window", q, k, v, window=(-3, 0),
                     backend="reference")
    raises_untouched(flashport.InvalidArgumentError, "heads", q[:, :, :1].repeat(3, axis=2), k,
                     v, backend="reference")
    raises_untouched(flashport.UnknownBackendError, "unknown backend 'nosuch'", q, k, v,
                     backend="nosuch")
    raises_untouched(flashport.UnknownKernelError, "nosuch", q, k, v, backend="reference",
                     kernel="nosuch")
    bad = np.array([0, 9], np.int32)  # 9 rows of 8
    raises_untouched(flashport.BadTableError, "cu_seqlens_q", q[0], k[0], v[0],
                     cu_seqlens_q=bad, cu_seqlens_kv=np.array([0, 8], np.int32),
                     backend="reference")


def test_bad_arguments(qkv):
    q, k, v = qkv
    raises_untouched(flashport.InvalidArgumentError, "q must be an array", q.tolist(), k, v)
    raises_untouched(flashport.InvalidArgumentError, "window must be a pair", q, k, v,
                     window=3, backend="reference")
    raises_untouched(flashport.InvalidArgumentError, "scale must not be 0", q, k, v, scale=0)
    ro = np.zeros_like(q)
    ro.setflags(write=False)
    with pytest.raises(flashport.InvalidArgumentError, match="out is read-only"):
        flashport.attention(q, k, v, out=ro, backend="reference")
    assert (ro == 0).all()


def test_read_only_inputs_are_fine(qkv):
    q, k, v = (x.copy() for x in qkv)
    for x in (q, k, v):
        x.setflags(write=False)
    assert flashport.attention(q, k, v, backend="reference").shape == q.shape


def test_gpu_backend_on_host_arrays(qkv):
    # A GPU backend takes host arrays through copies, as flashport_attention_run_host does;
    # where none is available the error names why.
    q, k, v = qkv
    if available("cuda"):
        from conftest import reference, assert_close
        want, _ = reference(q, k, v)
        assert_close(flashport.attention(q, k, v, backend="cuda"), want, factor=10)
    else:
        raises_untouched(flashport.BackendUnavailableError, "cuda", q, k, v, backend="cuda")


def test_unsupported_plan_is_reported(qkv):
    # A kernel forced on a problem it cannot run: plan reports it; attention raises.
    q, k, v = qkv
    # OpenCL's nv_tf32x3 implements no API v2 feature, so a window forced on it is declined by
    # name whatever device the platform has.
    if not available("opencl"):
        pytest.skip("opencl unavailable here: no kernel that declines a feature to check with")
    p = flashport.plan(q, k, v, backend="opencl", kernel="nv_tf32x3", window=(2, 2))
    assert p.kernel is None and "window" in p.reason
    raises_untouched(flashport.UnsupportedError, "window", q, k, v, backend="opencl",
                     kernel="nv_tf32x3", window=(2, 2))
