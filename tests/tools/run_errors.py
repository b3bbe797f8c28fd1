#!/usr/bin/env python3
"""flashport-run's exit codes and messages on bad command lines and bad input files.

usage: run_errors.py --run FLASHPORT_RUN

Every bad input must give its documented exit code (2 usage, 3 input files or an invalid
problem, 4 flashport, 5 a table out of range), a message on stderr that names the cause, and no
output file.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        def f(name):
            return os.path.join(d, name)

        rng = np.random.default_rng(7)
        np.save(f("q.npy"), rng.standard_normal((1, 4, 9, 8)).astype(np.float32))
        np.save(f("k.npy"), rng.standard_normal((1, 2, 11, 8)).astype(np.float32))
        np.save(f("v.npy"), rng.standard_normal((1, 2, 11, 8)).astype(np.float32))
        np.save(f("k3.npy"), rng.standard_normal((1, 3, 11, 8)).astype(np.float32))
        np.save(f("v_short.npy"), rng.standard_normal((1, 2, 10, 8)).astype(np.float32))
        np.save(f("q_d7.npy"), rng.standard_normal((1, 4, 9, 7)).astype(np.float32))
        np.save(f("rank3.npy"), rng.standard_normal((4, 9, 8)).astype(np.float32))
        np.save(f("f64.npy"), rng.standard_normal((1, 4, 9, 8)))
        np.save(f("int.npy"), np.ones((1, 4, 9, 8), dtype=np.int32))
        np.save(f("zero_seq.npy"), np.ones((1, 4, 0, 8), dtype=np.float32))
        with open(f("q.npy"), "rb") as src:
            whole = src.read()
        with open(f("truncated.npy"), "wb") as dst:
            dst.write(whole[:-5])
        with open(f("garbage.npy"), "wb") as dst:
            dst.write(b"this is not an npy file at all")
        np.save(f("fortran.npy"), np.asfortranarray(rng.standard_normal((1, 4, 9, 8)).astype(np.float32)))

        # Packed (varlen) and paged versions of the same sizes, and their tables.
        def i32(name, values):
            np.save(f(name), np.array(values, dtype=np.int32))
            return f(name)

        np.save(f("qp.npy"), rng.standard_normal((9, 4, 8)).astype(np.float32))
        np.save(f("kp.npy"), rng.standard_normal((11, 2, 8)).astype(np.float32))
        np.save(f("pages.npy"), rng.standard_normal((3, 4, 2, 8)).astype(np.float32))
        np.save(f("u8.npy"), np.zeros((1, 4, 9, 8), dtype=np.uint8))
        np.save(f("cu_float.npy"), np.array([0, 4, 9], dtype=np.float32))
        np.save(f("slopes2.npy"), np.ones(2, dtype=np.float32))
        np.save(f("bias_bad.npy"), np.zeros((1, 4, 9, 10), dtype=np.float32))
        np.save(f("bias_i32.npy"), np.zeros((1, 1, 9, 11), dtype=np.int32))
        base = ["--q", f("q.npy"), "--k", f("k.npy"), "--v", f("v.npy"), "--out", f("o.npy")]
        packed = ["--q", f("qp.npy"), "--k", f("kp.npy"), "--v", f("kp.npy"), "--out", f("o.npy"),
                  "--cu-seqlens-q", i32("cu_q.npy", [0, 4, 9]),
                  "--cu-seqlens-kv", i32("cu_kv.npy", [0, 5, 11])]
        paged = ["--q", f("q.npy"), "--k", f("pages.npy"), "--v", f("pages.npy"), "--out", f("o.npy"),
                 "--block-table", i32("table.npy", [[2, 0, 1]]), "--seqlens-kv", i32("lens.npy", [11])]
        fp8 = ["--q", f("u8.npy"), "--k", f("u8.npy"), "--v", f("u8.npy"), "--out", f("o.npy"),
               "--dtype", "fp8_e4m3"]

        grads = ["--dq", f("dq.npy"), "--dk", f("dk.npy"), "--dv", f("dv.npy")]

        def backward(args, d_o=f("q.npy")):
            return args + ["--backward", "--do", d_o] + grads

        def with_table(args, flag, path):
            out = list(args)
            out[out.index(flag) + 1] = path
            return out

        def replace(flag, value):
            out = list(base)
            out[out.index(flag) + 1] = value
            return out

        cases = [
            # (description, arguments, exit code, text the message must contain)
            ("no arguments", [], 2, "required"),
            ("unknown option", base + ["--frobnicate"], 2, "unknown option"),
            ("bad layout", base + ["--layout", "nhbd"], 2, "not one of"),
            ("bad scale", base + ["--scale", "abc"], 2, "not a finite number"),
            ("missing Q file", replace("--q", f("nope.npy")), 3, "cannot open"),
            ("rank-3 Q", replace("--q", f("rank3.npy")), 3, "expected rank 4"),
            ("truncated Q", replace("--q", f("truncated.npy")), 3, "truncated"),
            ("not an npy file", replace("--k", f("garbage.npy")), 3, "not a .npy file"),
            ("float64 input", replace("--v", f("f64.npy")), 3, "float64"),
            ("int32 input", replace("--v", f("int.npy")), 3, "int32 input"),
            ("Fortran order", replace("--q", f("fortran.npy")), 3, "Fortran"),
            ("K and V differ", replace("--v", f("v_short.npy")), 3, "same shape"),
            ("head_dim differs", replace("--q", f("q_d7.npy")), 3, "head_dim"),
            ("Hq not a multiple of Hkv",
             ["--q", f("q.npy"), "--k", f("k3.npy"), "--v", f("k3.npy"), "--out", f("o.npy")], 3,
             "valid problem"),
            ("empty sequence", replace("--q", f("zero_seq.npy")), 3, "valid problem"),
            ("unwritable output", replace("--out", f("no/such/dir/o.npy")), 3, "cannot create"),
            ("unknown backend", base + ["--backend", "warp_drive"], 4, "warp_drive"),
            ("unknown kernel", base + ["--backend", "reference", "--kernel", "nope"], 4, "nope"),
            # the feature flags: command line
            ("--window without R", base + ["--window", "3"], 2, "--window '3'"),
            ("--window below -1", base + ["--window", "-2,0"], 2, "each -1"),
            ("negative --softcap", base + ["--softcap", "-1"], 2, "--softcap"),
            ("block table alone", base + ["--block-table", f("table.npy")], 2,
             "both --block-table and --seqlens-kv"),
            ("cu-seqlens-kv alone", base + ["--cu-seqlens-kv", f("cu_kv.npy")], 2,
             "needs --cu-seqlens-q"),
            ("cu-seqlens-q alone", base + ["--cu-seqlens-q", f("cu_q.npy")], 2,
             "needs --cu-seqlens-kv"),
            ("packed and paged K/V", packed + ["--block-table", f("table.npy"), "--seqlens-kv",
                                              f("lens.npy")], 2, "not both"),
            ("descale of f32 inputs", base + ["--q-descale", "0.5"], 2, "for FP8 inputs"),
            ("--descale-block, numbers", fp8 + ["--descale-block", "4", "--q-descale", "2"], 2,
             "as .npy files"),
            # the feature flags: files, and problems the library's validator refuses
            ("uint8 without FP8 dtype", replace("--q", f("u8.npy")), 3, "FP8 bytes"),
            ("float input, FP8 dtype", base + ["--dtype", "fp8_e4m3"], 3, "uint8 files"),
            ("window contradicts causal", base + ["--causal", "--window", "2,3"], 3,
             "window_right"),
            ("--out-dtype of f32 inputs", base + ["--out-dtype", "f16"], 3, "out_dtype"),
            ("float cu_seqlens", with_table(packed, "--cu-seqlens-q", f("cu_float.npy")), 3,
             "tables are int32"),
            ("dense Q with cu_seqlens", with_table(packed, "--q", f("q.npy")), 3, "expected rank 3"),
            ("batch of cu_seqlens differ",
             with_table(packed, "--cu-seqlens-kv", i32("cu_kv3.npy", [0, 2, 5, 11])), 3,
             "batch 2 (--cu-seqlens-q) vs 3 (--cu-seqlens-kv)"),
            ("table rows vs seqlens",
             with_table(paged, "--seqlens-kv", i32("lens2.npy", [11, 3])), 3, "one per sequence"),
            ("bias of another shape", base + ["--bias", f("bias_bad.npy")], 3, "--bias"),
            ("int32 bias", base + ["--bias", f("bias_i32.npy")], 3, "expected float32 or float16"),
            ("ALiBi of 2 heads", base + ["--alibi", f("slopes2.npy")], 3, "--alibi"),
            ("sinks of 2 heads", base + ["--sinks", f("slopes2.npy")], 3, "--sinks"),
            ("block descales' shape", fp8 + ["--descale-block", "4"] + [
                x for t in "qkv" for x in ("--%s-descale" % t, f("slopes2.npy"))], 3,
             "ceil(seq / 4)"),
            # the backward pass
            ("--do without --backward", base + ["--do", f("q.npy")], 2, "go with --backward"),
            ("--deterministic alone", base + ["--deterministic"], 2, "go with --backward"),
            ("--backward without --dq", base + ["--backward", "--do", f("q.npy")] + grads[2:], 2,
             "needs --do, --dq, --dk and --dv"),
            ("dO of another shape", backward(base, f("q_d7.npy")), 3, "in Q's (and O's) shape"),
            ("float64 dO", backward(base, f("f64.npy")), 3, "float32 or float16"),
            ("paged backward", backward(paged) + ["--backend", "reference"], 4,
             "backward pass of paged KV cache"),
            ("FP8 backward", backward(fp8) + ["--backend", "cpu_simd"], 4,
             "backward pass of FP8 inputs"),
            # table contents: the library's FLASHPORT_ERROR_BAD_TABLE, named by its message
            ("cu_seqlens_q decreasing", with_table(packed, "--cu-seqlens-q", i32("c1.npy", [0, 6, 4])),
             5, "cu_seqlens_q is not monotonic"),
            ("cu_seqlens_q negative", with_table(packed, "--cu-seqlens-q", i32("c2.npy", [-1, 4, 9])),
             5, "cu_seqlens_q[0] is -1"),
            ("cu_seqlens_kv overrun", with_table(packed, "--cu-seqlens-kv", i32("c3.npy", [0, 5, 12])),
             5, "overruns the packed tensor's 11 rows"),
            ("seqlens_kv past the cache", with_table(paged, "--seqlens-kv", i32("l1.npy", [13])),
             5, "seqlens_kv[0] is 13"),
            ("seqlens_kv negative", with_table(paged, "--seqlens-kv", i32("l2.npy", [-2])),
             5, "seqlens_kv[0] is -2"),
            ("block_table past the pages", with_table(paged, "--block-table", i32("t1.npy", [[2, 3, 1]])),
             5, "block_table[0][1] is 3, outside [0, num_pages = 3)"),
            ("block_table negative", with_table(paged, "--block-table", i32("t2.npy", [[2, 0, -1]])),
             5, "block_table[0][2] is -1"),
        ]
        outputs = [f(n) for n in ("o.npy", "dq.npy", "dk.npy", "dv.npy")]
        for desc, argv, code, text in cases:
            for path in outputs:
                if os.path.exists(path):
                    os.remove(path)
            p = subprocess.run([args.run] + argv, capture_output=True, text=True)
            ok = p.returncode == code and text in p.stderr and \
                not any(os.path.exists(path) for path in outputs)
            if code == 5:
                ok = ok and "bad table content" in p.stderr
            print("%-30s exit %d (want %d) %s" % (desc, p.returncode, code, "ok" if ok else "WRONG"))
            if not ok:
                failures += 1
                print("    stderr: %s" % p.stderr.strip())

        p = subprocess.run([args.run, "--help"], capture_output=True, text=True)
        ok = p.returncode == 0 and "exit status" in p.stdout and all(
            flag in p.stdout for flag in ("--layout", "--window", "--softcap", "--alibi", "--bias",
                                          "--sinks", "--cu-seqlens-q", "--cu-seqlens-kv",
                                          "--block-table", "--seqlens-kv", "--out-dtype",
                                          "--q-descale", "--descale-block", "FLASHPORT_ERROR_BAD_TABLE",
                                          "--backward", "--do", "--dq", "--dk", "--dv",
                                          "--deterministic"))
        print("%-30s exit %d (want 0) %s" % ("--help", p.returncode, "ok" if ok else "WRONG"))
        failures += not ok

        p = subprocess.run([args.run] + base + ["--backend", "reference"], capture_output=True, text=True)
        ok = p.returncode == 0 and np.load(f("o.npy")).shape == (1, 4, 9, 8)
        print("%-30s exit %d (want 0) %s" % ("valid run", p.returncode, "ok" if ok else "WRONG"))
        failures += not ok

        p = subprocess.run([args.run] + backward(base) + ["--backend", "reference"],
                           capture_output=True, text=True)
        ok = p.returncode == 0 and np.load(f("dq.npy")).shape == (1, 4, 9, 8) and \
            np.load(f("dk.npy")).shape == (1, 2, 11, 8) and np.load(f("dv.npy")).shape == (1, 2, 11, 8)
        print("%-30s exit %d (want 0) %s" % ("valid backward run", p.returncode, "ok" if ok else "WRONG"))
        failures += not ok
    print("run_errors.py: %d wrong" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
