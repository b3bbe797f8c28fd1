"""The conformance cases: every shape, dtype and feature flashport-conformance checks.

Each case is a dict. Fields (defaults in DEFAULTS):
  name       unique, [a-z0-9_]; the fixture folder and the name in every report
  dtype      f32 | f16 | bf16
  batch, heads_q, heads_kv, seq_q, seq_kv, head_dim
  layout     bhnd ([B,H,N,d]) | bnhd ([B,N,H,d])
  causal     bottom-right aligned mask
  scale      0 means 1/sqrt(head_dim)
  pad        extra elements after every row of d in every tensor (strided, non-contiguous
             tensors; the gaps in O are guard regions the runner checks are untouched)
  inputs     how Q, K, V are drawn (see generate.py): normal | writeup | big_logits
  nan        None, or (tensor, batch, head, seq, dim): one element set to NaN after drawing
  tol_factor multiplies the dtype's tolerances on O (not LSE, which is judged relative to
             its magnitude); only where the case's own conditioning demands it, with the
             reason beside it

Sizes are chosen so that the whole list runs in a few minutes on two CPU cores on the
reference backend (double accumulation) and the CPU and OpenCL-on-CPU backends.
"""

DEFAULTS = dict(dtype="f32", batch=1, heads_q=1, heads_kv=1, head_dim=64, layout="bhnd",
                causal=False, scale=0.0, pad=0, inputs="normal", nan=None, tol_factor=1.0)


def _case(name, seq, seq_kv=None, **kw):
    c = dict(DEFAULTS)
    c.update(kw)
    c["name"] = name
    c["seq_q"] = seq
    c["seq_kv"] = seq if seq_kv is None else seq_kv
    return c


CASES = [
    # Sequence lengths around tile boundaries (16/32/64/128 tiles) and the write-up's N.
    _case("seq1", 1),
    _case("seq17", 17),
    _case("seq127", 127),
    _case("seq128", 128),
    _case("seq1000", 1000),
    _case("seq1024", 1024),
    _case("seq1000_causal", 1000, causal=True),
    # Head dimensions, including ones no tile divides (1, 80) and the largest (1024).
    _case("dim1", 128, head_dim=1),
    _case("dim16", 127, head_dim=16),
    _case("dim64_causal", 129, head_dim=64, causal=True),
    _case("dim80", 127, head_dim=80),
    _case("dim128", 128, head_dim=128),
    _case("dim256", 127, head_dim=256),
    _case("dim1024", 64, head_dim=1024),
    # Batch and heads (B*H > 1), grouped-query ratios 1, 4 and 8.
    _case("batch2_heads3", 65, batch=2, heads_q=3, heads_kv=3, head_dim=32),
    _case("gqa1_causal", 100, batch=2, heads_q=4, heads_kv=4, causal=True),
    _case("gqa4", 100, batch=2, heads_q=8, heads_kv=2),
    _case("gqa8_causal", 100, batch=1, heads_q=8, heads_kv=1, causal=True, head_dim=128),
    # Nq != Nkv: decoding (Nq = 1), chunked prefill (Nq < Nkv), and Nq > Nkv causal, where
    # the first Nq - Nkv rows see no key at all (O = 0, LSE = -inf).
    _case("decode_q1", 1, 1000, heads_q=8, heads_kv=2, head_dim=128),
    _case("decode_q1_causal", 1, 300, heads_q=4, heads_kv=4, causal=True),
    _case("q100_kv300", 100, 300, batch=2, heads_q=2, heads_kv=2),
    _case("q100_kv300_causal", 100, 300, batch=2, heads_q=2, heads_kv=1, causal=True),
    _case("q300_kv100_causal", 300, 100, heads_q=2, heads_kv=2, causal=True),
    _case("q17_kv1", 17, 1, head_dim=16),
    # A non-default scale.
    _case("scale0p3", 200, scale=0.3),
    _case("scale2_causal", 150, scale=2.0, causal=True, head_dim=32),
    # Negative scales are valid: the softmax then favours the smallest scores, and a kernel that
    # takes the running max over unscaled scores must account for the sign.
    _case("scale_negative", 90, scale=-0.25),
    _case("bf16_scale_negative_causal", 130, dtype="bf16", scale=-0.5, causal=True,
          heads_q=2, heads_kv=1),
    # Many keys per row: an accumulation whose error grows with the number of keys (a sum that
    # is not rounded like f32 additions) shows here and not in the short cases.
    _case("long_keys", 64, 8192, heads_q=2, heads_kv=1),
    # Logits near +1000 and -1000 (an unguarded exp overflows to inf or underflows to 0).
    # Scores are exact in f32 (small integers, scale 1/8), but a kernel that forms
    # scale*log2(e)*s in f32 at |s| ~ 1000 loses ~1e-4 in the exponent: an f32 model of such a
    # kernel in NumPy lands at rel_l2 ~2e-5, so these cases get 10x the f32 tolerances on O.
    # Overflow shows up as inf/NaN or an error of order one, far outside either.
    _case("big_logits", 200, inputs="big_logits", tol_factor=10.0),
    _case("big_logits_causal", 150, inputs="big_logits", causal=True, heads_q=2, heads_kv=1,
          tol_factor=10.0),
    # [B,N,H,d] layout.
    _case("bnhd", 130, batch=2, heads_q=4, heads_kv=4, layout="bnhd"),
    _case("bnhd_gqa_causal", 70, 90, batch=2, heads_q=4, heads_kv=2, layout="bnhd", causal=True),
    # Strided tensors: every row padded, gaps in O must stay untouched.
    _case("padded_rows", 77, batch=2, heads_q=2, heads_kv=1, pad=8),
    _case("padded_rows_bnhd", 50, 60, batch=1, heads_q=4, heads_kv=2, pad=3, layout="bnhd",
          causal=True, head_dim=80),
    # f16 and bf16 inputs (rounded to the dtype before the oracle runs).
    _case("f16_seq128", 128, dtype="f16"),
    _case("f16_gqa4_causal", 300, dtype="f16", batch=2, heads_q=4, heads_kv=1, causal=True,
          head_dim=128),
    _case("f16_dim256", 127, dtype="f16", head_dim=256),
    _case("f16_bnhd_decode", 1, 500, dtype="f16", heads_q=8, heads_kv=8, layout="bnhd"),
    # Decode with GQA over enough keys that the split-KV variants split them at every tile
    # configuration.
    _case("bf16_decode_gqa4", 1, 2000, dtype="bf16", heads_q=8, heads_kv=2),
    _case("bf16_seq128", 128, dtype="bf16"),
    _case("bf16_gqa8_causal", 257, dtype="bf16", heads_q=8, heads_kv=1, causal=True),
    _case("bf16_dim80", 100, dtype="bf16", head_dim=80, batch=3),
    _case("bf16_q300_kv100_causal", 300, 100, dtype="bf16", causal=True, layout="bnhd",
          heads_q=2, heads_kv=2),
    # The write-up's shape: B = H = 1, N = d = 1024, f32, inputs drawn as its flash.py draws
    # them (see generate.py), default scale 1/sqrt(1024).
    _case("writeup_n1024_d1024", 1024, head_dim=1024, inputs="writeup"),
    # Heads wider than 256, where GPU kernels split d across warps: d not a multiple of 4 with
    # GQA and causal rows that see no key (Nq > Nkv), few rows over many keys (split-KV), a
    # single decode row in [B,N,H,d], and strided rows with a causal mask.
    _case("dim300_gqa_causal", 90, 70, heads_q=4, heads_kv=2, head_dim=300, causal=True),
    _case("dim512_long_keys", 40, 2000, head_dim=512),
    _case("dim1000_decode_bnhd", 1, 700, heads_q=4, heads_kv=1, head_dim=1000, layout="bnhd"),
    _case("dim520_padded_causal", 50, 60, heads_q=2, heads_kv=1, head_dim=520, pad=3,
          causal=True),
    # NaN propagation: one NaN in K (batch 1, kv head 0, key 5). With GQA 4:2 and causal, only
    # rows of batch 1, query heads 0-1, queries >= 5 become NaN; everything else stays finite.
    _case("nan_in_k", 64, batch=2, heads_q=4, heads_kv=2, causal=True,
          nan=("k", 1, 0, 5, 3)),
    # One NaN in Q: exactly one row NaN.
    _case("nan_in_q", 40, 50, heads_q=2, heads_kv=1, nan=("q", 0, 1, 7, 0)),
]


def validate(cases):
    names = set()
    for c in cases:
        assert c["name"] not in names, "duplicate case " + c["name"]
        names.add(c["name"])
        assert c["heads_q"] % c["heads_kv"] == 0, c["name"]
        assert c["dtype"] in ("f32", "f16", "bf16"), c["name"]
        assert c["layout"] in ("bhnd", "bnhd"), c["name"]
    return cases


validate(CASES)
