"""The authors' own PyTorch modules for arbor-bench's workloads (`--versus pytorch`).

`twins.py` times a plain PyTorch twin of every workload; where the papers' authors released a
module that still runs on current PyTorch, this file builds that module at the workload's shapes
so that both are timed side by side and arbor is compared with the faster of the two (issue 33:
the authors' Gumbel Tree-LSTM trains about 2x faster than the twin on an AVX-512 CPU).

Nothing of the reference code is copied here: each adapter imports the authors' classes at run
time from a checkout at a pinned commit, found under `$ARBOR_REFERENCE_DIR` (default
`runs/reference/` of this workspace, git-ignored), one folder per repository, as written by
`cargo xtask references`. A folder without the `.arbor-pin` file that command writes is still
used, and its commit is reported as unknown.

| workloads | repository @ commit | module |
|---|---|---|
| `gumbel/*` | jihunchoi/unsupervised-treelstm @ 47623f5 | `model.treelstm.BinaryTreeLSTM` |
| `cells/*/on-lstm` | billptw/FastTrees @ 776cf51 | `ON_LSTM.LSTMStack` |
| `cells/*/fasttrees` | billptw/FastTrees @ 776cf51 | `FastTrees.LSTMStack` |
| `cells/*/faster-fasttrees` | billptw/FastTrees @ 776cf51 | `FasterFT.LSTMStack` |
| `cells/*/conv-fasttrees` | billptw/FastTrees @ 776cf51 | `ConvFT.LSTMStack` |
| `r2d2/*` | alipay/StructuredLM_RTDT @ 6edf2ac (branch r2d2) | `model.r2d2.R2D2` |

Not adapted, and why (the twin stands alone there): `cells/*/lstm` and `spinn/lstm` (the twin
already is PyTorch's fused `nn.LSTM`); `transformer/*` (the twin is PyTorch's
`nn.TransformerEncoderLayer` fast path; arbor's FastTrees gate has no released module);
`spinn/*` (nyu-mll/spinn's PyTorch code needs PyTorch 0.1-era APIs: `Variable` volatility,
`torch.autograd.Function` with instance `forward`).

Each adapter computes what its workload computes: the same shapes, lengths and token ids, the
same loss (the sum of the module's outputs; R2D2: its own LM loss), argmax decisions in
evaluation and its own straight-through Gumbel sampling in training (seeded `torch.manual_seed(0)`
before every run). The authors' modules are run with dropout 0, as the workloads are.

Compatibility shims (the only departures from running the references as they are):
1. The FastTrees modules import their helpers by bare name (`from locked_dropout import ...`,
   `from TCN import ...`): the checkout is put on `sys.path` and each file is loaded as a module
   of its own (the four files define classes of the same names).
2. R2D2 and the Gumbel Tree-LSTM import `model.*`, `utils.*`, `data_structure.*` from their
   checkout roots (as their scripts do by running from that folder): the root is put on
   `sys.path` while importing, and each checkout's packages are kept apart in `sys.modules`
   (both have a package `model`).
3. ConvFT's `TemporalBlock` has a dropout of 0.2 that `LSTMStack` does not expose: its `p` is
   set to 0 after construction, as every workload runs without dropout. (ConvFT's released
   stack also differs from arbor's Conv FastTrees in structure: its convolution runs over the
   first `2·H/chunk` input features before the input projection; it is timed as released.)
"""

import contextlib
import importlib
import importlib.util
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
REFERENCE_ENV = "ARBOR_REFERENCE_DIR"
PIN_FILE = ".arbor-pin"



def _pins():
    """folder -> (owner/name, commit), from `references.json` beside this file (the one place
    the pins are written; `cargo xtask references` reads it too)."""
    with open(os.path.join(HERE, "references.json"), encoding="utf-8") as f:
        refs = json.load(f)["references"]
    return {r["folder"]: (r["repository"], r["commit"]) for r in refs}


REPOS = _pins()
FASTTREES_FILES = {
    "on-lstm": "ON_LSTM.py",
    "fasttrees": "FastTrees.py",
    "faster-fasttrees": "FasterFT.py",
    "conv-fasttrees": "ConvFT.py",
}


def reference_root():
    return os.environ.get(REFERENCE_ENV) or os.path.join(WORKSPACE, "runs", "reference")


def checkout(folder):
    """The checkout's path and its pinned commit (`None`: no `.arbor-pin`). Raises
    FileNotFoundError naming the folder and the command that fetches it."""
    path = os.path.join(reference_root(), folder)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"no checkout of {REPOS[folder][0]} at {path} (`cargo xtask references` fetches it; "
            f"${REFERENCE_ENV} names another folder)")
    pin = os.path.join(path, PIN_FILE)
    commit = None
    if os.path.isfile(pin):
        with open(pin, encoding="utf-8") as f:
            words = f.read().split()
        commit = words[0] if words else None
    return path, commit


def source_of(folder):
    """`owner/name@commit` of a checkout, for the records: `@unknown` without a pin file, and
    `(not the pinned X)` when the checkout holds another commit than `references.json` pins."""
    _, commit = checkout(folder)
    repo, pinned = REPOS[folder]
    if not commit:
        return f"{repo}@unknown"
    if commit != pinned:
        return f"{repo}@{commit[:7]} (not the pinned {pinned[:7]})"
    return f"{repo}@{commit[:7]}"


_loaded = {}


def load_file(folder, filename):
    """Loads `filename` of a checkout as a module of its own, the checkout on `sys.path`."""
    key = (folder, filename)
    if key not in _loaded:
        path, _ = checkout(folder)
        name = f"arbor_authors_{folder}_{os.path.splitext(filename)[0]}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, os.path.join(path, filename))
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, path)
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(path)
        _loaded[key] = module
    return _loaded[key]


def import_package_modules(folder, dotted_names):
    """`import` each of `dotted_names` with the checkout's root first on `sys.path` (the
    reference's own layout), keeping the checkout's top-level packages apart: two references
    both have a package `model`, so this checkout's modules are taken out of `sys.modules`
    after the import (the classes keep their modules alive) and any other checkout's are put
    back. Returns the modules in order."""
    key = (folder, tuple(dotted_names))
    if key in _loaded:
        return _loaded[key]
    path, _ = checkout(folder)
    tops = {os.path.splitext(e)[0] for e in os.listdir(path)}

    def take(names):
        return {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] in names}

    others = take(tops)
    sys.path.insert(0, path)
    try:
        modules = [importlib.import_module(d) for d in dotted_names]
    finally:
        sys.path.remove(path)
        take(tops)
        sys.modules.update(others)
    _loaded[key] = modules
    return modules


def seeded(fwd):
    """`fwd` with `torch.manual_seed(0)` first, so that the authors' modules, which draw their
    Gumbel noise from the global generator, make the same decisions at every run."""

    def run(m, xa):
        torch.manual_seed(0)
        return fwd(m, xa)

    return run


def cells_run(p, device, uniform, input_run):
    """billptw/FastTrees' `LSTMStack([d_in, d_h], chunk)` (one layer, dropout and dropconnect
    0), time-major as its scripts run it."""
    module = load_file("FastTrees", FASTTREES_FILES[p["cell"]])
    model = module.LSTMStack([p["d_input"], p["d_hidden"]], p["chunk_size"], dropout=0.0,
                             dropconnect=0.0).to(device)
    for m in model.modules():
        # Shim 3: ConvFT's TemporalBlock has a fixed dropout of 0.2; the workloads run none.
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    x = uniform((p["length"], p["batch"], p["d_input"]), 1).to(device)
    batch = p["batch"]

    def fwd(m, xa):
        return m(xa, m.init_hidden(batch))[0]

    return input_run(model, x, fwd)


def gumbel_run(p, device, uniform, input_run):
    """jihunchoi/unsupervised-treelstm's `BinaryTreeLSTM` (leaf LSTM or affine leaves, no
    intra-attention, unidirectional): the root `h`."""
    (treelstm,) = import_package_modules("unsupervised-treelstm", ["model.treelstm"])
    lengths = p["lengths"]
    if isinstance(lengths, int):
        lengths = [lengths] * p["batch"]
    model = treelstm.BinaryTreeLSTM(
        word_dim=p["d_input"], hidden_dim=p["d_hidden"], use_leaf_rnn=p["leaf"] == "lstm",
        intra_attention=False, gumbel_temperature=p.get("tau", 1.0), bidirectional=False,
    ).to(device)
    x = uniform((len(lengths), max(lengths), p["d_input"]), 1).to(device)
    lens = torch.tensor(lengths, device=device)
    return input_run(model, x, seeded(lambda m, xa: m(xa, lens)[0]))


def r2d2_run(p, device, tokens):
    """alipay/StructuredLM_RTDT's `R2D2` (branch r2d2) at the workload's sizes: its own
    bidirectional LM loss over the batch; pruned with window `p["window"]`, exhaustive CKY with
    a window as long as the sentence (its pruning starts at step `window_size`)."""
    r2d2, basic = import_package_modules(
        "StructuredLM_RTDT", ["model.r2d2", "data_structure.basic_structure"])
    d, n = p["d_model"], p["length"]
    config = basic.DotDict(
        vocab_size=p["vocab"], hidden_size=d, intermediate_size=4 * d,
        window_size=p["window"] if p["pruning"] else n, num_attention_heads=p["n_heads"],
        encoder_num_hidden_layers=p["n_layers"], max_role_embeddings=3,
        attention_probs_dropout_prob=0.0, pad_token_id=0, bos_token_id=4, eos_token_id=5,
        cls_token_id=101, sum_token_id=7, mask_token_id=103, nsp_token_id=8)
    model = r2d2.R2D2(config).to(device)
    ids = torch.tensor(tokens, device=device)
    mask = torch.ones_like(ids)

    def run(mode):
        torch.manual_seed(0)
        if mode == "forward":
            model.eval()
            with torch.no_grad():
                return model(input_ids=ids, attention_mask=mask)[0].item()
        model.train()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask)[0]
        value = loss.item()
        loss.backward()
        return value

    return run


def adapter(name, params):
    """The checkout folder and builder of the authors' module for workload `name`, or `None`.
    The builder takes `(params, device, helpers)` with `helpers` the twins' `uniform`,
    `splitmix_tokens` and `input_run` (the timing policy's run closure)."""
    group = name.split("/")[0]
    found = _adapter(group, params)
    if found is None:
        return None
    folder, build = found

    def quiet(p, dev, h):
        # Module constructors that print (ConvFT's TCN lists its layers) write to stderr:
        # stdout carries only result lines.
        with contextlib.redirect_stdout(sys.stderr):
            return build(p, dev, h)

    return folder, quiet


def _adapter(group, params):
    if group == "cells" and params.get("cell") in FASTTREES_FILES:
        return "FastTrees", lambda p, dev, h: cells_run(p, dev, h["uniform"], h["input_run"])
    if group == "gumbel":
        return "unsupervised-treelstm", lambda p, dev, h: gumbel_run(
            p, dev, h["uniform"], h["input_run"])
    if group == "r2d2":
        return "StructuredLM_RTDT", lambda p, dev, h: r2d2_run(
            p, dev, h["splitmix_tokens"](p["batch"], p["length"], p["vocab"], 0))
    return None
