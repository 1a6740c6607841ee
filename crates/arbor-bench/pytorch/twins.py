#!/usr/bin/env python3
"""PyTorch twins of arbor-bench's workloads (`cargo xtask bench --versus pytorch`).

Every workload of `crates/arbor-bench/src/workloads/*.rs` has a twin here, written in plain,
idiomatic PyTorch: `nn.Module` classes, fused gate `nn.Linear` layers, stock modules where
PyTorch has them (`nn.LSTM`, `nn.LSTMCell`, `nn.TransformerEncoderLayer`,
`nn.MultiheadAttention`, `F.scaled_dot_product_attention`), `model.eval()` + `torch.no_grad()`
for the forward mode. The models are in `twin_models.py` beside this file (shared with the
learning-curve twins, `twins/common.py`); this script builds the workloads and times them. Each
twin computes what its arbor workload computes (the same shapes, batch, lengths, trees and token
ids, the same decisions: argmax at evaluation, straight-through Gumbel-softmax with seeded noise
in training, the same scalar loss) and is timed by the same policy as
`crates/arbor-bench/src/harness.rs`:

- *forward*: `model.eval()`, `torch.no_grad()`, a sum of the outputs read back with `.item()`;
- *forward+backward*: `model.train()`, the input as a leaf that requires grad, `backward()` of
  the scalar loss, then the sum of the input's gradient read back (R2D2: the LM loss, read back,
  then its backward pass, as in arbor);
- warm-up runs, then at least `min_reps` and at most `max_reps` timed runs, continuing until
  `min_time_s` were spent; a workload whose first timed run takes over `slow_run_s` is timed
  `slow_reps` times. The median, min and max are reported, and items/s at the median.

What differs from arbor, by design: the random *numbers* (inputs come from `torch.Generator`s,
weights from `torch.manual_seed(0)`, Gumbel noise from a generator seeded 0 at every run) — the
shapes, lengths, trees and token ids are arbor's own, handed over by `arbor-bench` in the spec
file (without one, this script draws lengths and trees from the same distributions with
Python's `random`, and the R2D2 token ids with arbor's SplitMix64, which gives the same ids).

Usage (arbor-bench does this for you):

    python3 twins.py --list
    python3 twins.py --filter cells/in128 --quick --threads 2
    python3 twins.py --spec spec.json           # written by arbor-bench --versus pytorch
    python3 twins.py --self-test                # small shapes; checks outputs, never speed

Output: one line per workload and mode on stdout, `arbor-twin: {json}`; progress on stderr.
"""

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

try:
    import torch
except ImportError as e:  # pragma: no cover - arbor-bench checks `import torch` first
    print(f"twins.py: cannot import torch ({e}); `pip install torch` (the CPU wheel is enough)",
          file=sys.stderr)
    sys.exit(3)

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import authors  # noqa: E402  (the authors' own modules, beside this file)
from twin_models import (  # noqa: E402  (the models, beside this file)
    ConvFastTreesLayer, FasterFastTreesLayer, FastTreesLayer, GumbelTreeLstm, LstmLayer,
    OnLstmLayer, R2d2Lm, SpinnPiNt, TransformerEncoder, random_tree, transitions_of,
    tree_from_transitions, tree_nodes)

PREFIX = "arbor-twin: "


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def uniform(shape, seed):
    """Entries uniform in [-1, 1) from a seeded generator (arbor: `workloads::uniform`)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2.0 - 1.0


def uniform_lengths(batch, lo, hi, seed):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(batch)]


def splitmix_tokens(batch, n, vocab, seed):
    """arbor's `r2d2::random_tokens` (SplitMix64): the very same ids."""
    mask = (1 << 64) - 1
    state = seed
    out = []
    for _ in range(batch):
        row = []
        for _ in range(n):
            state = (state + 0x9E3779B97F4A7C15) & mask
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            z ^= z >> 31
            row.append(z % max(vocab, 1))
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# cells: LSTM, ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees (twin_models.py)
# --------------------------------------------------------------------------------------------


CELLS = {
    "lstm": lambda d_in, d_h, k: LstmLayer(d_in, d_h, like_arbor=False),
    "on-lstm": OnLstmLayer,
    "fasttrees": FastTreesLayer,
    "faster-fasttrees": FasterFastTreesLayer,
    "conv-fasttrees": ConvFastTreesLayer,
}
CELL_CONFIGS = [("in256-h512", 256, 512, 8, 128, 25), ("in128-h400", 128, 400, 10, 128, 30)]


def cells_run(p, device):
    model = CELLS[p["cell"]](p["d_input"], p["d_hidden"], p["chunk_size"]).to(device)
    x = uniform((p["batch"], p["length"], p["d_input"]), 1).to(device)
    return input_run(model, x, lambda m, xa: m(xa))


# --------------------------------------------------------------------------------------------
# Gumbel Tree-LSTM (Choi et al. 2018; twin_models.py)
# --------------------------------------------------------------------------------------------


def gumbel_run(p, device):
    lengths = p["lengths"]
    if isinstance(lengths, int):
        lengths = [lengths] * p["batch"]
    model = GumbelTreeLstm(p["d_input"], p["d_hidden"], p["leaf"], p.get("tau", 1.0),
                           like_arbor=False).to(device)
    x = uniform((len(lengths), max(lengths), p["d_input"]), 1).to(device)
    lens = torch.tensor(lengths, device=device)

    def fwd(m, xa):
        gen = torch.Generator().manual_seed(0) if m.training else None
        return m(xa, lens, gen)[0]

    return input_run(model, x, fwd)


# --------------------------------------------------------------------------------------------
# Transformer encoder with and without the FastTrees gate (twin_models.py)
# --------------------------------------------------------------------------------------------


def transformer_run(p, device):
    model = TransformerEncoder(p["d_model"], p["n_heads"], p["d_ff"], p["n_layers"],
                               p["fasttrees_gate"], p["chunk_size"]).to(device)
    x = uniform((p["batch"], p["length"], p["d_model"]), 1).to(device)
    lens = torch.full((p["batch"],), p["length"], device=device)
    return input_run(model, x, lambda m, xa: m(xa, lens))


# --------------------------------------------------------------------------------------------
# SPINN-PI-NT (shift-reduce over stacks), the per-node recursive Tree-LSTM, the LSTM
# (twin_models.py)
# --------------------------------------------------------------------------------------------


SPINN_D, SPINN_BATCH, SPINN_MAX = 300, 512, 30


def spinn_inputs(p):
    """arbor's lengths and trees when the spec has them (`lengths`, `transitions` as 'S'/'R'
    strings); otherwise the same distributions: lengths uniform in 2..=max_len, uniformly
    random merge orders."""
    if "lengths" in p and "transitions" in p:
        lengths, transitions = p["lengths"], p["transitions"]
    else:
        lengths = uniform_lengths(p.get("batch", SPINN_BATCH), 2, p.get("max_len", SPINN_MAX), 0)
        rng = random.Random(0)
        transitions = [transitions_of(random_tree(n, rng)) for n in lengths]
    trees = [tree_from_transitions(t) for t in transitions]
    return lengths, transitions, trees


def spinn_run(p, device, kind):
    d = p.get("d", SPINN_D)
    lengths, transitions, trees = spinn_inputs(p)
    x = uniform((len(lengths), max(p.get("max_len", SPINN_MAX), max(lengths)), d), 1).to(device)
    if kind == "lstm":
        model = LstmLayer(d, d, like_arbor=False).to(device)
        lens = torch.tensor(lengths)
        return input_run(model, x, lambda m, xa: m.sentence(xa, lens))
    model = SpinnPiNt(d, d).to(device)
    if kind == "recursive":
        return input_run(model, x, lambda m, xa: m.recursive(xa, lengths, trees))
    return input_run(model, x, lambda m, xa: m(xa, lengths, transitions))


# --------------------------------------------------------------------------------------------
# R2D2 (Hu et al. 2021): pruned differentiable CKY (twin_models.py)
# --------------------------------------------------------------------------------------------


def r2d2_run(p, device):
    model = R2d2Lm(p["vocab"], p["d_model"], p["n_layers"], p["n_heads"], p["window"],
                   p["pruning"]).to(device)
    tokens = splitmix_tokens(p["batch"], p["length"], p["vocab"], 0)

    def run(mode):
        if mode == "forward":
            model.eval()
            with torch.no_grad():
                return model(tokens)[0].item()
        model.train()
        model.zero_grad(set_to_none=True)
        loss = model(tokens, torch.Generator().manual_seed(0))[0]
        value = loss.item()
        loss.backward()
        return value

    run.model = model
    return run


# --------------------------------------------------------------------------------------------
# The suite: names, parameters and items per run exactly as arbor-bench's
# --------------------------------------------------------------------------------------------


def input_run(model, x, fwd):
    """The run closure of a workload whose loss is the sum of `fwd(model, x)`."""

    def run(mode):
        if mode == "forward":
            model.eval()
            with torch.no_grad():
                return fwd(model, x).sum().item()
        model.train()
        model.zero_grad(set_to_none=True)
        xa = x.detach().requires_grad_()
        fwd(model, xa).sum().backward()
        return xa.grad.sum().item()

    return run


# What the authors' adapters (`authors.py`) borrow from here: the same inputs and run policy.
AUTHORS_HELPERS = {"uniform": uniform, "splitmix_tokens": splitmix_tokens,
                   "input_run": input_run}


def report_failure(name, source, label, error):
    """One `error` result line (with the authors' module's `source`, if any) and a log line."""
    rec = {"name": name, "error": error}
    if source:
        rec["source"] = source
    print(PREFIX + json.dumps(rec), flush=True)
    log(f"pytorch {label}: failed: {error}")


def suite():
    """[(name, group, params, items, unit, builder(params, device))], in arbor's order.
    A spec's `inputs` (arbor's exact lengths, trees) are merged into `params`."""
    out = []
    for tag, d_in, d_h, chunk, batch, length in CELL_CONFIGS:
        for cell in CELLS:
            p = {"cell": cell, "d_input": d_in, "d_hidden": d_h, "chunk_size": chunk,
                 "batch": batch, "length": length}
            out.append((f"cells/{tag}/{cell}", "cells", p, batch * length, "tokens",
                        cells_run))
    lengths = uniform_lengths(128, 5, 25, 0)
    gumbel = [("d100-affine", 100, "affine", lengths), ("d300-lstm", 300, "lstm", lengths)]
    gumbel += [(f"length/d100-affine-n{n}", 100, "affine", n) for n in (8, 16, 32, 64, 128)]
    for tag, d, leaf, lens in gumbel:
        batch = len(lens) if isinstance(lens, list) else 16
        p = {"d_input": d, "d_hidden": d, "leaf": leaf, "batch": batch, "lengths": lens,
             "tau": 1.0}
        out.append((f"gumbel/{tag}", "gumbel", p, batch, "sentences",
                    gumbel_run))
    for tag, gate in (("plain", False), ("fasttrees", True)):
        p = {"d_model": 256, "n_heads": 4, "d_ff": 1024, "n_layers": 2, "fasttrees_gate": gate,
             "chunk_size": 8, "batch": 64, "length": 32}
        out.append((f"transformer/{tag}", "transformer", p, 64 * 32, "tokens",
                    transformer_run))
    for kind in ("thin-stack", "recursive", "lstm"):
        out.append((f"spinn/{kind}", "spinn", {"d": SPINN_D, "batch": SPINN_BATCH}, SPINN_BATCH,
                    "sentences", lambda p, dev, kind=kind: spinn_run(p, dev, kind)))
    r2d2 = [("pruned", True, n) for n in (16, 32, 64, 128)] + [("full-cky", False, n) for n in (8, 16)]
    for tag, pruning, n in r2d2:
        p = {"d_model": 128, "n_layers": 2, "n_heads": 4, "window": 4, "pruning": pruning,
             "vocab": 1000, "batch": 8, "length": n}
        out.append((f"r2d2/{tag}-n{n}", "r2d2", p, 8 * n, "tokens",
                    r2d2_run))
    return out


# --------------------------------------------------------------------------------------------
# Timing (crates/arbor-bench/src/harness.rs `measure`)
# --------------------------------------------------------------------------------------------

# As arbor-bench on the CPU: one warm-up, none in a smoke run (`--quick`).
FULL = {"warmup": 1, "min_reps": 3, "max_reps": 10, "min_time_s": 1.5, "slow_run_s": 3.0,
        "slow_reps": 2}
QUICK = {"warmup": 0, "min_reps": 1, "max_reps": 1, "min_time_s": 0.0, "slow_run_s": 0.0,
         "slow_reps": 1}


def measure(run, mode, settings, sync):
    def once():
        start = time.perf_counter()
        check = run(mode)
        sync()
        elapsed = time.perf_counter() - start
        if not math.isfinite(check):
            raise RuntimeError(f"the run produced {check}")
        return elapsed

    for _ in range(settings["warmup"]):
        once()
    times = []
    timing = time.perf_counter()
    while True:
        slow = bool(times) and times[0] > settings["slow_run_s"]
        if slow:
            done = len(times) >= max(settings["slow_reps"], 1)
        else:
            done = len(times) >= max(settings["min_reps"], 1) and (
                len(times) >= settings["max_reps"]
                or time.perf_counter() - timing >= settings["min_time_s"])
        if done:
            return times
        times.append(once())


def set_threads(n):
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def run_suite(entries, settings, threads, device, with_authors=True):
    """entries: [(suite row, modes, inputs, reps)], `reps` {mode: count} or None. Prints one
    record per workload and mode for the twin and, with `with_authors`, one for the authors'
    module where `authors.py` has one (marked with its `source`); the two are timed
    alternately, mode by mode, so that both see the same machine state."""
    set_threads(threads)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    failed = 0
    missing = set()
    for (name, group, params, items, unit, build), modes, inputs, reps in entries:
        p = {**params, **(inputs or {})}
        sides = [(None, lambda p=p, build=build: build(p, device))]
        found = authors.adapter(name, p) if with_authors else None
        if found is not None:
            folder, make = found
            try:
                source = authors.source_of(folder)
                sides.append((source,
                              lambda p=p, make=make: make(p, device, AUTHORS_HELPERS)))
            except FileNotFoundError as e:
                if folder not in missing:
                    missing.add(folder)
                    report_failure(name, folder, f"the authors' modules of {folder}", str(e))
        runs = []
        for source, make in sides:
            label = f"{name} ({source})" if source else name
            try:
                torch.manual_seed(0)
                runs.append((source, label, make()))
            except Exception as e:  # noqa: BLE001 - reported per workload, the others still run
                failed += 1
                report_failure(name, source, label, f"{type(e).__name__}: {e}")
        for mode in modes:
            mode_settings = settings
            if reps and reps.get(mode):
                n = int(reps[mode])
                mode_settings = {**settings, "min_reps": n, "max_reps": n, "min_time_s": 0.0,
                                 "slow_run_s": float("inf"), "slow_reps": n}
            for source, label, run in list(runs):
                try:
                    times = measure(run, mode, mode_settings, sync)
                except Exception as e:  # noqa: BLE001
                    failed += 1
                    report_failure(name, source, label, f"{mode}: {type(e).__name__}: {e}")
                    runs.remove((source, label, run))
                    continue
                med = statistics.median(times)
                rec = {"name": name, "group": group, "mode": mode, "items": items, "unit": unit,
                       "times_s": times, "median_s": med, "min_s": min(times),
                       "max_s": max(times), "items_per_s": items / med, "threads": threads,
                       "torch_version": torch.__version__, "device": device}
                if source:
                    rec["source"] = source
                if hasattr(run, "model"):
                    rec["compositions"] = run.model.compositions
                print(PREFIX + json.dumps(rec), flush=True)
                log(f"pytorch {label:<60} {mode:<16} {med * 1e3:>10.2f} ms "
                    f"{items / med:>12.0f} {unit}/s")
    return failed


# --------------------------------------------------------------------------------------------
# Self-test: small shapes, outputs checked, speed never measured
# --------------------------------------------------------------------------------------------


def self_test():
    torch.manual_seed(0)
    set_threads(1)
    for cell, ctor in CELLS.items():
        m = ctor(6, 8, 2)
        x = uniform((3, 5, 6), 1)
        y = m(x)
        assert y.shape == (3, 5, 8), (cell, y.shape)
        run = input_run(m, x, lambda m, xa: m(xa))
        assert math.isfinite(run("forward")) and math.isfinite(run("forward+backward")), cell
    # Faster FastTrees' closed-form scan equals the generic ordered update with no h-input.
    ff = FasterFastTreesLayer(6, 8, 2)
    x = uniform((2, 4, 6), 3)
    ft = FastTreesLayer(6, 8, 2)
    with torch.no_grad():
        ft.ih.weight.copy_(ff.ih.weight)
        ft.ih.bias.copy_(ff.ih.bias)
        ft.hh.weight.zero_()
        assert torch.allclose(ff(x), ft(x), atol=1e-6)
    for leaf in ("affine", "lstm"):
        g = GumbelTreeLstm(6, 8, leaf, like_arbor=False)
        x = uniform((4, 7, 6), 1)
        lens = torch.tensor([7, 1, 3, 5])
        g.eval()
        with torch.no_grad():
            root, sel = g(x, lens)
            assert root.shape == (4, 8) and len(sel) == 6
            # Padding is exact: a sentence alone gets the root it gets in the batch.
            alone, _ = g(x[2:3, :3], lens[2:3])
            assert torch.allclose(alone, root[2:3], atol=1e-5), leaf
            if leaf == "affine":
                assert torch.allclose(root[1], g.leaf(x[1, 0]).chunk(2)[0], atol=1e-6)
        g.train()
        root, _ = g(x, lens, torch.Generator().manual_seed(0))
        root.sum().backward()
        assert g.query.grad is not None and torch.isfinite(g.query.grad).all()
    t = TransformerEncoder(16, 4, 32, 2, True, 4)
    y = t(uniform((2, 5, 16), 1), torch.tensor([5, 3]))
    assert y.shape == (2, 5, 16) and (y[1, 3:] == 0).all()
    # SPINN: the shift-reduce encoder equals per-node recursion with the same weights.
    s = SpinnPiNt(6, 8).eval()
    lengths, transitions, trees = spinn_inputs({"batch": 9, "max_len": 7})
    x = uniform((9, 7, 6), 1)
    with torch.no_grad():
        a, b = s(x, lengths, transitions), s.recursive(x, lengths, trees)
    assert a.shape == (9, 8) and torch.allclose(a, b, atol=1e-5)
    assert tree_from_transitions(transitions_of(((0, 1), 2))) == ((0, 1), 2)
    lstm = LstmLayer(6, 8, like_arbor=False)
    assert lstm.sentence(x, torch.tensor(lengths)).shape == (9, 8)
    # R2D2: compositions as the chart predicts; both modes finite.
    assert splitmix_tokens(1, 3, 1000, 0) == splitmix_tokens(1, 3, 1000, 0)
    for pruning, n in ((False, 6), (True, 9)):
        m = R2d2Lm(50, d=16, layers=1, heads=2, window=2, pruning=pruning)
        tokens = splitmix_tokens(2, n, 50, 0)
        m.eval()
        with torch.no_grad():
            loss, comps = m(tokens)
        if not pruning:
            assert comps == 2 * sum((n - length + 1) * (length - 1) for length in range(2, n + 1))
        else:
            assert 0 < comps < 2 * sum((n - length + 1) * (length - 1) for length in range(2, n + 1))
        m.train()
        loss, _ = m(tokens, torch.Generator().manual_seed(0))
        loss.backward()
        assert math.isfinite(loss.item()) and m.comp.score.weight.grad is not None
    # The learning-curve twins' forms of the same models (twins/common.py): padding keeps the
    # state, the Gumbel schedule that drops finished sentences and SPINN level by level give the
    # roots computed above.
    lens = torch.tensor([5, 2, 4])
    x = uniform((3, 5, 6), 2)
    for layer in (LstmLayer(6, 8), OnLstmLayer(6, 8, 2), FastTreesLayer(6, 8, 2)):
        with torch.no_grad():
            v = layer.sentence(x, lens)
            for b, n in enumerate(lens.tolist()):
                alone = layer(x[b:b + 1, :n])[0, -1]
                assert torch.allclose(v[b], alone, atol=1e-6), type(layer).__name__
    x = uniform((4, 7, 6), 1)
    lens = torch.tensor([7, 1, 3, 5])
    for leaf in ("affine", "lstm"):
        g = GumbelTreeLstm(6, 8, leaf).eval()
        with torch.no_grad():
            assert torch.allclose(g.sentence(x, lens), g(x, lens)[0], atol=1e-5), leaf
        g.train()
        g.sentence(x, lens).sum().backward()
        assert g.query.grad is not None and torch.isfinite(g.query.grad).all()
    x = uniform((9, 7, 6), 1)
    with torch.no_grad():
        c = s.sentence(x, torch.tensor(lengths), [tree_nodes(t) for t in trees])
        assert torch.allclose(c, s(x, lengths, transitions), atol=1e-5)
    names = [w[0] for w in suite()]
    assert len(names) == len(set(names)) == 28, len(names)
    # The authors' modules, at small shapes, where their checkouts are present.
    small = {
        "cells/t/on-lstm": {"cell": "on-lstm", "d_input": 6, "d_hidden": 8, "chunk_size": 2,
                            "batch": 3, "length": 5},
        "cells/t/conv-fasttrees": {"cell": "conv-fasttrees", "d_input": 12, "d_hidden": 8,
                                   "chunk_size": 2, "batch": 3, "length": 5},
        "gumbel/t": {"d_input": 6, "d_hidden": 8, "leaf": "lstm", "batch": 3,
                     "lengths": [5, 1, 3], "tau": 1.0},
        "r2d2/t": {"d_model": 16, "n_layers": 1, "n_heads": 2, "window": 2, "pruning": True,
                   "vocab": 200, "batch": 2, "length": 7},
    }
    assert authors.adapter("cells/t/lstm", {"cell": "lstm"}) is None
    assert authors.adapter("transformer/plain", {}) is None
    ran = []
    for name, p in small.items():
        folder, build = authors.adapter(name, p)
        try:
            authors.checkout(folder)
        except FileNotFoundError as e:
            log(f"twins.py self-test: authors' {folder} skipped ({e})")
            continue
        run = build(p, "cpu", AUTHORS_HELPERS)
        assert math.isfinite(run("forward")) and math.isfinite(run("forward+backward")), name
        ran.append(name)
    print(f"twins.py self-test: ok (authors' modules run: {', '.join(ran) or 'none'})")


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", help="JSON written by arbor-bench: workloads, modes, inputs, "
                                   "timing settings, threads, device")
    ap.add_argument("--filter", default="", help="comma-separated substrings of workload names")
    ap.add_argument("--quick", action="store_true", help="one timed run per mode (a smoke run)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's own default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-authors", action="store_true",
                    help="time the twins only, not the authors' modules (authors.py)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    table = {w[0]: w for w in suite()}
    if args.list:
        print("\n".join(table))
        return 0
    modes_both = ["forward", "forward+backward"]
    if args.spec:
        with open(args.spec, encoding="utf-8") as f:
            spec = json.load(f)
        settings = {**FULL, **spec.get("settings", {})}
        threads = int(spec.get("threads") or torch.get_num_threads())
        device = spec.get("device", "cpu")
        entries = []
        for w in spec["workloads"]:
            if w["name"] not in table:
                print(PREFIX + json.dumps({"name": w["name"], "error": "no PyTorch twin"}))
                continue
            entries.append((table[w["name"]], w.get("modes", modes_both), w.get("inputs"),
                            w.get("reps")))
    else:
        filters = [f for f in args.filter.split(",") if f]
        settings = QUICK if args.quick else FULL
        threads = args.threads or torch.get_num_threads()
        device = args.device
        entries = [(w, modes_both, None, None) for name, w in table.items()
                   if not filters or any(f in name for f in filters)]
        if not entries:
            log(f"no twin matches {filters}; --list shows the names")
            return 2
    log(f"pytorch twins: torch {torch.__version__}, {threads} thread(s), device {device}, "
        f"{len(entries)} workload(s)")
    with_authors = not args.no_authors and (not args.spec or spec.get("authors", True))
    return 1 if run_suite(entries, settings, threads, device, with_authors) else 0


if __name__ == "__main__":
    sys.exit(main())
