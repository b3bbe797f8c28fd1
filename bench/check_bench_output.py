#!/usr/bin/env python3
"""Runs flashport-bench on the reference backend and checks its exit codes and what it writes:
the JSON parses and carries every documented field with sane values, and the CSV matches it;
shapes with the v2 features (window, softcap, ALiBi, paged, varlen, FP8) run through --shape and
count their FLOPs as documented; --backward times the backward pass and counts 2.5 times the
forward's FLOPs; --shape reads back every line --list-shapes prints. Timings are never judged,
only their consistency."""
import argparse
import csv
import json
import math
import os
import subprocess
import sys

TOP_FIELDS = ["schema", "tool", "flashport_version", "git_commit", "date", "preset", "backend",
              "device", "settings", "ceilings", "results"]
DEVICE_FIELDS = ["name", "vendor", "kind", "memory_bytes", "compute_units", "details"]
SHAPE_FIELDS = ["batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "dtype", "causal",
                "layout", "out_dtype", "window_left", "window_right", "softcap", "alibi",
                "bias", "bias_per_query", "sinks", "page_size", "pages_in_order", "varlen"]
RECORD_FIELDS = ["shape", "implementation", "backend", "kernel_requested", "kernel", "precision",
                 "description", "status", "message", "flops", "tokens_q", "tokens_kv"]
FEATURE_PRESETS = ["window", "softcap", "alibi", "paged", "varlen", "decode-paged", "fp8"]
OK_FIELDS = ["repeats", "ms", "tflops", "ceiling", "ceiling_tflops", "pct_of_ceiling", "workspace_bytes",
             "input_bytes", "output_bytes", "input_sets", "peak_rss_bytes", "max_abs_err",
             "rel_l2_err", "checked_on", "speedup_vs_previous"]

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(bench, *args):
    p = subprocess.run([bench, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def check_document(doc, n_results):
    for f in TOP_FIELDS:
        expect(f in doc, f"top-level field {f}")
    expect(doc.get("schema") == "flashport-bench/1", "schema is flashport-bench/1")
    expect(doc.get("tool") == "flashport-bench", "tool is flashport-bench")
    expect(doc.get("backend") == "reference", "backend is reference")
    expect(len(doc.get("git_commit", "")) > 0, "git_commit is set")
    expect(doc.get("date", "").endswith("Z"), "date is UTC ISO 8601")
    for f in DEVICE_FIELDS:
        expect(f in doc.get("device", {}), f"device field {f}")
    expect(len(doc.get("results", [])) == n_results, f"{n_results} result(s)")


def causal_pairs(nq, nkv):
    """Visible (query, key) pairs of a causal problem as flashport_attention_desc_flops counts
    them: N^2 / 2 when square (the FlashAttention papers' count), else exactly."""
    if nq == nkv:
        return nq * nkv / 2
    return sum(min(max(i + nkv - nq + 1, 0), nkv) for i in range(nq))


def check_ok_record(r, shape):
    for f in RECORD_FIELDS + OK_FIELDS:
        expect(f in r, f"record field {f}")
    for f in SHAPE_FIELDS:
        expect(f in r["shape"], f"shape field {f}")
    expect(r["status"] == "ok", f"status ok ({r.get('message')})")
    expect({k: r["shape"][k] for k in shape} == shape, "shape echoes the flags")
    pairs = shape["seq_q"] * shape["seq_kv"]
    if shape["causal"]:
        pairs = causal_pairs(shape["seq_q"], shape["seq_kv"])
    flops = 4 * shape["batch"] * shape["heads_q"] * shape["head_dim"] * pairs
    expect(math.isclose(r["flops"], flops), f"flops {r['flops']} == {flops}")
    ms = r["ms"]
    expect(0 < ms["min"] <= ms["median"] <= ms["max"], f"0 < min <= median <= max: {ms}")
    expect(r["repeats"] == 3, "--repeat 3 made 3 timed calls")
    expect(math.isclose(r["tflops"], flops / (ms["median"] * 1e-3) / 1e12, rel_tol=1e-6),
           "tflops = flops / median")
    expect(r["kernel"] != "" and r["implementation"] == f"flashport:reference:{r['kernel']}",
           "kernel and implementation name")
    # The reference compared with itself on the same inputs: bit-identical.
    expect(r["max_abs_err"] == 0 and r["rel_l2_err"] == 0, "reference agrees with itself")
    expect(r["checked_on"] != "", "checked_on is set")
    expect(r["description"] != "", "the variant's description is recorded")
    es = {"f32": 4, "f16": 2, "bf16": 2}[shape["dtype"]]
    expect(r["tokens_q"] == shape["batch"] * shape["seq_q"]
           and r["tokens_kv"] == shape["batch"] * shape["seq_kv"], "tokens of a dense shape")
    q = shape["batch"] * shape["heads_q"] * shape["seq_q"] * shape["head_dim"]
    kv = shape["batch"] * shape["heads_kv"] * shape["seq_kv"] * shape["head_dim"]
    expect(r["input_bytes"] == es * (q + 2 * kv), "input_bytes")
    expect(r["output_bytes"] == es * q, "output_bytes")
    expect(r["input_sets"] >= 1 and r["peak_rss_bytes"] > 0, "input_sets and peak_rss_bytes")


def window_pairs(nq, nkv, left, right):
    """Visible (query, key) pairs of one sequence with a window (-1: unbounded side)."""
    pairs = 0
    for i in range(nq):
        diag = i + nkv - nq
        lo = 0 if left < 0 else max(0, diag - left)
        hi = nkv - 1 if right < 0 else min(nkv - 1, diag + right)
        pairs += max(0, hi - lo + 1)
    return pairs


def check_features(bench, workdir):
    """Feature shapes through --shape on the reference, checked against the reference (the same
    bits, whole and on a slice); FLOPs as flashport_attention_desc_flops counts them, on real
    tokens for packed batches."""
    js, cs = os.path.join(workdir, "features.json"), os.path.join(workdir, "features.csv")
    cases = [
        # (shape text, --check-gflop, expected shape fields, FLOPs: a number or a function of
        #  the record)
        ("f32 B=2 Hq=4 Hkv=2 Nq=40 Nkv=56 d=16 causal window=7,0 softcap=50 alibi", "8",
         dict(window_left=7, window_right=0, softcap=50, alibi=True),
         4 * 2 * 4 * 16 * window_pairs(40, 56, 7, 0)),
        ("f16 B=2 Hq=4 Hkv=2 Nq=40 Nkv=56 d=16 causal bias sinks", "8",
         dict(bias=True, sinks=True, alibi=False), 4 * 2 * 4 * 16 * window_pairs(40, 56, -1, 0)),
        ("f32 B=3 Hq=2 Hkv=1 Nq=20 Nkv=30 d=8 causal bias varlen", "0.00001",
         dict(bias=True, bias_per_query=False, varlen=True), None),
        ("f16 B=2 Hq=4 Hkv=2 Nq=40 Nkv=56 d=16 window=9,3 qbias", "8",
         dict(bias=True, bias_per_query=True, window_left=9, window_right=3),
         4 * 2 * 4 * 16 * window_pairs(40, 56, 9, 3)),
        ("f32 B=3 Hq=2 Hkv=1 Nq=20 Nkv=30 d=8 causal qbias varlen", "0.00001",
         dict(bias=True, bias_per_query=True, varlen=True), None),
        ("bf16 B=3 Hq=4 Hkv=2 Nq=1 Nkv=70 d=16 page=16 bnhd", "8",
         dict(page_size=16, layout="bnhd", window_left=-1, window_right=-1,
              pages_in_order=False),
         4 * 3 * 4 * 16 * 70),
        ("bf16 B=3 Hq=4 Hkv=2 Nq=20 Nkv=70 d=16 causal page=16 inorder", "8",
         dict(page_size=16, pages_in_order=True), None),
        ("f16 B=5 Hq=2 Hkv=1 Nq=48 Nkv=60 d=8 causal varlen", "0.00001", dict(varlen=True), None),
        ("f32 B=3 Hq=2 Hkv=2 Nq=33 Nkv=40 d=8 causal page=16 varlen", "8",
         dict(varlen=True, page_size=16), None),
        ("fp8_e4m3 B=1 Hq=2 Hkv=1 Nq=32 Nkv=48 d=16", "8",
         dict(dtype="fp8_e4m3", out_dtype="bf16"), 4 * 2 * 16 * 32 * 48),
    ]
    for text, gflop, fields, flops in cases:
        rc, out = run(bench, "--backend", "reference", "--shape", text, "--check", "--check-gflop",
                      gflop, "--no-peaks", "--warmup", "1", "--repeat", "2", "--json", js,
                      "--csv", cs)
        expect(rc == 0, f"{text}: exit 0 (got {rc}): {out}")
        if rc != 0:
            continue
        with open(js) as f:
            r = json.load(f)["results"][0]
        for k in RECORD_FIELDS + OK_FIELDS:
            expect(k in r, f"{text}: record field {k}")
        expect(r["status"] == "ok", f"{text}: status ok ({r['message']})")
        if r["status"] != "ok":
            continue
        for k, v in fields.items():
            expect(r["shape"][k] == v, f"{text}: shape.{k} is {r['shape'][k]!r}, expected {v!r}")
        b, hq, nq, nkv, d = (r["shape"][k] for k in ("batch", "heads_q", "seq_q", "seq_kv", "head_dim"))
        if flops is not None:
            expect(math.isclose(r["flops"], flops), f"{text}: flops {r['flops']} == {flops}")
            expect(r["tokens_q"] == b * nq and r["tokens_kv"] == b * nkv, f"{text}: tokens")
        else:
            # Lq drawn from 1..Nq, Lkv = Lq + c with c = Nkv - Nq > 0; causal row i sees c + i + 1
            # keys, so a sequence has Lq * c + (Lq^2 + Lq) / 2 pairs, and sum(Lq^2) lies between
            # T^2 / B and Nq * T for T real query rows.
            t, c = r["tokens_q"], nkv - nq
            expect(c > 0, f"{text}: the check assumes Nkv > Nq")
            expect(b <= t <= b * nq and r["tokens_kv"] == t + b * c,
                   f"{text}: {t} real query rows of at most {b * nq}")
            lo = 2 * hq * d * (t * t / b + t + 2 * c * t)
            hi = 2 * hq * d * (nq * t + t + 2 * c * t)
            expect(lo * (1 - 1e-9) <= r["flops"] <= hi * (1 + 1e-9),
                   f"{text}: flops {r['flops']} on real tokens within [{lo}, {hi}]")
        expect(math.isclose(r["tflops"], r["flops"] / (r["ms"]["median"] * 1e-3) / 1e12,
                            rel_tol=1e-6), f"{text}: tflops = flops / median")
        expect(r["max_abs_err"] == 0 and r["rel_l2_err"] == 0,
               f"{text}: the reference agrees with itself on {r['checked_on']}")
        expect((r["checked_on"] == "all") == (gflop == "8"), f"{text}: checked_on {r['checked_on']}")
        with open(cs) as f:
            row = list(csv.DictReader(f))[0]
        expect(int(row["window_left"]) == r["shape"]["window_left"]
               and row["varlen"] == str(int(r["shape"]["varlen"]))
               and int(row["page_size"]) == r["shape"]["page_size"]
               and int(row["tokens_q"]) == r["tokens_q"]
               and math.isclose(float(row["flops"]), r["flops"], rel_tol=1e-5),
               f"{text}: CSV feature columns match the JSON")

    # Every feature preset names its feature, and --shape reads back each line it lists.
    tokens = {"window": "window=4095,0", "softcap": "softcap=50", "alibi": "alibi",
              "paged": "page=16", "varlen": "varlen", "decode-paged": "page=16", "fp8": "fp8_e4m3"}
    for preset in FEATURE_PRESETS:
        rc, listed = run(bench, "--backend", "reference", "--preset", preset, "--list-shapes")
        lines = listed.splitlines()
        expect(rc == 0 and lines and any(tokens[preset] in line for line in lines),
               f"preset {preset} lists shapes with {tokens[preset]}")
        for line in lines:
            rc, back = run(bench, "--backend", "reference", "--shape", line, "--list-shapes")
            expect(rc == 0 and back.strip() == line, f"--shape reads back '{line}' (got '{back.strip()}')")


def check_training_step(bench, workdir):
    """training_step.py pairs a forward and a backward document of the same shapes and sums
    their medians; a document of the wrong pass is bad input (exit 2), a shape timed in one
    pass only is unpaired (exit 1)."""
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_step.py")
    docs = {}
    for name, extra in (("forward", []), ("backward", ["--backward"])):
        docs[name] = os.path.join(workdir, f"step-{name}.json")
        rc, out = run(bench, "--backend", "reference", *extra, "--hq", "2", "--nq", "24", "--d", "16",
                      "--causal", "--no-peaks", "--repeat", "2", "--json", docs[name])
        expect(rc == 0, f"training step: the {name} run exits 0 (got {rc}): {out}")
    out_json = os.path.join(workdir, "step.json")
    p = subprocess.run([sys.executable, tool, docs["forward"], docs["backward"], "--json",
                        out_json], capture_output=True, text=True)
    expect(p.returncode == 0, f"training_step.py exits 0 (got {p.returncode}): {p.stderr}")
    with open(out_json) as f:
        rows = json.load(f)["rows"]
    meds = {}
    for name in docs:
        with open(docs[name]) as f:
            meds[name] = [r["ms"]["median"] for r in json.load(f)["results"]]
    expect(len(rows) == len(meds["forward"]) == 1
           and all(r["status"] == "ok" and r["forward_ms"] == fm and r["backward_ms"] == bm
                   and math.isclose(r["step_ms"], fm + bm)
                   for r, fm, bm in zip(rows, meds["forward"], meds["backward"])),
           "training_step.py sums each shape's forward and backward medians")
    p = subprocess.run([sys.executable, tool, docs["backward"], docs["backward"]],
                       capture_output=True, text=True)
    expect(p.returncode == 2 and "forward pass was expected" in p.stderr,
           f"training_step.py refuses a backward document as the forward (exit {p.returncode})")
    with open(docs["backward"]) as f:
        doc = json.load(f)
    doc["results"] = []
    with open(docs["backward"], "w") as f:
        json.dump(doc, f)
    p = subprocess.run([sys.executable, tool, docs["forward"], docs["backward"]],
                       capture_output=True, text=True)
    expect(p.returncode == 1 and "no backward record" in p.stdout,
           f"training_step.py reports a shape missing from one pass (exit {p.returncode})")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--compare-torch", help="compare_torch.py, whose preset shapes must match")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    js, cs = os.path.join(a.workdir, "bench.json"), os.path.join(a.workdir, "bench.csv")

    shape = dict(batch=2, heads_q=4, heads_kv=2, seq_q=40, seq_kv=56, head_dim=24, dtype="bf16",
                 causal=True, layout="bnhd")
    rc, out = run(a.bench, "--backend", "reference", "--b", "2", "--hq", "4", "--hkv", "2",
                  "--nq", "40", "--nkv", "56", "--d", "24", "--dtype", "bf16", "--causal",
                  "--layout", "bnhd", "--check", "--check-gflop", "0.00005", "--no-peaks",
                  "--warmup", "1", "--repeat", "3", "--json", js, "--csv", cs)
    expect(rc == 0, f"tiny run exits 0 (got {rc}): {out}")
    with open(js) as f:
        doc = json.load(f)
    check_document(doc, 1)
    check_ok_record(doc["results"][0], shape)
    expect("rows" in doc["results"][0]["checked_on"], "a small --check-gflop checks a slice")
    with open(cs) as f:
        rows = list(csv.DictReader(f))
    expect(len(rows) == 1 and rows[0]["kernel"] == doc["results"][0]["kernel"]
           and rows[0]["status"] == "ok" and int(rows[0]["heads_kv"]) == 2, "CSV matches JSON")

    rc, out = run(a.bench, "--backend", "reference", "--nq", "17", "--d", "8", "--kernel", "all",
                  "--no-peaks", "--repeat", "1", "--json", js)
    expect(rc == 0, f"--kernel all exits 0 (got {rc}): {out}")
    with open(js) as f:
        doc = json.load(f)
    expect(len(doc["results"]) >= 1 and all(r["status"] == "ok" for r in doc["results"]),
           "--kernel all runs every reference variant")

    rc, out = run(a.bench, "--backend", "reference", "--preset", "ladder", "--no-peaks", "--json", js)
    expect(rc == 0, f"ladder on the reference backend exits 0 (got {rc}): {out}")
    with open(js) as f:
        doc = json.load(f)
    expect(len(doc["results"]) == 16 and all(r["status"] == "unsupported" for r in doc["results"]),
           "ladder kernels are unsupported on the reference backend, one record each")

    for det in ([], ["--deterministic"]):
        rc, out = run(a.bench, "--backend", "reference", "--backward", *det, "--hq", "2",
                      "--hkv", "1", "--nq", "24", "--nkv", "40", "--d", "16", "--causal",
                      "--no-peaks", "--repeat", "2", "--json", js)
        expect(rc == 0, f"--backward {det} exits 0 (got {rc}): {out}")
        with open(js) as f:
            doc = json.load(f)
        r = doc["results"][0]
        want = 2.5 * 4 * 2 * 16 * causal_pairs(24, 40)
        expect(r["status"] == "ok" and math.isclose(r["flops"], want),
               f"--backward counts 2.5x the forward's FLOPs ({r['flops']} vs {want})")
        expect(doc["settings"].get("pass") == ("backward_deterministic" if det else "backward"),
               "settings.pass names the backward pass")

    check_training_step(a.bench, a.workdir)

    for args, want, what in [(["--bogus"], 2, "unknown option"),
                             (["--backend", "reference", "--backward", "--check"], 2,
                              "--backward with --check"),
                             (["--backend", "reference", "--deterministic"], 2,
                              "--deterministic without --backward"),
                             (["--hq", "3", "--hkv", "2"], 2, "Hq not a multiple of Hkv"),
                             (["--backend", "nosuch"], 2, "unknown backend"),
                             (["--backend", "reference", "--kernel", "nosuch", "--no-peaks"], 2,
                              "unknown kernel"),
                             (["--backend", "reference:7", "--no-peaks"], 3, "missing device"),
                             (["--shape", "f32 B=0"], 2, "--shape with a zero size"),
                             (["--shape", "f32 colour=red"], 2, "--shape with an unknown token"),
                             (["--shape", "Nq=8", "--preset", "seed"], 2, "--shape and --preset"),
                             (["--shape", "Nq=8", "--hq", "2"], 2, "--shape and a shape flag"),
                             (["--shape", "Nq=8 Nkv=4 varlen"], 2, "varlen with Nkv < Nq")]:
        rc, out = run(a.bench, *args)
        expect(rc == want, f"{what}: exit {want} (got {rc}): {out}")

    check_features(a.bench, a.workdir)

    if a.compare_torch:
        for preset in ["seed", "fa-grid", "ladder", "decode", "cpu"]:
            for extra in [[], ["--dtype", "f16", "--layout", "bnhd"]]:
                rc, ours = run(a.bench, "--backend", "reference", "--preset", preset,
                               "--list-shapes", *extra)
                p = subprocess.run([sys.executable, a.compare_torch, "--device", "cpu", "--preset",
                                    preset, "--list-shapes", *extra], capture_output=True, text=True)
                expect(rc == 0 and p.returncode == 0 and ours.split("\n") == p.stdout.split("\n")
                       and len(ours.splitlines()) > 0,
                       f"preset {preset} {extra}: compare_torch.py lists the same shapes")

    print("FAILED" if failures else "OK", f"({len(failures)} failure(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
