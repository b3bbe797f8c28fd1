#!/usr/bin/env python3
"""What a flashport.attention call costs over the C call it makes, per call, on the host.

For each shape, three loops of back-to-back calls on the same arrays, timed on the host clock
(the GPU is synchronised before each loop and after it, not inside):
  c        flashport_attention_run (GPU arrays) or _run_host (host arrays) on buffers wrapped
           once, as a C program calls it: the library call alone (flashport._C.c_call_seconds)
  py_out   flashport.attention(q, k, v, out=out): the Python call, output given
  py_alloc flashport.attention(q, k, v): the Python call, allocating the output
Each loop runs `--calls` calls, `--rounds` times, interleaved; the medians and the minima are
reported, with the overhead py - c of each (on a shared machine the minima are the steadier).
On a GPU the loops measure launch cost as long as the GPU keeps up; the "gpu" column (the C
loop plus synchronisation, per call) says whether it did: when gpu exceeds c, the kernel, not
the host, set the pace of that loop. On a CPU backend each call includes the computation, and
the overhead is the difference of two much larger numbers.

usage: python_overhead.py [--array torch|numpy|cupy] [--device cuda|cpu] [--backend SPEC]
                          [--dtype f16|bf16|f32] [--shape B,H,Nq,Nkv,d ...] [--calls N]
                          [--rounds R] [--machine NAME] [--json FILE]
Exit status: 0 success; 2 bad command line; 3 what the run needs is not there.
"""
import argparse
import datetime
import json
import platform
import statistics
import sys
import time

import flashport
from flashport import _C

DEFAULT_SHAPES = ["1,8,128,128,64", "1,8,1,128,64"]  # the shape, and one decode step


def make_arrays(args, b, h, nq, nkv, d):
    if args.array == "torch":
        import torch
        dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
        dev = "cuda" if args.device == "cuda" else "cpu"
        q = torch.randn(b, nq, h, d, dtype=dt, device=dev)
        k, v = (torch.randn(b, nkv, h, d, dtype=dt, device=dev) for _ in range(2))
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        return q, k, v, torch.empty_like(q), sync
    if args.array == "cupy":
        import cupy
        dt = {"f16": cupy.float16, "f32": cupy.float32}[args.dtype]
        q = cupy.random.standard_normal((b, nq, h, d)).astype(dt)
        k, v = (cupy.random.standard_normal((b, nkv, h, d)).astype(dt) for _ in range(2))
        return q, k, v, cupy.empty_like(q), cupy.cuda.get_current_stream().synchronize
    import numpy as np
    dt = {"f16": np.float16, "f32": np.float32}[args.dtype]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, nq, h, d)).astype(dt)
    k, v = (rng.standard_normal((b, nkv, h, d)).astype(dt) for _ in range(2))
    return q, k, v, np.empty_like(q), lambda: None


def measure(args, shape_text):
    b, h, nq, nkv, d = (int(x) for x in shape_text.split(","))
    q, k, v, out, sync = make_arrays(args, b, h, nq, nkv, d)
    backend = args.backend
    n = args.calls
    # flashport._C.c_call_seconds takes attention's options positionally (flashport/_attention.py)
    options = (False, None, None, None, None, None, None, None, None, None, None, None, None,
               "bnhd", backend, None)
    attention = flashport.attention

    def c_loop():
        return _C.c_call_seconds(n, q, k, v, *options, out)

    def py_out():
        t = time.perf_counter()
        for _ in range(n):
            attention(q, k, v, backend=backend, out=out)
        return time.perf_counter() - t

    def py_alloc():
        t = time.perf_counter()
        for _ in range(n):
            attention(q, k, v, backend=backend)
        return time.perf_counter() - t

    def gpu_paced():
        sync()
        t = time.perf_counter()
        _C.c_call_seconds(n, q, k, v, *options, out)
        sync()
        return time.perf_counter() - t

    loops = {"c": c_loop, "py_out": py_out, "py_alloc": py_alloc, "gpu": gpu_paced}
    for f in loops.values():  # warm up: contexts, kernels, allocator caches
        f()
    samples = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name, f in loops.items():
            sync()
            samples[name].append(f() / n * 1e6)
            sync()
    med = {name: statistics.median(v) for name, v in samples.items()}
    low = {name: min(v) for name, v in samples.items()}
    plan = flashport.plan(q, k, v, backend=backend)
    return {
        "shape": dict(batch=b, heads=h, seq_q=nq, seq_kv=nkv, head_dim=d, dtype=args.dtype,
                      layout="bnhd"),
        "backend": plan.backend, "kernel": plan.kernel,
        "us_per_call": {k: round(v, 3) for k, v in med.items()},
        "us_per_call_min": {k: round(v, 3) for k, v in low.items()},
        "overhead_us": {"out_given": round(med["py_out"] - med["c"], 3),
                        "allocating": round(med["py_alloc"] - med["c"], 3)},
        "overhead_us_min": {"out_given": round(low["py_out"] - low["c"], 3),
                            "allocating": round(low["py_alloc"] - low["c"], 3)},
        "samples_us": {k: [round(x, 3) for x in v] for k, v in samples.items()},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit status: 0 success; 2 bad command line; 3 what the "
                                       "run needs is not there.")
    p.add_argument("--array", choices=["torch", "numpy", "cupy"], default="torch")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--backend", default=None, help="backend spec (host arrays); default: as "
                   "flashport.attention chooses")
    p.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    p.add_argument("--shape", action="append", help="B,H,Nq,Nkv,d (repeatable; default: %s)"
                   % " and ".join(DEFAULT_SHAPES))
    p.add_argument("--calls", type=int, default=200, help="calls per timed loop (default 200)")
    p.add_argument("--rounds", type=int, default=15, help="timed loops of each kind (default 15)")
    p.add_argument("--machine", default=platform.node(), help="machine name for the record")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args()
    if args.array == "numpy" and args.device == "cuda":
        args.device = "cpu"
    try:
        results = [measure(args, s) for s in (args.shape or DEFAULT_SHAPES)]
    except (ImportError, flashport.BackendUnavailableError) as e:
        print("python_overhead.py: %s" % e, file=sys.stderr)
        return 3
    doc = {"schema": "flashport-python-overhead/1", "flashport_version": flashport.__version__,
           "python": platform.python_version(), "machine": args.machine,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "array": args.array, "device": args.device, "calls": args.calls,
           "rounds": args.rounds, "results": results}
    if args.array == "torch":
        import torch
        doc["torch"] = torch.__version__
    print("%-22s %-9s %-12s %-6s %9s %9s %9s %9s %11s %11s" % (
        "shape B,H,Nq,Nkv,d", "backend", "kernel", "stat", "c us", "py_out", "py_alloc", "gpu",
        "over(out)", "over(alloc)"))
    for r in results:
        s = r["shape"]
        for stat, u, o in (("median", r["us_per_call"], r["overhead_us"]),
                           ("min", r["us_per_call_min"], r["overhead_us_min"])):
            print("%-22s %-9s %-12s %-6s %9.2f %9.2f %9.2f %9.2f %11.2f %11.2f" % (
                "%d,%d,%d,%d,%d %s" % (s["batch"], s["heads"], s["seq_q"], s["seq_kv"],
                                       s["head_dim"], s["dtype"]),
                r["backend"], (r["kernel"] or "-")[:12], stat, u["c"], u["py_out"],
                u["py_alloc"], u["gpu"], o["out_given"], o["allocating"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
