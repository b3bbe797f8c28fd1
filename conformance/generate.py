#!/usr/bin/env python3
"""Writes the conformance fixtures: inputs, float64 expected O and LSE, and the manifest.

usage: generate.py --out DIR [--cases SUBSTRING]

For every case in cases.py, DIR/<name>/ receives
  q.npy k.npy v.npy  inputs in the case's layout ([B,H,N,d] or [B,N,H,d], unpadded), already
                     rounded to the dtype: float16 for f16; float32 for f32; for bf16, float32
                     arrays whose every value is exactly a bfloat16 (the runner converts them
                     to bf16 bits without rounding again)
  o.npy              float64 expected output, same layout as q (heads_q, seq_q)
  lse.npy            float64 expected log-sum-exp [B, Hq, Nq] (-inf for rows with no key)
and DIR/manifest.txt lists the cases (format described at the top of that file). Seeds are
fixed per case name, so the fixtures are the same on every run and machine.
"""
import argparse
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as case_list  # noqa: E402
import reference_numpy as ref  # noqa: E402

MANIFEST_HEADER = """\
# flashport conformance manifest, written by generate.py; do not edit.
# First non-comment line: "flashport-conformance-manifest 1". Then one line per case:
# "case" followed by key=value fields (no spaces inside values):
#   name dtype(f32|f16|bf16) batch heads_q heads_kv seq_q seq_kv head_dim layout(bhnd|bnhd)
#   causal(0|1) scale(float32 value, 0 = 1/sqrt(d)) pad(extra elements after each row)
#   tol_factor(multiplies the dtype's tolerances on O)
# The case's files are <name>/q.npy k.npy v.npy o.npy lse.npy beside this manifest.
flashport-conformance-manifest 1
"""


def shape_of(c, heads, seq):
    if c["layout"] == "bhnd":
        return (c["batch"], heads, seq, c["head_dim"])
    return (c["batch"], seq, heads, c["head_dim"])


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


def big_logit_values(c, rng):
    """Scores near +-1000 that are exact in float32: with d = 64 the default scale is 1/8;
    component 0 of every query is +-80 and of every key 100 or 99, so it contributes +-1000 or
    +-990 to the scaled score; the other components are integers in [-2, 2] and spread the
    scores of one row by a few units, so the softmax is not one-hot."""
    assert c["head_dim"] == 64 and c["scale"] == 0.0, "big_logits assumes d = 64, default scale"
    q = rng.integers(-2, 3, size=(c["batch"], c["heads_q"], c["seq_q"], 64)).astype(np.float64)
    k = rng.integers(-2, 3, size=(c["batch"], c["heads_kv"], c["seq_kv"], 64)).astype(np.float64)
    q[..., 0] = 80.0 * rng.choice([1.0, -1.0], size=q.shape[:-1])
    k[..., 0] = rng.choice([100.0, 99.0], size=k.shape[:-1])
    v = rng.standard_normal(k.shape)
    return [ref.from_bhnd(x, c["layout"]) for x in (q, k, v)]


def draw_inputs(c):
    q_shape = shape_of(c, c["heads_q"], c["seq_q"])
    kv_shape = shape_of(c, c["heads_kv"], c["seq_kv"])
    rng = np.random.default_rng(zlib.crc32(c["name"].encode()))
    if c["inputs"] == "normal":
        q, k, v = (rng.standard_normal(s) for s in (q_shape, kv_shape, kv_shape))
    elif c["inputs"] == "writeup":
        q, k, v = (writeup_values(s, seed) for s, seed in ((q_shape, 42), (kv_shape, 43), (kv_shape, 44)))
    elif c["inputs"] == "big_logits":
        q, k, v = big_logit_values(c, rng)
    else:
        raise ValueError("unknown inputs kind " + c["inputs"])
    tensors = {"q": q, "k": k, "v": v}
    if c["nan"]:
        name, b, h, n, d = c["nan"]
        t = ref.to_bhnd(tensors[name], c["layout"])  # a view: the write lands in the tensor
        t[b, h, n, d] = np.nan
    return [ref.round_to_dtype(tensors[x], c["dtype"]) for x in ("q", "k", "v")]


def manifest_line(c):
    fields = ["name", "dtype", "batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim",
              "layout", "causal", "scale", "pad", "tol_factor"]
    out = []
    for f in fields:
        v = c[f]
        if isinstance(v, bool):
            v = int(v)
        elif f == "scale":
            v = repr(float(np.float32(v)))
        out.append("%s=%s" % (f, v))
    return "case " + " ".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description="Write the flashport conformance fixtures.")
    ap.add_argument("--out", required=True, help="folder to write (created if missing)")
    ap.add_argument("--cases", default="", help="only cases whose name contains this")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    selected = [c for c in case_list.CASES if args.cases in c["name"]]
    lines = []
    for c in selected:
        q, k, v = draw_inputs(c)
        o, lse = ref.attention(q, k, v, causal=c["causal"], scale=c["scale"], layout=c["layout"])
        folder = os.path.join(args.out, c["name"])
        os.makedirs(folder, exist_ok=True)
        for name, arr in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse)):
            np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(arr))
        lines.append(manifest_line(c))
    # The manifest is written last and atomically: its presence means the fixtures are whole.
    tmp = os.path.join(args.out, "manifest.txt.tmp")
    with open(tmp, "w") as f:
        f.write(MANIFEST_HEADER)
        f.writelines(lines)
    os.replace(tmp, os.path.join(args.out, "manifest.txt"))
    print("generate.py: %d cases written to %s" % (len(selected), args.out))


if __name__ == "__main__":
    main()
