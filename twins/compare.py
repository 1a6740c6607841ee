#!/usr/bin/env python3
"""Side-by-side learning curves: arbor's metrics log against a twin's log, as a markdown table.

Usage: python3 twins/compare.py NAME=ARBOR_RUN_DIR:TWIN_LOG [NAME=...]
  ARBOR_RUN_DIR holds arbor's metrics.jsonl (the `--out` of an example program); TWIN_LOG is the
  stdout of a twin script. Either side may be `-` (missing). Prints one row per evaluated step
  with each run's validation accuracy.
"""
import json
import os
import re
import sys


def arbor_curve(run_dir):
    curve = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    if run_dir == "-" or not os.path.exists(path):
        return curve
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "eval:valid":
            curve[r["step"]] = r["accuracy"]
    return curve


def twin_curve(log):
    curve = {}
    if log == "-" or not os.path.exists(log):
        return curve
    for line in open(log):
        m = re.match(r"step (\d+) valid ([0-9.]+)", line)
        if m:
            curve[int(m.group(1))] = float(m.group(2))
    return curve


def main(args):
    runs = []
    for a in args:
        name, paths = a.split("=", 1)
        arbor, twin = paths.split(":", 1)
        runs.append((name, arbor_curve(arbor), twin_curve(twin)))
    steps = sorted({s for _, a, t in runs for s in list(a) + list(t)})
    head = "| step | " + " | ".join(f"{n}: arbor | {n}: PyTorch" for n, _, _ in runs) + " |"
    print(head)
    print("|" + "---:|" * (1 + 2 * len(runs)))
    fmt = lambda c, s: f"{c[s]:.4f}" if s in c else "—"
    for s in steps:
        cells = [f"{fmt(a, s)} | {fmt(t, s)}" for _, a, t in runs]
        print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
