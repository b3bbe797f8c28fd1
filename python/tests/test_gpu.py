"""flashport.attention on GPU arrays (torch CUDA tensors, CuPy arrays): zero-copy, on the
caller's current stream, contexts per stream, against torch's SDPA and the oracle. Skipped with
the reason where no CUDA device is seen."""
import numpy as np
import pytest

import flashport
from conftest import assert_close, available, reference

pytestmark = pytest.mark.gpu


def torch_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch %s sees no CUDA device" % torch.__version__)
    if not available("cuda"):
        pytest.skip("the flashport cuda backend is unavailable: %s"
                    % [b.reason for b in flashport.backends() if b.name == "cuda"][0])
    return torch


def f64(t):
    return t.detach().double().cpu().numpy()


# f32 on the GPU runs on tensor cores with the 3xTF32 split or on CUDA cores: within 10x the
# host f32 tolerance
FACTOR = {"float32": 10.0, "float16": 1.0, "bfloat16": 1.0}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_torch_cuda(dtype, causal, layout):
    torch = torch_cuda()
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(1)
    shape = (2, 128, 8, 64) if layout == "bnhd" else (2, 8, 128, 64)
    q, k, v = (torch.randn(shape, device="cuda", generator=g, dtype=dt) for _ in range(3))
    o, lse = flashport.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    assert o.device == q.device and o.dtype == dt and lse.device == q.device
    want, want_lse = reference(f64(q), f64(k), f64(v), layout=layout, causal=causal)
    assert_close(f64(o), want, dtype, FACTOR[dtype])
    assert np.allclose(f64(lse), want_lse, atol=1e-4, rtol=1e-4)
    assert flashport.plan(q, k, v, causal=causal, layout=layout).backend == "cuda"


def test_torch_current_stream_orders_work():
    # On a side stream: a long sleep, then q is overwritten, then attention. Run on any other
    # stream, the kernel would read q before the copy; on the caller's stream it reads the new
    # q. No synchronisation happens until the end.
    torch = torch_cuda()
    q, k, v = (torch.randn(1, 256, 8, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    new_q = torch.randn_like(q)
    want, _ = reference(f64(new_q), f64(k), f64(v))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time
        q.copy_(new_q)
        o = flashport.attention(q, k, v)
        total = o.float().sum()
    side.synchronize()
    assert_close(f64(o), want, "float16")
    assert abs(total.item() - want.sum()) < 1e-2 * max(1.0, abs(want.sum()))


def test_torch_contexts_per_stream():
    torch = torch_cuda()
    q, k, v = (torch.randn(1, 64, 4, 64, device="cuda") for _ in range(3))
    want, _ = reference(f64(q), f64(k), f64(v))
    streams = [torch.cuda.Stream() for _ in range(3)]
    outs = []
    for s in streams:
        with torch.cuda.stream(s):
            outs.append(flashport.attention(q, k, v))
    torch.cuda.synchronize()
    for o in outs:
        assert_close(f64(o), want, "float32", FACTOR["float32"])


def test_torch_cuda_errors():
    torch = torch_cuda()
    q = torch.randn(1, 16, 2, 64, device="cuda")
    with pytest.raises(flashport.DeviceMismatchError, match="backend 'cpu_simd' cannot run"):
        flashport.attention(q, q, q, backend="cpu_simd")
    with pytest.raises(flashport.DeviceMismatchError, match="k is in host memory"):
        flashport.attention(q, q.cpu(), q)
    out = torch.full_like(q, 3.0)
    # a kernel forced on a feature it does not implement (the ladder's naive_tiled has no
    # score modifiers): named, and nothing written
    with pytest.raises(flashport.UnsupportedError, match="softcap"):
        flashport.attention(q, q, q, softcap=30.0, kernel="naive_tiled", out=out)
    with pytest.raises(flashport.InvalidArgumentError, match="window"):
        flashport.attention(q, q, q, window=(-3, 0), out=out)
    torch.cuda.synchronize()
    assert (out == 3.0).all()
    p = flashport.plan(q, q, q, softcap=30.0, kernel="naive_tiled")
    assert p.kernel is None and "softcap" in p.reason


# The conformance suite's bounds on the relative L2 error of gradients (conformance/README.md).
GRAD_REL_L2 = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_cuda_autograd(dtype, causal):
    # flashport.torch.attention under autograd on CUDA tensors (GQA, bnhd), against SDPA's
    # float64 gradients on the host: the backward pass runs on the GPU, on the caller's stream.
    torch = torch_cuda()
    import flashport.torch as fpt
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 96, 8, 64, device="cuda", generator=g, dtype=dt)
    k, v = (torch.randn(2, 96, 2, 64, device="cuda", generator=g, dtype=dt) for _ in range(2))
    do = torch.randn(2, 96, 8, 64, device="cuda", generator=g, dtype=dt)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = fpt.attention(*leaves, causal=causal)
    assert o.device == q.device and o.dtype == dt
    (o * do).sum().backward()
    ref = [t.detach().double().cpu().transpose(1, 2).requires_grad_() for t in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(
        *ref, is_causal=causal, enable_gqa=True)
    (want * do.double().cpu().transpose(1, 2)).sum().backward()
    for name, leaf, r in zip("qkv", leaves, ref):
        assert leaf.grad.device == q.device and leaf.grad.dtype == dt
        got, w = leaf.grad.double().cpu().transpose(1, 2), r.grad
        err = (torch.linalg.norm(got - w) / torch.linalg.norm(w)).item()
        assert err <= GRAD_REL_L2[dtype], "d%s: relative L2 %.3g" % (name, err)


def test_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    if not available("cuda"):
        pytest.skip("the flashport cuda backend is unavailable")
    rng = np.random.default_rng(2)
    host = [rng.standard_normal((2, 64, 4, 64)).astype(np.float16) for _ in range(3)]
    want, _ = reference(*host, causal=True)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        q, k, v = (cupy.asarray(x) for x in host)
        o = flashport.attention(q, k, v, causal=True)
        assert isinstance(o, cupy.ndarray) and o.dtype == cupy.float16
        got = cupy.asnumpy(o, stream=stream)
    stream.synchronize()
    assert_close(got, want, "float16")
