"""The conformance cases: every shape, dtype and feature flashport-conformance checks.

Each case is a dict built by _case (dense Q, K, V), _varlen (packed Q and K/V, cu_seqlens) or
_paged (a paged K/V cache, Q dense or packed). Fields (defaults in DEFAULTS):
  name       unique, [a-z0-9_]; the fixture folder and the name in every report
  dtype      f32 | f16 | bf16 | e4m3 | e5m2 (the FP8 formats for Q, K and V, with descales)
  out_dtype  dtype of O: the dtype itself, or f32 | f16 | bf16 for FP8 (None: bf16 for FP8)
  batch, heads_q, heads_kv, seq_q, seq_kv, head_dim
             seq_q and seq_kv are the longest sequences of a varlen or paged case
  layout     bhnd ([B,H,N,d]) | bnhd ([B,N,H,d]); packed tensors are [H,total,d] and
             [total,H,d], pages [pages,H,page_size,d] and [pages,page_size,H,d]
  causal     bottom-right aligned mask (window_right = 0)
  window_left, window_right
             keys i+a-left <= j <= i+a+right are visible (a = Nkv - Nq); -1: unbounded
  scale      0 means 1/sqrt(head_dim)
  softcap    0: off; s = softcap * tanh(s / softcap)
  alibi      none | head (slopes [Hq]) | batch_head (slopes [B, Hq])
  bias       None, or dict(dtype=f32|f16|bf16, dims=, kind=): dims names the full dimensions
             of [B, Hq, Nq, Nkv] in order, "." for one broadcast (stride 0), e.g. "..qk";
             kind says how generate.py draws it (normal | sparse_mask | key_padding |
             masked_rows)
  sinks      one f32 logit per query head in the softmax denominator
  seqlens_q  per-sequence query counts (packed Q) or None (dense Q of seq_q rows)
  seqlens_kv per-sequence key counts (varlen or paged K/V) or None (dense)
  kv_layout  dense | varlen | paged
  q_slack, kv_slack
             (before, after): packed rows that belong to no sequence (cu_seqlens[0] > 0,
             cu_seqlens[B] < total); outputs there must stay untouched
  page_size  rows per page (paged)
  descale    none | tensor | block (FP8 only); descale_block positions per factor
  zero_descale
             [(tensor, None | (b, h, block))]: descale factors set to 0 (the whole tensor's
             factor, or one block's)
  pad        extra elements after every row of d in every tensor (strided, non-contiguous
             tensors; the gaps in O are guard regions the runner checks are untouched)
  inputs     how Q, K, V are drawn (see generate.py): normal | writeup | big_logits | integers
             | fp8_max
  nan, inf   None, or (tensor, batch, head, seq, dim): one element set to NaN (or +inf, e5m2
             only) after drawing (dense cases)
  tol_factor multiplies the dtype's tolerances on O (not LSE, which is judged relative to
             its magnitude); only where the case's own conditioning demands it, with the
             reason beside it
  backward   the case checks the backward pass (dQ, dK, dV from dO and the expected O and LSE)
             instead of the forward; BACKWARD_CASES derives one, named <case>_bwd, from every
             forward case a backward pass applies to
Derived by the constructors: q_varlen, total_q, total_kv, num_pages, max_pages.

Sizes are chosen so that the whole list runs in a couple of minutes on two CPU cores on the
reference backend (double accumulation) and the CPU and OpenCL-on-CPU backends.
"""

FP8 = ("e4m3", "e5m2")

DEFAULTS = dict(dtype="f32", out_dtype=None, batch=1, heads_q=1, heads_kv=1, head_dim=64,
                layout="bhnd", causal=False, window_left=-1, window_right=-1, scale=0.0,
                softcap=0.0, alibi="none", bias=None, sinks=False, seqlens_q=None,
                seqlens_kv=None, kv_layout="dense", q_slack=(0, 0), kv_slack=(0, 0),
                page_size=0, descale="none", descale_block=0, zero_descale=(), pad=0,
                inputs="normal", nan=None, inf=None, tol_factor=1.0, backward=False)


def _base(name, kw):
    c = dict(DEFAULTS)
    c.update(kw)
    c["name"] = name
    if c["out_dtype"] is None:
        c["out_dtype"] = "bf16" if c["dtype"] in FP8 else c["dtype"]
    c.update(q_varlen=False, total_q=0, total_kv=0, num_pages=0, max_pages=0)
    return c


def _case(name, seq, seq_kv=None, **kw):
    """Dense Q, K and V: [B, H, N, d] in the layout."""
    c = _base(name, kw)
    c["seq_q"] = seq
    c["seq_kv"] = seq if seq_kv is None else seq_kv
    return c


def _packed_q(c, seqlens_q):
    c.update(q_varlen=True, seqlens_q=list(seqlens_q), batch=len(seqlens_q),
             seq_q=max(seqlens_q), total_q=sum(c["q_slack"]) + sum(seqlens_q))


def _varlen(name, seqlens_q, seqlens_kv, **kw):
    """Packed Q and K/V, sequence b holding rows cu_seqlens[b] .. cu_seqlens[b+1]-1."""
    c = _base(name, kw)
    _packed_q(c, seqlens_q)
    c.update(kv_layout="varlen", seqlens_kv=list(seqlens_kv), seq_kv=max(seqlens_kv),
             total_kv=sum(c["kv_slack"]) + sum(seqlens_kv))
    return c


def _paged(name, seq_q, seqlens_kv, page_size, **kw):
    """A paged K/V cache: seq_q an int (dense Q of that many rows per sequence) or a list of
    per-sequence lengths (packed Q). Every block_table row has one entry more than its longest
    sequence needs, the cache two pages more than the sequences use; generate.py shuffles the
    pages and fills what no sequence reads with large values."""
    c = _base(name, kw)
    if isinstance(seq_q, int):
        c.update(seq_q=seq_q, batch=len(seqlens_kv))
    else:
        _packed_q(c, seq_q)
    pages = [-(-n // page_size) for n in seqlens_kv]
    c.update(kv_layout="paged", seqlens_kv=list(seqlens_kv), seq_kv=max(seqlens_kv),
             page_size=page_size, max_pages=max(pages) + 1, num_pages=sum(pages) + 2)
    return c


def features(c):
    """The API v2 features a case asks for, in the runner's words (flashport-conformance
    --list prints the same for the descriptor it builds). Causal alone is not a feature, nor
    is a window spelled as causal (left unbounded, right 0)."""
    right = 0 if c["causal"] else c["window_right"]
    f = []
    if c["window_left"] >= 0 or right > 0:
        f.append("window")
    if c["softcap"] > 0:
        f.append("softcap")
    if c["alibi"] != "none":
        f.append("alibi")
    if c["bias"]:
        f.append("bias")
    if c["sinks"]:
        f.append("sinks")
    if c["q_varlen"] or c["kv_layout"] == "varlen":
        f.append("varlen")
    if c["kv_layout"] == "paged":
        f.append("paged")
    if c["dtype"] in FP8:
        f.append("fp8")
    if c["backward"]:
        f.append("backward")
    return f


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
    # ---- API v2 features, each alone, then together. Feature cases keep head_dim <= 64 so
    # that no kernel declines them for their size: a decline must be about a feature. ----
    # Sliding windows (bottom-right aligned like causal).
    _case("window_left8", 64, batch=2, heads_q=4, heads_kv=2, head_dim=32, window_left=8),
    _case("window_8_4_bnhd_bf16", 50, 70, dtype="bf16", heads_q=2, heads_kv=1, head_dim=32,
          layout="bnhd", window_left=8, window_right=4),
    _case("window_causal_left16_f16", 90, dtype="f16", heads_q=8, heads_kv=2, head_dim=32,
          causal=True, window_left=16),
    _case("window_right_only", 40, 60, head_dim=32, window_right=5),
    # Both sides wider than the sequences: every key visible, as with no window.
    _case("window_wider_than_n", 40, 60, head_dim=32, window_left=500, window_right=1000),
    # Window 0 on both sides: each row sees the one key on its aligned diagonal.
    _case("window_zero", 30, 45, heads_q=2, heads_kv=2, head_dim=32, window_left=0,
          window_right=0),
    # Nq > Nkv: rows i < Nq - Nkv - right (26 of 48) see no key: O = 0, LSE = -inf.
    _case("window_rows_masked", 48, 20, head_dim=32, window_left=3, window_right=2, pad=5),
    # Left unbounded and right 0 is causal spelled as a window: no feature, every causal
    # kernel must run it.
    _case("window_spelled_causal", 70, 50, heads_q=2, heads_kv=1, head_dim=32, window_right=0),
    # Logit softcap: with scale 1 the scores' spread (sqrt(d) ~ 5.7) bends tanh strongly.
    _case("softcap5", 80, heads_q=2, heads_kv=1, head_dim=32, scale=1.0, softcap=5.0),
    _case("softcap_bf16_bnhd", 70, dtype="bf16", layout="bnhd", batch=2, heads_q=4, heads_kv=4,
          head_dim=32, scale=0.5, softcap=2.0),
    # Logits in the thousands (integer Q and K in [-3, 3], scale 64: every score an exact
    # float32 multiple of 64, spread ~1000) squashed to +-30: without the cap each row would
    # be one-hot, with it most keys tie near 30.
    _case("softcap_logits_thousands", 64, 96, head_dim=16, inputs="integers", scale=64.0,
          softcap=30.0, causal=True),
    # ALiBi: slopes per head (the paper's geometric sequence) or per batch and head; the
    # distance |i + a - j| grows on both sides when not causal.
    _case("alibi_head_causal", 100, batch=2, heads_q=4, heads_kv=2, head_dim=32, causal=True,
          alibi="head"),
    _case("alibi_batch_head_q20_kv70", 20, 70, batch=2, heads_q=4, heads_kv=1, head_dim=32,
          alibi="batch_head"),
    _case("alibi_f16_q60_kv25_causal", 60, 25, dtype="f16", heads_q=2, heads_kv=2, head_dim=32,
          causal=True, alibi="head"),
    # Additive bias: every broadcast the strides express, each bias dtype, -inf masks.
    _case("bias_f32_full_sparse_mask", 40, 56, batch=2, heads_q=4, heads_kv=2, head_dim=32,
          bias=dict(dtype="f32", dims="bhqk", kind="sparse_mask")),
    _case("bias_f16_qk_broadcast_causal", 64, heads_q=4, heads_kv=1, head_dim=32, causal=True,
          bias=dict(dtype="f16", dims="..qk", kind="normal")),
    _case("bias_bf16_key_padding", 33, 50, batch=3, dtype="bf16", heads_q=2, heads_kv=2,
          head_dim=32, bias=dict(dtype="bf16", dims="b..k", kind="key_padding")),
    # One constant per row (key stride 0): O is unchanged, LSE moves by the constant.
    _case("bias_row_constant", 30, batch=2, heads_q=2, heads_kv=1, head_dim=32,
          bias=dict(dtype="f32", dims="bhq.", kind="normal")),
    # Every fifth row masked whole by -inf: O = 0, LSE = -inf there.
    _case("bias_masked_rows", 24, 40, batch=2, heads_q=2, heads_kv=1, head_dim=32,
          bias=dict(dtype="f32", dims="bhqk", kind="masked_rows")),
    # A NaN in V (key 6, component 2) reaches component 2 of every row whose window holds key
    # 6 (rows 0-8), rows whose bias is -inf everywhere included (their O is 0 elsewhere, their
    # LSE -inf); rows past the window are untouched.
    _case("nan_in_v_window_bias_masked_rows", 20, 30, head_dim=16, causal=True, window_left=12,
          bias=dict(dtype="f32", dims="bhqk", kind="masked_rows"), nan=("v", 0, 0, 6, 2)),
    # Attention sinks: denominator only; rows seeing no key keep LSE = sink, O = 0.
    _case("sinks", 64, batch=2, heads_q=4, heads_kv=2, head_dim=32, sinks=True),
    _case("sinks_causal_empty_rows", 40, 16, heads_q=2, heads_kv=1, head_dim=32, causal=True,
          sinks=True),
    _case("sinks_bias_masked_rows", 24, 40, heads_q=2, heads_kv=2, head_dim=32, sinks=True,
          bias=dict(dtype="f32", dims="bhqk", kind="masked_rows")),
    # Variable-length batches, packed [total, H, d] (bnhd) or [H, total, d] (bhnd).
    _varlen("varlen_gqa", [5, 17, 9], [12, 17, 30], heads_q=4, heads_kv=2, head_dim=32,
            layout="bnhd"),
    # Empty sequences of every kind: no queries, no keys (rows O = 0, LSE = -inf), neither.
    _varlen("varlen_empty_seqs", [0, 7, 3, 0, 10], [4, 0, 8, 0, 12], heads_q=2, heads_kv=1,
            head_dim=32, causal=True, layout="bnhd"),
    _varlen("varlen_bhnd_causal_padded", [30, 1, 12], [10, 40, 12], dtype="f16", heads_q=2,
            heads_kv=2, head_dim=32, causal=True, pad=3),
    # Packed rows outside every sequence, before and after: never read, O and LSE untouched.
    _varlen("varlen_slack_rows", [6, 9], [11, 4], dtype="bf16", heads_q=2, heads_kv=1,
            head_dim=32, layout="bnhd", q_slack=(2, 3), kv_slack=(1, 4)),
    # Paged caches: pages shuffled, unused block_table entries -1, unread rows large.
    _paged("paged_decode_gqa", 1, [40, 1, 64], 16, heads_q=8, heads_kv=2, head_dim=32,
           layout="bnhd"),
    _paged("paged_page1_bhnd_causal", 4, [9, 13], 1, heads_q=2, heads_kv=1, head_dim=32,
           causal=True),
    _paged("paged_varlen_q_page5", [3, 0, 8], [17, 6, 8], 5, heads_q=4, heads_kv=2,
           head_dim=32, causal=True, layout="bnhd"),
    _paged("paged_empty_seq_f16", 3, [0, 20, 7], 8, dtype="f16", heads_q=2, heads_kv=2,
           head_dim=32, pad=2),
    # FP8 Q, K, V: bit patterns decoded by the oracle, descales per tensor or per block.
    _case("fp8_e4m3_tensor", 64, batch=2, dtype="e4m3", heads_q=4, heads_kv=2, head_dim=64,
          descale="tensor"),
    _case("fp8_e5m2_block16_f16out_causal", 40, 70, dtype="e5m2", out_dtype="f16", heads_q=2,
          heads_kv=1, head_dim=32, causal=True, descale="block", descale_block=16),
    _case("fp8_e4m3_block8_f32out_bnhd", 50, dtype="e4m3", out_dtype="f32", heads_q=4,
          heads_kv=1, head_dim=32, layout="bnhd", descale="block", descale_block=8, pad=4),
    # Every fifth element at the format's largest magnitude (448, 57344); V's descale 1, so
    # the e5m2 case's O reaches ~57344, near the f16 output's own maximum (65504).
    # O reaches 448 here, where one f32 ulp is 3e-5: the max-abs bound, set for unit-sized
    # outputs, scales with it (f32 kernels land near 3e-3, a relative 6e-6).
    _case("fp8_e4m3_max_f32out", 32, 48, dtype="e4m3", out_dtype="f32", heads_q=2, heads_kv=1,
          head_dim=32, descale="tensor", inputs="fp8_max", tol_factor=64),
    _case("fp8_e5m2_max_f16out", 32, dtype="e5m2", out_dtype="f16", head_dim=32,
          descale="tensor", inputs="fp8_max"),
    # A NaN bit pattern in K (e4m3 0xff): rows that see key 9 are NaN, earlier rows are not.
    _case("fp8_e4m3_nan_in_k_causal", 40, dtype="e4m3", out_dtype="f32", heads_q=2, heads_kv=1,
          head_dim=32, causal=True, descale="tensor", nan=("k", 0, 0, 9, 4)),
    # A NaN in V (e5m2 0x7f): component 7 of every row is NaN, the others finite.
    _case("fp8_e5m2_nan_in_v", 30, 40, dtype="e5m2", out_dtype="bf16", head_dim=32,
          descale="block", descale_block=16, nan=("v", 0, 0, 12, 7)),
    # An infinity in K (e5m2 0x7c at key 5, component 3): the score of key 5 is +inf or -inf
    # by the sign of q's component 3; a +inf score makes the row NaN, a -inf one takes the key
    # out; rows before key 5 (causal) never see it.
    _case("fp8_e5m2_inf_in_k_causal", 24, dtype="e5m2", out_dtype="f32", heads_q=2, heads_kv=1,
          head_dim=16, causal=True, descale="tensor", inf=("k", 0, 0, 5, 3)),
    # Descale 0: K's makes every score 0 (O = mean of V); single blocks of Q, K and V at 0.
    _case("fp8_k_descale_zero", 30, 40, dtype="e4m3", out_dtype="f32", head_dim=32,
          descale="tensor", zero_descale=[("k", None)]),
    _case("fp8_descale_zero_blocks", 30, 40, dtype="e5m2", out_dtype="f32", batch=2, heads_q=2,
          heads_kv=2, head_dim=32, descale="block", descale_block=8,
          zero_descale=[("q", (0, 1, 1)), ("k", (0, 0, 0)), ("v", (1, 0, 2))]),
    # FP8 at d = 128, the head dim of the GPUs' FP8 kernels: a ragged last key tile (300 keys),
    # GQA and causal per tensor; per-block factors over 128 positions with a window, one V
    # block and one K block at 0; 256-position blocks with sinks and an f16 output in bnhd.
    _case("fp8_e4m3_d128_tensor_gqa_causal", 300, batch=2, dtype="e4m3", heads_q=4, heads_kv=2,
          head_dim=128, causal=True, descale="tensor"),
    _case("fp8_e5m2_d128_block128_window", 200, 450, dtype="e5m2", out_dtype="f32", heads_q=2,
          heads_kv=1, head_dim=128, window_left=150, window_right=20, descale="block",
          descale_block=128, zero_descale=[("v", (0, 0, 1)), ("k", (0, 0, 2))]),
    _case("fp8_e4m3_d128_block256_sinks_f16out", 130, 520, dtype="e4m3", out_dtype="f16",
          heads_q=2, heads_kv=2, head_dim=128, layout="bnhd", sinks=True, descale="block",
          descale_block=256),
    # One block per sequence that is not a multiple of the 128-key tile (1000 positions).
    _case("fp8_e4m3_d128_block1000_gqa", 333, 600, dtype="e4m3", heads_q=4, heads_kv=1,
          head_dim=128, descale="block", descale_block=1000),
    # Decode: a few query rows against a long cache, at the head dims where GPUs have a decode
    # kernel; long enough that the keys are split across blocks and merged.
    _case("decode_bf16_gqa4_long", 1, 5000, dtype="bf16", batch=2, heads_q=8, heads_kv=2,
          head_dim=128),
    _case("decode_f16_mha_d256", 1, 3000, dtype="f16", heads_q=4, heads_kv=4, head_dim=256,
          layout="bnhd"),
    _case("decode_f32_gqa8_q4_causal", 4, 2000, heads_q=8, heads_kv=1, head_dim=64,
          causal=True),
    _case("decode_bf16_q16_window_causal", 16, 3000, dtype="bf16", heads_q=4, heads_kv=2,
          head_dim=128, causal=True, window_left=1000),
    _case("decode_e5m2_softcap_alibi_sinks", 1, 2500, dtype="e5m2", out_dtype="f32",
          heads_q=4, heads_kv=1, head_dim=64, softcap=30.0, alibi="head", sinks=True,
          descale="tensor"),
    _paged("decode_paged_bf16_page16", 1, [3000, 17, 4096, 0], 16, dtype="bf16", heads_q=8,
           heads_kv=2, head_dim=128, layout="bnhd"),
    _paged("decode_paged_f16_page7_q3", 3, [700, 333], 7, dtype="f16", heads_q=4, heads_kv=4,
           head_dim=64),
    _paged("decode_paged_e4m3_block64", 2, [1500, 900], 32, dtype="e4m3", heads_q=8,
           heads_kv=2, head_dim=128, descale="block", descale_block=64),
    _varlen("decode_varlen_bf16_key_padding", [1, 2, 1], [2000, 50, 1], dtype="bf16",
            heads_q=4, heads_kv=2, head_dim=128,
            bias=dict(dtype="f32", dims="b.qk", kind="key_padding")),
    # Prefill over several blocks of keys, where tiled kernels skip the blocks outside a window
    # and mask only those crossing its edges: a NaN in V at key 150 reaches rows 130-190 (40
    # keys left, 20 right) and no other, across tile and block boundaries.
    _case("window_blocks_nan_in_v", 300, heads_q=2, heads_kv=1, head_dim=32, window_left=40,
          window_right=20, nan=("v", 0, 0, 150, 3)),
    # Pages of 80 rows, longer than a key block and not a power of two, under prefill-sized
    # query tiles with a causal window; sequence 1 has fewer keys than queries.
    _paged("paged_prefill_page80_causal_window", 100, [150, 97], 80, heads_q=4, heads_kv=2,
           head_dim=32, causal=True, window_left=70, layout="bnhd"),
    # Packed sequences longer than a query tile and a key block, with every score modifier.
    _varlen("varlen_long_softcap_alibi_bias_sinks", [150, 70, 1], [200, 70, 90], heads_q=2,
            heads_kv=1, head_dim=32, causal=True, softcap=20.0, alibi="batch_head",
            bias=dict(dtype="f16", dims="bhqk", kind="normal"), sinks=True),
    # Prefill at the head dims of the tensor-core kernels (64, 128), several 128-row query
    # blocks and 64-key tiles per sequence, so that a GPU kernel meets full tiles, edge tiles,
    # tiles a window skips and blocks past a short sequence's end. Row strides stay multiples
    # of 16 bytes, as cp.async tile loads need.
    _varlen("prefill_varlen_bf16_d128_causal", [130, 1, 257, 0, 64], [130, 40, 300, 20, 200],
            dtype="bf16", heads_q=4, heads_kv=2, head_dim=128, causal=True, layout="bnhd"),
    _varlen("prefill_varlen_f16_d64_slack", [200, 77], [150, 333], dtype="f16", heads_q=2,
            heads_kv=1, head_dim=64, q_slack=(8, 5), kv_slack=(3, 16)),
    # Packed batches at the Hopper kernel's widest head dim (64-key tiles) with a window and
    # sinks, and at d = 128 with a bias and ALiBi (its modifier instance, the bias as the
    # accumulators' start); last key tiles run into the next sequence or the slack.
    _varlen("prefill_varlen_bf16_d256_window_sinks", [200, 0, 90], [260, 30, 150], dtype="bf16",
            heads_q=4, heads_kv=2, head_dim=256, causal=True, window_left=100, sinks=True,
            layout="bnhd", kv_slack=(0, 9)),
    _varlen("prefill_varlen_f16_d128_bias_alibi", [150, 64, 1], [150, 300, 77], dtype="f16",
            heads_q=4, heads_kv=1, head_dim=128, alibi="head",
            bias=dict(dtype="f32", dims="bhqk", kind="normal")),
    _paged("prefill_paged_f16_d64_page16_causal", 150, [150, 300, 129], 16, dtype="f16",
           heads_q=4, heads_kv=1, head_dim=64, causal=True),
    _paged("prefill_paged_bf16_d128_page7", [140, 33], [200, 61], 7, dtype="bf16", heads_q=2,
           heads_kv=2, head_dim=128, layout="bnhd"),
    # A paged cache alone (dense Q, no window): the prefill kernels' paged instance.
    _paged("prefill_paged_bf16_d128_page24_gqa", 130, [300, 140, 77], 24, dtype="bf16",
           heads_q=4, heads_kv=2, head_dim=128),
    _paged("prefill_paged_f16_d256_page32_causal", 100, [250, 100], 32, dtype="f16", heads_q=2,
           heads_kv=1, head_dim=256, causal=True),
    _case("prefill_window_causal_bf16_d128", 600, dtype="bf16", heads_q=2, heads_kv=1,
          head_dim=128, causal=True, window_left=100),
    _case("prefill_window_both_f16_d64", 300, 500, dtype="f16", heads_q=2, heads_kv=2,
          head_dim=64, window_left=70, window_right=30, layout="bnhd"),
    _case("prefill_softcap_f16_d64", 300, dtype="f16", heads_q=2, heads_kv=1, head_dim=64,
          softcap=2.0),
    # With a negative scale a kernel that flips Q's signs must still cap scale * q.k.
    _case("prefill_softcap_negscale_bf16_d128", 200, dtype="bf16", head_dim=128, scale=-0.3,
          softcap=5.0, causal=True),
    # A softcap alone takes the tensor-core forward's softcap instance (dense tiles, the tanh on
    # every score, its factor in the softmax), here beside sinks, GQA and Nq != Nkv.
    _case("prefill_softcap_sinks_bf16_d256_gqa", 150, 330, dtype="bf16", heads_q=4, heads_kv=2,
          head_dim=256, causal=True, softcap=3.0, sinks=True),
    _case("prefill_alibi_bf16_d128_causal", 260, dtype="bf16", batch=2, heads_q=4, heads_kv=2,
          head_dim=128, causal=True, alibi="head"),
    # ALiBi without a mask over tiles on both sides of the diagonal: the tensor-core forward
    # forms such a tile's exponents from its raw scores and a bound on each row's maximum, for
    # slopes whose spread over a tile keeps the bound close (heads 1-7 here), and takes the
    # general path for head 0's slope of 1/2.
    _case("prefill_alibi_bf16_d64_both_sides", 400, dtype="bf16", heads_q=8, heads_kv=2,
          head_dim=64, alibi="head"),
    # Softcap with logits near +-40 (exponents that underflow), causal, and a NaN in K at key
    # 150: rows 150 and later are NaN in both query heads and no other row is.
    _case("prefill_softcap_bf16_d64_nan_in_k", 300, dtype="bf16", heads_q=2, heads_kv=1,
          head_dim=64, scale=1.0, softcap=50.0, causal=True, nan=("k", 0, 0, 150, 5)),
    _case("prefill_bias_f16_d64_sparse_mask", 200, 260, dtype="f16", heads_q=2, heads_kv=1,
          head_dim=64, bias=dict(dtype="f32", dims="bhqk", kind="sparse_mask")),
    _case("prefill_bias_bf16_d128_qk_broadcast_causal", 190, dtype="bf16", heads_q=2,
          heads_kv=2, head_dim=128, causal=True,
          bias=dict(dtype="bf16", dims="..qk", kind="normal")),
    # Tensor-core kernels start a tile's dot products from its bias: a key-padding bias read
    # once for all rows, and a per-row one whose odd row length misaligns every other row's
    # pairs of keys, across full tiles and edge tiles.
    _case("prefill_bias_key_padding_bf16_d128", 300, 515, dtype="bf16", batch=2, heads_q=4,
          heads_kv=2, head_dim=128, bias=dict(dtype="f32", dims="b..k", kind="key_padding")),
    _case("prefill_bias_f16_d64_odd_keys_causal", 260, 333, dtype="f16", heads_q=2, heads_kv=1,
          head_dim=64, causal=True, bias=dict(dtype="f16", dims="bhqk", kind="normal")),
    # Nq > Nkv, causal: the first 50 rows see no key and keep LSE = sink.
    _case("prefill_sinks_bf16_d128_causal", 200, 150, dtype="bf16", heads_q=4, heads_kv=1,
          head_dim=128, causal=True, sinks=True),
    # Few blocks of query rows over many keys: the split-KV variants split them, and only the
    # first split may count the sink.
    _paged("prefill_split_paged_sinks_window_bf16_d128", 64, [2000, 1500], 16, dtype="bf16",
           heads_q=2, heads_kv=1, head_dim=128, causal=True, window_left=1200, sinks=True),
    _varlen("prefill_split_varlen_softcap_alibi_f16_d64", [40, 90], [1800, 2500], dtype="f16",
            heads_q=2, heads_kv=2, head_dim=64, softcap=10.0, alibi="batch_head", sinks=True),
    # A long causal query at d = 64: many blocks of query rows, walked heaviest first, and many
    # key tiles, so that a K/V ring wraps its phases often; 2100 rows leave a partial last
    # block for 128-, 192- and 64-row blocks alike.
    _case("prefill_long_f16_d64_gqa_causal", 2100, dtype="f16", heads_q=2, heads_kv=1,
          head_dim=64, causal=True),
    _paged("prefill_combo_bf16_d128_page16", [100, 0, 150], [180, 30, 260], 16, dtype="bf16",
           heads_q=4, heads_kv=2, head_dim=128, causal=True, window_left=90, softcap=20.0,
           alibi="head", bias=dict(dtype="f16", dims="b.qk", kind="sparse_mask"), sinks=True,
           layout="bnhd"),
    _paged("prefill_paged_window_bf16_d256", 130, [140, 260], 16, dtype="bf16", heads_q=2,
           heads_kv=1, head_dim=256, causal=True, window_left=64),
    # Pages larger than a key tile (the Hopper kernel copies a tile from inside a page), a
    # window that starts mid-page, and a last page the sequence fills only partly.
    _paged("prefill_paged_bf16_d128_page256_window", 300, [600, 290], 256, dtype="bf16",
           heads_q=2, heads_kv=1, head_dim=128, causal=True, window_left=200, layout="bnhd"),
    # A head dim the tiles pad (80 of 128), packed.
    _varlen("prefill_varlen_alibi_f16_d80", [129, 20], [129, 150], dtype="f16", heads_q=2,
            heads_kv=1, head_dim=80, alibi="head", causal=True),
    # The same features in f32, at the head dims of the CUDA-core kernels' tiles.
    _paged("prefill_f32_paged_window_d64", [150, 40], [300, 90], 16, heads_q=2, heads_kv=1,
           head_dim=64, window_left=80, window_right=10),
    _case("prefill_f32_softcap_alibi_bias_sinks_d128", 200, 230, head_dim=128, causal=True,
          softcap=30.0, alibi="head", bias=dict(dtype="f32", dims="bhqk", kind="normal"),
          sinks=True),
    _paged("prefill_f32_split_page7_sinks_d128", 32, [1500, 700], 7, heads_q=2, heads_kv=2,
           head_dim=128, causal=True, sinks=True),
    # Combinations: GQA x varlen x paged x window x softcap x ALiBi x bias x sinks x causal.
    _varlen("combo_varlen_window_softcap_alibi_sinks", [20, 0, 33, 7], [20, 5, 50, 30],
            heads_q=4, heads_kv=2, head_dim=32, window_left=6, window_right=3, scale=0.5,
            softcap=10.0, alibi="head", sinks=True, layout="bnhd"),
    _paged("combo_paged_bias_alibi_window", 12, [30, 45], 8, heads_q=4, heads_kv=1,
           head_dim=32, causal=True, window_left=10, alibi="batch_head",
           bias=dict(dtype="f32", dims="bhqk", kind="sparse_mask")),
    _varlen("combo_varlen_bias_sinks_window_bhnd", [15, 4, 22], [15, 30, 9], heads_q=2,
            heads_kv=2, head_dim=32, window_left=5, window_right=5, pad=3, sinks=True,
            bias=dict(dtype="bf16", dims="bhqk", kind="masked_rows")),
    _paged("combo_everything_bf16", [7, 16, 0, 11], [25, 16, 9, 40], 4, dtype="bf16",
           heads_q=6, heads_kv=2, head_dim=32, causal=True, window_left=12, softcap=20.0,
           alibi="batch_head", bias=dict(dtype="f16", dims="b.qk", kind="sparse_mask"),
           sinks=True, pad=2, layout="bnhd"),
    _paged("combo_fp8_everything", [9, 14], [20, 33], 16, dtype="e4m3", out_dtype="f16",
           heads_q=4, heads_kv=2, head_dim=32, causal=True, window_left=8, softcap=15.0,
           alibi="head", bias=dict(dtype="bf16", dims="..qk", kind="normal"), sinks=True,
           descale="block", descale_block=4),
    _varlen("combo_fp8_varlen_e5m2", [10, 3], [10, 25], dtype="e5m2", out_dtype="bf16",
            heads_q=2, heads_kv=1, head_dim=32, descale="tensor", window_left=4, window_right=4,
            sinks=True, layout="bnhd"),
]


def backward_applies(c):
    """Whether the backward pass is defined for case c: not for a paged cache or FP8 inputs
    (declined by every backend: no training step differentiates them), nor for NaN or
    infinite inputs, whose gradients the API leaves undefined."""
    return c["kv_layout"] != "paged" and c["dtype"] not in FP8 and c["nan"] is None and \
        c["inf"] is None


def _backward_of(c):
    b = dict(c)
    b.update(name=c["name"] + "_bwd", backward=True)
    return b


BACKWARD_CASES = [_backward_of(c) for c in CASES if backward_applies(c)]
CASES = CASES + BACKWARD_CASES

BIAS_KINDS = ("normal", "sparse_mask", "key_padding", "masked_rows")


def validate(cases):
    names = set()
    for c in cases:
        n = c["name"]
        assert n not in names, "duplicate case " + n
        names.add(n)
        assert c["heads_q"] % c["heads_kv"] == 0, n
        assert c["dtype"] in ("f32", "f16", "bf16") + FP8, n
        assert c["out_dtype"] == c["dtype"] or (c["dtype"] in FP8 and c["out_dtype"] in
                                                 ("f32", "f16", "bf16")), n
        assert c["layout"] in ("bhnd", "bnhd"), n
        assert c["window_left"] >= -1 and c["window_right"] >= -1, n
        assert not (c["causal"] and c["window_right"] > 0), n
        assert c["alibi"] in ("none", "head", "batch_head"), n
        assert c["kv_layout"] in ("dense", "varlen", "paged"), n
        assert not c["q_varlen"] or c["kv_layout"] != "dense", n
        assert c["seqlens_kv"] is None or len(c["seqlens_kv"]) == c["batch"], n
        assert (c["descale"] != "none") == (c["dtype"] in FP8), n
        assert (c["descale"] == "block") == (c["descale_block"] > 0), n
        assert c["nan"] is None or (not c["q_varlen"] and c["kv_layout"] == "dense"), n
        assert c["inf"] is None or (c["dtype"] == "e5m2" and c["kv_layout"] == "dense"), n
        assert not c["backward"] or backward_applies(c), n
        if c["bias"]:
            b = c["bias"]
            assert b["dtype"] in ("f32", "f16", "bf16") and b["kind"] in BIAS_KINDS, n
            assert len(b["dims"]) == 4 and all(x in (y, ".") for x, y in zip(b["dims"], "bhqk")), n
    return cases


validate(CASES)
