"""flashport.attention on torch CPU tensors: results of torch's kind, read and written in place,
against torch's scaled_dot_product_attention and the conformance oracle."""
import numpy as np
import pytest

import flashport
from conftest import assert_close, assert_lse_close, cpu_backends, reference

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytestmark = pytest.mark.torch
BACKENDS = cpu_backends()
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def f64(t):
    return t.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_layout(backend, dtype, causal):
    # torch's SDPA layout [B, H, N, d] with layout="bhnd", grouped-query heads
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 24, 32, generator=g).to(DTYPES[dtype])
    k = torch.randn(2, 2, 24, 32, generator=g).to(DTYPES[dtype])
    v = torch.randn(2, 2, 24, 32, generator=g).to(DTYPES[dtype])
    o = flashport.attention(q, k, v, causal=causal, layout="bhnd", backend=backend)
    assert isinstance(o, torch.Tensor) and o.dtype == q.dtype and o.shape == q.shape
    want, _ = reference(f64(q), f64(k), f64(v), layout="bhnd", causal=causal)
    assert_close(f64(o), want, dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1),
        is_causal=causal)
    assert_close(f64(o), sdpa.numpy(), dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_are_read_in_place(backend):
    # A [B, N, H, d] tensor seen as [B, H, N, d] through transpose: no copy, either layout.
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 16, 2, 32, generator=g) for _ in range(3))
    o_bnhd = flashport.attention(q, k, v, backend=backend)
    o_bhnd = flashport.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 layout="bhnd", backend=backend)
    assert not q.transpose(1, 2).is_contiguous()
    assert torch.equal(o_bhnd.transpose(1, 2), o_bnhd)
    out = torch.full_like(q, 5.0)
    got = flashport.attention(q, k, v, out=out, backend=backend)
    assert got is out and torch.equal(out, o_bnhd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lse_and_varlen(backend):
    g = torch.Generator().manual_seed(5)
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)
    q, k, v = (torch.randn(20, 2, 16, generator=g) for _ in range(3))
    o, lse = flashport.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, causal=True,
                                 return_lse=True, backend=backend)
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32 and lse.shape == (2, 20)
    want_o, want_lse = reference(f64(q), f64(k), f64(v), packed_q=True, packed_kv=True,
                                 causal=True, cu_seqlens_q=cu.numpy(), cu_seqlens_kv=cu.numpy())
    assert_close(f64(o), want_o)
    assert_lse_close(lse.numpy(), want_lse)


def test_requires_grad_inputs():
    # Tensors that require grad are read as they are (the autograd function's case).
    q = torch.randn(1, 8, 1, 16, requires_grad=True)
    o = flashport.attention(q, q, q, backend="reference")
    want, _ = reference(f64(q), f64(q), f64(q))
    assert_close(f64(o), want)


def test_errors():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(flashport.DtypeError, match="q is int32"):
        flashport.attention(q.int(), q.int(), q.int(), backend="reference")
    cu = torch.tensor([0, 8], dtype=torch.int64)
    with pytest.raises(flashport.DtypeError, match="cu_seqlens_q is int64; it must be int32"):
        flashport.attention(q[0], q[0], q[0], cu_seqlens_q=cu, cu_seqlens_kv=cu)
    with pytest.raises(flashport.StrideError, match="head dimension"):
        flashport.attention(q.transpose(2, 3), q.transpose(2, 3), q.transpose(2, 3),
                            backend="reference")
    out = torch.full_like(q, 9.0)
    with pytest.raises(flashport.InvalidArgumentError, match="window"):
        flashport.attention(q, q, q, window=(-5, 0), out=out, backend="reference")
    assert (out == 9.0).all()
    # a NumPy table with torch CPU tensors: both in host memory, so accepted
    cu32 = np.array([0, 8], np.int32)
    o = flashport.attention(q[0], q[0], q[0], cu_seqlens_q=cu32, cu_seqlens_kv=cu32,
                            backend="reference")
    assert isinstance(o, torch.Tensor)


def test_compare_torch_times_the_package(tmp_path):
    # bench/compare_torch.py --impl flashport times the package beside torch's SDPA and writes
    # the flashport-bench JSON that bench/plot.py draws
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
    import compare_torch
    import plot
    out = tmp_path / "results.json"
    assert compare_torch.main(["--device", "cpu", "--impl", "flashport,math", "--hq", "2",
                               "--nq", "64", "--d", "32", "--causal", "--dtype", "f32",
                               "--backend", "cpu_simd", "--warmup", "1", "--repeat", "2",
                               "--json", str(out)]) == 0
    records, _ = plot.load_records([str(out)])
    by_impl = {r["implementation"]: r for r, _ in records}
    assert set(by_impl) == {"python:flashport", "torch:math"}
    fp = by_impl["python:flashport"]
    assert fp["backend"] == "cpu_simd" and fp["kernel"] and fp["tflops"] > 0


def test_compare_torch_varlen_matches_flashport_bench(tmp_path):
    # compare_torch.py --varlen draws flashport-bench's lengths from the same seed and runs
    # torch on nested (jagged) tensors: both sides count the same real tokens and FLOPs
    import os
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
    import compare_torch
    bench = os.environ.get("FLASHPORT_BENCH", "")
    assert os.access(bench, os.X_OK), f"FLASHPORT_BENCH ({bench!r}) is not flashport-bench"
    out = tmp_path / "varlen.json"
    assert compare_torch.main(["--device", "cpu", "--varlen", "--b", "5", "--hq", "2",
                               "--nq", "40", "--nkv", "52", "--d", "16", "--dtype", "f32",
                               "--impl", "math", "--flashport-bench", bench,
                               "--backend", "cpu_simd", "--seed", "7", "--warmup", "1",
                               "--repeat", "2", "--flashport-args", "--no-peaks",
                               "--json", str(out)]) == 0
    import json
    records = json.loads(out.read_text())["results"]
    fp = [r for r in records if r["implementation"] != "torch:math"]
    tm = [r for r in records if r["implementation"] == "torch:math"]
    assert len(fp) == 1 and len(tm) == 1 and tm[0]["status"] == "ok"
    assert fp[0]["shape"]["varlen"] and tm[0]["shape"]["varlen"]
    for field in ("tokens_q", "tokens_kv", "flops"):
        assert fp[0][field] == tm[0][field], field
    assert tm[0]["tokens_q"] < 5 * 40 and tm[0]["tokens_kv"] == tm[0]["tokens_q"] + 5 * 12
