"""Float64 NumPy attention: the oracle the conformance fixtures and the random-shape test use.

Written from the formulas of flashport.h ("Attention, API v2"), not from the C code. For one
sequence with Nq queries and Nkv keys, query row i and key j counted within the sequence, the
alignment offset a = Nkv - Nq, and query head h reading kv head h // (Hq // Hkv):

  s_ij  = scale * q_i . k_j                     (FP8: q and k decoded and descaled first)
  s_ij  = softcap * tanh(s_ij / softcap)        when softcap > 0
  s_ij -= slope_h * |i + a - j|                 ALiBi
  s_ij += bias[b, h, i, j]                      additive bias; -inf masks the key
  key j is visible when i + a - left <= j <= i + a + right (-1: that side unbounded;
  causal is right = 0)
  LSE_i = log(sum_{visible j} exp(s_ij) + exp(sink_h))   (the sink term only with sinks)
  O_i   = sum_{visible j} exp(s_ij - LSE_i) v_j

A row that no key reaches (none visible, or every visible score -inf) has O = 0 and
LSE = -inf, or LSE = sink_h with sinks. A NaN or +inf among the scores of the keys a row sees,
or a NaN sink, makes its O and LSE NaN; a NaN in V reaches the components of O it is multiplied
into, from every key inside the row's window, whatever its score (a kernel multiplies such a
row of V by its weight, 0 * NaN being NaN, even when the weight is exp(-inf) = 0). The score
matrix is materialised on purpose: this is the oracle, not a kernel.

The backward pass (attend_backward, attention_v2_backward) is the gradient of sum(dO * O) by
Q, K and V, from the same formulas: with P_ij = exp(s_ij - LSE_i) over the visible keys,
D_i = sum_c dO_ic O_ic, dP_ij = dO_i . v_j and dS_ij = P_ij (dP_ij - D_i),

  dV_j = sum_i P_ij dO_i,   dQ_i = sum_j scale g_ij dS_ij k_j,   dK_j = sum_i scale g_ij dS_ij q_i

g_ij being the softcap's derivative 1 - tanh^2(scale q_i . k_j / softcap) (1 without one);
ALiBi, the bias and the sinks add terms free of q and k and take no gradient; with GQA, dK and
dV sum over the query heads of a group. Inputs with NaN or infinity are outside its scope.
"""
import numpy as np

FP8_FORMATS = ("e4m3", "e5m2")


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


def fp8_decode(bits, fmt):
    """Float64 values of FP8 bit patterns (OCP formats, exponent bias 7 and 15).

    e4m3: S.EEEE.MMM, no infinities, S.1111.111 is NaN, largest finite 0x7e = 448.
    e5m2: S.EEEEE.MM, IEEE-like: exponent 31 is inf (M = 0) or NaN, largest finite 0x7b = 57344.
    Exponent 0 encodes subnormals, M * 2^(1 - bias - mantissa bits)."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    if fmt == "e4m3":
        e, m = (b >> 3) & 0xF, (b & 0x7).astype(np.float64)
        mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7))
        mag = np.where((e == 15) & (m == 7), np.nan, mag)
    elif fmt == "e5m2":
        e, m = (b >> 2) & 0x1F, (b & 0x3).astype(np.float64)
        mag = np.where(e == 0, m / 4.0 * 2.0 ** -14, (1.0 + m / 4.0) * 2.0 ** (e - 15))
        mag = np.where(e == 31, np.where(m == 0, np.inf, np.nan), mag)
    else:
        raise ValueError("unknown FP8 format " + fmt)
    return sign * mag


def to_bhnd(x, layout):
    return x if layout == "bhnd" else np.transpose(x, (0, 2, 1, 3))


def from_bhnd(x, layout):
    return x if layout == "bhnd" else np.transpose(x, (0, 2, 1, 3))


def _visible(seq_q, seq_kv, causal, window_left, window_right):
    """The bottom-right aligned diagonal i + a ([Nq, 1]), the key index j ([1, Nkv]), and which
    keys each query sees ([Nq, Nkv]), as flashport.h defines them."""
    diag = np.arange(seq_q)[:, None] + (seq_kv - seq_q)  # i + a
    j = np.arange(seq_kv)[None, :]
    right = 0 if causal else window_right
    visible = np.ones((seq_q, seq_kv), dtype=bool)
    if window_left >= 0:
        visible &= j >= diag - window_left
    if right >= 0:
        visible &= j <= diag + right
    return diag, j, visible


def attend(q, k, v, scale, causal=False, window_left=-1, window_right=-1, softcap=0.0,
           slopes=None, bias=None, sinks=None):
    """One sequence, every head: q [Hq, Nq, d], k and v [Hkv, Nkv, d] (float64), scale the
    resolved float, slopes and sinks [Hq] or None, bias broadcastable to [Hq, Nq, Nkv] or
    None. Returns O [Hq, Nq, d] and LSE [Hq, Nq]."""
    heads_q, seq_q, dim = q.shape
    heads_kv, seq_kv = k.shape[0], k.shape[1]
    if heads_q % heads_kv:
        raise ValueError("heads_q must be a multiple of heads_kv")
    sink = np.full(heads_q, -np.inf) if sinks is None else np.asarray(sinks, dtype=np.float64)
    o = np.zeros((heads_q, seq_q, dim))
    lse = np.repeat(sink[:, None], seq_q, axis=1)
    if seq_q == 0 or seq_kv == 0:
        return o, lse  # no key: O = 0, LSE = the sink or -inf
    k = np.repeat(k, heads_q // heads_kv, axis=0)
    v = np.repeat(v, heads_q // heads_kv, axis=0)
    diag, j, visible = _visible(seq_q, seq_kv, causal, window_left, window_right)

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.einsum("hid,hjd->hij", q, k) * scale
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if slopes is not None:
            s = s - np.asarray(slopes, dtype=np.float64)[:, None, None] * np.abs(diag - j)
        if bias is not None:
            s = s + bias
    s = np.where(visible, s, -np.inf)
    reach = s != -np.inf  # NaN and +inf scores reach the row too
    finite_reach = np.isfinite(s)

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.maximum(np.where(finite_reach, s, -np.inf).max(axis=-1), sink[:, None])
        m_safe = np.where(np.isfinite(m), m, 0.0)
        p = np.where(finite_reach, np.exp(s - m_safe[..., None]), 0.0)
        denom = p.sum(axis=-1) + np.exp(sink[:, None] - m_safe)
        acc = np.einsum("hij,hjd->hid", p, np.where(np.isnan(v), 0.0, v))
        nan_v = np.einsum("ij,hjd->hid", visible.astype(np.float64),
                          np.isnan(v).astype(np.float64)) > 0
        reached = denom > 0
        o = np.where(reached[..., None], acc / np.where(reached, denom, 1.0)[..., None], 0.0)
        o = np.where(nan_v, np.nan, o)
        lse = np.where(reached, m_safe + np.log(np.where(reached, denom, 1.0)), -np.inf)
    nan_row = (reach & ~finite_reach).any(axis=-1) | np.isnan(sink)[:, None]
    o[nan_row] = np.nan
    lse[nan_row] = np.nan
    return o, lse


def attend_backward(q, k, v, do, scale, causal=False, window_left=-1, window_right=-1,
                    softcap=0.0, slopes=None, bias=None, sinks=None):
    """Gradients of one sequence (shapes and arguments as attend, do like q): dQ [Hq, Nq, d],
    dK and dV [Hkv, Nkv, d]. O and LSE are this oracle's own, in float64."""
    heads_q, seq_q, dim = q.shape
    heads_kv, seq_kv = k.shape[0], k.shape[1]
    group = heads_q // heads_kv
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    if seq_q == 0 or seq_kv == 0:
        return dq, dk, dv
    o, lse = attend(q, k, v, scale, causal=causal, window_left=window_left,
                    window_right=window_right, softcap=softcap, slopes=slopes, bias=bias,
                    sinks=sinks)
    kr, vr = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    diag, j, visible = _visible(seq_q, seq_kv, causal, window_left, window_right)
    x = np.einsum("hid,hjd->hij", q, kr) * scale
    slope = np.ones_like(x)
    s = x
    if softcap > 0:
        t = np.tanh(x / softcap)
        s, slope = softcap * t, 1.0 - t * t
    if slopes is not None:
        s = s - np.asarray(slopes, dtype=np.float64)[:, None, None] * np.abs(diag - j)
    if bias is not None:
        s = s + bias
    with np.errstate(invalid="ignore", over="ignore"):
        live = visible & np.isfinite(s) & np.isfinite(lse)[..., None]
        p = np.where(live, np.exp(np.where(live, s - lse[..., None], 0.0)), 0.0)
    d_sum = np.sum(do * o, axis=-1)
    dp = np.einsum("hid,hjd->hij", do, vr)
    ds = p * (dp - d_sum[..., None]) * slope * scale
    dq = np.einsum("hij,hjd->hid", ds, kr)
    dk = np.einsum("hij,hid->hjd", ds, q).reshape(heads_kv, group, seq_kv, dim).sum(axis=1)
    dv = np.einsum("hij,hid->hjd", p, do).reshape(heads_kv, group, seq_kv, dim).sum(axis=1)
    return dq, dk, dv


def _dequantise(x, dtype, descale, block, batch, positions):
    """x [H, n, d] as the library reads it: float values, or FP8 bit patterns decoded and
    multiplied by their descale (one factor, or [B, H, blocks] by the row's position within
    its sequence)."""
    if dtype not in FP8_FORMATS:
        return np.asarray(x, dtype=np.float64)
    values = fp8_decode(x, dtype)
    descale = np.asarray(descale, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf * 0 is NaN, as in the library
        if block:
            return values * descale[batch][:, positions // block][..., None]
        return values * descale.reshape(-1)[0]


def attention_v2(q, k, v, *, layout="bhnd", dtype="f32", scale=0.0, causal=False,
                 window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None, bias=None,
                 sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, seqlens_kv=None,
                 block_table=None, descales=None, descale_block=0):
    """Attention of a whole problem. Tensors are stored in the layout ("bhnd" or "bnhd") as
    4-d arrays (outer, heads, rows, d) in bhnd terms:
      q  [B, Hq, Nq, d], or packed [1, Hq, total_q, d] with cu_seqlens_q (int [B + 1])
      k, v  [B, Hkv, Nkv, d]; packed [1, Hkv, total_kv, d] with cu_seqlens_kv; or pages
            [num_pages, Hkv, page_size, d] with block_table [B, max_pages] and seqlens_kv [B]
    dtype f32 | f16 | bf16 (float arrays holding the dtype's values) or e4m3 | e5m2 (uint8 bit
    patterns, with descales = (q, k, v) factors of shape [1] or, with descale_block,
    [B, H, ceil(rows / descale_block)]). alibi_slopes [Hq] or [B, Hq]; bias broadcastable to
    [B, Hq, Nq, Nkv] (Nq, Nkv the longest sequences); sinks [Hq].
    Returns O (float64, q's storage shape; rows of no sequence are 0) and LSE (float64,
    [B, Hq, Nq], or [Hq, total_q] when Q is packed; 0 for rows of no sequence)."""
    qs, ks, vs = (to_bhnd(np.asarray(x), layout) for x in (q, k, v))
    heads_q, dim = qs.shape[1], qs.shape[3]
    if cu_seqlens_q is not None:
        batch = len(cu_seqlens_q) - 1
    elif seqlens_kv is not None:
        batch = len(seqlens_kv)
    else:
        batch = qs.shape[0]
    scale = resolved_scale(scale, dim)
    o = np.zeros(qs.shape)
    lse = np.zeros((heads_q, qs.shape[2]) if cu_seqlens_q is not None else qs.shape[:3])
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
    for b in range(batch):
        if cu_seqlens_q is not None:
            q_rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
            q_b = qs[0][:, q_rows]
        else:
            q_b = qs[b]
        if cu_seqlens_kv is not None:
            kv_rows = slice(int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1]))
            k_b, v_b = ks[0][:, kv_rows], vs[0][:, kv_rows]
        elif block_table is not None:
            j = np.arange(int(seqlens_kv[b]))
            page_size = ks.shape[2]
            pages, rows = np.asarray(block_table)[b, j // page_size], j % page_size
            k_b = np.transpose(ks[pages, :, rows, :], (1, 0, 2))
            v_b = np.transpose(vs[pages, :, rows, :], (1, 0, 2))
        else:
            k_b, v_b = ks[b], vs[b]
        nq, nkv = q_b.shape[1], k_b.shape[1]
        qd, kd, vd = descales if descales is not None else (None, None, None)
        q_b = _dequantise(q_b, dtype, qd, descale_block, b, np.arange(nq))
        k_b = _dequantise(k_b, dtype, kd, descale_block, b, np.arange(nkv))
        v_b = _dequantise(v_b, dtype, vd, descale_block, b, np.arange(nkv))
        slopes = None
        if alibi_slopes is not None:
            slopes = np.asarray(alibi_slopes, dtype=np.float64)
            slopes = slopes[b] if slopes.ndim == 2 else slopes
        bias_b = None
        if bias is not None:
            bias_b = bias[min(b, bias.shape[0] - 1), :, :nq, :nkv]
        o_b, lse_b = attend(q_b, k_b, v_b, scale, causal=causal, window_left=window_left,
                            window_right=window_right, softcap=softcap, slopes=slopes,
                            bias=bias_b, sinks=sinks)
        if cu_seqlens_q is not None:
            o[0][:, q_rows] = o_b
            lse[:, q_rows] = lse_b
        else:
            o[b] = o_b
            lse[b] = lse_b
    return from_bhnd(o, layout), lse


def attention_v2_backward(q, k, v, do, *, layout="bhnd", scale=0.0, causal=False,
                          window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                          bias=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None):
    """dQ, dK and dV (float64, in the storage shapes of q, k and v; rows of no sequence 0) of
    a dense or packed problem of f32, f16 or bf16 values, arguments as attention_v2 (a paged
    cache and FP8 inputs have no backward pass); do is dO in q's shape."""
    qs, ks, vs, dos = (to_bhnd(np.asarray(x, dtype=np.float64), layout) for x in (q, k, v, do))
    batch = len(cu_seqlens_q) - 1 if cu_seqlens_q is not None else qs.shape[0]
    scale = resolved_scale(scale, qs.shape[3])
    dq, dk, dv = np.zeros(qs.shape), np.zeros(ks.shape), np.zeros(vs.shape)
    bias = None if bias is None else np.asarray(bias, dtype=np.float64)
    for b in range(batch):
        if cu_seqlens_q is not None:
            qb, kb = (0, slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))), \
                (0, slice(int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1])))
        else:
            qb, kb = (b, slice(None)), (b, slice(None))
        q_b, do_b = qs[qb[0]][:, qb[1]], dos[qb[0]][:, qb[1]]
        k_b, v_b = ks[kb[0]][:, kb[1]], vs[kb[0]][:, kb[1]]
        slopes = None
        if alibi_slopes is not None:
            slopes = np.asarray(alibi_slopes, dtype=np.float64)
            slopes = slopes[b] if slopes.ndim == 2 else slopes
        bias_b = None if bias is None else \
            bias[min(b, bias.shape[0] - 1), :, :q_b.shape[1], :k_b.shape[1]]
        g = attend_backward(q_b, k_b, v_b, do_b, scale, causal=causal, window_left=window_left,
                            window_right=window_right, softcap=softcap, slopes=slopes,
                            bias=bias_b, sinks=sinks)
        dq[qb[0]][:, qb[1]] = g[0]
        dk[kb[0]][:, kb[1]] = g[1]
        dv[kb[0]][:, kb[1]] = g[2]
    return tuple(from_bhnd(x, layout) for x in (dq, dk, dv))


def attention(q, k, v, causal=False, scale=0.0, layout="bhnd"):
    """Dense attention: O (float64, in the layout of q) and LSE (float64 [B, Hq, Nq])."""
    return attention_v2(q, k, v, layout=layout, scale=scale, causal=causal)
