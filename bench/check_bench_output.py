#!/usr/bin/env python3
"""Runs flashport-bench on the reference backend and checks its exit codes and what it writes:
the JSON parses and carries every documented field with sane values, and the CSV matches it."""
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
                "layout"]
RECORD_FIELDS = ["shape", "implementation", "backend", "kernel_requested", "kernel", "precision",
                 "description", "status", "message", "flops"]
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


def check_ok_record(r, shape):
    for f in RECORD_FIELDS + OK_FIELDS:
        expect(f in r, f"record field {f}")
    for f in SHAPE_FIELDS:
        expect(f in r["shape"], f"shape field {f}")
    expect(r["status"] == "ok", f"status ok ({r.get('message')})")
    expect({k: r["shape"][k] for k in shape} == shape, "shape echoes the flags")
    flops = 4 * shape["batch"] * shape["heads_q"] * shape["seq_q"] * shape["seq_kv"] * shape["head_dim"]
    if shape["causal"]:
        flops /= 2
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
    q = shape["batch"] * shape["heads_q"] * shape["seq_q"] * shape["head_dim"]
    kv = shape["batch"] * shape["heads_kv"] * shape["seq_kv"] * shape["head_dim"]
    expect(r["input_bytes"] == es * (q + 2 * kv), "input_bytes")
    expect(r["output_bytes"] == es * q, "output_bytes")
    expect(r["input_sets"] >= 1 and r["peak_rss_bytes"] > 0, "input_sets and peak_rss_bytes")


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

    for args, want, what in [(["--bogus"], 2, "unknown option"),
                             (["--hq", "3", "--hkv", "2"], 2, "Hq not a multiple of Hkv"),
                             (["--backend", "nosuch"], 2, "unknown backend"),
                             (["--backend", "reference", "--kernel", "nosuch", "--no-peaks"], 2,
                              "unknown kernel"),
                             (["--backend", "reference:7", "--no-peaks"], 3, "missing device")]:
        rc, out = run(a.bench, *args)
        expect(rc == want, f"{what}: exit {want} (got {rc}): {out}")

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
