"""flashport.torch.attention under autograd: finite differences through a small model on the
reference backend, gradients against torch's scaled_dot_product_attention on cpu_simd, and the
errors of the backward pass."""
import numpy as np
import pytest

import flashport
from conftest import available

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
import flashport.torch as fpt  # noqa: E402

pytestmark = pytest.mark.torch
# The conformance suite's bound on the relative L2 error of f32 gradients (conformance/README.md).
GRAD_REL_L2 = 1e-4


def needs(backend):
    return pytest.mark.skipif(not available(backend), reason="%s unavailable here" % backend)


def rel_l2(got, want):
    got, want = got.detach().double(), want.detach().double()
    return (torch.linalg.norm(got - want) / max(torch.linalg.norm(want).item(), 1e-30)).item()


# name: (heads_q, heads_kv, options). Small enough for finite differences of every input.
GRADCHECK_CASES = {
    "dense": (2, 2, {}),
    "causal": (2, 2, {"causal": True}),
    "gqa": (4, 2, {"causal": True}),
    "window": (2, 1, {"window": (2, 1)}),
    "softcap": (2, 2, {"softcap": 1.5, "scale": 0.8}),
    "varlen": (2, 1, {"causal": True, "varlen": True}),
}


@needs("reference")
@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_in_a_model(case):
    # x -> linear layer -> q, k, v (views of one tensor) -> attention -> tanh -> sum over d, in
    # float64 (the reference backend's f64 inputs) with gradcheck's default step and tolerances.
    heads_q, heads_kv, opts = GRADCHECK_CASES[case]
    opts = dict(opts)
    varlen = opts.pop("varlen", False)
    d, rows = 4, 5
    g = torch.Generator().manual_seed(11)
    lead = (rows,) if varlen else (2, rows)
    x = torch.randn(*lead, 6, generator=g, dtype=torch.float64, requires_grad=True)
    linear = torch.nn.Linear(6, (heads_q + 2 * heads_kv) * d).double()
    if varlen:
        cu = torch.tensor([0, 2, 5], dtype=torch.int32)
        opts.update(cu_seqlens_q=cu, cu_seqlens_kv=cu)

    def model(x):
        y = linear(x)
        q, k, v = y.split([heads_q * d, heads_kv * d, heads_kv * d], dim=-1)
        q = q.unflatten(-1, (heads_q, d))
        k, v = k.unflatten(-1, (heads_kv, d)), v.unflatten(-1, (heads_kv, d))
        o = fpt.attention(q, k, v, backend="reference", **opts)
        assert o.dtype == torch.float64
        return torch.tanh(o).sum(-1)

    assert torch.autograd.gradcheck(model, (x,))


def sdpa_grads(q, k, v, do, causal):
    # torch's own attention and autograd in float64, K/V heads repeated for grouped queries
    group = q.shape[1] // k.shape[1]
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal)
    o.backward(do.double())
    return o, q.grad, k.grad, v.grad


@needs("cpu_simd")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_gradients_match_sdpa(causal, heads, layout):
    g = torch.Generator().manual_seed(12)
    (hq, hkv), n, d = heads, 40, 32
    q = torch.randn(2, hq, n, d, generator=g)
    k, v = (torch.randn(2, hkv, n, d, generator=g) for _ in range(2))
    do = torch.randn(2, hq, n, d, generator=g)
    want_o, *want = sdpa_grads(q, k, v, do, causal)
    # "bnhd" gets the same values through transposed views, read in place
    to = (lambda t: t) if layout == "bhnd" else (lambda t: t.transpose(1, 2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = fpt.attention(*(to(t) for t in leaves), causal=causal, layout=layout,
                      backend="cpu_simd")
    assert rel_l2(to(o), want_o) <= 1e-5
    (to(o) * do).sum().backward()
    for name, leaf, w in zip("qkv", leaves, want):
        assert leaf.grad.shape == w.shape
        err = rel_l2(leaf.grad, w)
        assert err <= GRAD_REL_L2, "d%s: relative L2 %.3g" % (name, err)


@needs("cpu_simd")
def test_deterministic_bits():
    g = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(1, 64, 2, 32, generator=g) for _ in range(3))
    grads = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        fpt.attention(*leaves, causal=True, backend="cpu_simd", deterministic=True).sum().backward()
        grads.append([t.grad for t in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert all(torch.isfinite(t).all() and t.abs().sum() > 0 for t in grads[0])


@needs("reference")
def test_no_gradient_for_modifiers():
    g = torch.Generator().manual_seed(14)
    q, k, v = (torch.randn(1, 6, 2, 8, generator=g, requires_grad=True) for _ in range(3))
    sinks = torch.zeros(2, requires_grad=True)
    o = fpt.attention(q, k, v, sinks=sinks, backend="reference")
    o.sum().backward()
    assert sinks.grad is None and q.grad is not None and torch.isfinite(q.grad).all()


@needs("reference")
def test_paged_backward_declined():
    # A paged cache runs forward; its backward pass is declined, naming the feature.
    g = torch.Generator().manual_seed(15)
    q = torch.randn(1, 4, 2, 8, generator=g, requires_grad=True)
    pages = [torch.randn(3, 4, 2, 8, generator=g, requires_grad=True) for _ in range(2)]
    table = torch.tensor([[2, 0]], dtype=torch.int32)
    o = fpt.attention(q, *pages, block_table=table, seqlens_kv=torch.tensor([6], dtype=torch.int32),
                      backend="reference")
    assert torch.isfinite(o).all()
    with pytest.raises(flashport.UnsupportedError, match="paged"):
        o.sum().backward()


def test_backward_errors_write_nothing():
    # The extension's backward call checks every array before the library runs.
    g = torch.Generator().manual_seed(16)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g) for _ in range(3))
    o, lse = flashport.attention(q, k, v, return_lse=True, backend="reference")
    opts = (False, None, None, None, None, None, None, None, None, None, None, None, None,
            "bnhd", "reference", None)
    outs = [torch.full_like(t, 7.0) for t in (q, k, v)]

    def call(o=o, lse=lse, do=torch.ones_like(o), outs=outs):
        return flashport._C.backward(q, k, v, o, lse, do, *opts, False, *outs)

    with pytest.raises(flashport.LayoutError, match="lse"):
        call(lse=lse[:, :1])
    with pytest.raises(flashport.DtypeError, match="grad_out is float16"):
        call(do=torch.ones_like(o, dtype=torch.float16))
    with pytest.raises(flashport.StrideError, match="grad_out must have the strides of out"):
        call(do=torch.ones(1, 2, 8, 16).transpose(1, 2))
    with pytest.raises(flashport.StrideError, match="dk must have the strides of k"):
        call(outs=[outs[0], torch.full((1, 2, 8, 16), 7.0).transpose(1, 2), outs[2]])
    with pytest.raises(flashport.InvalidArgumentError, match="needs lse"):
        call(lse=None)
    assert all(torch.equal(t, torch.full_like(t, 7.0)) for t in outs)
    got = call()
    assert all(a is b for a, b in zip(got, outs))
    assert not torch.equal(outs[0], torch.full_like(q, 7.0))


@needs("cpu_simd")
def test_varlen_gradients_match_oracle():
    # Packed sequences, which SDPA has no form of: against the conformance suite's float64
    # NumPy backward.
    import reference_numpy
    g = torch.Generator().manual_seed(17)
    cu_q = torch.tensor([0, 9, 30], dtype=torch.int32)
    cu_kv = torch.tensor([0, 13, 40], dtype=torch.int32)
    q = torch.randn(30, 4, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(40, 2, 16, generator=g, requires_grad=True) for _ in range(2))
    do = torch.randn(30, 4, 16, generator=g)
    o = fpt.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, causal=True,
                      softcap=3.0, backend="cpu_simd")
    (o * do).sum().backward()
    want = reference_numpy.attention_v2_backward(
        *(t.detach().numpy()[None] for t in (q, k, v, do)), layout="bnhd", causal=True,
        softcap=3.0, cu_seqlens_q=cu_q.numpy(), cu_seqlens_kv=cu_kv.numpy())
    for name, leaf, w in zip("qkv", (q, k, v), want):
        w = torch.from_numpy(np.asarray(w)[0])
        assert leaf.grad.shape == w.shape
        err = rel_l2(leaf.grad, w)
        assert err <= GRAD_REL_L2, "d%s: relative L2 %.3g" % (name, err)
