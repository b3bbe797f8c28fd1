#!/usr/bin/env python3
"""The conformance suite checks every feature it claims to: no case's fixture is missing, no
feature is dropped on the way from cases.py to the library, and the runner refuses fixtures
that do not match their manifest line.

usage: conformance_fixtures.py --runner FLASHPORT_CONFORMANCE --data FIXTURE_DIR

1. The manifest lists exactly the cases of conformance/cases.py, and each case's folder holds
   exactly the .npy files generate.needed_files names for it.
2. flashport-conformance --list reports, for every case, the features of the descriptor it
   builds; they must be the features cases.features gives the case (a field the runner reads
   but does not pass on shows up here).
3. Every API v2 forward feature has a case of its own and appears in a combination.
4. On a copy of a few cases: a missing table, bias or descale file, and a manifest line that
   drops a feature whose array is still there, each make the runner exit 3 naming the file.
5. A manifest line that drops or changes a feature with no array of its own (window, softcap,
   causal, FP8 format) makes the case fail on the reference backend: the
   expected output holds the feature, so the runner must pass it on for a pass.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "conformance"))
import cases as case_list  # noqa: E402
import generate  # noqa: E402

FEATURES = ["window", "softcap", "alibi", "bias", "sinks", "varlen", "paged", "fp8"]
# A case per file kind that step 4 removes: (case, file).
REMOVED = [("paged_varlen_q_page5", "block_table.npy"), ("paged_varlen_q_page5", "cu_seqlens_q.npy"),
           ("varlen_gqa", "cu_seqlens_kv.npy"), ("combo_fp8_everything", "bias.npy"),
           ("combo_fp8_everything", "k_descale.npy"), ("combo_fp8_everything", "alibi_slopes.npy"),
           ("combo_fp8_everything", "seqlens_kv.npy"), ("sinks", "sinks.npy")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    problems = []

    with open(os.path.join(args.data, "manifest.txt")) as f:
        lines = f.readlines()
    listed = [l.split()[1][len("name="):] for l in lines if l.startswith("case ")]
    names = [c["name"] for c in case_list.CASES]
    if listed != names:
        problems.append("the manifest lists %s, cases.py %s" % (
            sorted(set(listed) ^ set(names)) or "the same cases in another order", names))
    for c in case_list.CASES:
        folder = os.path.join(args.data, c["name"])
        have = set(os.listdir(folder)) if os.path.isdir(folder) else set()
        want = set(generate.needed_files(c))
        if want - have:
            problems.append("%s: fixture files missing: %s" % (c["name"], sorted(want - have)))
        if have - want:
            problems.append("%s: files no feature of the case uses: %s" % (c["name"], sorted(have - want)))

    proc = subprocess.run([args.runner, "--data", args.data, "--backend", "reference", "--list"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        problems.append("--list exited %d: %s" % (proc.returncode, proc.stderr.strip()))
    reported = {}
    for line in proc.stdout.splitlines():
        if line.startswith("case "):
            name, features = line.split()[1], line.split()[2]
            reported[name] = [] if features == "features=none" else features[len("features="):].split(",")
    for c in case_list.CASES:
        if reported.get(c["name"]) != case_list.features(c):
            problems.append("%s: the runner asks for %s, the case for %s" % (
                c["name"], reported.get(c["name"]), case_list.features(c)))

    for feature in FEATURES:
        alone = [c["name"] for c in case_list.CASES if case_list.features(c) == [feature]]
        combined = [c["name"] for c in case_list.CASES
                    if feature in case_list.features(c) and len(case_list.features(c)) > 1]
        if not alone or not combined:
            problems.append("feature %s: %d cases of its own, %d combinations" % (
                feature, len(alone), len(combined)))

    with tempfile.TemporaryDirectory() as tmp:
        def run_on(case, edit_line=None):
            data = os.path.join(tmp, "data")
            shutil.rmtree(data, ignore_errors=True)
            os.makedirs(data)
            line = [l for l in lines if l.split()[1] == "name=" + case][0]
            with open(os.path.join(data, "manifest.txt"), "w") as f:
                f.writelines([l for l in lines if not l.startswith("case ")])
                f.write(edit_line(line) if edit_line else line)
            shutil.copytree(os.path.join(args.data, case), os.path.join(data, case))
            return data

        def expect_exit3(what, data, text):
            proc = subprocess.run([args.runner, "--data", data, "--backend", "reference"],
                                  capture_output=True, text=True)
            ok = proc.returncode == 3 and text in proc.stderr
            print("%-60s exit %d (want 3) %s" % (what, proc.returncode, "ok" if ok else "WRONG"))
            if not ok:
                problems.append("%s: exit %d, looked for %r in: %s" % (
                    what, proc.returncode, text, proc.stderr.strip()[-500:]))

        for case, file in REMOVED:
            data = run_on(case)
            os.remove(os.path.join(data, case, file))
            expect_exit3("%s without %s" % (case, file), data, file)
        data = run_on("sinks", lambda l: l.replace(" sinks=1 ", " sinks=0 "))
        expect_exit3("sinks=0 beside sinks.npy", data, "sinks.npy")
        data = run_on("combo_fp8_everything", lambda l: l.replace(" alibi=head ", " alibi=none "))
        expect_exit3("alibi=none beside alibi_slopes.npy", data, "alibi_slopes.npy")

        # (case, what is changed, old field, new field)
        for case, what, old, new in [
                ("window_zero", "window dropped", " window_left=0 window_right=0 ",
                 " window_left=-1 window_right=-1 "),
                ("softcap5", "softcap dropped", " softcap=5.0 ", " softcap=0.0 "),
                ("alibi_head_causal", "causal dropped", " causal=1 ", " causal=0 "),
                ("fp8_e4m3_tensor", "FP8 format changed", " dtype=e4m3 ", " dtype=e5m2 "),
                ("window_right_only", "window narrowed", " window_right=5 ", " window_right=4 ")]:
            data = run_on(case, lambda l: l.replace(old, new) if old in l else "no field " + old)
            proc = subprocess.run([args.runner, "--data", data, "--backend", "reference"],
                                  capture_output=True, text=True)
            ok = proc.returncode == 1 and "%s on reference" % case in proc.stdout
            print("%-60s exit %d (want 1) %s" % ("%s: %s" % (case, what), proc.returncode,
                                                 "ok" if ok else "WRONG"))
            if not ok:
                problems.append("%s with %s: exit %d: %s" % (case, what, proc.returncode,
                                                             (proc.stdout + proc.stderr)[-500:]))

    for p in problems:
        print("PROBLEM: " + p)
    print("conformance_fixtures.py: %d cases, %d problems" % (len(case_list.CASES), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
