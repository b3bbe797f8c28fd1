#!/usr/bin/env python3
"""Forward plus backward time, shape by shape: reads a forward and a backward JSON document of
the same shapes (compare_torch.py --json, with and without --backward, or flashport-bench
--json, with and without --backward; flashport-bench/1 schema) and prints, for every
implementation timed in both, the two medians, their sum, and the sum's ratio to torch's flash
backend (> 1: faster than it), the training-step bar of the backward pass.

flashport's records pair by backend, whatever kernel the planner picked for each pass (both
kernels are printed); torch's by implementation. A shape or implementation found in only one of
the documents, or failed in either, is listed as such, not summed.

Exit status: 0 when every implementation paired; 1 when one was missing or failed in a pass;
2 on bad input (unreadable files, another schema)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import SCHEMA, shape_key, shape_text  # noqa: E402

EXIT_OK, EXIT_UNPAIRED, EXIT_BAD_INPUT = 0, 1, 2
BASELINE = "torch:flash"


def family(r):
    """The name an implementation pairs by: torch's and the Python package's as recorded,
    flashport-bench's by backend (the planner may pick a different kernel for each pass)."""
    name = r["implementation"]
    if name.startswith(("torch:", "python:")):
        return name
    return "flashport:" + r.get("backend", name.split(":")[0])


def load(path, expected_pass):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "results" not in doc:
        raise ValueError(f"{path}: not a {SCHEMA} document")
    got = doc.get("settings", {}).get("pass", "forward")
    if got.split("_")[0] != expected_pass:  # backward_deterministic is a backward pass
        raise ValueError(f"{path}: a {got} document where the {expected_pass} pass was expected")
    out = {}
    for r in doc["results"]:
        out.setdefault(shape_key(r["shape"]), {})[family(r)] = r
    return out


def pair(forward, backward):
    """One row per (shape, implementation) in either document: both records, or a reason."""
    rows = []
    for key in list(forward) + [k for k in backward if k not in forward]:
        fwd, bwd = forward.get(key, {}), backward.get(key, {})
        for name in list(fwd) + [n for n in bwd if n not in fwd]:
            f, b = fwd.get(name), bwd.get(name)
            row = dict(shape=(f or b)["shape"], implementation=name,
                       forward_kernel=f.get("kernel", "") if f else "",
                       backward_kernel=b.get("kernel", "") if b else "")
            passes = (("forward", f), ("backward", b))
            problems = ([f"no {p} record" for p, r in passes if r is None]
                        + [f"{p} {r['status']}: {r.get('message', '')}" for p, r in passes
                           if r is not None and r.get("status") != "ok"])
            if problems:
                row.update(status="unpaired", message="; ".join(problems))
            else:
                fm, bm = f["ms"]["median"], b["ms"]["median"]
                row.update(status="ok", forward_ms=fm, backward_ms=bm, step_ms=fm + bm)
            rows.append(row)
    by_shape = {}
    for row in rows:
        by_shape.setdefault(shape_key(row["shape"]), []).append(row)
    for group in by_shape.values():
        base = next((r for r in group if r["implementation"] == BASELINE and r["status"] == "ok"),
                    None)
        for r in group:
            r["vs_flash"] = (base["step_ms"] / r["step_ms"]
                             if base and r["status"] == "ok" else None)
    return rows


def print_rows(rows):
    print(f"{'implementation':<26} {'forward ms':>11} {'backward ms':>12} {'sum ms':>9} "
          f"{'vs flash':>9}  kernels")
    last = None
    for r in rows:
        key = shape_key(r["shape"])
        if key != last:
            print("\n" + shape_text(r["shape"]))
            last = key
        if r["status"] != "ok":
            print(f"  {r['implementation']:<24} {r['status']}: {r['message']}")
            continue
        vs = f"{r['vs_flash']:.2f}x" if r["vs_flash"] is not None else "-"
        kernels = ""
        if r["forward_kernel"] or r["backward_kernel"]:
            kernels = f"{r['forward_kernel'] or '-'} + {r['backward_kernel'] or '-'}"
        print(f"  {r['implementation']:<24} {r['forward_ms']:11.3f} {r['backward_ms']:12.3f} "
              f"{r['step_ms']:9.3f} {vs:>9}  {kernels}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("forward", help="JSON of the forward pass")
    ap.add_argument("backward", help="JSON of the backward pass (--backward)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = ap.parse_args(argv)
    try:
        rows = pair(load(a.forward, "forward"), load(a.backward, "backward"))
    except ValueError as e:
        print(f"training_step.py: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print_rows(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(tool="training_step.py", forward=a.forward, backward=a.backward,
                           baseline=BASELINE, rows=rows), f, indent=2)
            f.write("\n")
    return EXIT_OK if all(r["status"] == "ok" for r in rows) else EXIT_UNPAIRED


if __name__ == "__main__":
    sys.exit(main())
