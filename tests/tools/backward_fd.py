#!/usr/bin/env python3
"""The backward references against finite differences, and flashport-run --backward against
the NumPy one.

usage: backward_fd.py --run FLASHPORT_RUN [--backend SPEC ...]

1. On tiny float64 problems, one per feature and one with all of them (GQA, causal with
   Nq != Nkv, window, softcap, ALiBi per head and per batch, bias with masked rows, sinks,
   packed sequences), the central difference (L(x + h) - L(x - h)) / 2h of L = sum(dO * O),
   O from conformance/reference_numpy.py's forward, matches its attention_v2_backward for
   every element of Q, K and V.
2. The same problems through flashport-run --backward on each backend (the reference by
   default: the C oracle; ctest adds cpu_simd and opencl where built), from float32 files: dQ,
   dK and dV match NumPy's gradients of the same float32 values, and the tool's O and LSE its
   forward.
Exits 1 on any mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conformance"))
import reference_numpy as ref  # noqa: E402

FD_TOL = 1e-6   # float64 central differences with h = 1e-5: truncation near 1e-10
RUN_TOL = {"reference": 2e-5, "cpu_simd": 1e-4, "opencl": 1e-4}  # relative L2, float32 O, LSE and gradients


def problems():
    """(name, arrays, options) of every problem, drawn from one fixed seed."""
    rng = np.random.default_rng(20261201)

    def dense(b, hq, hkv, nq, nkv, d):
        return dict(q=rng.standard_normal((b, hq, nq, d)), k=rng.standard_normal((b, hkv, nkv, d)),
                    v=rng.standard_normal((b, hkv, nkv, d)), do=rng.standard_normal((b, hq, nq, d)))

    out = []
    out.append(("dense GQA", dense(2, 4, 2, 5, 7, 6), {}))
    out.append(("causal Nq > Nkv", dense(1, 3, 1, 6, 4, 5), dict(causal=True)))
    out.append(("window", dense(1, 2, 2, 6, 9, 4), dict(window_left=2, window_right=1)))
    out.append(("softcap", dense(1, 2, 1, 5, 6, 4), dict(softcap=1.5, scale=1.3)))
    out.append(("alibi per head", dense(1, 2, 1, 5, 6, 4),
                dict(alibi_slopes=np.float32([0.25, 0.5]), causal=True)))
    out.append(("alibi per batch", dense(2, 2, 2, 4, 6, 4),
                dict(alibi_slopes=np.float32([[0.1, 0.2], [0.3, 0.4]]))))
    bias = rng.standard_normal((1, 2, 5, 6))
    bias[0, :, 1, :] = -np.inf
    bias[0, 0, 3, ::2] = -np.inf
    out.append(("bias, masked row", dense(1, 2, 1, 5, 6, 4), dict(bias=bias)))
    out.append(("sinks", dense(1, 2, 1, 5, 6, 4), dict(sinks=np.float32([0.5, 2.0]))))
    cu_q, cu_kv = np.int32([0, 3, 3, 8]), np.int32([0, 4, 6, 13])
    packed = dict(q=rng.standard_normal((1, 2, 9, 4)), k=rng.standard_normal((1, 1, 14, 4)),
                  v=rng.standard_normal((1, 1, 14, 4)), do=rng.standard_normal((1, 2, 9, 4)))
    out.append(("packed, causal", packed, dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, causal=True)))
    every = {k: v.copy() for k, v in packed.items()}
    out.append(("every feature", every,
                dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, window_left=3, window_right=1,
                     softcap=2.0, alibi_slopes=np.float32([[0.1, 0.2], [0.3, 0.4], [0.2, 0.1]]),
                     bias=rng.standard_normal((3, 2, 5, 7)), sinks=np.float32([0.3, -0.5]),
                     layout="bnhd")))
    for name, arrays, opts in out:
        if opts.get("layout") == "bnhd":
            for t in arrays:
                arrays[t] = ref.from_bhnd(arrays[t], "bnhd")
    return out


def forward(arrays, opts):
    o, lse = ref.attention_v2(arrays["q"], arrays["k"], arrays["v"], **opts)
    return o, lse


def loss(arrays, opts):
    o, _ = forward(arrays, opts)
    return float(np.sum(arrays["do"] * o))


def finite_differences(name, arrays, opts):
    grads = ref.attention_v2_backward(arrays["q"], arrays["k"], arrays["v"], arrays["do"], **opts)
    h, worst = 1e-5, 0.0
    for t, grad in zip("qkv", grads):
        x = arrays[t]
        fd = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            x0 = x[i]
            x[i] = x0 + h
            up = loss(arrays, opts)
            x[i] = x0 - h
            down = loss(arrays, opts)
            x[i] = x0
            fd[i] = (up - down) / (2 * h)
        worst = max(worst, float(np.max(np.abs(fd - grad)) / max(np.max(np.abs(grad)), 1e-3)))
    ok = worst < FD_TOL
    print("  %-20s NumPy backward vs finite differences: %.1e %s" % (name, worst, "ok" if ok else "MISMATCH"))
    return ok


def through_tool(run, backend, name, arrays, opts, work):
    layout = opts.get("layout", "bhnd")
    arrays32 = {t: a.astype(np.float32) for t, a in arrays.items()}
    files = {}
    for t, a in arrays32.items():
        files[t] = os.path.join(work, t + ".npy")
        store = a
        if "cu_seqlens_q" in opts:  # packed tensors are rank 3 [total, H, d] for the tool
            store = np.transpose(ref.to_bhnd(a, layout)[0], (1, 0, 2))
        np.save(files[t], np.ascontiguousarray(store))
    cmd = [run, "--backward", "--backend", backend, "--layout", layout]
    for t in "qkv":
        cmd += ["--" + t, files[t]]
    outs = {t: os.path.join(work, "out_" + t + ".npy") for t in ("o", "lse", "dq", "dk", "dv")}
    cmd += ["--do", files["do"], "--out", outs["o"], "--lse", outs["lse"], "--dq", outs["dq"],
            "--dk", outs["dk"], "--dv", outs["dv"]]
    for key, flag in (("alibi_slopes", "--alibi"), ("sinks", "--sinks"), ("bias", "--bias"),
                      ("cu_seqlens_q", "--cu-seqlens-q"), ("cu_seqlens_kv", "--cu-seqlens-kv")):
        if key in opts:
            path = os.path.join(work, key + ".npy")
            value = opts[key]
            np.save(path, value.astype(np.float32) if key == "bias" else value)
            cmd += [flag, path]
    if opts.get("causal"):
        cmd.append("--causal")
    if "window_left" in opts:
        cmd += ["--window", "%d,%d" % (opts["window_left"], opts["window_right"])]
    for key in ("softcap", "scale"):
        if key in opts:
            cmd += ["--" + key, repr(opts[key])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print("  %-20s %s: flashport-run exited %d: %s" % (name, backend, proc.returncode, proc.stderr.strip()))
        return False
    rounded = dict(opts)
    if "bias" in rounded:
        rounded["bias"] = rounded["bias"].astype(np.float32)
    want = ref.attention_v2_backward(arrays32["q"], arrays32["k"], arrays32["v"], arrays32["do"], **rounded)
    o_ref, lse_ref = forward({t: arrays32[t] for t in "qkv"}, rounded)
    got = []
    for t in ("dq", "dk", "dv"):
        g = np.load(outs[t]).astype(np.float64)
        if "cu_seqlens_q" in opts:
            g = ref.from_bhnd(np.transpose(g, (1, 0, 2))[None], layout)
        got.append(g)
    errs = []
    for g, w in zip(got, want):
        errs.append(float(np.sqrt(np.sum((g - w) ** 2) / np.sum(w * w))))
    o = np.load(outs["o"]).astype(np.float64)
    if "cu_seqlens_q" in opts:
        o = ref.from_bhnd(np.transpose(o, (1, 0, 2))[None], layout)
    errs.append(float(np.sqrt(np.sum((o - o_ref) ** 2) / np.sum(o_ref ** 2))))
    tol = RUN_TOL.get(backend, 1e-4)
    ok = max(errs) < tol
    print("  %-20s %s: dQ %.1e dK %.1e dV %.1e O %.1e %s" % (
        name, backend, errs[0], errs[1], errs[2], errs[3], "ok" if ok else "MISMATCH"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--backend", action="append", default=None)
    args = ap.parse_args()
    backends = args.backend or ["reference"]
    ok = True
    with tempfile.TemporaryDirectory() as work:
        for name, arrays, opts in problems():
            ok &= finite_differences(name, arrays, opts)
            for backend in backends:
                ok &= through_tool(args.run, backend, name, arrays, opts, work)
    print("backward_fd.py: %s" % ("every check passed" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
