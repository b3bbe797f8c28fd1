#!/usr/bin/env python3
"""Writes the conformance fixtures: inputs, float64 expected O and LSE, and the manifest.

usage: generate.py --out DIR [--cases PATTERNS] [--jobs N]

For every case in cases.py, DIR/<name>/ receives (needed_files lists which)
  q.npy k.npy v.npy  inputs in the case's layout, unpadded: [B,H,N,d] or [B,N,H,d]; packed
                     [1,H,total,d] or [1,total,H,d]; pages [pages,H,page_size,d] or
                     [pages,page_size,H,d]. Already in the dtype: float16 for f16; float32 for
                     f32; for bf16, float32 arrays whose every value is exactly a bfloat16 (the
                     runner converts them to bf16 bits without rounding again); uint8 bit
                     patterns for e4m3 and e5m2
  o.npy              float64 expected output, Q's shape (rows of no sequence: 0, not judged)
  lse.npy            float64 expected log-sum-exp [B, Hq, Nq], or [Hq, total_q] for packed Q
                     (-inf for rows with no key, the sink with sinks; NaN where a NaN reaches)
  sinks.npy          float32 [Hq]
  alibi_slopes.npy   float32 [Hq] or [B, Hq]
  bias.npy           [B|1, Hq|1, Nq|1, Nkv|1] (1 where broadcast), in the bias dtype as above
  cu_seqlens_q.npy cu_seqlens_kv.npy  int32 [B + 1]
  seqlens_kv.npy     int32 [B];  block_table.npy  int32 [B, max_pages] (-1 where unused)
  q_descale.npy k_descale.npy v_descale.npy  float32 [1] or [B, H, ceil(N / descale_block)]
  do.npy             backward cases: dO in Q's shape, in the output dtype as inputs are stored
                     (rows of no sequence hold the unread value)
  dq.npy dk.npy dv.npy  backward cases: float64 expected gradients in Q's and K's shapes
                     (rows of no sequence: 0, not judged); o.npy and lse.npy are then inputs
and DIR/manifest.txt lists the cases (format described at the top of that file). Seeds are
fixed per case name, so the fixtures are the same on every run and machine.
"""
import argparse
import fnmatch
import multiprocessing
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as case_list  # noqa: E402
import reference_numpy as ref  # noqa: E402

MANIFEST_HEADER = """\
# flashport conformance manifest, written by generate.py; do not edit.
# First non-comment line: "flashport-conformance-manifest 3". Then one line per case:
# "case" followed by key=value fields (no spaces inside values), every one required:
#   name dtype(f32|f16|bf16|e4m3|e5m2) out_dtype(f32|f16|bf16) batch heads_q heads_kv
#   seq_q seq_kv (the longest sequences when packed or paged) head_dim layout(bhnd|bnhd)
#   causal(0|1) window_left window_right(-1 = unbounded) scale(float32 value, 0 = 1/sqrt(d))
#   softcap(float32 value, 0 = off) alibi(none|head|batch_head)
#   bias(none, or dtype:dims with dims the full dimensions of bhqk, '.' where broadcast)
#   sinks(0|1) q_varlen(0|1) total_q kv_layout(dense|varlen|paged) total_kv num_pages
#   page_size max_pages descale(none|tensor|block) descale_block
#   pad(extra elements after each row) tol_factor(multiplies the dtype's tolerances on O)
#   backward(0|1: the backward pass, from do.npy and the expected O and LSE, judged on dQ, dK, dV)
# The case's .npy files are in <name>/ beside this manifest.
flashport-conformance-manifest 3
"""

FP8_MAX_CODE = {"e4m3": 0x7E, "e5m2": 0x7B}    # 448 and 57344
FP8_NAN_CODE = {"e4m3": 0xFF, "e5m2": 0x7F}    # S.1111.111 (sign set), S.11111.11
E5M2_INF_CODE = 0x7C                           # 0.11111.00
# What rows no sequence reads hold (packed slack, unused pages, page tails): large enough
# that a kernel reading one shows an error of order one, finite so that multiplying by a
# zero weight hides it, as the API allows.
UNREAD = 300.0


def needed_files(c):
    """The .npy files of case c, as the runner loads them."""
    files = ["q", "k", "v", "o", "lse"]
    files += ["sinks"] if c["sinks"] else []
    files += ["alibi_slopes"] if c["alibi"] != "none" else []
    files += ["bias"] if c["bias"] else []
    files += ["cu_seqlens_q"] if c["q_varlen"] else []
    files += ["cu_seqlens_kv"] if c["kv_layout"] == "varlen" else []
    files += ["seqlens_kv", "block_table"] if c["kv_layout"] == "paged" else []
    files += ["q_descale", "k_descale", "v_descale"] if c["descale"] != "none" else []
    files += ["do", "dq", "dk", "dv"] if c["backward"] else []
    return [f + ".npy" for f in files]


def storage(c, tensor):
    """(outer, heads, rows) of a tensor as stored: per batch, packed, or per page."""
    if tensor in ("q", "o"):
        return (1, c["heads_q"], c["total_q"]) if c["q_varlen"] else \
            (c["batch"], c["heads_q"], c["seq_q"])
    if c["kv_layout"] == "varlen":
        return (1, c["heads_kv"], c["total_kv"])
    if c["kv_layout"] == "paged":
        return (c["num_pages"], c["heads_kv"], c["page_size"])
    return (c["batch"], c["heads_kv"], c["seq_kv"])


def writeup_values(shape, seed):
    """The write-up's flash.py inputs: each entry is a + b/100 with a and b uniform integers in
    0..4, negated with probability 1/2, drawn from NumPy's legacy RandomState(seed) in that
    order (integer parts, hundredths, signs). Q, K and V use seeds 42, 43 and 44 as it does."""
    rng = np.random.RandomState(seed)
    count = int(np.prod(shape))
    whole = rng.randint(0, 5, size=count)
    hundredths = rng.randint(0, 5, size=count) * 0.01
    sign = rng.choice([1, -1], size=count, p=[0.5, 0.5])
    return ((whole + hundredths) * sign).reshape(shape)


def big_logit_values(c, rng, shapes):
    """Scores near +-1000 that are exact in float32: with d = 64 the default scale is 1/8;
    component 0 of every query is +-80 and of every key 100 or 99, so it contributes +-1000 or
    +-990 to the scaled score; the other components are integers in [-2, 2] and spread the
    scores of one row by a few units, so the softmax is not one-hot."""
    assert c["head_dim"] == 64 and c["scale"] == 0.0, "big_logits assumes d = 64, default scale"
    q = rng.integers(-2, 3, size=shapes[0]).astype(np.float64)
    k = rng.integers(-2, 3, size=shapes[1]).astype(np.float64)
    q[..., 0] = 80.0 * rng.choice([1.0, -1.0], size=q.shape[:-1])
    k[..., 0] = rng.choice([100.0, 99.0], size=k.shape[:-1])
    return q, k, rng.standard_normal(shapes[2])


def fp8_encode(x, fmt):
    """Bit patterns of the finite FP8 values nearest to x (magnitudes beyond the largest
    saturate to it)."""
    codes = np.arange(0x80, dtype=np.uint8)
    values = ref.fp8_decode(codes, fmt)
    finite = np.isfinite(values)
    codes, values = codes[finite], values[finite]
    order = np.argsort(values)
    codes, values = codes[order], values[order]
    mag = np.minimum(np.abs(x), values[-1])
    hi = np.clip(np.searchsorted(values, mag), 1, len(values) - 1)
    pick = np.where(values[hi] - mag < mag - values[hi - 1], hi, hi - 1)
    return (codes[pick] | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def fp8_unit(c):
    """Magnitude of one standard deviation of the FP8 inputs as stored: an eighth of the
    format's maximum, so that the values use most of its range; the descales undo it."""
    return float(ref.fp8_decode(FP8_MAX_CODE[c["dtype"]], c["dtype"])) / 8.0


def draw_inputs(c, rng, used):
    """Q, K, V in bhnd storage order (float values, or FP8 bit patterns)."""
    shapes = [storage(c, t) + (c["head_dim"],) for t in "qkv"]
    # Drawn in the file's order (layout), then viewed as bhnd.
    in_file_order = [s if c["layout"] == "bhnd" else (s[0], s[2], s[1], s[3]) for s in shapes]
    if c["inputs"] in ("normal", "fp8_max"):
        q, k, v = (ref.to_bhnd(rng.standard_normal(s), c["layout"]) for s in in_file_order)
    elif c["inputs"] == "writeup":
        q, k, v = (ref.to_bhnd(writeup_values(s, seed), c["layout"])
                   for s, seed in zip(in_file_order, (42, 43, 44)))
    elif c["inputs"] == "big_logits":
        q, k, v = big_logit_values(c, rng, shapes)
    elif c["inputs"] == "integers":
        q, k = (rng.integers(-3, 4, size=s).astype(np.float64) for s in shapes[:2])
        v = rng.standard_normal(shapes[2])
    else:
        raise ValueError("unknown inputs kind " + c["inputs"])
    tensors = {"q": q, "k": k, "v": v}
    for name, t in tensors.items():
        t[~used[name]] = UNREAD
    if c["dtype"] in case_list.FP8:
        fmt = c["dtype"]
        for name in tensors:
            bits = fp8_encode(tensors[name] * fp8_unit(c), fmt)
            if c["inputs"] == "fp8_max":
                flat = bits.reshape(-1)
                flat[::5] = FP8_MAX_CODE[fmt] | np.where(rng.random(flat[::5].shape) < 0.5, 0x80, 0)
            tensors[name] = bits
    if c["nan"]:
        name, b, h, n, d = c["nan"]
        nan = FP8_NAN_CODE[c["dtype"]] if c["dtype"] in case_list.FP8 else np.nan
        tensors[name][b, h, n, d] = nan
    if c["inf"]:
        name, b, h, n, d = c["inf"]
        tensors[name][b, h, n, d] = E5M2_INF_CODE
    if c["dtype"] not in case_list.FP8:
        tensors = {n: ref.round_to_dtype(t, c["dtype"]) for n, t in tensors.items()}
    return tensors


def tables(c, rng):
    """cu_seqlens, seqlens_kv and block_table (int32) of a packed or paged case, and which
    stored rows of Q, K and V some sequence reads."""
    out = {}
    used = {t: np.ones(storage(c, t), dtype=bool) for t in "qkv"}
    if c["q_varlen"]:
        cu = c["q_slack"][0] + np.concatenate([[0], np.cumsum(c["seqlens_q"])])
        out["cu_seqlens_q"] = cu.astype(np.int32)
        used["q"][:] = False
        used["q"][:, :, cu[0]:cu[-1]] = True
    if c["kv_layout"] == "varlen":
        cu = c["kv_slack"][0] + np.concatenate([[0], np.cumsum(c["seqlens_kv"])])
        out["cu_seqlens_kv"] = cu.astype(np.int32)
        used["k"][:] = False
        used["k"][:, :, cu[0]:cu[-1]] = True
    if c["kv_layout"] == "paged":
        ps = c["page_size"]
        order = rng.permutation(c["num_pages"])
        table = np.full((c["batch"], c["max_pages"]), -1, dtype=np.int32)
        used["k"][:] = False
        taken = 0
        for b, n in enumerate(c["seqlens_kv"]):
            pages = -(-n // ps)
            table[b, :pages] = order[taken:taken + pages]
            taken += pages
            j = np.arange(n)
            used["k"][table[b, j // ps], :, j % ps] = True
        out["seqlens_kv"] = np.asarray(c["seqlens_kv"], dtype=np.int32)
        out["block_table"] = table
    used["v"] = used["k"]
    return out, used


def descales(c, rng):
    """q/k/v_descale (float32): factors that bring the stored FP8 values back to unit size,
    varied by +-50% per tensor or block; V's is 1 for fp8_max inputs; zero_descale applied."""
    out = {}
    unit = fp8_unit(c)
    for t, heads, seq in (("q", c["heads_q"], c["seq_q"]), ("k", c["heads_kv"], c["seq_kv"]),
                          ("v", c["heads_kv"], c["seq_kv"])):
        shape = (1,) if c["descale"] == "tensor" else \
            (c["batch"], heads, -(-seq // c["descale_block"]))
        f = rng.uniform(0.5, 1.5, size=shape) / unit
        if t == "v" and c["inputs"] == "fp8_max":
            f[...] = 1.0
        out[t + "_descale"] = f.astype(np.float32)
    for t, where in c["zero_descale"]:
        out[t + "_descale"][... if where is None else where] = 0.0
    return out


def bias_values(c, rng):
    """The bias at its stored shape (1 where broadcast), rounded to its dtype."""
    spec = c["bias"]
    full = (c["batch"], c["heads_q"], c["seq_q"], c["seq_kv"])
    shape = tuple(n if d != "." else 1 for n, d in zip(full, spec["dims"]))
    kind = spec["kind"]
    if kind == "key_padding":
        # batch b's last 3*b keys are padding
        x = np.zeros(shape)
        for b in range(shape[0]):
            x[b, ..., c["seq_kv"] - 3 * b:] = -np.inf
    else:
        x = rng.standard_normal(shape)
        if kind == "sparse_mask":
            x[rng.random(shape) < 0.15] = -np.inf
        elif kind == "masked_rows":
            x[:, :, 2::5, :] = -np.inf
    return ref.round_to_dtype(x, spec["dtype"])


def extras(c, rng):
    """Every array besides Q, K and V: tables, slopes, sinks, bias, descales."""
    out, used = tables(c, rng)
    if c["alibi"] == "head":
        out["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, c["heads_q"] + 1) / c["heads_q"])
                               ).astype(np.float32)
    elif c["alibi"] == "batch_head":
        out["alibi_slopes"] = rng.uniform(0.02, 0.5, (c["batch"], c["heads_q"])).astype(np.float32)
    if c["sinks"]:
        out["sinks"] = rng.uniform(-1.0, 3.0, c["heads_q"]).astype(np.float32)
    if c["bias"]:
        out["bias"] = bias_values(c, rng)
    if c["descale"] != "none":
        out.update(descales(c, rng))
    return out, used


def expected(c, inputs, arrays):
    """O and LSE from the NumPy oracle on exactly what the library is given."""
    return ref.attention_v2(
        *(ref.from_bhnd(inputs[t], c["layout"]) for t in "qkv"), layout=c["layout"],
        dtype=c["dtype"], scale=c["scale"], causal=c["causal"], window_left=c["window_left"],
        window_right=c["window_right"], softcap=float(np.float32(c["softcap"])),
        alibi_slopes=arrays.get("alibi_slopes"), bias=arrays.get("bias"),
        sinks=arrays.get("sinks"), cu_seqlens_q=arrays.get("cu_seqlens_q"),
        cu_seqlens_kv=arrays.get("cu_seqlens_kv"), seqlens_kv=arrays.get("seqlens_kv"),
        block_table=arrays.get("block_table"),
        descales=tuple(arrays.get(t + "_descale") for t in "qkv"),
        descale_block=c["descale_block"])


def gradients(c, rng, inputs, arrays, used):
    """dO (in the output dtype, rows of no sequence unread) and NumPy's dQ, dK, dV."""
    shape = storage(c, "q") + (c["head_dim"],)
    do = ref.to_bhnd(rng.standard_normal(shape if c["layout"] == "bhnd" else
                                         (shape[0], shape[2], shape[1], shape[3])), c["layout"])
    do[~used["q"]] = UNREAD
    do = ref.round_to_dtype(do, c["out_dtype"])
    dq, dk, dv = ref.attention_v2_backward(
        *(ref.from_bhnd(inputs[t], c["layout"]) for t in "qkv"), ref.from_bhnd(do, c["layout"]),
        layout=c["layout"], scale=c["scale"], causal=c["causal"], window_left=c["window_left"],
        window_right=c["window_right"], softcap=float(np.float32(c["softcap"])),
        alibi_slopes=arrays.get("alibi_slopes"), bias=arrays.get("bias"),
        sinks=arrays.get("sinks"), cu_seqlens_q=arrays.get("cu_seqlens_q"),
        cu_seqlens_kv=arrays.get("cu_seqlens_kv"))
    return dict(do=ref.from_bhnd(do, c["layout"]), dq=dq, dk=dk, dv=dv)


def manifest_line(c):
    def text(f):
        v = c[f]
        if f in ("scale", "softcap"):
            return repr(float(np.float32(v)))
        if f == "bias":
            return "%s:%s" % (v["dtype"], v["dims"]) if v else "none"
        if isinstance(v, bool):
            return str(int(v))
        return str(v)
    fields = ["name", "dtype", "out_dtype", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv",
              "head_dim", "layout", "causal", "window_left", "window_right", "scale", "softcap",
              "alibi", "bias", "sinks", "q_varlen", "total_q", "kv_layout", "total_kv",
              "num_pages", "page_size", "max_pages", "descale", "descale_block", "pad",
              "tol_factor", "backward"]
    return "case " + " ".join("%s=%s" % (f, text(f)) for f in fields) + "\n"


def cost(c):
    """The reference's work for a case, in score-times-dim units (backward cases about twice)."""
    work = c["batch"] * c["heads_q"] * c["seq_q"] * c["seq_kv"] * c["head_dim"]
    return work * (3 if c["backward"] else 1)


def matches(patterns, name):
    """flashport-conformance's --cases rule: comma-separated patterns, each a glob when it has
    * ? or [, otherwise a substring of the case name; an empty list selects every case."""
    wanted = [p for p in patterns.split(",") if p]
    return not wanted or any(fnmatch.fnmatchcase(name, p) if any(ch in p for ch in "*?[")
                             else p in name for p in wanted)


def write_case(c, out):
    """Draws one case from its own seed, writes its folder and returns its manifest line."""
    rng = np.random.default_rng(zlib.crc32(c["name"].encode()))
    arrays, used = extras(c, rng)
    inputs = draw_inputs(c, rng, used)
    o, lse = expected(c, inputs, arrays)
    if c["backward"]:
        arrays.update(gradients(c, rng, inputs, arrays, used))
    arrays.update({t: ref.from_bhnd(inputs[t], c["layout"]) for t in "qkv"})
    arrays.update(o=o, lse=lse)
    folder = os.path.join(out, c["name"])
    os.makedirs(folder, exist_ok=True)
    for stale in set(os.listdir(folder)) - set(needed_files(c)):
        os.remove(os.path.join(folder, stale))
    assert sorted(a + ".npy" for a in arrays) == sorted(needed_files(c)), c["name"]
    for name, arr in arrays.items():
        np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(arr))
    return manifest_line(c)


def main():
    ap = argparse.ArgumentParser(description="Write the flashport conformance fixtures.")
    ap.add_argument("--out", required=True, help="folder to write (created if missing)")
    ap.add_argument("--cases", default="",
                    help="only cases matching one of these comma-separated patterns (a glob "
                         "with * ? [, otherwise a substring), as flashport-conformance --cases")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="cases written in parallel (default: the CPU count)")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")

    os.makedirs(args.out, exist_ok=True)
    selected = [c for c in case_list.CASES if matches(args.cases, c["name"])]
    if not selected:
        ap.error("--cases '%s' matches no case" % args.cases)
    # Each case draws from its own seed, so the order the workers finish in changes no byte;
    # the largest cases start first so that one of them does not finish the run alone.
    order = sorted(range(len(selected)), key=lambda i: -cost(selected[i]))
    jobs = [(selected[i], args.out) for i in order]
    if args.jobs == 1:
        written = [write_case(*j) for j in jobs]
    else:
        with multiprocessing.Pool(min(args.jobs, len(jobs))) as pool:
            written = pool.starmap(write_case, jobs, chunksize=1)
    lines = [None] * len(selected)
    for i, line in zip(order, written):
        lines[i] = line
    # The manifest is written last and atomically: its presence means the fixtures are whole.
    tmp = os.path.join(args.out, "manifest.txt.tmp")
    with open(tmp, "w") as f:
        f.write(MANIFEST_HEADER)
        f.writelines(lines)
    os.replace(tmp, os.path.join(args.out, "manifest.txt"))
    print("generate.py: %d cases written to %s" % (len(selected), args.out))


if __name__ == "__main__":
    main()
