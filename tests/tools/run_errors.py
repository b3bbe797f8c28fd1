#!/usr/bin/env python3
"""flashport-run's exit codes and messages on bad command lines and bad input files.

usage: run_errors.py --run FLASHPORT_RUN

Every bad input must give its documented exit code (2 usage, 3 input files, 4 flashport), a
message on stderr that names the cause, and no output file.
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

        base = ["--q", f("q.npy"), "--k", f("k.npy"), "--v", f("v.npy"), "--out", f("o.npy")]

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
        ]
        for desc, argv, code, text in cases:
            if os.path.exists(f("o.npy")):
                os.remove(f("o.npy"))
            p = subprocess.run([args.run] + argv, capture_output=True, text=True)
            ok = p.returncode == code and text in p.stderr and not os.path.exists(f("o.npy"))
            print("%-26s exit %d (want %d) %s" % (desc, p.returncode, code, "ok" if ok else "WRONG"))
            if not ok:
                failures += 1
                print("    stderr: %s" % p.stderr.strip())

        p = subprocess.run([args.run, "--help"], capture_output=True, text=True)
        ok = p.returncode == 0 and "exit status" in p.stdout and "--layout" in p.stdout
        print("%-26s exit %d (want 0) %s" % ("--help", p.returncode, "ok" if ok else "WRONG"))
        failures += not ok

        p = subprocess.run([args.run] + base + ["--backend", "reference"], capture_output=True, text=True)
        ok = p.returncode == 0 and np.load(f("o.npy")).shape == (1, 4, 9, 8)
        print("%-26s exit %d (want 0) %s" % ("valid run", p.returncode, "ok" if ok else "WRONG"))
        failures += not ok
    print("run_errors.py: %d wrong" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
