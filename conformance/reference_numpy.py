"""Float64 NumPy attention: the oracle the conformance fixtures and the random-shape test use.

Semantics are flashport's: query head h reads kv head h // (Hq // Hkv); causal masking is
bottom-right aligned (key j is visible to query i when j <= i + Nkv - Nq); a row with no
visible key has O = 0 and LSE = -inf; a NaN among a row's visible scores makes that row's O and
LSE NaN. The N x N score matrix is materialised on purpose: this is the oracle, not a kernel.
"""
import numpy as np


def resolved_scale(scale, head_dim):
    """The scale the library runs with: the problem stores it as float32, and 0 means 1/sqrt(d)
    (resolved in float32 by the core), so the oracle uses the same float32 value."""
    if scale == 0:
        return float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))
    return float(np.float32(scale))


def round_bf16(x):
    """Rounds float32 values to the nearest bfloat16 (ties to even); returns float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = rounded.view(np.float32).copy()
    nan = np.isnan(x)
    out[nan] = np.float32(np.nan)
    return out


def round_to_dtype(x, dtype):
    """Values as the library sees them: float16 array for f16, float32 for f32 and bf16."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return round_bf16(x)
    if dtype == "f32":
        return x
    raise ValueError("unknown dtype " + dtype)


def to_bhnd(x, layout):
    return x if layout == "bhnd" else np.transpose(x, (0, 2, 1, 3))


def from_bhnd(x, layout):
    return x if layout == "bhnd" else np.transpose(x, (0, 2, 1, 3))


def attention(q, k, v, causal=False, scale=0.0, layout="bhnd"):
    """O (float64, in the layout of q) and LSE (float64 [B, Hq, Nq])."""
    q = to_bhnd(np.asarray(q, dtype=np.float64), layout)
    k = to_bhnd(np.asarray(k, dtype=np.float64), layout)
    v = to_bhnd(np.asarray(v, dtype=np.float64), layout)
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_kv = k.shape[1], k.shape[2]
    if heads_q % heads_kv:
        raise ValueError("heads_q must be a multiple of heads_kv")
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)

    s = np.einsum("bhid,bhjd->bhij", q, k) * resolved_scale(scale, head_dim)
    visible = np.ones((seq_q, seq_kv), dtype=bool)
    if causal:
        i = np.arange(seq_q)[:, None]
        j = np.arange(seq_kv)[None, :]
        visible = j <= i + (seq_kv - seq_q)
    s = np.where(visible, s, -np.inf)
    empty = ~visible.any(axis=1)  # rows with no visible key, [Nq]

    with np.errstate(invalid="ignore", divide="ignore"):
        m = s.max(axis=-1, keepdims=True)
        m_safe = np.where(np.isfinite(m) | np.isnan(m), m, 0.0)
        p = np.exp(s - m_safe)
        denom = p.sum(axis=-1, keepdims=True)
        # p is 0 at masked keys; a NaN in V at a masked key must not reach the row, so masked
        # products are dropped rather than multiplied by 0.
        o = np.einsum("bhij,bhjd->bhid", p, np.where(np.isnan(v), 0.0, v))
        nan_v = np.einsum("bhij,bhjd->bhid", (p != 0).astype(np.float64), np.isnan(v).astype(np.float64))
        o = np.where(nan_v > 0, np.nan, o) / denom
        lse = (m_safe + np.log(denom))[..., 0]

    o[:, :, empty, :] = 0.0
    lse[:, :, empty] = -np.inf
    return from_bhnd(o, layout), lse
