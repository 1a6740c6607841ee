#!/usr/bin/env python3
"""Side-by-side table of several `arbor-bench` runs (their `bench.json`), as in docs/log/bench.md.

    python3 crates/arbor-bench/compare.py before=runs/bench-before/bench.json \
        after=runs/bench-after/bench.json [mimalloc=...] [--base before] [--pytorch after]

Columns: each run's median ms, the speed-up of every run over `--base` (base median / run
median), the PyTorch median and the arbor/PyTorch ratio (PyTorch median / arbor median) of each
run, taken from the run named by `--pytorch` (the one made with `--versus pytorch`), and the
peak RSS of the base run and the last run. Workloads missing from a run show a dash.

`--pytorch each` instead gives every run made with `--versus pytorch` its own PyTorch column
and ratio (its twins were timed in the same run, interleaved with it): the way to show how
much the ratios move between two runs of the same code.
"""

import argparse
import json
import sys


def load(arg):
    label, _, path = arg.partition("=")
    if not path:
        sys.exit(f"compare.py: `{arg}`: expected LABEL=PATH/bench.json")
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"compare.py: {path}: {e}")
    records = {(r["name"], r["mode"]): r for r in report["records"]}
    return label, records, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=PATH/bench.json, in column order")
    ap.add_argument("--base", help="label the speed-ups are taken against (default: the first)")
    ap.add_argument("--pytorch", help="label of the run whose PyTorch times are used, or `each`")
    args = ap.parse_args()

    runs = [load(a) for a in args.runs]
    labels = [label for label, _, _ in runs]
    base = args.base or labels[0]
    if base not in labels:
        sys.exit(f"compare.py: --base {base}: no run has that label ({', '.join(labels)})")
    by_label = {label: records for label, records, _ in runs}
    twins = {label: {k: r["pytorch"]["median_s"] * 1e3 for k, r in records.items()
                     if r.get("pytorch")} for label, records, _ in runs}
    each = args.pytorch == "each"
    torch = {}
    if args.pytorch and not each:
        if args.pytorch not in by_label:
            sys.exit(f"compare.py: --pytorch {args.pytorch}: no run has that label")
        torch = {k: r["pytorch"]["median_s"] * 1e3 for k, r in by_label[args.pytorch].items()
                 if r.get("pytorch")}

    keys = []
    for _, records, _ in runs:
        for k in records:
            if k not in keys:
                keys.append(k)

    others = [label for label in labels if label != base]
    head = ["workload", "mode"] + [f"{label} ms" for label in labels]
    head += [f"{label} speed-up" for label in others]
    if torch:
        head += ["PyTorch ms"] + [f"{label}/PyTorch" for label in labels]
    own = [label for label in labels if twins[label]] if each else []
    for label in own:
        head += [f"PyTorch ms ({label})", f"{label}/PyTorch"]
    head += [f"RSS MiB {base}", f"RSS MiB {labels[-1]}"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))

    def median(label, k):
        r = by_label[label].get(k)
        return r["median_ms"] if r else None

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    for k in keys:
        row = [k[0], k[1]]
        row += [fmt(median(label, k), ".1f") for label in labels]
        b = median(base, k)
        for label in others:
            m = median(label, k)
            row.append(fmt(b / m if b and m else None, ".2f") + ("×" if b and m else ""))
        if torch:
            t = torch.get(k)
            row.append(fmt(t, ".1f"))
            for label in labels:
                m = median(label, k)
                row.append(fmt(t / m if t and m else None, ".2f") + ("×" if t and m else ""))
        for label in own:
            t, m = twins[label].get(k), median(label, k)
            row.append(fmt(t, ".1f"))
            row.append(fmt(t / m if t and m else None, ".2f") + ("×" if t and m else ""))
        for label in (base, labels[-1]):
            r = by_label[label].get(k)
            rss = r.get("peak_rss_bytes") if r else None
            row.append(fmt(rss / 2**20 if rss else None, ".0f"))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
