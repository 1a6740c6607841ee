"""The PyTorch models that mirror arbor's, written once for both PyTorch sides of the workspace:

- `twins.py` beside this file (arbor-bench `--versus pytorch`) times them on the bench's
  workloads;
- `twins/common.py` at the workspace root (the learning-curve twins of the example programs)
  trains them; it puts this folder on `sys.path`.

This file imports nothing but torch (`cargo xtask gpu-pack` copies this folder alone). The
comments name the Rust file each part follows. Linear layers are plain `nn.Linear`: Burn's
Linear init is KaimingUniform(gain 1/sqrt 3) = U(±1/sqrt(fan_in)) for weight and bias, PyTorch's
default. Where the two users want different things from one model, a constructor flag or a
second method says so:

- `like_arbor` (LSTM layers, the Gumbel leaf LSTM): re-draw the weights as arbor's
  `LstmCell` does and freeze PyTorch's redundant `bias_hh` at 0 (the learning curves); off,
  PyTorch's own `nn.LSTM` / `nn.LSTMCell` initialisation (the bench, whose timings do not
  depend on the numbers);
- recurrent layers: `forward(x)` gives every step's output (the bench's full-length
  sequences); `forward(x, lengths)` keeps the state over padding steps, and `sentence(x,
  lengths)` is the state after each sentence's last word (arbor's pooling `last`);
- `GumbelTreeLstm.forward` runs every row through every layer with arbor's `done` mask and
  seeded noise (the bench); `GumbelTreeLstm.sentence` drops finished sentences as it goes and
  draws the noise from torch's global generator (the learning curves): the same roots, the
  noise falls on other rows;
- `SpinnPiNt.forward` (shift-reduce), `.recursive` (per node) and `.sentence` (level by level)
  compute the same roots with the same weights.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_BIG = -1e30
U_MIN, U_MAX = 1e-10, 1.0 - 1e-7


# --------------------------------------------------------------------------------------------
# Selection helpers (arbor-cells gumbel.rs)
# --------------------------------------------------------------------------------------------


def gumbel_noise(shape, gen, device):
    """g = −log(−log u), u from `gen` clamped to [1e-10, 1 − 1e-7]."""
    u = torch.rand(shape, generator=gen).clamp_(U_MIN, U_MAX)
    return (-torch.log(-torch.log(u))).to(device)


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


def masked_softmax(scores, mask):
    """cells/gumbel.rs `masked_softmax`: exact zeros outside the mask, no NaN when a row is
    all-invalid (finished sentences)."""
    filled = scores.masked_fill(~mask, NEG_BIG)
    mx = filled.max(1, keepdim=True).values.detach()
    e = (filled - mx).masked_fill(~mask, 0.0).exp() * mask.float()
    return e / e.sum(1, keepdim=True).clamp_min(1e-12)


# --------------------------------------------------------------------------------------------
# Trees: nested tuples of leaf indices, and the forms the encoders read
# --------------------------------------------------------------------------------------------


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


def tree_nodes(tree):
    """A nested-tuple binary tree (leaves are anything else) → its internal nodes
    [(left, right, height)] in post-order with local ids (leaves numbered left to right 0..n-1,
    internal node j numbered n + j): the form `SpinnPiNt.sentence` reads."""
    n_leaves = [0]

    def count(t):
        if isinstance(t, tuple):
            count(t[0])
            count(t[1])
        else:
            n_leaves[0] += 1

    count(tree)
    n = n_leaves[0]
    nodes = []
    next_leaf = [0]

    def walk(t):
        if not isinstance(t, tuple):
            next_leaf[0] += 1
            return next_leaf[0] - 1, 0
        l, hl = walk(t[0])
        r, hr = walk(t[1])
        nodes.append((l, r, 1 + max(hl, hr)))
        return n + len(nodes) - 1, 1 + max(hl, hr)

    walk(tree)
    return nodes


# --------------------------------------------------------------------------------------------
# Cells: LSTM, ON-LSTM, FastTrees, Faster FastTrees, Conv FastTrees (arbor-cells). Inputs
# [B, T, d_in]; `forward(x)` → outputs [B, T, H]; with `lengths` [B], padding steps keep the
# state, and `sentence(x, lengths)` → [B, H], the state after each sentence's last word.
# --------------------------------------------------------------------------------------------


def default_chunk_size(d):
    """arbor-encoders lstm.rs `default_chunk_size`: largest c in 1..=min(10, d) dividing d."""
    return next(c for c in range(min(10, max(d, 1)), 0, -1) if d % c == 0)


def cumax(x):
    return torch.cumsum(F.softmax(x, -1), -1)


def lstm_params_like_arbor(lstm):
    """cells/lstm.rs: input Linear(d_in, 4H) with bias, hidden Linear(H, 4H) without bias, gates
    i, f, u(g), o: PyTorch's order. So an nn.LSTM / nn.LSTMCell matches with weight_ih and bias_ih
    ~ U(±1/sqrt(d_in)), weight_hh ~ U(±1/sqrt(H)) and bias_hh fixed at 0 (frozen)."""
    for name, p in lstm.named_parameters():
        with torch.no_grad():
            if name.startswith("weight_ih") or name.startswith("bias_ih"):
                bound = 1.0 / math.sqrt(lstm.input_size)
                p.uniform_(-bound, bound)
            elif name.startswith("weight_hh"):
                bound = 1.0 / math.sqrt(lstm.hidden_size)
                p.uniform_(-bound, bound)
            elif name.startswith("bias_hh"):
                p.zero_()
                p.requires_grad_(False)


def ordered_update(master_f, master_i, gates, c):
    """ON-LSTM eq. 11-14 (master.rs `ordered_update`): master gates mf, mi [B, C] (activated),
    gate pre-activations [i; f; u; o] [B, 4H], cell c [B, H] → (h, c). ω = f~·i~,
    f^ = σ(f)·ω + (f~ − ω), i^ = σ(i)·ω + (i~ − ω) chunk-wise (C chunks of H / C neurons),
    c = f^·c + i^·tanh(u), h = σ(o)·tanh(c)."""
    i, f, g, o = gates.chunk(4, 1)
    b, h = c.shape
    n_chunks = master_f.shape[1]
    mf, mi = master_f.unsqueeze(2), master_i.unsqueeze(2)
    w = mf * mi
    f_hat = (torch.sigmoid(f).view(b, n_chunks, -1) * w + (mf - w)).view(b, h)
    i_hat = (torch.sigmoid(i).view(b, n_chunks, -1) * w + (mi - w)).view(b, h)
    c = f_hat * c + i_hat * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def keep_padding(new_h, new_c, h, c, lengths, t):
    """runner.rs: a sentence shorter than t + 1 keeps its state at step t."""
    if lengths is None:
        return new_h, new_c
    m = (lengths > t).unsqueeze(1)
    return torch.where(m, new_h, h), torch.where(m, new_c, c)


class LstmLayer(nn.Module):
    """One `nn.LSTM` layer (PyTorch's fused kernel); cells/lstm.rs + encoders/lstm.rs (1 layer,
    pooling `last`) with `like_arbor` (see `lstm_params_like_arbor`)."""

    def __init__(self, d_in, d_h, like_arbor=True):
        super().__init__()
        self.rnn = nn.LSTM(d_in, d_h, batch_first=True)
        if like_arbor:
            lstm_params_like_arbor(self.rnn)

    def forward(self, x):
        """Every sequence has the full length here."""
        return self.rnn(x)[0]

    def sentence(self, x, lengths):
        """Over packed sequences: h after each sentence's last word."""
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        return self.rnn(packed)[1][0][-1]


class OnLstmLayer(nn.Module):
    """ON-LSTM (Shen et al. 2019; cells/on_lstm.rs + master.rs + runner.rs): `ih(x)` for the
    whole sequence, then per step one fused `hh(h)` (no bias) for the master gates and the LSTM
    gates. Pre-activations [forget-master (C); input-master (C); i; f; u; o (H each)];
    f~ = cumax, i~ = 1 − cumax, then `ordered_update`."""

    def __init__(self, d_in, d_h, chunk):
        super().__init__()
        assert d_h % chunk == 0, f"the width {d_h} must be a multiple of the chunk size {chunk}"
        self.d_h, self.c = d_h, d_h // chunk
        self.ih = nn.Linear(d_in, 2 * self.c + 4 * d_h)
        self.hh = nn.Linear(d_h, 2 * self.c + 4 * d_h, bias=False)

    def forward(self, x, lengths=None):
        b, t_max, _ = x.shape
        xp = self.ih(x)
        h = x.new_zeros(b, self.d_h)
        c = x.new_zeros(b, self.d_h)
        outputs, distances = [], []
        for t in range(t_max):
            g = xp[:, t] + self.hh(h)
            mf = cumax(g[:, :self.c])
            mi = 1.0 - cumax(g[:, self.c:2 * self.c])
            new_h, new_c = ordered_update(mf, mi, g[:, 2 * self.c:], c)
            h, c = keep_padding(new_h, new_c, h, c, lengths, t)
            outputs.append(h)
            distances.append(1.0 - mf.mean(1))
        self.distances = torch.stack(distances, 1)
        return torch.stack(outputs, 1)

    def sentence(self, x, lengths):
        return self(x, lengths)[:, -1]


class FastTreesLayer(nn.Module):
    """FastTrees (cells/fast_trees.rs): the master gates read x_t only and are computed for the
    whole sequence before the loop (`ih`: [forget-master (C); input-master (C); i; f; u; o]); the
    LSTM gates still read h_{t-1} (`hh`: Linear(H, 4H), no bias); the update is ON-LSTM's."""

    def __init__(self, d_in, d_h, chunk):
        super().__init__()
        assert d_h % chunk == 0, f"the width {d_h} must be a multiple of the chunk size {chunk}"
        self.d_h, self.c = d_h, d_h // chunk
        self.ih = nn.Linear(d_in, 2 * self.c + 4 * d_h)
        self.hh = nn.Linear(d_h, 4 * d_h, bias=False)

    def master(self, x):
        xp = self.ih(x)
        c = self.c
        return cumax(xp[..., :c]), 1.0 - cumax(xp[..., c:2 * c]), xp[..., 2 * c:]

    def forward(self, x, lengths=None):
        b, t_max, _ = x.shape
        mf, mi, xp = self.master(x)
        h = x.new_zeros(b, self.d_h)
        c = x.new_zeros(b, self.d_h)
        outputs = []
        for t in range(t_max):
            new_h, new_c = ordered_update(mf[:, t], mi[:, t], xp[:, t] + self.hh(h), c)
            h, c = keep_padding(new_h, new_c, h, c, lengths, t)
            outputs.append(h)
        self.distances = 1.0 - mf.mean(2)
        return torch.stack(outputs, 1)

    def sentence(self, x, lengths):
        return self(x, lengths)[:, -1]


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


# --------------------------------------------------------------------------------------------
# Tree-LSTM composition, Gumbel Tree-LSTM (Choi et al. 2018)
# --------------------------------------------------------------------------------------------


class TreeLstm(nn.Module):
    """cells/tree_lstm.rs `BinaryTreeLstm`: gates = W[h_l; h_r] + b in the order i, f_l, f_r, o, u
    (one fused Linear(2D, 5D), W ~ U(±1/sqrt(2D))); the bias starts at 0 except the two forget
    gates at 1."""

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
    """encoders/gumbel_tree_lstm.rs. Leaves: a left-to-right LSTM cell whose (h, c) at every
    position are the leaves (no masking: padding leaves are never selected), or an affine map to
    [h; c]. Each layer composes all adjacent pairs with the Tree-LSTM, scores them q·h̃/√D
    (q ~ N(0, `query_std`²)), selects one (argmax at evaluation, straight-through
    Gumbel-softmax in training) over the valid candidates, and builds
    new = s·h̃ + (1−cum)·left + (cum−s)·right: the layer shrinks by one.

    Leaf LSTM: `leaf_forget_bias` v (cells/lstm.rs `forget_bias: Some(v)`, 1 in
    gumbel_tree_lstm.rs since arbor commit 8117c9b): the biases start at 0 except the forget
    gate's at v; `None`: random like every other bias (arbor before that commit).
    `like_arbor`: see `lstm_params_like_arbor`."""

    def __init__(self, d_in, d, leaf="lstm", tau=1.0, query_std=0.01, leaf_forget_bias=1.0,
                 like_arbor=True):
        super().__init__()
        self.d, self.tau, self.leaf_kind = d, tau, leaf
        if leaf == "lstm":
            self.leaf = nn.LSTMCell(d_in, d)
            if like_arbor:
                lstm_params_like_arbor(self.leaf)
            if leaf_forget_bias is not None:
                with torch.no_grad():
                    self.leaf.bias_ih.zero_()
                    self.leaf.bias_hh.zero_()
                    self.leaf.bias_ih[d:2 * d] = leaf_forget_bias
        else:
            self.leaf = nn.Linear(d_in, 2 * d)
        self.comp = TreeLstm(d)
        self.query = nn.Parameter(torch.randn(d) * query_std)

    def leaves(self, x):
        if self.leaf_kind == "affine":
            return self.leaf(x).chunk(2, -1)
        b, n, _ = x.shape
        # nn.LSTMCell with a zero bias_hh is arbor's LstmCell; the fused cell is faster than a
        # hand-written step on one CPU thread.
        h = x.new_zeros(b, self.d)
        c = x.new_zeros(b, self.d)
        hs, cs = [], []
        for t in range(n):
            h, c = self.leaf(x[:, t], (h, c))
            hs.append(h)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(cs, 1)

    def candidates(self, h, c):
        """All adjacent pairs of a layer: (left h, left c, right h, right c, parent h, parent c,
        scores q·h̃/√D)."""
        lh, lc, rh, rc = h[:, :-1], c[:, :-1], h[:, 1:], c[:, 1:]
        ph, pc = self.comp(lh, lc, rh, rc)
        return lh, lc, rh, rc, ph, pc, ph @ self.query / math.sqrt(self.d)

    @staticmethod
    def merge(s, ph, pc, lh, lc, rh, rc):
        """The next layer from the one-hot (straight-through) selection s [B, M−1]."""
        s = s.unsqueeze(2)
        cum = s.cumsum(1)
        keep_left, take_right = 1.0 - cum, cum - s
        return (s * ph + keep_left * lh + take_right * rh,
                s * pc + keep_left * lc + take_right * rc)

    def forward(self, x, lengths, noise_gen=None):
        """Every example advances one layer at a time; a complete sentence keeps its left column
        (the `done` mask), as arbor computes it. Training noise from `noise_gen`. Returns the
        roots [B, D] and the selected index of every layer."""
        n = int(lengths.max())
        h, c = self.leaves(x[:, :n])
        arange = torch.arange(n, device=x.device)
        selected = []
        for t in range(n - 1):
            m = n - t
            lh, lc, rh, rc, ph, pc, logits = self.candidates(h, c)
            valid = (arange[:m - 1] + t + 1).unsqueeze(0) < lengths.unsqueeze(1)
            if self.training:
                scores = (logits + gumbel_noise(logits.shape, noise_gen, x.device)) / self.tau
                s, index = one_hot_st(scores, valid)
            else:
                s, index = one_hot_st(logits, valid, hard_only=True)
            selected.append(index)
            new_h, new_c = self.merge(s, ph, pc, lh, lc, rh, rc)
            done = (lengths < t + 2).view(-1, 1, 1)
            h = torch.where(done, lh, new_h)
            c = torch.where(done, lc, new_c)
        return h[:, 0], selected

    def sentence(self, x, lengths):
        """The roots [B, D], computing each layer on the sentences still being built only: rows
        sorted by length, longest first, so that at layer t those (length >= t + 2) are a prefix,
        and a finished sentence's root (its column 0) is taken out. Training noise
        g = −log(−log u) from torch's global generator, one draw per remaining row, u clamped
        to [1e-10, 1−1e-7]; the selection's soft part is arbor's `masked_softmax`."""
        n = int(lengths.max())
        x = x[:, :n]
        h, c = self.leaves(x)
        order = torch.argsort(lengths, descending=True, stable=True)
        h, c, lens = h[order], c[order], lengths[order]
        finished = []
        for t in range(n - 1):
            m = n - t
            k = int((lens >= t + 2).sum())
            if k < h.shape[0]:
                finished.append(h[k:, 0])
                h, c, lens = h[:k], c[:k], lens[:k]
            lh, lc, rh, rc, ph, pc, logits = self.candidates(h, c)  # logits [k, m-1]
            valid = torch.arange(m - 1).unsqueeze(0) + (t + 1) < lens.unsqueeze(1)
            if self.training:
                u = torch.rand_like(logits).clamp(U_MIN, U_MAX)
                scores = (logits - torch.log(-torch.log(u))) / self.tau
                soft = masked_softmax(scores, valid)
                idx = scores.detach().masked_fill(~valid, NEG_BIG).argmax(1)
                hard = F.one_hot(idx, m - 1).to(soft.dtype)
                s = hard - soft.detach() + soft
            else:
                idx = logits.masked_fill(~valid, NEG_BIG).argmax(1)
                s = F.one_hot(idx, m - 1).to(logits.dtype)
            h, c = self.merge(s, ph, pc, lh, lc, rh, rc)
        finished.append(h[:, 0])
        roots = torch.cat(finished[::-1])  # back to longest-first order
        return roots[torch.argsort(order)]


# --------------------------------------------------------------------------------------------
# SPINN-PI-NT: a gold tree, composed by shift-reduce, per node, or level by level
# --------------------------------------------------------------------------------------------


class SpinnPiNt(nn.Module):
    """encoders/spinn (SPINN without tracking), given the trees. Words go through
    Linear(d_in, 2D) to [h; c] leaves; the Tree-LSTM composes along the tree.

    `forward` is the shift-reduce encoder in the PyTorch idiom of SPINN's own PyTorch code
    (nyu-mll/spinn, `fat_stack.py`): stacks and buffers are Python lists of per-example rows,
    REDUCE pops two rows per example, and the composed rows are pushed back after one batched
    call per transition step. (arbor's thin stack keeps one stack tensor and host-side pointers
    instead; in eager PyTorch, writing one row per step into a stack tensor would copy it, as
    Burn does.) `recursive` is the per-sentence, per-node recursion over the same weights;
    `sentence` composes all nodes of one height at once, which is what the thin stack computes
    too."""

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
        """lengths: a list; transitions: per sentence, an 'S'/'R' string."""
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
        """trees: nested tuples of leaf indices."""
        roots = []
        for b, (n, tree) in enumerate(zip(lengths, trees)):
            leaves = self.proj(x[b, :n])

            def node(t):
                if isinstance(t, tuple):
                    return self.compose(node(t[0]), node(t[1]))
                return leaves[t:t + 1]

            roots.append(node(tree))
        return torch.cat(roots)[:, :self.d]

    def sentence(self, x, lengths, trees):
        """x [B, T, D] embeddings, lengths a tensor [B]; trees: per sentence, its internal nodes
        as `tree_nodes` gives them (the root is the last internal node, or leaf 0 for one
        word)."""
        B, T, _ = x.shape
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        leaves = self.proj(x[mask])  # [sum n, 2D] in sentence order
        nl = leaves.shape[0]
        H, C = leaves.chunk(2, -1)
        n_int = sum(len(t) for t in trees)
        Hs = torch.cat([H, H.new_zeros(n_int, self.d)])
        Cs = torch.cat([C, C.new_zeros(n_int, self.d)])
        by_h = {}
        roots = []
        leaf_off, int_off = 0, nl
        for b, nodes in enumerate(trees):
            n = int(lengths[b])
            gid = lambda k: leaf_off + k if k < n else int_off + (k - n)  # noqa: E731
            for j, (l, r, ht) in enumerate(nodes):
                by_h.setdefault(ht, ([], [], []))
                lst = by_h[ht]
                lst[0].append(int_off + j)
                lst[1].append(gid(l))
                lst[2].append(gid(r))
            roots.append(int_off + len(nodes) - 1 if nodes else leaf_off)
            leaf_off += n
            int_off += len(nodes)
        for ht in sorted(by_h):
            idx, li, ri = (torch.tensor(v) for v in by_h[ht])
            hh, cc = self.comp(Hs[li], Cs[li], Hs[ri], Cs[ri])
            Hs = Hs.index_copy(0, idx, hh)
            Cs = Cs.index_copy(0, idx, cc)
        return Hs[torch.tensor(roots)]


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
