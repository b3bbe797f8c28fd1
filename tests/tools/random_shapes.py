#!/usr/bin/env python3
"""flashport-run against the NumPy oracle on shapes drawn at test time.

usage: random_shapes.py --run FLASHPORT_RUN [--random N] [--seed S] [--backend SPEC] [--work DIR]

Draws N problems (batch, heads and GQA ratio, Nq and Nkv, head_dim, layout, causal, scale,
dtype, the input files' type), writes the inputs, runs flashport-run on them and compares O and
LSE with conformance/reference_numpy.py under the dtype's tolerance. Without --seed a fresh seed
is drawn; it is printed first so a failure can be replayed. Exits 1 when any problem disagrees.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conformance"))
import reference_numpy as ref  # noqa: E402

# relative L2 of O, max abs of O (0: not checked), relative LSE error
TOLERANCE = {"f32": (1e-5, 1e-4, 1e-5), "f16": (2e-3, 0.0, 2e-3), "bf16": (1e-2, 0.0, 1e-2)}


def draw_problem(rng):
    heads_kv = int(rng.integers(1, 4))
    seq_q = int(rng.integers(1, 160))
    p = dict(
        batch=int(rng.integers(1, 4)),
        heads_kv=heads_kv,
        heads_q=heads_kv * int(rng.choice([1, 2, 3, 4, 8])),
        seq_q=seq_q,
        seq_kv=seq_q if rng.random() < 0.3 else int(rng.integers(1, 160)),
        head_dim=int(rng.choice([int(rng.integers(1, 161)), 16, 32, 64, 128])),
        layout=str(rng.choice(["bhnd", "bnhd"])),
        causal=bool(rng.random() < 0.5),
        scale=0.0 if rng.random() < 0.5 else float(rng.uniform(0.02, 1.5)),
        dtype=str(rng.choice(["f32", "f16", "bf16"])),
        magnitude=float(rng.uniform(0.3, 3.0)),
    )
    # f16 problems read float16 files half of the time, float32 files (rounded by the tool)
    # otherwise; f32 and bf16 problems always read float32 files.
    p["file_type"] = "float16" if p["dtype"] == "f16" and rng.random() < 0.5 else "float32"
    return p


def shape(p, heads, seq):
    if p["layout"] == "bhnd":
        return (p["batch"], heads, seq, p["head_dim"])
    return (p["batch"], seq, heads, p["head_dim"])


def errors(o, o_ref, lse, lse_ref):
    masked = np.isneginf(lse_ref)
    problems = []
    if not np.array_equal(np.isneginf(lse), masked):
        problems.append("LSE is -inf on other rows than NumPy's")
    if not np.all(np.isfinite(o)):
        problems.append("O has NaN or inf")
    d = o.astype(np.float64) - o_ref
    denom = np.sqrt(np.sum(o_ref * o_ref))
    rel_l2 = float(np.sqrt(np.sum(d * d)) / denom) if denom > 0 else float(np.sqrt(np.sum(d * d)))
    max_abs = float(np.max(np.abs(d))) if d.size else 0.0
    live = ~masked
    lse_err = float(np.max(np.abs(lse[live] - lse_ref[live]) / np.maximum(1.0, np.abs(lse_ref[live])))) \
        if live.any() else 0.0
    return rel_l2, max_abs, lse_err, problems


def run_one(args, p, rng, work, index):
    q_shape, kv_shape = shape(p, p["heads_q"], p["seq_q"]), shape(p, p["heads_kv"], p["seq_kv"])
    tensors = [rng.standard_normal(s) * p["magnitude"] for s in (q_shape, kv_shape, kv_shape)]
    files = []
    for name, t in zip("qkv", tensors):
        path = os.path.join(work, "%d_%s.npy" % (index, name))
        np.save(path, t.astype(p["file_type"]))
        files.append(path)
    # What the library computes on: the file's values rounded to the dtype.
    inputs = [ref.round_to_dtype(np.load(f).astype(np.float32), p["dtype"]) for f in files]
    o_ref, lse_ref = ref.attention(*inputs, causal=p["causal"], scale=p["scale"], layout=p["layout"])

    out, lse_out = os.path.join(work, "%d_o.npy" % index), os.path.join(work, "%d_lse.npy" % index)
    cmd = [args.run, "--q", files[0], "--k", files[1], "--v", files[2], "--out", out,
           "--lse", lse_out, "--layout", p["layout"], "--backend", args.backend, "--json"]
    if p["causal"]:
        cmd.append("--causal")
    if p["scale"]:
        cmd += ["--scale", repr(p["scale"])]
    if p["dtype"] != "f32" or p["file_type"] != "float32":
        cmd += ["--dtype", p["dtype"]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return ["flashport-run exited %d: %s" % (proc.returncode, proc.stderr.strip())]
    report = json.loads(proc.stdout)
    problems = []
    for key in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"):
        if report[key] != p[key]:
            problems.append("--json reports %s=%s, expected %s" % (key, report[key], p[key]))
    if report["dtype"] != p["dtype"] or report["causal"] != p["causal"]:
        problems.append("--json reports dtype %s causal %s" % (report["dtype"], report["causal"]))

    o, lse = np.load(out), np.load(lse_out)
    if o.dtype != np.float32 or o.shape != o_ref.shape:
        return problems + ["O is %s %s, expected float32 %s" % (o.dtype, o.shape, o_ref.shape)]
    if lse.dtype != np.float32 or lse.shape != lse_ref.shape:
        return problems + ["LSE is %s %s, expected float32 %s" % (lse.dtype, lse.shape, lse_ref.shape)]
    rel_l2, max_abs, lse_err, more = errors(o, o_ref, lse, lse_ref)
    tol_l2, tol_abs, tol_lse = TOLERANCE[p["dtype"]]
    problems += more
    if rel_l2 > tol_l2:
        problems.append("rel_l2 %.3g > %.3g" % (rel_l2, tol_l2))
    if tol_abs and max_abs > tol_abs:
        problems.append("max_abs %.3g > %.3g" % (max_abs, tol_abs))
    if lse_err > tol_lse:
        problems.append("LSE error %.3g > %.3g" % (lse_err, tol_lse))
    print("  %3d %s rel_l2 %.2g max_abs %.2g lse %.2g %s" % (
        index, describe(p), rel_l2, max_abs, lse_err, "ok" if not problems else "MISMATCH"))
    return problems


def describe(p):
    return "%s B=%d Hq=%d Hkv=%d Nq=%d Nkv=%d d=%d %s%s scale=%s files=%s" % (
        p["dtype"], p["batch"], p["heads_q"], p["heads_kv"], p["seq_q"], p["seq_kv"], p["head_dim"],
        p["layout"], " causal" if p["causal"] else "", p["scale"] or "default", p["file_type"])


def main():
    ap = argparse.ArgumentParser(description="flashport-run vs NumPy on random shapes")
    ap.add_argument("--run", required=True, help="path of flashport-run")
    ap.add_argument("--random", type=int, default=20, help="number of problems")
    ap.add_argument("--seed", type=int, default=None, help="replay a run (default: fresh)")
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--work", default=None, help="folder for the files (default: a temporary one)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print("random_shapes.py: seed %d (replay with --seed %d), %d problems on %s" % (
        seed, seed, args.random, args.backend))
    rng = np.random.default_rng(seed)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        for i in range(args.random):
            p = draw_problem(rng)
            problems = run_one(args, p, rng, work, i)
            if problems:
                failures += 1
                print("FAIL %d: %s: %s" % (i, describe(p), "; ".join(problems)))
    print("random_shapes.py: %d of %d problems disagree (seed %d)" % (failures, args.random, seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
