#!/usr/bin/env python3
"""PyTorch twins of arbor-bench's workloads (`cargo xtask bench --versus pytorch`).

Every workload of `crates/arbor-bench/src/workloads/*.rs` has a twin here, written in plain,
idiomatic PyTorch: `nn.Module` classes, fused gate `nn.Linear` layers, stock modules where
PyTorch has them (`nn.LSTM`, `nn.LSTMCell`, `nn.TransformerEncoderLayer`,
`nn.MultiheadAttention`, `F.scaled_dot_product_attention`), `model.eval()` + `torch.no_grad()`
for the forward mode. Each twin computes what its arbor workload computes (the same shapes,
batch, lengths, trees and token ids, the same decisions: argmax at evaluation, straight-through
Gumbel-softmax with seeded noise in training, the same scalar loss) and is timed by the same
policy as `crates/arbor-bench/src/harness.rs`:

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
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - arbor-bench checks `import torch` first
    print(f"twins.py: cannot import torch ({e}); `pip install torch` (the CPU wheel is enough)",
          file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import authors  # noqa: E402  (the authors' own modules, beside this file)

PREFIX = "arbor-twin: "
NEG_BIG = -1e30
U_MIN, U_MAX = 1e-10, 1.0 - 1e-7


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


def gumbel_noise(shape, gen, device):
    u = torch.rand(shape, generator=gen).clamp_(U_MIN, U_MAX)
    return (-torch.log(-torch.log(u))).to(device)


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


def random_tree(n, rng):
    """A uniformly random merge order, as arbor's `BinaryTree::random`: at a layer of m + 1
    nodes merge the adjacent pair k ~ U(0..m). Trees are nested tuples of leaf indices."""
    nodes = list(range(n))
    for m in range(n - 1, 0, -1):
        k = rng.randrange(m)
        nodes[k:k + 2] = [(nodes[k], nodes[k + 1])]
    return nodes[0]


def tree_from_transitions(ts):
    """'S'/'R' string → nested tuples, leaves numbered in SHIFT order."""
    stack, nxt = [], 0
    for t in ts:
        if t == "S":
            stack.append(nxt)
            nxt += 1
        else:
            r = stack.pop()
            stack.append((stack.pop(), r))
    if len(stack) != 1:
        raise ValueError(f"malformed transitions {ts!r}")
    return stack[0]


def transitions_of(tree):
    if isinstance(tree, tuple):
        return transitions_of(tree[0]) + transitions_of(tree[1]) + "R"
    return "S"


def one_hot_st(scores, mask=None, hard_only=False):
    """Straight-through one-hot of the (masked) argmax of `scores`: forward value one-hot, gradient
    that of the masked softmax. `hard_only` (evaluation): the plain one-hot."""
    filled = scores if mask is None else scores.masked_fill(~mask, NEG_BIG)
    index = filled.detach().argmax(-1)
    hard = F.one_hot(index, scores.shape[-1]).to(scores.dtype)
    if hard_only:
        return hard, index
    soft = F.softmax(filled, -1)
    if mask is not None:
        soft = soft * mask
    return hard - soft.detach() + soft, index


# --------------------------------------------------------------------------------------------
# cells: LSTM, ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees (arbor-cells)
# --------------------------------------------------------------------------------------------


def cumax(x):
    return torch.cumsum(F.softmax(x, -1), -1)


def ordered_update(master_f, master_i, gates, c):
    """ON-LSTM eq. 11-14: master gates [B, C] broadcast over chunks of H / C neurons."""
    i, f, g, o = gates.chunk(4, 1)
    b, h = c.shape
    n_chunks = master_f.shape[1]
    mf, mi = master_f.unsqueeze(2), master_i.unsqueeze(2)
    w = mf * mi
    f_hat = (torch.sigmoid(f).view(b, n_chunks, -1) * w + (mf - w)).view(b, h)
    i_hat = (torch.sigmoid(i).view(b, n_chunks, -1) * w + (mi - w)).view(b, h)
    c = f_hat * c + i_hat * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


class LstmLayer(nn.Module):
    """One `nn.LSTM` layer (PyTorch's fused kernel): every sequence has the full length here."""

    def __init__(self, d_in, d_h):
        super().__init__()
        self.rnn = nn.LSTM(d_in, d_h, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


class OnLstmLayer(nn.Module):
    """ON-LSTM (Shen et al. 2019): `ih(x)` for the whole sequence, then per step one fused
    `hh(h)` for the master gates and the LSTM gates."""

    def __init__(self, d_in, d_h, chunk):
        super().__init__()
        self.d_h, self.c = d_h, d_h // chunk
        self.ih = nn.Linear(d_in, 2 * self.c + 4 * d_h)
        self.hh = nn.Linear(d_h, 2 * self.c + 4 * d_h, bias=False)

    def forward(self, x):
        b, t_max, _ = x.shape
        xp = self.ih(x)
        h = x.new_zeros(b, self.d_h)
        c = x.new_zeros(b, self.d_h)
        outputs, distances = [], []
        for t in range(t_max):
            g = xp[:, t] + self.hh(h)
            mf = cumax(g[:, :self.c])
            mi = 1.0 - cumax(g[:, self.c:2 * self.c])
            h, c = ordered_update(mf, mi, g[:, 2 * self.c:], c)
            outputs.append(h)
            distances.append(1.0 - mf.mean(1))
        self.distances = torch.stack(distances, 1)
        return torch.stack(outputs, 1)


class FastTreesLayer(nn.Module):
    """FastTrees: the master gates read x_t only and are computed for the whole sequence before
    the loop; the LSTM gates still read h_{t-1}."""

    def __init__(self, d_in, d_h, chunk):
        super().__init__()
        self.d_h, self.c = d_h, d_h // chunk
        self.ih = nn.Linear(d_in, 2 * self.c + 4 * d_h)
        self.hh = nn.Linear(d_h, 4 * d_h, bias=False)

    def master(self, x):
        xp = self.ih(x)
        c = self.c
        return cumax(xp[..., :c]), 1.0 - cumax(xp[..., c:2 * c]), xp[..., 2 * c:]

    def forward(self, x):
        b, t_max, _ = x.shape
        mf, mi, xp = self.master(x)
        h = x.new_zeros(b, self.d_h)
        c = x.new_zeros(b, self.d_h)
        outputs = []
        for t in range(t_max):
            h, c = ordered_update(mf[:, t], mi[:, t], xp[:, t] + self.hh(h), c)
            outputs.append(h)
        self.distances = 1.0 - mf.mean(2)
        return torch.stack(outputs, 1)


class ConvFastTreesLayer(FastTreesLayer):
    """Conv FastTrees: master gates from a causal convolution over time (kernel 3, d_in
    channels), a ReLU and a position-wise linear layer; otherwise FastTrees."""

    def __init__(self, d_in, d_h, chunk, kernel=3):
        super().__init__(d_in, d_h, chunk)
        self.kernel = kernel
        self.conv = nn.Conv1d(d_in, d_in, kernel)
        self.to_master = nn.Linear(d_in, 2 * self.c)
        self.ih = nn.Linear(d_in, 4 * d_h)

    def master(self, x):
        conv = self.conv(F.pad(x.transpose(1, 2), (self.kernel - 1, 0))).transpose(1, 2)
        m = self.to_master(F.relu(conv))
        c = self.c
        return cumax(m[..., :c]), 1.0 - cumax(m[..., c:]), self.ih(x)


class FasterFastTreesLayer(nn.Module):
    """Faster FastTrees (QRNN-style): every gate from x_t in one matmul over the sequence; the
    loop is the elementwise scan c_t = f̂ c_{t-1} + î tanh(ĉ), h_t = σ(o) tanh(c_t)."""

    def __init__(self, d_in, d_h, chunk):
        super().__init__()
        self.d_h, self.c = d_h, d_h // chunk
        self.ih = nn.Linear(d_in, 2 * self.c + 4 * d_h)

    def forward(self, x):
        b, t_max, _ = x.shape
        c_n, h_n = self.c, self.d_h
        xp = self.ih(x)
        mf = cumax(xp[..., :c_n]).unsqueeze(3)
        mi = (1.0 - cumax(xp[..., c_n:2 * c_n])).unsqueeze(3)
        i, f, g, o = xp[..., 2 * c_n:].chunk(4, 2)
        w = mf * mi
        f_hat = (torch.sigmoid(f).view(b, t_max, c_n, -1) * w + (mf - w)).view(b, t_max, h_n)
        i_hat = (torch.sigmoid(i).view(b, t_max, c_n, -1) * w + (mi - w)).view(b, t_max, h_n)
        u = i_hat * torch.tanh(g)
        o = torch.sigmoid(o)
        c = x.new_zeros(b, h_n)
        outputs = []
        for t in range(t_max):
            c = f_hat[:, t] * c + u[:, t]
            outputs.append(o[:, t] * torch.tanh(c))
        self.distances = 1.0 - mf.squeeze(3).mean(2)
        return torch.stack(outputs, 1)


CELLS = {
    "lstm": lambda d_in, d_h, k: LstmLayer(d_in, d_h),
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
# Tree-LSTM composition, Gumbel Tree-LSTM (Choi et al. 2018)
# --------------------------------------------------------------------------------------------


class TreeLstm(nn.Module):
    """Binary Tree-LSTM: one fused Linear(2D, 5D), gates i, f_l, f_r, o, u; forget biases 1."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Linear(2 * d, 5 * d)
        with torch.no_grad():
            self.w.bias.zero_()
            self.w.bias[d:3 * d] = 1.0

    def forward(self, hl, cl, hr, cr):
        i, fl, fr, o, u = self.w(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr + torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c


class GumbelTreeLstm(nn.Module):
    """Every example advances one layer at a time: all adjacent pairs composed in one call,
    scored q·h̃/√D, one selected (argmax / ST Gumbel-softmax over the valid candidates), the
    layer shrinks by one; a complete sentence keeps its left column (the `done` mask)."""

    def __init__(self, d_in, d, leaf, tau=1.0):
        super().__init__()
        self.d, self.tau, self.leaf_kind = d, tau, leaf
        if leaf == "lstm":
            self.leaf = nn.LSTMCell(d_in, d)
            with torch.no_grad():
                self.leaf.bias_ih.zero_()
                self.leaf.bias_hh.zero_()
                self.leaf.bias_ih[d:2 * d] = 1.0
        else:
            self.leaf = nn.Linear(d_in, 2 * d)
        self.comp = TreeLstm(d)
        self.query = nn.Parameter(torch.randn(d) * 0.01)

    def leaves(self, x):
        if self.leaf_kind == "affine":
            return self.leaf(x).chunk(2, -1)
        b, n, _ = x.shape
        h = x.new_zeros(b, self.d)
        c = x.new_zeros(b, self.d)
        hs, cs = [], []
        for t in range(n):
            h, c = self.leaf(x[:, t], (h, c))
            hs.append(h)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(cs, 1)

    def forward(self, x, lengths, noise_gen=None):
        n = int(lengths.max())
        h, c = self.leaves(x[:, :n])
        arange = torch.arange(n, device=x.device)
        selected = []
        for t in range(n - 1):
            m = n - t
            lh, lc, rh, rc = h[:, :-1], c[:, :-1], h[:, 1:], c[:, 1:]
            ph, pc = self.comp(lh, lc, rh, rc)
            logits = ph @ self.query / math.sqrt(self.d)
            valid = (arange[:m - 1] + t + 1).unsqueeze(0) < lengths.unsqueeze(1)
            if self.training:
                scores = (logits + gumbel_noise(logits.shape, noise_gen, x.device)) / self.tau
                s, index = one_hot_st(scores, valid)
            else:
                s, index = one_hot_st(logits, valid, hard_only=True)
            selected.append(index)
            s = s.unsqueeze(2)
            cum = s.cumsum(1)
            done = (lengths < t + 2).view(-1, 1, 1)
            h = torch.where(done, lh, s * ph + (1.0 - cum) * lh + (cum - s) * rh)
            c = torch.where(done, lc, s * pc + (1.0 - cum) * lc + (cum - s) * rc)
        return h[:, 0], selected


def gumbel_run(p, device):
    lengths = p["lengths"]
    if isinstance(lengths, int):
        lengths = [lengths] * p["batch"]
    model = GumbelTreeLstm(p["d_input"], p["d_hidden"], p["leaf"], p.get("tau", 1.0)).to(device)
    x = uniform((len(lengths), max(lengths), p["d_input"]), 1).to(device)
    lens = torch.tensor(lengths, device=device)

    def fwd(m, xa):
        gen = torch.Generator().manual_seed(0) if m.training else None
        return m(xa, lens, gen)[0]

    return input_run(model, x, fwd)


# --------------------------------------------------------------------------------------------
# Transformer encoder with and without the FastTrees gate (arbor-blocks)
# --------------------------------------------------------------------------------------------


def sinusoids(time_steps, d):
    t = torch.arange(time_steps, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(d)
    angle = t / torch.pow(10000.0, (2 * (j // 2)).double() / d)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).float()


class FastTreesGate(nn.Module):
    """Pung & Chan §3.3: one Linear(D, 2C + D) → cumax master gates and σ gate; the attention
    output is multiplied by σ(F_h)·ω + (A − ω)."""

    def __init__(self, d, chunk):
        super().__init__()
        self.c = d // chunk
        self.proj = nn.Linear(d, 2 * self.c + d)

    def forward(self, x):
        b, t, d = x.shape
        c = self.c
        z = self.proj(x)
        a = cumax(z[..., :c]).unsqueeze(3)
        bb = (1.0 - cumax(z[..., c:2 * c])).unsqueeze(3)
        hg = torch.sigmoid(z[..., 2 * c:]).view(b, t, c, -1)
        w = a * bb
        gate = (hg * w + (a - w)).view(b, t, d)
        self.distances = 1.0 - a.squeeze(3).mean(2)
        return gate * x


class GatedEncoderLayer(nn.Module):
    """`nn.TransformerEncoderLayer` (post-norm, ReLU) with the FastTrees gate after
    self-attention. PyTorch has no hook for that, so the layer is spelled out with the same
    stock modules."""

    def __init__(self, d, heads, d_ff, chunk):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.gate = FastTreesGate(d, chunk)
        self.linear1 = nn.Linear(d, d_ff)
        self.linear2 = nn.Linear(d_ff, d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x, src_key_padding_mask=None):
        a = self.self_attn(x, x, x, key_padding_mask=src_key_padding_mask, need_weights=False)[0]
        x = self.norm1(x + self.gate(a))
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, d, heads, d_ff, layers, fasttrees, chunk, max_len=512):
        super().__init__()
        if fasttrees:
            self.layers = nn.ModuleList(GatedEncoderLayer(d, heads, d_ff, chunk) for _ in range(layers))
            self.stock = None
        else:
            layer = nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.0, batch_first=True)
            self.stock = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.register_buffer("positions", sinusoids(max_len, d), persistent=False)

    def forward(self, x, lengths):
        t = x.shape[1]
        pad = torch.arange(t, device=x.device).unsqueeze(0) >= lengths.unsqueeze(1)
        h = x + self.positions[:t]
        if self.stock is not None:
            h = self.stock(h, src_key_padding_mask=pad)
        else:
            for layer in self.layers:
                h = layer(h, src_key_padding_mask=pad)
        return h.masked_fill(pad.unsqueeze(2), 0.0)


def transformer_run(p, device):
    model = TransformerEncoder(p["d_model"], p["n_heads"], p["d_ff"], p["n_layers"],
                               p["fasttrees_gate"], p["chunk_size"]).to(device)
    x = uniform((p["batch"], p["length"], p["d_model"]), 1).to(device)
    lens = torch.full((p["batch"],), p["length"], device=device)
    return input_run(model, x, lambda m, xa: m(xa, lens))


# --------------------------------------------------------------------------------------------
# SPINN-PI-NT (shift-reduce over stacks), the per-node recursive Tree-LSTM, the LSTM
# --------------------------------------------------------------------------------------------


class SpinnPiNt(nn.Module):
    """SPINN without tracking, given transitions. Words go through Linear(D, 2D) to [h; c];
    each transition step is one batched Tree-LSTM call over the examples that REDUCE.

    `forward` is the shift-reduce encoder in the PyTorch idiom of SPINN's own PyTorch code
    (nyu-mll/spinn, `fat_stack.py`): stacks and buffers are Python lists of per-example rows,
    REDUCE pops two rows per example, and the composed rows are pushed back after one batched
    call. (arbor's thin stack keeps one stack tensor and host-side pointers instead; in eager
    PyTorch, writing one row per step into a stack tensor would copy it, as Burn does.)
    `recursive` is the per-sentence, per-node recursion over the same weights."""

    def __init__(self, d_in, d):
        super().__init__()
        self.d = d
        self.proj = nn.Linear(d_in, 2 * d)
        self.comp = TreeLstm(d)

    def compose(self, left, right):
        hl, cl = left.chunk(2, -1)
        hr, cr = right.chunk(2, -1)
        h, c = self.comp(hl, cl, hr, cr)
        return torch.cat([h, c], -1)

    def forward(self, x, lengths, transitions):
        words = self.proj(x)
        bufs = [list(words[b, :n].unbind(0))[::-1] for b, n in enumerate(lengths)]
        stacks = [[] for _ in lengths]
        steps = max(len(t) for t in transitions)
        for t in range(steps):
            lefts, rights, reducing = [], [], []
            for b, ts in enumerate(transitions):
                if t >= len(ts):
                    continue
                if ts[t] == "S":
                    stacks[b].append(bufs[b].pop())
                else:
                    rights.append(stacks[b].pop())
                    lefts.append(stacks[b].pop())
                    reducing.append(b)
            if reducing:
                out = self.compose(torch.stack(lefts), torch.stack(rights))
                for b, row in zip(reducing, out.unbind(0)):
                    stacks[b].append(row)
        return torch.stack([s[-1] for s in stacks])[:, :self.d]

    def recursive(self, x, lengths, trees):
        roots = []
        for b, (n, tree) in enumerate(zip(lengths, trees)):
            leaves = self.proj(x[b, :n])

            def node(t):
                if isinstance(t, tuple):
                    return self.compose(node(t[0]), node(t[1]))
                return leaves[t:t + 1]

            roots.append(node(tree))
        return torch.cat(roots)[:, :self.d]


class LstmEncoder(nn.Module):
    """One `nn.LSTM` layer over packed sequences; the sentence vector is h after the last word."""

    def __init__(self, d_in, d):
        super().__init__()
        self.rnn = nn.LSTM(d_in, d, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        return self.rnn(packed)[1][0][-1]


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
        model = LstmEncoder(d, d).to(device)
        lens = torch.tensor(lengths)
        return input_run(model, x, lambda m, xa: m(xa, lens))
    model = SpinnPiNt(d, d).to(device)
    if kind == "recursive":
        return input_run(model, x, lambda m, xa: m.recursive(xa, lengths, trees))
    return input_run(model, x, lambda m, xa: m(xa, lengths, transitions))


# --------------------------------------------------------------------------------------------
# R2D2 (Hu et al. 2021): pruned differentiable CKY with a 2-layer composition Transformer
# --------------------------------------------------------------------------------------------


def attention_bias(length, tasks):
    """Additive mask: task token i sees itself and the inputs; inputs see the inputs only."""
    allowed = torch.zeros(length, length, dtype=torch.bool)
    allowed[:, tasks:] = True
    for i in range(tasks):
        allowed[i, i] = True
    return torch.zeros(length, length).masked_fill(~allowed, -1e9)


class RoleLayer(nn.Module):
    """Post-LN Transformer layer whose queries and keys get role embeddings (no bias on the
    role part), GELU feed-forward."""

    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm_attn = nn.LayerNorm(d)
        self.ff_in = nn.Linear(d, d_ff)
        self.ff_out = nn.Linear(d_ff, d)
        self.norm_ff = nn.LayerNorm(d)

    def forward(self, x, roles, bias):
        n, length, d = x.shape
        role_qk = roles @ self.qkv.weight[:2 * d].t()
        qkv = self.qkv(x) + F.pad(role_qk, (0, d))
        q, k, v = qkv.view(n, length, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.norm_attn(x + self.out(a.transpose(1, 2).reshape(n, length, d)))
        return self.norm_ff(x + self.ff_out(F.gelu(self.ff_in(x))))


def ln(x):
    return F.layer_norm(x, x.shape[-1:], eps=1e-5)


class Composition(nn.Module):
    """f(left, right) over [CLS, SUM, left, right]: the representation is the LN'd softmax
    mix of the two outputs, log p = log σ(score(SUM))."""

    def __init__(self, d, layers=2, heads=4):
        super().__init__()
        self.d = d
        self.layers = nn.ModuleList(RoleLayer(d, heads, 4 * d) for _ in range(layers))
        self.task_tokens = nn.Parameter(torch.randn(3, d) * 0.02)
        self.roles = nn.Parameter(torch.randn(3, d))
        self.score = nn.Linear(d, 1)
        self.mix = nn.Linear(d, 2)
        self.register_buffer("bias4", attention_bias(4, 2), persistent=False)
        self.register_buffer("bias3", attention_bias(3, 1), persistent=False)

    def encode(self, x, role_ids, bias):
        roles = self.roles[role_ids]
        for layer in self.layers:
            x = layer(x, roles, bias)
        return x

    def forward(self, left, right):
        n = left.shape[0]
        x = torch.cat([self.task_tokens[:2].expand(n, 2, self.d), left.unsqueeze(1),
                       right.unsqueeze(1)], 1)
        o = self.encode(x, [0, 0, 1, 2], self.bias4)
        w = F.softmax(self.mix(o[:, 0]), -1)
        mixed = o[:, 2] * w[:, :1] + o[:, 3] * w[:, 1:]
        return ln(mixed), F.logsigmoid(self.score(o[:, 1])).squeeze(1)

    def context(self, left, right):
        n = left.shape[0]
        x = torch.cat([self.task_tokens[2:].expand(n, 1, self.d), left.unsqueeze(1),
                       right.unsqueeze(1)], 1)
        return ln(self.encode(x, [0, 1, 2], self.bias3)[:, 0])


class Cell:
    __slots__ = ("e_row", "lpt_row", "splits", "log_p")

    def __init__(self, e_row, lpt_row, splits, log_p):
        self.e_row, self.lpt_row, self.splits, self.log_p = e_row, lpt_row, splits, log_p


class SentenceChart:
    """Host-side structure of one sentence's chart (cells by span, current terminals)."""

    def __init__(self, n, leaf_rows):
        self.n = n
        self.cells = {}
        self.atoms = [(i, i) for i in range(n)]
        self.merged = []
        self.longest_ending = [(1, r) for r in leaf_rows]
        self.longest_starting = [(1, r) for r in leaf_rows]

    def add(self, span, cell):
        length = span[1] - span[0] + 1
        if length > self.longest_ending[span[1]][0]:
            self.longest_ending[span[1]] = (length, cell.e_row)
        if length > self.longest_starting[span[0]][0]:
            self.longest_starting[span[0]] = (length, cell.e_row)
        self.cells[span] = cell

    def find(self, window):
        """Algorithm 2: the bigram of terminals to merge next (index of its left terminal)."""
        atoms = self.atoms
        a = len(atoms)
        at_start = {s: t for t, (s, _) in enumerate(atoms)}
        at_end = {e: t for t, (_, e) in enumerate(atoms)}
        used = [False] * (a - 1)
        stack = [(atoms[s][0], atoms[s + window][1]) for s in range(a - window)]
        while stack:
            span = stack.pop()
            first, last = at_start[span[0]], at_end[span[1]]
            if last - first == 1:
                used[first] = True
            elif last - first > 1:
                cell = self.cells[span]
                k = next((k for k in cell.splits if k in at_end), cell.splits[0])
                stack.append((span[0], k))
                stack.append((k + 1, span[1]))

        def p(u):
            return math.exp(self.cells[(atoms[u][0], atoms[u + 1][1])].log_p)

        def score(u):
            s = math.log(max(p(u), 1e-9))
            if u > 0:
                s += math.log(max(1.0 - p(u - 1), 1e-9))
            if u + 2 < a:
                s += math.log(max(1.0 - p(u + 1), 1e-9))
            return s

        candidates = [u for u in range(a - 1) if used[u]] or list(range(a - 1))
        return max(candidates, key=score)

    def merge(self, u, window):
        span = (self.atoms[u][0], self.atoms[u + 1][1])
        self.atoms[u:u + 2] = [span]
        self.merged.append(span)
        a = len(self.atoms)
        missing = []
        if a > window:
            for s in range(max(u - window, 0), min(u, a - window - 1) + 1):
                cell = (self.atoms[s][0], self.atoms[s + window][1])
                missing.append((cell, [self.atoms[t][1] for t in range(s, s + window)]))
        return missing


class R2d2Lm(nn.Module):
    """R2D2's bidirectional LM: embeddings → chart (all pending cells of all sentences, every
    split, in one composition call per step) → each token predicted from the longest cells left
    and right of it."""

    def __init__(self, vocab, d=128, layers=2, heads=4, window=4, pruning=True, tau=1.0):
        super().__init__()
        self.d, self.window, self.pruning, self.tau = d, window, pruning, tau
        self.embedding = nn.Embedding(vocab, d)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.comp = Composition(d, layers, heads)
        self.edges = nn.Parameter(torch.randn(2, d) * 0.02)
        self.head = nn.Linear(d, d)
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, tokens, noise_gen=None):
        """tokens: a list of `batch` lists of ids (all of one length here). Returns the mean
        NLL and the number of compositions."""
        device = self.embedding.weight.device
        batch, time_steps = len(tokens), max(len(s) for s in tokens)
        ids = torch.tensor([s + [0] * (time_steps - len(s)) for s in tokens], device=device)
        leaves = self.embedding(ids).reshape(batch * time_steps, self.d)
        self.e = leaves
        self.lpt = leaves.new_zeros(batch * time_steps)
        self.compositions = 0
        self.noise_gen = noise_gen
        charts = [SentenceChart(len(s), [b * time_steps + i for i in range(len(s))])
                  for b, s in enumerate(tokens)]
        lengths = [len(s) for s in tokens]
        for span_len in range(2, max(lengths) + 1):
            jobs = [(b, (i, i + span_len - 1), list(range(i, i + span_len - 1)))
                    for b, n in enumerate(lengths)
                    if n >= span_len and (not self.pruning or span_len <= self.window + 1)
                    for i in range(n - span_len + 1)]
            if not jobs:
                break
            self.compute(charts, jobs, time_steps)
        while self.pruning:
            pending = [b for b, ch in enumerate(charts) if len(ch.atoms) > self.window + 1]
            if not pending:
                break
            jobs, merged = [], []
            for b in pending:
                ch = charts[b]
                u = ch.find(self.window)
                span = (ch.atoms[u][0], ch.atoms[u + 1][1])
                merged.append((b, span, ch.cells[span].lpt_row))
                jobs += [(b, cell, splits) for cell, splits in ch.merge(u, self.window)]
            # The new terminals' log p̃ become constants.
            first = self.push(leaves.new_zeros(len(merged), self.d),
                              self.lpt[[m[2] for m in merged]].detach())
            for t, (b, span, _) in enumerate(merged):
                charts[b].cells[span].lpt_row = first + t
            self.compute(charts, jobs, time_steps)

        rows = self.e.shape[0]
        table = torch.cat([self.e, self.edges])
        left, right, targets = [], [], []
        for ch, s in zip(charts, tokens):
            for i in range(ch.n):
                left.append(ch.longest_ending[i - 1][1] if i > 0 else rows)
                right.append(ch.longest_starting[i + 1][1] if i + 1 < ch.n else rows + 1)
                targets.append(s[i])
        h = self.comp.context(table[left], table[right])
        h = ln(F.gelu(self.head(h)))
        logits = h @ self.embedding.weight.t() + self.out_bias
        return F.cross_entropy(logits, torch.tensor(targets, device=device)), self.compositions

    def push(self, e, lpt):
        first = self.e.shape[0]
        self.e = torch.cat([self.e, e])
        self.lpt = torch.cat([self.lpt, lpt])
        return first

    def compute(self, charts, jobs, time_steps):
        if not jobs:
            return
        c, k = len(jobs), len(jobs[0][2])

        def rows_of(b, span):
            if span[0] == span[1]:
                r = b * time_steps + span[0]
                return r, r
            cell = charts[b].cells[span]
            return cell.e_row, cell.lpt_row

        le, ll, re, rl = [], [], [], []
        for b, span, splits in jobs:
            for s in splits:
                e, lp = rows_of(b, (span[0], s))
                le.append(e)
                ll.append(lp)
                e, lp = rows_of(b, (s + 1, span[1]))
                re.append(e)
                rl.append(lp)
        n = c * k
        e = self.e[le + re]
        lpt = self.lpt[ll + rl]
        repr_, log_p = self.comp(e[:n], e[n:])
        lpt_k = log_p + lpt[:n] + lpt[n:]
        host = torch.cat([lpt_k.detach(), log_p.detach()]).tolist()
        lpt_k = lpt_k.view(c, k)
        if k == 1:
            e_new, lpt_new = repr_, lpt_k.view(c)
        else:
            if self.training:
                scores = (lpt_k + gumbel_noise((c, k), self.noise_gen, lpt_k.device)) / self.tau
                alpha, _ = one_hot_st(scores)
            else:
                alpha, _ = one_hot_st(lpt_k, hard_only=True)
            e_new = (repr_.view(c, k, self.d) * alpha.unsqueeze(2)).sum(1)
            lpt_new = (lpt_k * alpha).sum(1)
        first = self.push(e_new, lpt_new)
        for t, (b, span, splits) in enumerate(jobs):
            scores = host[t * k:(t + 1) * k]
            order = sorted(range(k), key=lambda o: (-scores[o], o))
            charts[b].add(span, Cell(first + t, first + t, [splits[o] for o in order],
                                     host[n + t * k + order[0]]))
        self.compositions += n


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

FULL = {"warmup": 0, "min_reps": 3, "max_reps": 10, "min_time_s": 1.5, "slow_run_s": 3.0,
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
        g = GumbelTreeLstm(6, 8, leaf)
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
    lstm = LstmEncoder(6, 8)
    assert lstm(x, torch.tensor(lengths)).shape == (9, 8)
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
