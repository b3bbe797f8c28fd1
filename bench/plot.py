#!/usr/bin/env python3
"""Draws PNG plots from flashport-bench / compare_torch.py JSON files: TFLOP/s (or time) against
sequence length, one figure per (dtype, head dim, causal), one line per implementation.

A flashport run that let the planner choose is one line per backend ("flashport:cuda"), whatever
variant the planner picked at each length; a forced variant is a line of its own."""
import argparse
import json
import os
import sys


def load_records(paths):
    records, devices = [], set()
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != "flashport-bench/1":
            sys.exit(f"plot.py: {path} is not a flashport-bench/1 file")
        device = doc.get("device", {}).get("name", "")
        devices.add(device)
        for r in doc.get("results", []):
            if r.get("status") == "ok":
                records.append((r, device))
    return records, devices


def line_label(r, device, many_devices):
    impl = r["implementation"]
    if impl.startswith("flashport:"):
        impl = f"flashport:{r['backend']}"
        if r.get("kernel_requested"):
            impl += f":{r['kernel_requested']}"
    return f"{impl} ({device})" if many_devices else impl


def features(s):
    """The shape's v2 features as a name part ("" for none, and for records written before
    they existed), so that a windowed shape is not drawn on the line of its unwindowed twin."""
    parts = []
    if s.get("window_left", -1) != -1 or s.get("window_right", -1) != -1:
        parts.append(f"window{s['window_left']},{s['window_right']}")
    if s.get("softcap", 0):
        parts.append(f"softcap{s['softcap']:g}")
    if s.get("alibi"):
        parts.append("alibi")
    if s.get("bias"):
        parts.append("qbias" if s.get("bias_per_query") else "bias")
    if s.get("sinks"):
        parts.append("sinks")
    if s.get("page_size", 0):
        parts.append(f"page{s['page_size']}")
    if s.get("varlen"):
        parts.append("varlen")
    return "_".join(parts)


def group_key(s):
    return (s["dtype"], s["head_dim"], s["causal"], s["seq_q"] == 1, s["layout"], features(s))


def file_name(metric, key):
    dtype, d, causal, decode, layout, feats = key
    name = f"{metric}_{dtype}_d{d}_{'causal' if causal else 'noncausal'}"
    if decode:
        name += "_decode"
    if layout != "bhnd":
        name += f"_{layout}"
    if feats:
        name += f"_{feats}"
    return name + ".png"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="flashport-bench or compare_torch.py JSON files")
    ap.add_argument("--out", default=".", help="folder for the PNG files (default: .)")
    ap.add_argument("--metric", choices=["tflops", "ms"], default="tflops")
    ap.add_argument("--title", default="", help="text put before each figure's title")
    a = ap.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot.py: matplotlib is needed ({e})", file=sys.stderr)
        return 3

    records, devices = load_records(a.json)
    if not records:
        print("plot.py: no successful results in the input", file=sys.stderr)
        return 1
    many = len(devices) > 1
    groups = {}
    for r, device in records:
        s = r["shape"]
        x = s["seq_kv"]
        y = r["tflops"] if a.metric == "tflops" else r["ms"]["median"]
        lines = groups.setdefault(group_key(s), {})
        # A repeated (line, x) keeps the best measurement.
        pts = lines.setdefault(line_label(r, device, many), {})
        better = max if a.metric == "tflops" else min
        pts[x] = better(pts.get(x, y), y)

    os.makedirs(a.out, exist_ok=True)
    for key, lines in sorted(groups.items(), key=lambda kv: str(kv[0])):
        dtype, d, causal, decode, layout, feats = key
        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs_all = set()
        for label, pts in sorted(lines.items()):
            xs = sorted(pts)
            xs_all.update(xs)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(xs_all))
        ax.set_xticklabels([str(x) for x in sorted(xs_all)])
        ax.set_xlabel("Nkv (key/value length)" if decode else "N (sequence length)")
        ax.set_ylabel("TFLOP/s" if a.metric == "tflops" else "median time (ms)")
        if a.metric == "ms":
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        title = f"{dtype}, d={d}, {'causal' if causal else 'non-causal'}"
        if decode:
            title += ", decode (Nq=1)"
        if layout != "bhnd":
            title += f", {layout}"
        if feats:
            title += f", {feats.replace('_', ', ')}"
        if not many and devices:
            title += f" - {next(iter(devices))}"
        ax.set_title(f"{a.title} {title}".strip(), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(a.out, file_name(a.metric, key))
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
