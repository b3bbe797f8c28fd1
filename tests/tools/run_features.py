#!/usr/bin/env python3
"""flashport-run's feature flags end to end, against a float64 NumPy computation.

usage: run_features.py --run FLASHPORT_RUN [--backend SPEC] [--only NAME]

Each case writes its inputs (.npy), runs flashport-run with the flags under test, --lse and
--json, and compares O and LSE with an independent NumPy evaluation of the formulas in
flashport.h (section "Attention, API v2"); the --json report must echo the descriptor the
flags describe. Exits 1 when any case disagrees.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# relative L2 of O, max abs of O, absolute LSE error (relative above 1), by O's dtype
TOLERANCE = {"f32": (1e-5, 1e-4, 1e-5), "f16": (2e-3, 5e-3, 1e-5), "bf16": (1e-2, 3e-2, 1e-5)}


# ---- the oracle ----

def fp8_values(kind):
    """Float64 value of every FP8 byte (OCP E4M3 "fn" or E5M2), NaN where the byte is NaN."""
    b = np.arange(256)
    sign = np.where(b & 0x80, -1.0, 1.0)
    if kind == "fp8_e4m3":
        e, m = (b >> 3) & 0xF, (b & 7).astype(np.float64)
        val = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7.0))
        val = np.where((b & 0x7F) == 0x7F, np.nan, val)
    else:
        e, m = (b >> 2) & 0x1F, (b & 3).astype(np.float64)
        val = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * 2.0 ** (e - 15.0))
        val = np.where(e == 31, np.where(m == 0, np.inf, np.nan), val)
    return sign * val


def attend(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, slopes=None, bias=None,
           sinks=None):
    """One sequence: q [Hq, nq, d], k and v [Hkv, nk, d]; slopes and sinks [Hq]; bias
    [Hq, nq, nk]. Returns O [Hq, nq, d] and LSE [Hq, nq], float64."""
    hq, nq, _ = q.shape
    hkv, nk = k.shape[0], k.shape[1]
    k = np.repeat(k, hq // hkv, axis=0)
    v = np.repeat(v, hq // hkv, axis=0)
    s = np.einsum("hid,hjd->hij", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    diag = i + (nk - nq)
    if slopes is not None:
        s = s - slopes[:, None, None] * np.abs(diag - j)
    if bias is not None:
        s = s + bias
    left, right = window
    if causal:
        right = 0
    visible = np.ones((nq, nk), dtype=bool)
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1) if nk else np.full((hq, nq), -np.inf)
    if sinks is not None:
        m = np.maximum(m, sinks[:, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe[..., None])
    denom = p.sum(axis=-1)
    if sinks is not None:
        denom = denom + np.exp(sinks[:, None] - m_safe)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.einsum("hij,hjd->hid", p, v) / denom[..., None]
        lse = m_safe + np.log(denom)
    dead = denom == 0
    o[dead] = 0.0
    lse[dead] = -np.inf
    return o, lse


def f32(x):
    return float(np.float32(x))


def resolved_scale(scale, d):
    return f32(scale) if scale else float(np.float32(1.0) / np.sqrt(np.float32(d)))


# ---- the cases ----

class Case:
    def __init__(self, name, flags, expected_o, expected_lse, out_dtype, report):
        self.name, self.flags, self.o, self.lse = name, flags, expected_o, expected_lse
        self.out_dtype, self.report = out_dtype, report


def to_bhnd(x, layout):
    return x if layout == "bhnd" else np.transpose(x, (0, 2, 1, 3))


def dense_case(rng, save, name, b, hq, hkv, nq, nk, d, layout="bhnd", scale=0.0, causal=False,
               window=(-1, -1), softcap=0.0, alibi=None, bias=None, bias_dtype=np.float32,
               sinks=None, magnitude=1.0):
    """Dense Q, K, V (float32 files) with any of the score modifiers. alibi: "head" or "batch";
    bias: the shape of the bias file; sinks: True."""
    dims = (lambda h, n: (b, h, n, d)) if layout == "bhnd" else (lambda h, n: (b, n, h, d))
    q, k, v = (rng.standard_normal(s).astype(np.float32) * np.float32(magnitude)
               for s in (dims(hq, nq), dims(hkv, nk), dims(hkv, nk)))
    flags = ["--q", save("q", q), "--k", save("k", k), "--v", save("v", v), "--layout", layout]
    if scale:
        flags += ["--scale", repr(scale)]
    if causal:
        flags.append("--causal")
    if window != (-1, -1):
        flags += ["--window", "%d,%d" % window]
    if softcap:
        flags += ["--softcap", repr(softcap)]
    slopes = bias_full = sink = None
    report = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=nq, seq_kv=nk, head_dim=d,
                  window_left=window[0], window_right=window[1], kv_layout="dense",
                  q_varlen=False, sinks=sinks is not None,
                  alibi={None: "none", "head": "per_head", "batch": "per_batch_head"}[alibi])
    if alibi:
        slopes = rng.uniform(0.05, 0.6, (hq,) if alibi == "head" else (b, hq))
        flags += ["--alibi", save("alibi", slopes)]  # float64 file: the tool rounds to f32
        slopes = slopes.astype(np.float32).astype(np.float64)
    if bias is not None:
        bb = rng.standard_normal(bias).astype(bias_dtype)
        if bias[-1] > 3:  # one key masked through the bias
            bb[..., 1] = -np.inf
        elif bias[-2] > 2:  # one query row masked whole: O = 0, LSE = -inf
            bb[..., 2, :] = -np.inf
        flags += ["--bias", save("bias", bb)]
        bias_full = np.broadcast_to(bb.astype(np.float64), (b, hq, nq, nk))
    if sinks:
        sink = rng.uniform(-1.0, 2.0, hq).astype(np.float32).astype(np.float64)
        flags += ["--sinks", save("sinks", sink.astype(np.float32))]
    q, k, v = (to_bhnd(x.astype(np.float64), layout) for x in (q, k, v))
    o = np.zeros(q.shape)
    lse = np.zeros(q.shape[:3])
    for i in range(b):
        sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[i])
        o[i], lse[i] = attend(q[i], k[i], v[i], resolved_scale(scale, d), causal, window,
                              f32(softcap), sl, None if bias_full is None else bias_full[i], sink)
    o = o if layout == "bhnd" else np.transpose(o, (0, 2, 1, 3))
    return Case(name, flags, o, lse, "f32", report)


def varlen_case(rng, save, name, cu_q, cu_kv, hq, hkv, d, causal=False, window=(-1, -1),
                softcap=0.0, alibi=False, bias=False, sinks=False):
    """Packed Q, K, V by cu_seqlens; sequence b of Q meets sequence b of K/V."""
    b = len(cu_q) - 1
    lq, lk = np.diff(cu_q), np.diff(cu_kv)
    nq, nk = int(lq.max()), int(lk.max())
    q = rng.standard_normal((cu_q[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((cu_kv[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((cu_kv[-1], hkv, d)).astype(np.float32)
    flags = ["--q", save("q", q), "--k", save("k", k), "--v", save("v", v),
             "--cu-seqlens-q", save("cu_q", np.array(cu_q, dtype=np.int32)),
             "--cu-seqlens-kv", save("cu_kv", np.array(cu_kv, dtype=np.int32))]
    if causal:
        flags.append("--causal")
    if window != (-1, -1):
        flags += ["--window", "%d,%d" % window]
    if softcap:
        flags += ["--softcap", repr(softcap)]
    slopes = bias_full = sink = None
    if alibi:
        slopes = rng.uniform(0.05, 0.6, (b, hq)).astype(np.float32)
        flags += ["--alibi", save("alibi", slopes)]
    if bias:  # [B, 1, Nq, Nkv] by the longest sequences, indexed within each sequence
        bb = rng.standard_normal((b, 1, nq, nk)).astype(np.float16)
        flags += ["--bias", save("bias", bb)]
        bias_full = np.broadcast_to(bb.astype(np.float64), (b, hq, nq, nk))
    if sinks:
        sink = rng.uniform(-1.0, 2.0, hq).astype(np.float32)
        flags += ["--sinks", save("sinks", sink)]
    o = np.zeros(q.shape)
    lse = np.zeros((hq, cu_q[-1]))
    for i in range(b):
        qs = q[cu_q[i]:cu_q[i + 1]].astype(np.float64).transpose(1, 0, 2)
        ks = k[cu_kv[i]:cu_kv[i + 1]].astype(np.float64).transpose(1, 0, 2)
        vs = v[cu_kv[i]:cu_kv[i + 1]].astype(np.float64).transpose(1, 0, 2)
        bi = None if bias_full is None else bias_full[i, :, :lq[i], :lk[i]]
        oi, li = attend(qs, ks, vs, resolved_scale(0, d), causal, window, f32(softcap),
                        None if slopes is None else slopes[i].astype(np.float64), bi,
                        None if sink is None else sink.astype(np.float64))
        o[cu_q[i]:cu_q[i + 1]] = oi.transpose(1, 0, 2)
        lse[:, cu_q[i]:cu_q[i + 1]] = li
    report = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=nq, seq_kv=nk, head_dim=d,
                  q_varlen=True, total_q=int(cu_q[-1]), kv_layout="varlen",
                  total_kv=int(cu_kv[-1]))
    return Case(name, flags, o, lse, "f32", report)


def paged_case(rng, save, name, seqlens, page_size, max_pages, hq, hkv, d, nq=1, cu_q=None,
               causal=False, window=(-1, -1), dtype=None, descale_block=0):
    """A paged cache (pages in shuffled order, spare pages unreferenced) with dense Q [B, Hq,
    nq, d] or packed Q by cu_q. dtype "fp8_e4m3"/"fp8_e5m2" makes Q, K and V FP8 bytes."""
    b = len(seqlens)
    need = [-(-n // page_size) for n in seqlens]
    num_pages = sum(need) + 3
    order = rng.permutation(num_pages)
    table = np.full((b, max_pages), -7, dtype=np.int32)  # entries past a sequence are unread
    used = 0
    for i in range(b):
        table[i, :need[i]] = order[used:used + need[i]]
        used += need[i]
    q_shape = (cu_q[-1], hq, d) if cu_q is not None else (b, hq, nq, d)
    kv_shape = (num_pages, page_size, hkv, d)
    fp8 = dtype is not None
    if fp8:
        values = fp8_values(dtype)
        finite = np.flatnonzero(np.isfinite(values) & (np.abs(values) <= 4))
        qb, kb, vb = (rng.choice(finite, s).astype(np.uint8) for s in (q_shape, kv_shape, kv_shape))
        q, kp, vp = (values[x] for x in (qb, kb, vb))
        files = (qb, kb, vb)
    else:
        q, kp, vp = (rng.standard_normal(s).astype(np.float32) for s in (q_shape, kv_shape, kv_shape))
        files = (q, kp, vp)
    flags = ["--q", save("q", files[0]), "--k", save("k", files[1]), "--v", save("v", files[2]),
             "--block-table", save("table", table),
             "--seqlens-kv", save("seqlens", np.array(seqlens, dtype=np.int32))]
    if cu_q is not None:
        flags += ["--cu-seqlens-q", save("cu_q", np.array(cu_q, dtype=np.int32))]
    if causal:
        flags.append("--causal")
    if window != (-1, -1):
        flags += ["--window", "%d,%d" % window]
    lq = np.diff(cu_q) if cu_q is not None else [nq] * b
    seq_q, seq_kv = int(max(lq)), int(max(seqlens))
    factors = [None, None, None]
    if fp8:
        flags += ["--dtype", dtype, "--out-dtype", "f32"]
        if descale_block:
            flags += ["--descale-block", str(descale_block)]
            for t, (heads, seq) in enumerate([(hq, seq_q), (hkv, seq_kv), (hkv, seq_kv)]):
                factors[t] = rng.uniform(0.25, 2.0, (b, heads, -(-seq // descale_block))).astype(np.float32)
                flags += ["--%s-descale" % "qkv"[t], save("descale_%d" % t, factors[t])]
        else:
            for t in range(3):
                factors[t] = np.float32(rng.uniform(0.25, 2.0))
                flags += ["--%s-descale" % "qkv"[t], repr(float(factors[t]))]

    def dequant(x, t, i):
        """x [H, n, d] of sequence i, times its descales (per position's block)."""
        if not fp8:
            return x
        f = factors[t]
        if not descale_block:
            return x * float(f)
        pos = np.arange(x.shape[1]) // descale_block
        return x * f[i][:, pos][..., None].astype(np.float64)

    o = np.zeros(q.shape)
    lse = np.zeros((hq, cu_q[-1]) if cu_q is not None else (b, hq, nq))
    for i in range(b):
        rows = [table[i, j // page_size] for j in range(seqlens[i])]
        ks = np.array([kp[r, j % page_size] for j, r in enumerate(rows)]).reshape(seqlens[i], hkv, d)
        vs = np.array([vp[r, j % page_size] for j, r in enumerate(rows)]).reshape(seqlens[i], hkv, d)
        ks, vs = (dequant(x.astype(np.float64).transpose(1, 0, 2), t, i) for t, x in ((1, ks), (2, vs)))
        qs = q[cu_q[i]:cu_q[i + 1]].transpose(1, 0, 2) if cu_q is not None else q[i]
        qs = dequant(qs.astype(np.float64), 0, i)
        oi, li = attend(qs, ks, vs, resolved_scale(0, d), causal, window)
        if cu_q is not None:
            o[cu_q[i]:cu_q[i + 1]] = oi.transpose(1, 0, 2)
            lse[:, cu_q[i]:cu_q[i + 1]] = li
        else:
            o[i], lse[i] = oi, li
    report = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=seq_q, seq_kv=seq_kv, head_dim=d,
                  kv_layout="paged", num_pages=num_pages, page_size=page_size,
                  max_pages_per_seq=max_pages, q_varlen=cu_q is not None)
    if fp8:
        report.update(dtype=dtype, out_dtype="f32", descale="block" if descale_block else "tensor",
                      descale_block=descale_block)
    return Case(name, flags, o, lse, "f32", report)


def fp8_case(rng, save, name, kind, out_dtype, descale_file, b=2, hq=4, hkv=2, nq=19, nk=33, d=32,
             causal=False):
    """Dense FP8 Q, K, V (uint8 files of the bytes) with per-tensor descales, given as numbers
    or as one-element .npy files."""
    values = fp8_values(kind)
    finite = np.flatnonzero(np.isfinite(values) & (np.abs(values) <= 8))
    qb, kb, vb = (rng.choice(finite, s).astype(np.uint8)
                  for s in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d)))
    ds = [np.float32(rng.uniform(0.05, 0.5)) for _ in range(3)]
    flags = ["--q", save("q", qb), "--k", save("k", kb), "--v", save("v", vb), "--dtype", kind,
             "--out-dtype", out_dtype]
    for t in range(3):
        value = save("descale_%d" % t, np.array([ds[t]], dtype=np.float32)) if descale_file \
            else repr(float(ds[t]))
        flags += ["--%s-descale" % "qkv"[t], value]
    if causal:
        flags.append("--causal")
    q, k, v = (values[x] * float(f) for x, f in zip((qb, kb, vb), ds))
    o = np.zeros(q.shape)
    lse = np.zeros(q.shape[:3])
    for i in range(b):
        o[i], lse[i] = attend(q[i], k[i], v[i], resolved_scale(0, d), causal)
    report = dict(dtype=kind, out_dtype=out_dtype, descale="tensor", batch=b, seq_q=nq, seq_kv=nk)
    return Case(name, flags, o, lse, out_dtype, report)


def make_cases(rng, work):
    counter = [0]

    def saver(prefix):
        def save(name, array):
            path = os.path.join(work, "%s_%s.npy" % (prefix, name))
            np.save(path, array)
            return path
        return save

    def s():
        counter[0] += 1
        return saver("c%d" % counter[0])

    return [
        dense_case(rng, s(), "window 7,3", 2, 4, 2, 37, 53, 16, layout="bnhd", window=(7, 3)),
        dense_case(rng, s(), "window 5,-1 causal", 1, 2, 1, 40, 40, 8, causal=True, window=(5, -1)),
        dense_case(rng, s(), "window 0,2 (Nq > Nkv)", 1, 2, 2, 30, 12, 8, window=(0, 2)),
        dense_case(rng, s(), "softcap 1.5", 2, 2, 1, 21, 34, 24, softcap=1.5, magnitude=3.0),
        dense_case(rng, s(), "alibi [Hq] causal", 1, 4, 2, 25, 31, 16, causal=True, alibi="head"),
        dense_case(rng, s(), "alibi [B, Hq]", 3, 2, 2, 9, 17, 8, alibi="batch", scale=0.3),
        dense_case(rng, s(), "bias f32 [B,1,Nq,Nkv]", 2, 4, 4, 11, 13, 16, bias=(2, 1, 11, 13)),
        dense_case(rng, s(), "bias f16 [1,Hq,1,Nkv]", 2, 3, 1, 8, 29, 8, bias=(1, 3, 1, 29),
                   bias_dtype=np.float16, layout="bnhd"),
        dense_case(rng, s(), "bias [1,1,Nq,1]", 1, 2, 1, 6, 10, 8, bias=(1, 1, 6, 1)),
        dense_case(rng, s(), "sinks", 2, 4, 2, 16, 24, 16, sinks=True),
        dense_case(rng, s(), "sinks, rows seeing no key", 1, 2, 1, 10, 4, 8, sinks=True,
                   window=(0, 0)),
        dense_case(rng, s(), "window+softcap+alibi+bias+sinks", 2, 4, 2, 33, 47, 16,
                   window=(9, 0), softcap=4.0, alibi="head", bias=(2, 4, 33, 47), sinks=True,
                   magnitude=2.0),
        varlen_case(rng, s(), "varlen", [0, 5, 5, 17, 40], [0, 9, 10, 30, 30], 4, 2, 16),
        varlen_case(rng, s(), "varlen causal", [0, 7, 19], [0, 7, 27], 2, 1, 32, causal=True),
        varlen_case(rng, s(), "varlen+window+softcap+alibi+bias+sinks", [0, 12, 20, 31],
                    [0, 15, 35, 44], 4, 4, 8, window=(6, 2), softcap=3.0, alibi=True, bias=True,
                    sinks=True),
        paged_case(rng, s(), "paged decode, page 4", [9, 0, 16, 5], 4, 5, 4, 2, 16),
        paged_case(rng, s(), "paged, Nq 3 causal", [9, 14], 4, 4, 4, 2, 16, nq=3, causal=True),
        paged_case(rng, s(), "paged + packed Q, window", [11, 6, 20], 8, 3, 2, 1, 8,
                   cu_q=[0, 3, 4, 9], window=(4, 0)),
        fp8_case(rng, s(), "fp8_e4m3, descales as numbers", "fp8_e4m3", "f32", False),
        fp8_case(rng, s(), "fp8_e5m2, descales as .npy, O f16", "fp8_e5m2", "f16", True,
                 causal=True),
        fp8_case(rng, s(), "fp8_e4m3, O bf16", "fp8_e4m3", "bf16", False, b=1, nq=1, nk=64),
        paged_case(rng, s(), "fp8_e4m3 paged, block descales", [13, 30], 4, 8, 4, 2, 16, nq=2,
                   dtype="fp8_e4m3", descale_block=8),
        paged_case(rng, s(), "fp8_e5m2 paged + packed Q", [7, 12], 4, 3, 2, 2, 8, cu_q=[0, 2, 7],
                   causal=True, dtype="fp8_e5m2"),
    ]


# ---- running and judging ----

def judge(case, o, lse):
    problems = []
    if o.dtype != np.float32 or o.shape != case.o.shape:
        return ["O is %s %s, expected float32 %s" % (o.dtype, o.shape, case.o.shape)], ""
    if lse.dtype != np.float32 or lse.shape != case.lse.shape:
        return ["LSE is %s %s, expected float32 %s" % (lse.dtype, lse.shape, case.lse.shape)], ""
    dead = np.isneginf(case.lse)
    if not np.array_equal(np.isneginf(lse), dead):
        problems.append("LSE is -inf on other rows than NumPy's")
    if not np.all(np.isfinite(o)):
        problems.append("O has NaN or inf")
    diff = o.astype(np.float64) - case.o
    norm = np.sqrt(np.sum(case.o ** 2))
    rel_l2 = float(np.sqrt(np.sum(diff ** 2)) / norm) if norm > 0 else float(np.abs(diff).max(initial=0))
    max_abs = float(np.abs(diff).max(initial=0))
    live = ~dead
    lse_err = float((np.abs(lse[live] - case.lse[live]) / np.maximum(1, np.abs(case.lse[live])))
                    .max(initial=0))
    tol_l2, tol_abs, tol_lse = TOLERANCE[case.out_dtype]
    if rel_l2 > tol_l2:
        problems.append("rel_l2 %.3g > %.3g" % (rel_l2, tol_l2))
    if max_abs > tol_abs:
        problems.append("max_abs %.3g > %.3g" % (max_abs, tol_abs))
    if lse_err > tol_lse:
        problems.append("LSE error %.3g > %.3g" % (lse_err, tol_lse))
    return problems, "rel_l2 %.2g max_abs %.2g lse %.2g" % (rel_l2, max_abs, lse_err)


def run_case(args, case, work, index):
    out, lse_out = os.path.join(work, "%d_o.npy" % index), os.path.join(work, "%d_lse.npy" % index)
    cmd = [args.run] + case.flags + ["--out", out, "--lse", lse_out, "--backend", args.backend,
                                     "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return ["exit %d: %s" % (proc.returncode, proc.stderr.strip())], ""
    report = json.loads(proc.stdout)
    problems = ["--json reports %s=%r, expected %r" % (key, report.get(key), want)
                for key, want in case.report.items() if report.get(key) != want]
    more, numbers = judge(case, np.load(out), np.load(lse_out))
    return problems + more, numbers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="path of flashport-run")
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    args = ap.parse_args()
    rng = np.random.default_rng(20260)
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        cases = [c for c in make_cases(rng, work) if not args.only or args.only in c.name]
        for i, case in enumerate(cases):
            problems, numbers = run_case(args, case, work, i)
            print("%-42s %-36s %s" % (case.name, numbers, "ok" if not problems else "WRONG"))
            for p in problems:
                print("    " + p)
            failures += bool(problems)
        print("run_features.py: %d of %d cases wrong on %s" % (failures, len(cases), args.backend))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
