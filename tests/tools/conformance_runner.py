#!/usr/bin/env python3
"""flashport-conformance judges what it should: tampered fixtures must fail, broken fixtures
and bad filters must give their exit codes, the JSON and JUnit reports must be readable, and a
decline is unsupported only when its reason is honest about the features.

usage: conformance_runner.py --runner FLASHPORT_CONFORMANCE --data FIXTURE_DIR
                             --declining-module DIR

Works on a copy of a few cases of the generated fixtures and runs on the reference backend,
and on the test module in DIR (tests/fake_modules/declining.c, named hip), whose variants
decline in each way the runner tells apart.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np

CASES = ["seq17", "q300_kv100_causal", "nan_in_k"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--declining-module", required=True)
    args = ap.parse_args()
    failures = 0

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        with open(os.path.join(args.data, "manifest.txt")) as f:
            lines = f.readlines()
        header = [l for l in lines if not l.startswith("case ")]
        chosen = [l for l in lines if l.startswith("case ") and l.split()[1][5:] in CASES]
        if len(chosen) != len(CASES):
            print("conformance_runner.py: the fixtures lack one of %s" % CASES)
            return 1
        manifest = os.path.join(data, "manifest.txt")

        def write_manifest(extra=""):
            with open(manifest, "w") as f:
                f.writelines(header + chosen)
                f.write(extra)

        write_manifest()
        for c in CASES:
            shutil.copytree(os.path.join(args.data, c), os.path.join(data, c))

        def run(*extra):
            return subprocess.run([args.runner, "--data", data, "--backend", "reference"] + list(extra),
                                  capture_output=True, text=True)

        def expect(desc, proc, code, text=None):
            nonlocal failures
            out = proc.stdout + proc.stderr
            ok = proc.returncode == code and (text is None or text in out)
            print("%-44s exit %d (want %d) %s" % (desc, proc.returncode, code, "ok" if ok else "WRONG"))
            if not ok:
                failures += 1
                print("    looked for %r in:\n%s" % (text, out[-2000:]))

        def tamper(case, name, change):
            """Applies change to a copy of <case>/<name>.npy; returns a function restoring it."""
            path = os.path.join(data, case, name + ".npy")
            original = np.load(path)
            changed = original.copy()
            change(changed)
            np.save(path, changed)
            return lambda: np.save(path, original)

        report_json, report_xml = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.xml")
        expect("untouched fixtures pass", run("--json", report_json, "--junit", report_xml), 0,
               "3 passed, 0 failed")
        results = json.load(open(report_json))["results"]
        ok = len(results) == 3 and all(r["verdict"] == "pass" for r in results)
        suite = ET.parse(report_xml).getroot().find("testsuite")
        ok = ok and suite is not None and suite.get("tests") == "3" and suite.get("failures") == "0"
        print("%-44s %s" % ("JSON and JUnit reports", "ok" if ok else "WRONG"))
        failures += not ok

        def flat(i):
            return lambda a: a.reshape(-1).__setitem__(i, a.reshape(-1)[i] + 1e-3)

        restore = tamper("seq17", "o", flat(5))
        expect("expected O off by 1e-3 -> failure", run(), 1, "seq17 on reference")
        restore()
        restore = tamper("seq17", "o", lambda a: a.reshape(-1).__setitem__(9, np.nan))
        expect("expected NaN not produced -> failure", run(), 1, "not NaN where NaN is expected")
        restore()
        restore = tamper("nan_in_k", "o", lambda a: a.__setitem__(np.isnan(a), 0.0))
        expect("NaN where finite expected -> failure", run(), 1, "NaN/inf where the expected value is finite")
        restore()
        restore = tamper("q300_kv100_causal", "lse", lambda a: a.__setitem__(np.isneginf(a), 1.0))
        expect("-inf LSE where finite expected -> failure", run(), 1, "q300_kv100_causal on reference")
        restore()
        restore = tamper("q300_kv100_causal", "lse", lambda a: a.__setitem__((0, 0, 250), -np.inf))
        expect("finite LSE where -inf expected -> failure", run(), 1, "differ from an expected NaN or -inf")
        restore()
        expect("restored fixtures pass again", run(), 0, "3 passed")

        expect("--cases glob selects one case", run("--cases", "seq1*"), 0, "1 checks: 1 passed")
        expect("--cases matching nothing -> 2", run("--cases", "no_such_case"), 2, "matches no case")
        expect("unknown --backend -> 2", subprocess.run(
            [args.runner, "--data", data, "--backend", "warp_drive"], capture_output=True, text=True),
            2, "warp_drive")
        expect("unknown --kernel -> 2", run("--kernel", "no_such_kernel"), 2, "no backend and kernel")
        expect("bad option -> 2", run("--frobnicate"), 2, "unknown option")

        restore = tamper("seq17", "q", lambda a: None)
        np.save(os.path.join(data, "seq17", "q.npy"), np.zeros((17, 64), dtype=np.float32))
        expect("rank-2 fixture -> 3", run(), 3, "expected rank 4")
        np.save(os.path.join(data, "seq17", "q.npy"), np.zeros((1, 1, 16, 64), dtype=np.float32))
        expect("fixture shape differs from manifest -> 3", run(), 3, "the manifest says")
        restore()
        write_manifest("case name=extra dtype=f32 colour=blue\n")
        expect("malformed manifest line -> 3", run(), 3, "unknown key or invalid value")
        write_manifest()
        os.remove(manifest)
        expect("missing manifest -> 3", run(), 3, "cannot open")
        expect("--help -> 0", subprocess.run([args.runner, "--help"], capture_output=True, text=True),
               0, "exit status")

        # Declines: a window case and a dense one on each variant of the declining module.
        decline_data = os.path.join(tmp, "declines")
        os.makedirs(decline_data)
        with open(os.path.join(decline_data, "manifest.txt"), "w") as f:
            f.writelines(header + [l for l in lines if l.split()[1] in
                                   ("name=seq17", "name=window_zero", "name=window_zero_bwd")])
        for c in ("seq17", "window_zero", "window_zero_bwd"):
            shutil.copytree(os.path.join(args.data, c), os.path.join(decline_data, c))
        env = dict(os.environ, FLASHPORT_BACKEND_PATH=args.declining_module)
        report = os.path.join(tmp, "declines.json")

        def verdicts(kernel):
            subprocess.run([args.runner, "--data", decline_data, "--backend", "hip", "--kernel",
                            kernel, "--cases", "seq17,window_zero,window_zero_bwd", "--json", report],
                           capture_output=True, text=True, env=env)
            return {r["case"]: (r["verdict"], r["detail"]) for r in json.load(open(report))["results"]}

        def expect_verdict(desc, got, verdict, text):
            nonlocal failures
            ok = got[0] == verdict and text in got[1]
            print("%-44s %s" % (desc, "ok" if ok else "WRONG: %s (%s)" % got))
            failures += not ok

        got = verdicts("silent_window")
        expect_verdict("window declined naming no feature -> fail", got["window_zero"], "fail",
                       "declined without naming a feature of the case (window)")
        got = verdicts("names_alibi")
        expect_verdict("reason names an unused feature -> fail", got["window_zero"], "fail",
                       "declined naming ALiBi, which the case does not use")
        expect_verdict("same on a dense case -> fail", got["seq17"], "fail", "naming ALiBi")
        got = verdicts("too_small")
        expect_verdict("declined with or without features -> unsup", got["window_zero"],
                       "unsupported", "needs more registers")
        expect_verdict("dense case declined by size -> unsup", got["seq17"], "unsupported",
                       "needs more registers")
        # A backward-only variant: the same problem without the window is planned as a backward
        # pass, and the reason reported is the backward plan's.
        got = verdicts("backward_silent_window")
        expect_verdict("backward window declined silently -> fail", got["window_zero_bwd"], "fail",
                       "declined without naming a feature of the case (window)")
        got = verdicts("backward_too_small")
        expect_verdict("backward declined by size -> unsup", got["window_zero_bwd"], "unsupported",
                       "needs more registers")

    print("conformance_runner.py: %d wrong" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
