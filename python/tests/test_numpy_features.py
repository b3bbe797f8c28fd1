"""flashport.attention on NumPy arrays against the conformance oracle, on the host backends:
dense attention in both layouts, and every feature the signature exposes."""
import numpy as np
import pytest

import flashport
from conftest import assert_close, assert_lse_close, available, cpu_backends, random, reference

BACKENDS = cpu_backends()


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def shapes(layout, batch, heads, seq, dim):
    return (batch, seq, heads, dim) if layout == "bnhd" else (batch, heads, seq, dim)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_dense(backend, layout, dtype, causal, rng):
    # grouped-query heads (4 on 2) and Nq != Nkv, where the causal mask's alignment shows
    q = random(rng, shapes(layout, 2, 4, 19, 40), dtype)
    k = random(rng, shapes(layout, 2, 2, 33, 40), dtype)
    v = random(rng, shapes(layout, 2, 2, 33, 40), dtype)
    o, lse = flashport.attention(q, k, v, causal=causal, layout=layout, backend=backend,
                                 return_lse=True)
    assert isinstance(o, np.ndarray) and o.dtype == q.dtype and o.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (2, 4, 19)
    want_o, want_lse = reference(q, k, v, layout=layout, causal=causal)
    assert_close(o, want_o, dtype)
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize("causal", [False, True])
def test_float64_on_reference(causal, rng):
    # The reference backend's f64 inputs: O in float64, within double rounding of the oracle,
    # with softcap, ALiBi and an f64 bias on the way (scale and softcap are float32 fields of
    # the descriptor: values exact in float32 keep the comparison at double precision)
    q = random(rng, (2, 19, 4, 24), np.float64)
    k, v = (random(rng, (2, 33, 2, 24), np.float64) for _ in range(2))
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    bias = random(rng, (1, 4, 19, 33), np.float64)
    o, lse = flashport.attention(q, k, v, causal=causal, scale=0.25, softcap=3.0,
                                 alibi_slopes=slopes, bias=bias, backend="reference",
                                 return_lse=True)
    assert o.dtype == np.float64 and lse.dtype == np.float32
    want_o, want_lse = reference(q, k, v, causal=causal, scale=0.25, softcap=3.0,
                                 alibi_slopes=slopes, bias=bias)
    assert np.abs(o - want_o).max() <= 1e-12 * np.abs(want_o).max()
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_window_softcap(backend, rng):
    q, k, v = (random(rng, (1, 40, 2, 32)) for _ in range(3))
    kw = dict(scale=0.3, window=(5, 2), softcap=4.0)
    o = flashport.attention(q, k, v, backend=backend, **kw)
    want, _ = reference(q, k, v, scale=0.3, window_left=5, window_right=2, softcap=4.0)
    assert_close(o, want)
    o = flashport.attention(q, k, v, backend=backend, causal=True, window=(7, -1))
    want, _ = reference(q, k, v, causal=True, window_left=7)
    assert_close(o, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(backend, per_batch, rng):
    q, k, v = (random(rng, (2, 24, 4, 32)) for _ in range(3))
    slopes = (2.0 ** (-8.0 * np.arange(1, 5) / 4)).astype(np.float32)
    if per_batch:
        slopes = np.stack([slopes, slopes[::-1]]).copy()
    o = flashport.attention(q, k, v, causal=True, alibi_slopes=slopes, backend=backend)
    want, _ = reference(q, k, v, causal=True, alibi_slopes=slopes)
    assert_close(o, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dims", ["bhqk", "..qk", "b..k"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bias(backend, dims, dtype, rng):
    q, k, v = (random(rng, (2, 16, 2, 32)) for _ in range(3))
    full = (2, 2, 16, 16)
    bias = random(rng, tuple(n if c != "." else 1 for n, c in zip(full, dims)), dtype)
    bias[..., 3] = -np.inf  # masks key 3 wherever the bias reaches
    o = flashport.attention(q, k, v, bias=bias, backend=backend)
    want, _ = reference(q, k, v, bias=bias.astype(np.float64))
    assert_close(o, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sinks(backend, rng):
    q, k, v = (random(rng, (1, 12, 3, 16)) for _ in range(3))
    sinks = np.array([0.5, -1.0, 2.0], np.float32)
    o, lse = flashport.attention(q, k, v, sinks=sinks, backend=backend, return_lse=True)
    want_o, want_lse = reference(q, k, v, sinks=sinks)
    assert_close(o, want_o)
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_varlen(backend, layout, rng):
    cu_q = np.array([0, 5, 5, 17], np.int32)     # an empty sequence in the middle
    cu_kv = np.array([0, 9, 12, 30], np.int32)
    pack = (lambda rows, heads: (rows, heads, 32)) if layout == "bnhd" else \
        (lambda rows, heads: (heads, rows, 32))
    q = random(rng, pack(17, 4))
    k, v = random(rng, pack(30, 2)), random(rng, pack(30, 2))
    o, lse = flashport.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv,
                                 layout=layout, backend=backend, return_lse=True)
    assert o.shape == q.shape and lse.shape == (4, 17)
    want_o, want_lse = reference(q, k, v, layout=layout, packed_q=True, packed_kv=True,
                                 causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert_close(o, want_o)
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
@pytest.mark.parametrize("packed_q", [False, True])
def test_paged(backend, layout, packed_q, rng):
    page_size, pages = 8, 9
    seqlens = np.array([13, 30], np.int32)
    table = np.full((2, 4), -1, np.int32)  # entries past a sequence are never read
    order = rng.permutation(pages).astype(np.int32)
    table[0, :2], table[1, :4] = order[:2], order[2:6]
    cache = (pages, page_size, 2, 32) if layout == "bnhd" else (pages, 2, page_size, 32)
    k, v = random(rng, cache), random(rng, cache)
    kw = dict(block_table=table, seqlens_kv=seqlens, causal=True)
    if packed_q:
        cu_q = np.array([0, 3, 7], np.int32)
        q = random(rng, (7, 4, 32) if layout == "bnhd" else (4, 7, 32))
        kw["cu_seqlens_q"] = cu_q
    else:
        q = random(rng, shapes(layout, 2, 4, 3, 32))
    o = flashport.attention(q, k, v, layout=layout, backend=backend, **kw)
    want, _ = reference(q, k, v, layout=layout, packed_q=packed_q, **kw)
    assert_close(o, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_inputs_and_out(backend, rng):
    # Views into padded storage (rows longer than d) are read in place, and out= is written
    # in place with its own strides, leaving its padding untouched.
    store = random(rng, (3, 2, 20, 3, 48))
    q, k, v = store[0, ..., :32], store[1, ..., :32], store[2, ..., :32]
    out_store = np.full((2, 20, 3, 40), 7.0, np.float32)
    out = out_store[..., :32]
    got = flashport.attention(q, k, v, causal=True, out=out, backend=backend)
    assert got is out
    want, _ = reference(q, k, v, causal=True)
    assert_close(out, want)
    assert (out_store[..., 32:] == 7.0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_plan(backend, rng):
    q, k, v = (random(rng, (1, 16, 2, 32)) for _ in range(3))
    p = flashport.plan(q, k, v, causal=True, backend=backend)
    names = [k["name"] for k in flashport.info(backend)["backends"][0]["kernels"]]
    assert p.backend == backend and p.device == 0
    assert p.kernel in names and p.reason
    # Each kernel forced by name plans as itself, or declines with its reason (a kernel of
    # bf16 products takes no f32 data, one the CPU lacks runs nothing).
    forced = [flashport.plan(q, k, v, backend=backend, kernel=n) for n in names]
    assert all(f.kernel in (n, None) and f.reason for f, n in zip(forced, names))
    assert any(f.kernel == n for f, n in zip(forced, names))


def test_backend_list_falls_back(rng):
    # A spec is a preference list, as in C: an unknown-but-valid entry that cannot run is passed
    # over for the next.
    q, k, v = (random(rng, (1, 8, 1, 16)) for _ in range(3))
    assert flashport.plan(q, k, v, backend="hip,reference").backend == "reference"


def test_threads(rng):
    # Host calls release the interpreter lock; each thread has its own host context.
    import threading
    q, k, v = (random(rng, (2, 64, 2, 32)) for _ in range(3))
    want, _ = reference(q, k, v)
    results = [None] * 4

    names = ["reference"] + (["cpu_simd"] if available("cpu_simd") else [])

    def work(i):
        results[i] = flashport.attention(q, k, v, backend=names[i % len(names)])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert_close(r, want)


def test_context_cache_eviction(rng):
    # More backend specs than the context cache holds (32): the oldest contexts are destroyed
    # and remade as needed, from threads too, and every call still runs.
    import threading
    q, k, v = (random(rng, (1, 8, 1, 16)) for _ in range(3))
    want, _ = reference(q, k, v)
    specs = ["opencl:no-such-device-%d,reference" % i for i in range(40)]
    errors = []

    def work(offset):
        try:
            for i in range(len(specs)):
                assert_close(flashport.attention(q, k, v, backend=specs[(i + offset) % 40]), want)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i * 13,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
